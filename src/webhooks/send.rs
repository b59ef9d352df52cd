//! One delivery attempt over HTTP: POST the event body exactly as stored, signed at the real
//! current time (CONTRACT §9: receivers compare `t` with their own clock, whatever the
//! account's test clock says). Redirects are not followed: a 3xx is a failed attempt.

use super::schedule::ATTEMPT_TIMEOUT;
use super::signing;
use std::time::Instant;

/// What one attempt saw.
#[derive(Clone, Debug)]
pub struct AttemptResult {
    pub status_code: Option<u16>,
    pub latency_ms: i64,
    pub error: Option<String>,
    /// Real time of the attempt, milliseconds.
    pub attempted_at: i64,
}

impl AttemptResult {
    /// A delivery succeeds on 200 and only on 200 (the spec's rule).
    pub fn delivered(&self) -> bool {
        self.status_code == Some(200)
    }
}

/// The client every endpoint actor shares.
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(ATTEMPT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("billing-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// POSTs `body` to `url`, signed with `secret`.
pub async fn attempt(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    body: String,
) -> AttemptResult {
    let now = chrono::Utc::now();
    let signature = signing::header(secret, now.timestamp(), body.as_bytes());
    let started = Instant::now();
    let sent = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("Service-Signature", signature)
        .body(body)
        .send()
        .await;
    let latency_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let (status_code, error) = match sent {
        Ok(response) => {
            let status = response.status().as_u16();
            let error = (status != 200).then(|| format!("the endpoint answered {status}"));
            (Some(status), error)
        }
        Err(err) if err.is_timeout() => (None, Some("timed out after 15 s".to_owned())),
        Err(err) if err.is_connect() => (None, Some("could not connect".to_owned())),
        Err(_) => (None, Some("the request failed".to_owned())),
    };
    AttemptResult {
        status_code,
        latency_ms,
        error,
        attempted_at: now.timestamp_millis(),
    }
}
