//! `billing`: a recurring-billing engine. Crate map, in reading order:
//!
//! - [`domain`]: pure rules (money, fees, periods); no I/O.
//! - [`store`]: the database, tenant-scoped; the only module naming sea_orm.
//! - [`accounts`], [`bootstrap`]: creating accounts and the first start.
//! - [`processor`], [`charges`]: the processor's protocol (client, sandbox, signatures) and
//!   charging with fee reservations.
//! - [`api`]: the HTTP API, its shared layers and its OpenAPI document.
//! - [`config`], [`ids`], [`secrets`]: configuration, identifiers, credentials.
//!
//! [`run`] is the entry point: tests call it with a listener on port 0.

pub mod accounts;
pub mod actors;
pub mod api;
pub mod bootstrap;
pub mod charges;
pub mod config;
pub mod domain;
pub mod ids;
pub mod processor;
pub mod secrets;
pub mod store;

use api::rate_limit::RateLimiter;
use api::state::AppState;
use charges::Charger;
use config::Config;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use processor::client::ProcessorClient;
use processor::sandbox::{SandboxConfig, SandboxProcessor};
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use store::Store;
use tokio::net::TcpListener;

/// The process-wide Prometheus recorder. The `metrics` facade is global by design; every app
/// started in this process (tests start many) renders the same registry.
fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Fails only when another recorder is installed; then ours renders empty.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Serves the service on `listener` until `shutdown` completes.
pub async fn run(
    mut config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    config.bind = local.to_string();
    let store = Store::connect(&config.database_url).await?;
    let (admin_token_hash, first_start) = bootstrap::prepare(&store, &config).await?;
    first_start.print(&config.public_url());
    let processor = ProcessorClient::new()?;
    let public_url = config.public_url();
    let charger = Charger::new(store.clone(), processor.clone(), public_url);
    let (runtime, arms) = actors::Runtime::start(store.clone(), charger.clone()).await?;
    let state = AppState {
        charger,
        runtime: runtime.clone(),
        store,
        config: Arc::new(config),
        admin_token_hash,
        limiter: Arc::new(RateLimiter::default()),
        metrics: metrics_handle(),
        ready: Arc::new(AtomicBool::new(false)),
        sandbox: SandboxProcessor::new(SandboxConfig::default(), reqwest::Client::new()),
        processor,
    };
    for account in state.store.all_accounts().await? {
        state.register_sandbox_merchant(&account);
    }
    let app = api::app(state.clone());
    // Ready once the first scheduler pass has run every timer that fell due while down.
    actors::spawn_background(runtime, Arc::clone(&state.ready), arms);
    tracing::info!(address = %local, "billing listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
