//! `billing`: a recurring-billing engine. Crate map, in layers: a module imports only from its
//! own line and the lines above it (`tests/tidy.rs` fails on any cycle).
//!
//! - [`domain`], [`ids`], [`secrets`], [`logging`]: pure rules (money, fees, periods),
//!   identifiers, credentials, the log's format and filter.
//! - [`egress`], [`processor`], [`whatsapp`], [`config`]: the guarded client for every URL a
//!   tenant gives us; the processor's protocol (client, sandbox, signatures); WhatsApp's Cloud
//!   API (client, sandbox, signatures); configuration.
//! - [`store`]: the database, tenant-scoped; the only module naming sea_orm.
//! - [`clock`], [`events`], [`webhooks`]: real time plus each account's test offset; every
//!   event's payload; outgoing webhooks.
//! - [`accounts`], [`bootstrap`], [`charges`], [`refunds`], [`subscribe`],
//!   [`checkout_settlement`]: the use cases.
//! - [`actors`], [`cluster`]: the runtime (one actor per subscription and per webhook
//!   endpoint, the scheduler, forwarding) and the lease loop of several nodes.
//! - [`http`]: what every HTTP surface shares (state, errors, extractors, authentication,
//!   rate limits, idempotency).
//! - [`exports`]: the accountant's CSV and ZIP of documents, streamed (beside `documents`
//!   and `notices`, which it sits with in ARCHITECTURE.md's layers).
//! - [`api`], [`checkout`]: the REST API and its OpenAPI document; the hosted checkout.
//!
//! [`run`] is the entry point: tests call it with a listener on port 0. The `billing` command,
//! the benchmark, the fault-injection harness and the end-to-end suite are the workspace's
//! `harness` crate (`harness/`).

pub mod accounts;
pub mod actors;
pub mod api;
pub mod background;
pub mod bootstrap;
pub mod charges;
pub mod checkout;
pub mod checkout_settlement;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod dian;
pub mod documents;
pub mod domain;
pub mod egress;
pub mod events;
pub mod exports;
pub mod filing;
pub mod http;
pub mod ids;
pub mod logging;
pub mod notices;
pub mod processor;
pub mod refunds;
pub mod secrets;
pub mod store;
pub mod subscribe;
pub mod webhooks;
pub mod whatsapp;

use charges::Charger;
use config::Config;
use http::auth_failures::AuthFailures;
use http::rate_limit::RateLimiter;
use http::state::{AppState, Shared};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use processor::client::ProcessorClient;
use processor::sandbox::{AdminAuth, SandboxProcessor};
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
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
            describe_metrics();
            // A recorder built this way has no upkeep of its own: histogram samples pile up
            // until a scrape drains them, so a server nobody scrapes grows by every sample
            // (found by the million-renewal benchmark). Drained every 5 s instead.
            let upkeep = handle.clone();
            let _ = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(std::time::Duration::from_secs(5));
                        upkeep.run_upkeep();
                    }
                });
            handle
        })
        .clone()
}

/// Names and explains the operational metrics, and registers at zero those that a fresh
/// process would otherwise omit until their first event.
fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "renewals_due_total",
        "Subscription timers found due by their actor."
    );
    describe_counter!(
        "renewals_processed_total",
        "Due timers handled by their actor, by result (ok, error)."
    );
    describe_counter!(
        "charge_outcomes_total",
        "Charges settled, by outcome (approved, declined, error, voided)."
    );
    describe_histogram!(
        "processor_request_seconds",
        "Latency of the processor's create-transaction call."
    );
    describe_counter!(
        "processor_unknown_outcomes_total",
        "Processor answers that left a charge's outcome unknown (timeout, 5xx, 429, a failed lookup): the charge stays pending and is asked about again."
    );
    describe_counter!(
        "charge_outcome_conflicts_total",
        "Processor reports that contradicted their charge and moved no money, by kind (outcome, mismatch); listed at /admin/charge-conflicts."
    );
    describe_counter!(
        "ingress_events_total",
        "Processor events received at the ingress."
    );
    describe_counter!(
        "webhook_deliveries_total",
        "Webhook delivery attempts, by outcome (delivered, retrying, failed); incremented by the webhook endpoint actors."
    );
    describe_gauge!("actors_live", "Live actors, by kind.");
    describe_gauge!(
        "dian_range_used_ratio",
        "Share of a DIAN numbering range's numbers taken (0 to 1), by account, range and prefix; operators are warned at 0.9."
    );
    describe_gauge!(
        "dian_range_days_left",
        "Days until a DIAN numbering range's last valid day (Colombia), by account, range and prefix; operators are warned at 30."
    );
    describe_counter!(
        "dian_documents_filed_total",
        "Electronic documents DIAN answered about, by status (accepted, rejected)."
    );
    describe_counter!(
        "dian_unknown_answers_total",
        "Calls to DIAN whose answer was unknown (timeout, 5xx, fault): the document stays pending and is asked about again."
    );
    describe_gauge!(
        "cluster_shards_held",
        "Shards (of 256) this node holds under a lease it trusts (PostgreSQL)."
    );
    describe_counter!(
        "cluster_forwarded_messages_total",
        "Actor messages sent to the node holding their shard, by result (ok, moving, failed)."
    );
    describe_counter!(
        "cluster_fenced_writes_total",
        "Writes refused because this node no longer held the shard (another node took it over)."
    );
    describe_counter!("actor_restarts_total", "Actors that failed, by kind.");
    describe_gauge!(
        "timer_queue_depth",
        "Timers held in the scheduler's in-memory window."
    );
    describe_counter!(
        "timers_fired_total",
        "Timers that expired in the scheduler's window."
    );
    describe_counter!(
        "api_key_lookups_total",
        "Database lookups of an API key (a key not in the 5-second cache); a key that is not well formed is refused without one."
    );
    describe_histogram!(
        "db_transaction_seconds",
        "Time from begin to commit of the actors' write transactions."
    );
    for outcome in ["delivered", "retrying", "failed"] {
        metrics::counter!("webhook_deliveries_total", "outcome" => outcome).increment(0);
    }
    metrics::counter!("renewals_due_total").increment(0);
    metrics::counter!("api_key_lookups_total").increment(0);
    metrics::counter!("processor_unknown_outcomes_total").increment(0);
    for kind in ["outcome", "mismatch"] {
        metrics::counter!("charge_outcome_conflicts_total", "kind" => kind).increment(0);
    }
    metrics::counter!("ingress_events_total", "type" => "transaction.updated").increment(0);
}

/// Serves the service on `listener` until `shutdown` completes.
pub async fn run(
    mut config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    config.bind = local.to_string();
    // Held until serving ends: SQLite runs one node (`store::lock_sqlite_file`).
    let _single_node = store::lock_sqlite_file(&config.database_url)?;
    let mut store =
        Store::connect_with_pool(&config.database_url, config.database_pool_size).await?;
    if config.benchmark_without_invoices {
        store = store.issuing(store::Issuing::SkippedForBenchmark);
    }
    let (admin_token_hash, first_start) = bootstrap::prepare(&store, &config).await?;
    // The MRR ledger's opening movements (decision 0079): after the migrations, before
    // anything serves or renews.
    let opened = store.open_mrr_ledger().await?;
    if opened > 0 {
        tracing::info!(opened, "MRR ledger: opening movements written");
    }
    // On PostgreSQL this process is a node of a cluster (perhaps of one): its writes are
    // fenced by the shards it holds, and messages for other shards are forwarded.
    let (store, forwarder) = if store.shares_state() && !config.single_node {
        let node = format!("node_{}", uuid::Uuid::now_v7().simple());
        let store = store.with_ownership(Arc::new(store::ownership::Ownership::clustered(node)));
        let secret = store
            .setting_insert_once(
                actors::forward::SECRET_SETTING,
                &secrets::random_token("cls_", 40),
            )
            .await?;
        let forwarder = actors::forward::Forwarder::new(store.clone(), secret)?;
        (store, Some(forwarder))
    } else {
        (store, None)
    };
    first_start.print(&config.public_url(), config.log_format);
    let processor =
        ProcessorClient::with_timeout(Duration::from_millis(config.processor_timeout_ms))?;
    let public_url = config.public_url();
    let charger = Charger::new(store.clone(), processor.clone(), public_url)
        .with_recheck_base(Duration::from_millis(config.processor_recheck_base_ms))
        .with_in_flight_bound(Duration::from_millis(config.in_flight_bound_ms));
    let reconcile_every = Duration::from_millis(config.reconcile_interval_ms);
    let (runtime, arms) = actors::Runtime::start(
        store.clone(),
        charger.clone(),
        Duration::from_secs(config.actor_idle_secs),
        webhooks::send::Clients::new(&config)?,
        forwarder,
    )
    .await?;
    let leases = if store.ownership().is_single() {
        None
    } else {
        let (changes, mut changed) = tokio::sync::mpsc::unbounded_channel();
        let watcher = runtime.clone();
        runtime.track(tokio::spawn(async move {
            while let Some(change) = changed.recv().await {
                watcher.on_lease_change(change);
            }
        }));
        let leases = cluster::lease::Leases::start(
            store.clone(),
            Arc::clone(store.ownership()),
            config.node_url(),
            cluster::lease::Timing {
                ttl: Duration::from_millis(config.lease_ttl_ms.max(100)),
                renew: Duration::from_millis(config.lease_renew_ms.max(10)),
            },
            changes,
            Arc::new(runtime.clone()),
        )
        .await?;
        Some(leases)
    };
    // The in-process sandbox's administration takes the server's own admin token.
    let sandbox = SandboxProcessor::new(
        config.sandbox.clone(),
        AdminAuth::from_hash(admin_token_hash.clone()),
    )?;
    let dian_sandbox = dian::sandbox::SandboxDian::new(
        config.dian_sandbox.clone(),
        AdminAuth::from_hash(admin_token_hash.clone()),
    );
    let filing = filing::Filing::new(
        store.clone(),
        runtime.clock().clone(),
        Arc::clone(&dian_sandbox),
        &config,
    );
    let whatsapp_sandbox = whatsapp::sandbox::SandboxWhatsapp::new(
        config.whatsapp_sandbox.clone(),
        AdminAuth::from_hash(admin_token_hash.clone()),
    )?;
    let config = Arc::new(config);
    let notices = notices::Notices::new(
        store.clone(),
        runtime.clock().clone(),
        Arc::clone(&config),
        Some(Arc::clone(&whatsapp_sandbox)),
        Some(runtime.backlog()),
    )?;
    // On PostgreSQL every node counts against the same windows (`store::rate_windows`).
    let limiter = Arc::new(RateLimiter::new(&store));
    let store_for_purge = store.clone();
    let idempotency_purge_secs = config.idempotency_purge_secs;
    let auth_failures = Arc::new(AuthFailures::new(&store));
    let state = AppState::new(Shared {
        charger,
        runtime: runtime.clone(),
        store,
        config,
        admin_token_hash,
        limiter,
        auth_failures,
        metrics: metrics_handle(),
        ready: Arc::new(AtomicBool::new(false)),
        sandbox,
        processor,
        keys: Arc::default(),
        dian_sandbox,
        whatsapp_sandbox,
        filing: filing.clone(),
        notices: Arc::new(notices.clone()),
        background: background::Background::start(vec![
            Arc::new(filing.clone()),
            Arc::new(notices),
            Arc::new(http::idempotency::Purge {
                store: store_for_purge,
                every: Duration::from_secs(idempotency_purge_secs.max(1)),
            }),
        ]),
        requests: http::idempotency::RequestTasks::default(),
    });
    for account in state.store.all_accounts().await? {
        state.register_sandbox_merchant(&account);
    }
    let app = api::app(state.clone());
    // Ready once the first scheduler pass has run every timer that fell due while down.
    actors::spawn_webhooks(runtime.clone());
    actors::spawn_background(
        runtime.clone(),
        Arc::clone(&state.ready),
        arms,
        reconcile_every,
    );
    tracing::info!(address = %local, node = %runtime.ownership().node(), "billing listening");
    let grace = Duration::from_secs(state.config.shutdown_grace_secs);
    // The end of the shutdown's grace, set at the signal.
    let grace_ends = Arc::new(OnceLock::new());
    // The peer's address reaches the handlers (`ConnectInfo`), for the limit of failed
    // authentications per client address.
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown({
        // At the signal, the requests running (those whose clients hung up too: they run in
        // tasks of their own) end first, with this node's shards and database still there
        // (bounded by the grace; new requests are still served meanwhile). Then the shards go
        // to the other nodes, once the work in flight on them has finished and recorded itself;
        // only then does the listener close and the connections drain (a request accepted
        // since acts through the shards' new owners).
        let (leases, runtime) = (leases.clone(), runtime.clone());
        let (requests, grace_ends) = (state.requests.clone(), Arc::clone(&grace_ends));
        async move {
            shutdown.await;
            let deadline = *grace_ends.get_or_init(|| tokio::time::Instant::now() + grace);
            requests.drain(deadline).await;
            if let Some(leases) = leases {
                leases.leave().await;
                runtime.announce_release().await;
            }
        }
    })
    .await;
    // The requests that began after the first wait (or all of them, when serving failed before
    // the signal), in what is left of the grace, before the actors stop and the pool closes.
    let deadline = *grace_ends.get_or_init(|| tokio::time::Instant::now() + grace);
    state.requests.drain(deadline).await;
    // The loops beside the requests stop, each attempt under way recorded, before the pool
    // closes: a test process starts many apps, and a loop left running would keep each one's
    // database pool open.
    state
        .background
        .drain(
            deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .max(Duration::from_secs(1)),
        )
        .await;
    // Serving failed before the signal: the shards are given back here (a second `leave`
    // after the signal's finds nothing left to give).
    if let Some(leases) = leases {
        leases.leave().await;
    }
    runtime.stop().await;
    served?;
    Ok(())
}
