//! The sandbox processor: Wompi's protocol served by our code, so that every test and every
//! newcomer's first charge crosses a real HTTP boundary and comes back as a real signed event.
//! In-process under `/sandbox/processor/v1`, standalone at `/v1` (`billing sandbox-processor`).
//!
//! - `protocol`: the processor's routes, each with the key Wompi requires; acceptance tokens,
//!   card tokens and payment sources.
//! - `nequi`: Nequi tokens, which the customer accepts in the Nequi app.
//! - `transactions`: transactions on a payment source, and voiding one.
//! - `refunds`: refunds of an approved transaction.
//! - `events`: a transaction turning final (or voided), and its signed event delivered.
//! - `admin`: `_sandbox`, making merchants, behind the admin token.
//! - `scenario`: what a card or Nequi number makes of every transaction, carried in the ids.
//! - `merchants`, `ledger`, `retention`: what is kept in memory, and what bounds it.
//!
//! Transactions, their refunds and Nequi tokens live only in memory, for
//! `SandboxConfig::retention`: after a restart, or once pruned, a lookup by reference finds
//! nothing, and the caller creates the transaction again. What a payment source or a token
//! does is in its id, so it keeps working across a restart.

mod admin;
mod events;
mod ledger;
mod merchants;
mod nequi;
mod protocol;
mod refunds;
mod retention;
mod scenario;
mod transactions;

pub use admin::AdminAuth;

use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use ledger::Ledger;
use merchants::{Merchant, Merchants};
use nequi::NequiTokens;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Events the sandbox sends at once, over all merchants. An event's POST lasts until the
/// merchant has recorded it (the service answers after the outcome's batch commits, some
/// tens of milliseconds in a burst), so this bounds the events a second to about this many a
/// round trip: 64 held a renewal burst at about 3,500/s.
const EVENTS_AT_ONCE: usize = 256;

#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// How long a transaction (or a refund) stays PENDING.
    pub settle_delay: Duration,
    /// Waits before re-sending an event that was not answered 200: Wompi's 30 minutes, 3 hours
    /// and 24 hours by default (tests compress them).
    pub event_retry_delays: Vec<Duration>,
    /// How long a Nequi token stays PENDING, standing for the customer accepting in the Nequi
    /// app.
    pub nequi_approval_delay: Duration,
    /// How long a transaction (with its reference and refunds) and a Nequi token are kept
    /// after they were made: 7 days by default, far beyond the time our service takes to learn
    /// a transaction's outcome.
    pub retention: Duration,
    /// How many merchants there may be before the administration refuses a new one (409).
    pub max_merchants: usize,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            settle_delay: Duration::from_millis(100),
            event_retry_delays: [30 * 60, 3 * 3_600, 24 * 3_600]
                .map(Duration::from_secs)
                .to_vec(),
            nequi_approval_delay: Duration::from_secs(5),
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
    ledger: Ledger,
    nequi_tokens: NequiTokens,
    counter: AtomicU64,
    event_slots: Arc<Semaphore>,
}

impl SandboxProcessor {
    /// A sandbox administered by the holder of `admin`'s token.
    pub fn new(config: SandboxConfig, admin: AdminAuth) -> Result<Arc<Self>, reqwest::Error> {
        Ok(Arc::new(Self {
            http: events::events_client()?,
            ledger: Ledger::new(config.retention),
            nequi_tokens: NequiTokens::new(config.retention),
            config,
            admin,
            merchants: Merchants::default(),
            counter: AtomicU64::new(1),
            event_slots: Arc::new(Semaphore::new(EVENTS_AT_ONCE)),
        }))
    }

    /// Adds a merchant with exactly these keys, or sets the events URL of the one with this
    /// public key. For the service itself (its sandbox accounts), not reachable over HTTP.
    pub fn register_merchant(&self, keys: MerchantKeys, events_url: Option<String>) {
        self.merchants.register(keys, events_url);
    }

    /// Drops the transactions (with their refunds) and the Nequi tokens past their retention
    /// (making one does it too).
    pub fn prune(&self) {
        self.ledger.prune();
        self.nequi_tokens.prune();
    }

    /// The routes, relative: the caller nests them (`/sandbox/processor/v1`, `/v1`).
    pub fn router(self: Arc<Self>) -> Router {
        protocol::router(Arc::clone(&self)).nest("/_sandbox", admin::router(self))
    }

    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    /// The merchant whose public key is the request's Bearer.
    fn merchant_by_public(&self, headers: &HeaderMap) -> Option<Arc<Merchant>> {
        bearer(headers).and_then(|key| self.merchants.by_public(key))
    }

    /// The merchant whose private key is the request's Bearer.
    fn merchant_by_private(&self, headers: &HeaderMap) -> Option<Arc<Merchant>> {
        bearer(headers).and_then(|key| self.merchants.by_private(key))
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

fn unauthorized(which: &str) -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "INVALID_ACCESS_TOKEN",
        &format!("Se esperaba una llave {which} válida"),
    )
}

/// A JSON body; one that does not read as `T` is Wompi's 422, not axum's plain text.
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(body)) => Ok(Body(body)),
            Err(rejection) => Err(invalid("body", &rejection.body_text())),
        }
    }
}

/// Wompi's 422: `messages` names the field.
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
