//! `cargo bench --bench api`: GET one subscription and list subscriptions through our full
//! stack (auth, rate limit, idempotency layer, tenant-scoped store, wire types) under
//! concurrent load, beside a bare axum + sea-orm handler reading the same rows from the same
//! SQLite file, in the same run. The bare handler names axum and sea_orm directly: benches are
//! exempt from the layering invariants (ARCHITECTURE.md).

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use billing::store::entities::subscription;
use sea_orm::{
    ColumnTrait, Database, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CONCURRENCY: usize = 32;
const DURATION: Duration = Duration::from_secs(5);

fn to_json(m: subscription::Model) -> Value {
    json!({"id": m.id, "object": "subscription", "customer_id": m.customer_id, "plan_id": m.plan_id,
        "cycle": m.cycle, "status": m.status, "current_period_start": m.current_period_start,
        "current_period_end": m.current_period_end, "next_charge_date": m.next_charge_date,
        "default_payment_method_id": m.default_payment_method_id, "trial_end": m.trial_end,
        "cancel_at_period_end": m.cancel_at_period_end, "failed_attempts": m.failed_attempts,
        "metadata": m.metadata, "created_at": m.created_at})
}

#[derive(Clone)]
struct Bare {
    db: DatabaseConnection,
    account: String,
}

async fn bare_get(State(bare): State<Bare>, Path(id): Path<String>) -> Json<Value> {
    let row = subscription::Entity::find_by_id(billing::ids::SubscriptionId::given(id))
        .one(&bare.db)
        .await
        .ok()
        .flatten();
    Json(row.map(to_json).unwrap_or(Value::Null))
}

async fn bare_list(State(bare): State<Bare>) -> Json<Value> {
    let rows = subscription::Entity::find()
        .filter(subscription::Column::AccountId.eq(bare.account.as_str()))
        .order_by_desc(subscription::Column::Id)
        .limit(11)
        .all(&bare.db)
        .await
        .unwrap_or_default();
    let data: Vec<Value> = rows.into_iter().take(10).map(to_json).collect();
    Json(json!({"data": data, "has_more": true}))
}

struct Load {
    requests: u64,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Load {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn percentile(&self, p: f64) -> Duration {
        let i = ((self.latencies.len() as f64 - 1.0) * p) as usize;
        self.latencies.get(i).copied().unwrap_or_default()
    }
}

async fn load(client: &reqwest::Client, url: &str, key: &str) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (client, url, key, stop) = (
            client.clone(),
            url.to_owned(),
            key.to_owned(),
            Arc::clone(&stop),
        );
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let response = client
                    .get(&url)
                    .bearer_auth(&key)
                    .send()
                    .await
                    .expect("send");
                assert_eq!(response.status(), 200, "{url}");
                let _ = response.bytes().await.expect("body");
                latencies.push(t.elapsed());
            }
            latencies
        });
    }
    tokio::time::sleep(DURATION).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.expect("task"));
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Load {
        requests: latencies.len() as u64,
        latencies,
        elapsed,
    }
}

/// The allocator the `billing` binary uses (see `src/main.rs`), so the figures match it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-data");
        let fixture = harness::bench::Fixture::start(&dir, 50).await?;
        // The same pool as our read path: 8 connections, WAL, NORMAL sync.
        let mut options = sea_orm::ConnectOptions::new(fixture.database_url.clone());
        options
            .sqlx_logging(false)
            .max_connections(8)
            .map_sqlx_sqlite_opts(|opts| {
                use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
                opts.journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
            });
        let db = Database::connect(options).await?;
        let bare = Bare {
            db,
            account: fixture.account_id.to_string(),
        };
        let app = Router::new()
            .route("/bare/subscriptions/{id}", get(bare_get))
            .route("/bare/subscriptions", get(bare_list))
            .with_state(bare);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let bare_base = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });

        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(CONCURRENCY)
            .build()?;
        let id = &fixture.subscription_id;
        let scenarios = [
            (
                "GET one subscription",
                format!("{}/v1/subscriptions/{id}", fixture.base),
                format!("{bare_base}/bare/subscriptions/{id}"),
            ),
            (
                "list subscriptions (10)",
                format!("{}/v1/subscriptions?limit=10", fixture.base),
                format!("{bare_base}/bare/subscriptions"),
            ),
        ];
        println!(
            "API benchmark: {CONCURRENCY} concurrent clients, {} s each, SQLite, loopback",
            DURATION.as_secs()
        );
        println!(
            "{:<26} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9} {:>7}",
            "", "ours req/s", "p50", "p99", "bare req/s", "p50", "p99", "ratio"
        );
        for (name, ours_url, bare_url) in scenarios {
            // A short warm-up of each, then the measured runs, ours first then bare.
            let _ = load(&client, &ours_url, &fixture.api_key).await;
            let ours = load(&client, &ours_url, &fixture.api_key).await;
            let bare = load(&client, &bare_url, "").await;
            println!(
                "{name:<26} {:>10.0} {:>9.2?} {:>9.2?} {:>10.0} {:>9.2?} {:>9.2?} {:>6.0}%",
                ours.rps(),
                ours.percentile(0.5),
                ours.percentile(0.99),
                bare.rps(),
                bare.percentile(0.5),
                bare.percentile(0.99),
                100.0 * ours.rps() / bare.rps()
            );
        }
        fixture.stop().await
    })
}
