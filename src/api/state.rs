//! The state every handler shares.

use super::rate_limit::RateLimiter;
use crate::config::Config;
use crate::store::Store;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub config: Arc<Config>,
    /// SHA-256 of the operator's admin token.
    pub admin_token_hash: String,
    pub limiter: Arc<RateLimiter>,
    pub metrics: PrometheusHandle,
    /// Set once every actor has been recovered after start.
    pub ready: Arc<AtomicBool>,
}
