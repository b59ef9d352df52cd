//! The state every handler shares.

use super::rate_limit::RateLimiter;
use crate::charges::Charger;
use crate::config::Config;
use crate::processor::client::ProcessorClient;
use crate::processor::sandbox::SandboxProcessor;
use crate::store::Store;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// The state every handler shares: one `Arc`, so each layer and handler that takes it costs
/// one reference-count increment, not a clone of every field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub store: Store,
    pub config: Arc<Config>,
    /// SHA-256 of the operator's admin token.
    pub admin_token_hash: String,
    /// API rate limits (in this process on SQLite, in the database on PostgreSQL).
    pub limiter: Arc<RateLimiter>,
    /// Failed authentications per client address (`api::auth_failures`).
    pub auth_failures: Arc<super::auth_failures::AuthFailures>,
    pub metrics: PrometheusHandle,
    /// Set once every actor has been recovered after start.
    pub ready: Arc<AtomicBool>,
    /// The in-process sandbox processor, mounted at `/sandbox/processor/v1`.
    pub sandbox: Arc<SandboxProcessor>,
    pub processor: ProcessorClient,
    pub charger: Charger,
    pub runtime: crate::actors::Runtime,
    /// Accounts by API-key hash, briefly cached.
    pub keys: Arc<super::auth::KeyCache>,
    /// The in-process sandbox DIAN, mounted at `filing::SANDBOX_MOUNT`.
    pub dian_sandbox: Arc<crate::dian::sandbox::SandboxDian>,
    /// The in-process sandbox WhatsApp, mounted at `whatsapp::SANDBOX_MOUNT`.
    pub whatsapp_sandbox: Arc<crate::whatsapp::sandbox::SandboxWhatsapp>,
    /// Filing electronic documents with DIAN (the test clock flushes it).
    pub filing: crate::filing::Filing,
    /// The notices' delivery, which a person's portal link is sent through at once
    /// (`Notices::send_now`) as well as by its loop.
    pub notices: Arc<dyn crate::store::asked_notices::SendNow>,
    /// The loops beside the requests (`background`): DIAN's filing, the notices' delivery,
    /// the purge of expired keys; a test-clock advance flushes them, shutdown drains them.
    pub background: crate::background::Background,
    /// The keyed requests' own tasks, which the shutdown waits for (`api::idempotency`).
    pub requests: super::idempotency::RequestTasks,
}

impl Shared {
    /// Lets the in-process sandbox know an account that uses it (no `processor.base_url`),
    /// with our ingress as its events URL.
    pub fn register_sandbox_merchant(&self, account: &crate::store::accounts::Account) {
        if account.processor_base_url.is_some() {
            return;
        }
        self.sandbox.register_merchant(
            crate::processor::sandbox::MerchantKeys {
                public_key: account.processor_public_key.clone(),
                private_key: account.processor_private_key.clone().into(),
                events_secret: account.processor_events_secret.clone().into(),
                integrity_secret: account.processor_integrity_secret.clone().into(),
            },
            Some(format!(
                "{}/webhooks/processor/{}",
                self.config.public_url(),
                account.id
            )),
        );
    }
}
