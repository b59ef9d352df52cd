//! The integrator's webhook receiver: an HTTP server in the harness process that answers 200 to
//! every delivery and records which endpoint (its path, `/hooks/<n>`) received which event, and
//! when, so the judge can compare what arrived with the deliveries and attempts the database
//! recorded. It does not check signatures: that is the webhook tests' business, not this run's.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// One delivery as it arrived.
#[derive(Clone, Debug)]
pub struct Received {
    /// The endpoint's number in the run (its URL's `/hooks/<n>`).
    pub endpoint: usize,
    pub event_id: String,
    pub event_type: String,
    pub at: Instant,
    /// The same instant in real time (ms), to set beside the attempts' `attempted_at`.
    pub at_ms: i64,
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Received>>>);

/// A running receiver; it stops when dropped.
pub struct Receiver {
    pub base: String,
    log: Log,
    task: tokio::task::AbortHandle,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let log = Log::default();
        let app = axum::Router::new()
            .route("/hooks/{n}", axum::routing::post(receive))
            .with_state(log.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            base,
            log,
            task: task.abort_handle(),
        })
    }

    /// The URL to register as endpoint `n`.
    pub fn url(&self, n: usize) -> String {
        format!("{}/hooks/{n}", self.base)
    }

    /// Everything received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.log
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn receive(State(log): State<Log>, Path(n): Path<usize>, body: Bytes) -> StatusCode {
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let field = |name: &str| event[name].as_str().unwrap_or_default().to_owned();
    log.0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Received {
            endpoint: n,
            event_id: field("id"),
            event_type: field("type"),
            at: Instant::now(),
            at_ms: chrono::Utc::now().timestamp_millis(),
        });
    StatusCode::OK
}
