//! The run's load balancer: an HTTP front in the harness process that sends each request to the
//! next live node, round robin, as an orchestrator's service does. It is the sandbox merchant's
//! `events_url` (so the processor's events reach a live node whichever died) and one of the ways
//! the workload reaches the API. A request that cannot connect to its node goes to the next
//! (it was never sent, so even a POST may go again); any other failure is answered 502, as a
//! real balancer would, and left to the caller.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

#[derive(Default)]
struct Shared {
    /// Base URLs of the nodes requests may go to now.
    live: Mutex<Vec<String>>,
    next: AtomicUsize,
}

#[derive(Clone)]
struct FrontState {
    shared: Arc<Shared>,
    http: reqwest::Client,
}

/// A running front; it stops when dropped.
pub struct Front {
    pub base: String,
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Front {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared::default());
        let state = FrontState {
            shared: Arc::clone(&shared),
            // Bounded: a stopped node must not hold a request for ever.
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            base,
            shared,
            task: task.abort_handle(),
        })
    }

    /// The nodes requests go to from now on.
    pub fn set_live(&self, bases: Vec<String>) {
        *self
            .shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = bases;
    }
}

async fn forward(
    State(state): State<FrontState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let live = state
        .shared
        .live
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if live.is_empty() {
        return (StatusCode::SERVICE_UNAVAILABLE, "no live node").into_response();
    }
    let start = state.shared.next.fetch_add(1, Ordering::Relaxed);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    for offset in 0..live.len() {
        let base = &live[(start + offset) % live.len()];
        let mut request = state
            .http
            .request(method.clone(), format!("{base}{path}"))
            .body(body.clone());
        for (name, value) in &headers {
            if !matches!(name.as_str(), "host" | "content-length" | "connection") {
                request = request.header(name, value);
            }
        }
        match request.send().await {
            Ok(answer) => {
                let status = answer.status();
                let mut out = HeaderMap::new();
                for (name, value) in answer.headers() {
                    if matches!(name.as_str(), "content-type" | "retry-after" | "location") {
                        out.insert(name.clone(), value.clone());
                    }
                }
                let bytes = answer.bytes().await.unwrap_or_default();
                return (status, out, bytes).into_response();
            }
            Err(err) if err.is_connect() => continue,
            Err(_) => break,
        }
    }
    (StatusCode::BAD_GATEWAY, "no node answered").into_response()
}
