//! Sending one template message through the Cloud API, and what its answer means:
//!
//! - a 2xx naming the message's wamid: `Sent` (the wamid is what status webhooks name);
//! - a 4xx that is Meta's final word (a bad payload, a bad or expired token, no permission,
//!   a recipient that is not on WhatsApp): `Refused` with Meta's message and code;
//! - a 429, a 5xx, an error code Meta documents as "try later" (throttling, a temporary
//!   outage), a timeout or a broken connection: `Unknown`, the message may or may not have gone,
//!   and the notice is tried again.
//!
//! The base URL is the operator's (Meta's, the sandbox's, or a setting), never a tenant's; the
//! request still goes through the guarded client (no redirects, no proxy, a timeout). The
//! access token travels in the `Authorization` header only, and no outcome repeats it.

use super::wire::{ErrorOut, SentOut, TemplateMessage};
use crate::egress::GuardedClient;

/// What one message came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Sent {
        wamid: String,
    },
    /// Meta said no, for good: its message.
    Refused(String),
    Unknown(String),
}

/// Meta's error codes that mean "not now" even when answered with a 4xx: rate limits (4,
/// 80007, 130429, 131056), "something went wrong" (131000), a service outage (131016,
/// 133004) and a temporary error (2).
const TRY_LATER: [i64; 8] = [2, 4, 80_007, 130_429, 131_000, 131_016, 131_056, 133_004];

/// The messages URL of `phone_number_id` under `base_url` (which carries the version).
pub fn messages_url(base_url: &str, phone_number_id: &str) -> String {
    format!(
        "{}/{phone_number_id}/messages",
        base_url.trim_end_matches('/')
    )
}

/// Sends `message` from `phone_number_id` with `access_token`.
pub async fn send(
    http: &GuardedClient,
    base_url: &str,
    phone_number_id: &str,
    access_token: &str,
    message: &TemplateMessage,
) -> Outcome {
    let request = match http.post(&messages_url(base_url, phone_number_id)) {
        Ok(request) => request.bearer_auth(access_token).json(message),
        Err(err) => return Outcome::Unknown(format!("the Cloud API's URL is refused: {err}")),
    };
    let response = match http.send(request).await {
        Ok(response) => response,
        Err(err) => return Outcome::Unknown(describe(&err)),
    };
    let status = response.status();
    // Meta's bodies are small; a larger one is not Meta's and is not read whole.
    let body = match read_bounded(response, 64 * 1024).await {
        Ok(body) => body,
        Err(why) => return Outcome::Unknown(why),
    };
    classify(status.as_u16(), &body)
}

/// What an answer with `status` and `body` means.
pub fn classify(status: u16, body: &[u8]) -> Outcome {
    if (200..300).contains(&status) {
        return match serde_json::from_slice::<SentOut>(body) {
            Ok(sent) => match sent.messages.into_iter().next() {
                Some(message) if !message.id.is_empty() => Outcome::Sent { wamid: message.id },
                _ => Outcome::Unknown(format!("HTTP {status} without a message id")),
            },
            Err(_) => Outcome::Unknown(format!("HTTP {status} whose body does not read")),
        };
    }
    let error = serde_json::from_slice::<ErrorOut>(body)
        .ok()
        .map(|out| out.error);
    let said = match &error {
        Some(error) => format!("HTTP {status}: {} (code {})", error.message, error.code),
        None => format!("HTTP {status}"),
    };
    let later = error.as_ref().is_some_and(|e| TRY_LATER.contains(&e.code));
    if status == 429 || status >= 500 || later || !(400..500).contains(&status) {
        return Outcome::Unknown(said);
    }
    Outcome::Refused(said)
}

async fn read_bounded(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err("the answer is larger than the Cloud API's".to_owned());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(err) => return Err(format!("the answer was cut off: {err}")),
        }
    }
}

/// A failed request in words: what kind of failure, without the URL's query or any header.
fn describe(err: &crate::egress::SendError) -> String {
    use crate::egress::SendError;
    match err {
        SendError::Refused(_) => "the Cloud API's address is refused".to_owned(),
        SendError::InvalidUrl => "the Cloud API's URL is not an absolute http(s) URL".to_owned(),
        SendError::Http(err) if err.is_timeout() => "the Cloud API did not answer in time".into(),
        SendError::Http(err) if err.is_connect() => "the Cloud API could not be reached".into(),
        SendError::Http(_) => "the request to the Cloud API failed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(value: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&value).expect("json")
    }

    #[test]
    fn an_answer_with_a_wamid_is_sent() {
        let ok = body(json!({"messaging_product": "whatsapp",
            "contacts": [{"input": "573001234567", "wa_id": "573001234567"}],
            "messages": [{"id": "wamid.abc"}]}));
        assert_eq!(
            classify(200, &ok),
            Outcome::Sent {
                wamid: "wamid.abc".into()
            }
        );
        assert!(matches!(classify(200, b"{}"), Outcome::Unknown(_)));
    }

    #[test]
    fn metas_final_refusals_fail_and_its_not_nows_are_tried_again() {
        let error = |code: i64, message: &str| {
            body(
                json!({"error": {"message": message, "type": "OAuthException", "code": code,
                "fbtrace_id": "A1"}}),
            )
        };
        let Outcome::Refused(said) = classify(401, &error(190, "Invalid OAuth access token"))
        else {
            panic!("a bad token is final");
        };
        assert_eq!(said, "HTTP 401: Invalid OAuth access token (code 190)");
        assert!(matches!(
            classify(400, &error(100, "Invalid parameter")),
            Outcome::Refused(_)
        ));
        assert!(matches!(classify(403, b""), Outcome::Refused(_)));
        for (status, code) in [(429, 4), (400, 130_429), (500, 1), (503, 131_016)] {
            assert!(
                matches!(classify(status, &error(code, "later")), Outcome::Unknown(_)),
                "{status} {code}"
            );
        }
        assert!(matches!(classify(502, b"<html>"), Outcome::Unknown(_)));
        assert!(matches!(classify(302, b""), Outcome::Unknown(_)));
    }

    #[test]
    fn the_url_carries_the_phone_number_id_under_the_versioned_base() {
        assert_eq!(
            messages_url("https://graph.facebook.com/v21.0/", "1055"),
            "https://graph.facebook.com/v21.0/1055/messages"
        );
    }
}
