//! The sandbox processor: Wompi's protocol served by our code, so that every test and every
//! newcomer's first charge crosses a real HTTP boundary and comes back as a real signed event.
//! In-process under `/sandbox/processor/v1`, standalone at `/v1` (`billing sandbox-processor`).
//!
//! - `protocol`: the processor's routes, each with the key Wompi requires.
//! - `admin`: `_sandbox`, making merchants, behind the admin token.
//! - `events`: a transaction turning final, and its signed event delivered.
//! - `state`: merchants and transactions in memory, and their bounds.
//!
//! Transactions live only in memory, for `SandboxConfig::retention`: after a restart, or once
//! pruned, a lookup by reference finds nothing, and the caller creates the transaction again.

mod admin;
mod events;
mod protocol;
mod state;

pub use admin::AdminAuth;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::json;
use state::{Merchants, Transactions};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// How long a transaction stays PENDING.
    pub settle_delay: Duration,
    /// Waits before re-sending an event that was not answered 200.
    pub event_retry_delays: Vec<Duration>,
    /// How long a transaction (and its reference) is kept after it was made: 7 days by
    /// default, far beyond the time our service takes to learn a transaction's outcome.
    pub retention: Duration,
    /// How many merchants there may be before the administration refuses a new one (409).
    pub max_merchants: usize,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            settle_delay: Duration::from_millis(100),
            event_retry_delays: [1, 2, 5, 10, 30].map(Duration::from_secs).to_vec(),
            retention: Duration::from_secs(7 * 86_400),
            max_merchants: 10_000,
        }
    }
}

/// A merchant's four keys. Its `Debug` (below) prints the public key only.
#[derive(Clone)]
pub struct MerchantKeys {
    pub public_key: String,
    pub private_key: String,
    pub events_secret: String,
    pub integrity_secret: String,
}

pub struct SandboxProcessor {
    config: SandboxConfig,
    admin: AdminAuth,
    http: crate::egress::GuardedClient,
    merchants: Merchants,
    transactions: Transactions,
    counter: AtomicU64,
    event_slots: Arc<Semaphore>,
}

impl SandboxProcessor {
    /// A sandbox administered by the holder of `admin`'s token.
    pub fn new(config: SandboxConfig, admin: AdminAuth) -> Result<Arc<Self>, reqwest::Error> {
        Ok(Arc::new(Self {
            http: events::events_client()?,
            transactions: Transactions::new(config.retention),
            config,
            admin,
            merchants: Merchants::default(),
            counter: AtomicU64::new(1),
            event_slots: Arc::new(Semaphore::new(64)),
        }))
    }

    /// Adds a merchant with exactly these keys, or sets the events URL of the one with this
    /// public key. For the service itself (its sandbox accounts), not reachable over HTTP.
    pub fn register_merchant(&self, keys: MerchantKeys, events_url: Option<String>) {
        self.merchants.register(keys, events_url);
    }

    /// Drops the transactions past their retention (making a transaction does it too).
    pub fn prune(&self) {
        self.transactions.prune();
    }

    /// The routes, relative: the caller nests them (`/sandbox/processor/v1`, `/v1`).
    pub fn router(self: Arc<Self>) -> Router {
        protocol::router(Arc::clone(&self)).nest("/_sandbox", admin::router(self))
    }

    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// An error in Wompi's shape.
fn error(status: StatusCode, kind: &str, reason: &str) -> Response {
    (
        status,
        Json(json!({"error": {"type": kind, "reason": reason}})),
    )
        .into_response()
}

fn not_found(what: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "NOT_FOUND_ERROR",
        &format!("{what} no encontrado"),
    )
}

fn invalid(field: &str, message: &str) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({"error": {"type": "INPUT_VALIDATION_ERROR", "messages": {field: [message]}}})),
    )
        .into_response()
}

/// Serves the sandbox alone, at `/v1` (`billing sandbox-processor --bind ADDR`), administered
/// by the holder of `admin`'s token.
pub async fn serve_standalone(
    listener: tokio::net::TcpListener,
    config: SandboxConfig,
    admin: AdminAuth,
) -> anyhow::Result<()> {
    let sandbox = SandboxProcessor::new(config, admin)?;
    let app = Router::new().nest("/v1", sandbox.router());
    axum::serve(listener, app).await?;
    Ok(())
}

/// Only the public key: the other three are the merchant's secrets.
impl std::fmt::Debug for MerchantKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MerchantKeys")
            .field("public_key", &self.public_key)
            .finish_non_exhaustive()
    }
}
