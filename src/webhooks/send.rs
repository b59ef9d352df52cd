//! One delivery attempt over HTTP: POST the event body exactly as stored, signed at the real
//! current time (CONTRACT §9: receivers compare `t` with their own clock, whatever the
//! account's test clock says), through the guarded client of the endpoint's account
//! (`egress`): redirects are not followed (a 3xx is a failed attempt), and an address the
//! account may not reach is an attempt whose error is exactly `refused`, nothing more (the
//! log is the tenant's: it must not tell which internal addresses or ports answer).

use super::schedule::ATTEMPT_TIMEOUT;
use super::signing;
use crate::config::Config;
use crate::egress::{GuardedClient, SendError};
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

/// The delivery clients the endpoint actors share: one for sandbox accounts, one for live
/// ones, each under the address policy the configuration gives its mode.
#[derive(Clone)]
pub struct Clients {
    sandbox: GuardedClient,
    live: GuardedClient,
}

impl Clients {
    pub fn new(config: &Config) -> reqwest::Result<Self> {
        let resolver = config.host_resolver();
        let client = |sandbox: bool| {
            GuardedClient::new(
                config.webhook_policy(sandbox),
                std::sync::Arc::clone(&resolver),
                ATTEMPT_TIMEOUT,
                concat!("billing-webhooks/", env!("CARGO_PKG_VERSION")),
            )
        };
        Ok(Self {
            sandbox: client(true)?,
            live: client(false)?,
        })
    }

    /// The client of a sandbox (or live) account's endpoints.
    pub fn for_account(&self, sandbox: bool) -> &GuardedClient {
        if sandbox { &self.sandbox } else { &self.live }
    }
}

/// POSTs `body` to `url`, signed with `secret`.
pub async fn attempt(
    client: &GuardedClient,
    url: &str,
    secret: &str,
    body: String,
) -> AttemptResult {
    let now = chrono::Utc::now();
    let signature = signing::header(secret, now.timestamp(), body.as_bytes());
    let started = Instant::now();
    let sent = match client.post(url) {
        Ok(request) => {
            let request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header("Service-Signature", signature)
                .body(body);
            client.send(request).await
        }
        Err(err) => Err(err),
    };
    let latency_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let (status_code, error) = match sent {
        Ok(response) => {
            let status = response.status().as_u16();
            let error = (status != 200).then(|| format!("the endpoint answered {status}"));
            (Some(status), error)
        }
        Err(SendError::Refused(_)) => (None, Some("refused".to_owned())),
        Err(SendError::Http(err)) if err.is_timeout() => {
            (None, Some("timed out after 15 s".to_owned()))
        }
        Err(SendError::Http(err)) if err.is_connect() => {
            (None, Some("could not connect".to_owned()))
        }
        Err(_) => (None, Some("the request failed".to_owned())),
    };
    AttemptResult {
        status_code,
        latency_ms,
        error,
        attempted_at: now.timestamp_millis(),
    }
}
