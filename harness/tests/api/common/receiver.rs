//! A real webhook receiver: an axum server on a random port that records every request (raw
//! body, headers, arrival instant) and answers as scripted: a queue of replies, then a default.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
pub enum Reply {
    Status(u16),
    /// Never answers (the sender's timeout ends the attempt).
    Hang,
}

#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    default: Option<Reply>,
    received: Vec<Received>,
}

#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    script: Arc<Mutex<Script>>,
}

impl Receiver {
    /// Starts a receiver answering `replies` in order, then `default` forever.
    pub async fn start(replies: &[Reply], default: Reply) -> Self {
        let script = Arc::new(Mutex::new(Script {
            replies: replies.iter().copied().collect(),
            default: Some(default),
            received: Vec::new(),
        }));
        let shared = Arc::clone(&script);
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let script = Arc::clone(&shared);
            async move {
                let reply = {
                    let mut s = script.lock().expect("lock");
                    s.received.push(Received {
                        headers,
                        body,
                        at: Instant::now(),
                    });
                    let next = s.replies.pop_front();
                    next.or(s.default).unwrap_or(Reply::Status(200))
                };
                match reply {
                    Reply::Status(code) => StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
                    Reply::Hang => std::future::pending().await,
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let url = format!("http://{}/hooks", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, script }
    }

    pub fn received(&self) -> Vec<Received> {
        self.script.lock().expect("lock").received.clone()
    }

    pub fn count(&self) -> usize {
        self.script.lock().expect("lock").received.len()
    }

    /// Changes how later requests are answered.
    pub fn answer_from_now(&self, default: Reply) {
        let mut s = self.script.lock().expect("lock");
        s.replies.clear();
        s.default = Some(default);
    }
}

/// HMAC-SHA256 written out from its definition (RFC 2104) over `sha2`, so that the tests check
/// our signatures with an implementation that shares no code with the service's.
pub fn hmac_sha256_hex(key: &[u8], message: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner_pad: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
    let outer_pad: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
    let mut inner = Sha256::new();
    inner.update(&inner_pad);
    inner.update(message);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(&outer_pad);
    outer.update(inner);
    hex::encode(outer.finalize())
}

/// Checks a `Service-Signature` header over the raw body: `t` within five minutes of real
/// time and `v1` equal to HMAC-SHA256(secret, "t.body"). The answer is the independent
/// check's; the service's own `signing::verify` (what the README tells receivers to do) must
/// agree with it on every delivery the tests see.
pub fn signature_is_valid(secret: &str, received: &Received) -> bool {
    let Some(header) = received
        .headers
        .get("service-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let now = chrono::Utc::now().timestamp();
    let independent = independent_check(secret, header, &received.body, now);
    let ours = billing::webhooks::signing::verify(secret, header, &received.body, now, 300).is_ok();
    assert_eq!(
        independent, ours,
        "signing::verify disagrees with the independent check on {header}"
    );
    independent
}

fn independent_check(secret: &str, header: &str, body: &[u8], now: i64) -> bool {
    let (Some(t), Some(v1)) = (
        header.strip_prefix("t=").and_then(|r| r.split(',').next()),
        header.split(",v1=").nth(1),
    ) else {
        return false;
    };
    let Ok(t_secs) = t.parse::<i64>() else {
        return false;
    };
    if (now - t_secs).abs() > 300 {
        return false;
    }
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(body);
    hmac_sha256_hex(secret.as_bytes(), &message) == v1
}

#[test]
fn the_independent_hmac_matches_rfc_4231_case_2() {
    assert_eq!(
        hmac_sha256_hex(b"Jefe", b"what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}
