//! The renewal-burst benchmark behind `cargo bench --bench renewals` and `billing bench
//! renewals --subscriptions N`: the real service in this process on loopback HTTP, its
//! in-process sandbox processor (or, with `Processor::Standalone`, `billing sandbox-processor`
//! in a process of its own, counted apart), the signed ingress and real events.
//!
//! It seeds N active subscriptions of one account, each with its previous period's approved
//! charge (bulk inserts: seeding is not what is measured; on PostgreSQL the tables are then
//! analysed, as autovacuum would have done in a database in service), restarts the service to
//! time restart-to-ready with N held, makes all N fall due at one instant a little ahead with
//! one UPDATE, and waits until every one is renewed (charge approved, fee deducted,
//! `charge.approved` written, next period set), timed from that instant to the last
//! renewal's write. Then, in the same run, the primitive limit: the same processor
//! round trips (create the transaction, receive its signed event) with the scheduler's
//! concurrency and no service around them, and the rows the renewals write as multi-row
//! statements; the renewals' rate is reported as a share of it.

mod compare;
pub mod fixtures;
mod measure;
mod primitive;
mod report;
mod service;

pub use compare::{Feature, OverheadReport, overhead};
pub use measure::{process_cpu, rss_mib};
pub use service::Fixture;

use measure::{cpu_of, cpu_split, rss_of};
use primitive::{Primitive, round_trips, rows};
use service::{Variant, seeded, shop, start_as, turn_notices_on};

use anyhow::Context;
use billing::ids::AccountId;
use billing::store::Store;
use billing::store::subscriptions::Subscription;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub(super) const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
pub(super) const AMOUNT: i64 = 100_000;
/// The same bound as the scheduler's concurrency of due timers.
pub(super) const CONCURRENCY: usize = billing::actors::RENEWALS_AT_ONCE;
pub(super) const DAY_MS: i64 = 86_400_000;
/// How far ahead of making them due the burst's subscriptions fall due: more than the
/// scheduler's load interval (2 s), so their timers are loaded when they do.
pub(super) const DUE_AHEAD_MS: i64 = 3_000;

/// What one run measured.
#[derive(Debug)]
pub struct RenewalsReport {
    /// Which database it ran on, for the report's first line.
    pub database: String,
    pub subscriptions: usize,
    pub seed: Duration,
    pub restart_to_ready: Duration,
    pub rss_held_mib: f64,
    pub rss_baseline_mib: f64,
    pub settled: usize,
    /// The invoices the renewals issued (`None` in a run without invoicing).
    pub invoiced: Option<usize>,
    /// With notices on: the notices written, and those the SMTP sink had received when the
    /// burst settled (they go on being sent after it).
    pub noticed: Option<(usize, usize)>,
    pub settle: Duration,
    pub peak_rss_mib: f64,
    /// CPU time (user + system) of this whole process during the burst: the service, its
    /// in-process sandbox processor and the benchmark's polling.
    pub burst_cpu: Duration,
    /// The part of `burst_cpu` spent in the kernel (system time): system calls, page faults,
    /// the scheduler's switches on the process's behalf.
    pub burst_kernel_cpu: Duration,
    /// The time `burst_cpu` was counted over: from the due instant to the poll that saw the
    /// last renewal (a little longer than `settle`).
    pub cpu_window: Duration,
    /// With the standalone sandbox (`Processor::Standalone`), its process's CPU time over the
    /// same window and its peak RSS in MiB; `burst_cpu` is then the service's alone.
    pub sandbox: Option<(Duration, f64)>,
    /// The machine's limit for the same work, when measured.
    pub primitive: Option<Primitive>,
    /// The rows each table gained during the burst (every table that gained any).
    pub burst_rows: std::collections::BTreeMap<String, i64>,
    /// The same for the primitive limit's rows, when measured: equal to `burst_rows`, or the
    /// limit is not for the same work.
    pub primitive_rows: Option<std::collections::BTreeMap<String, i64>>,
}

/// Where the renewal benchmark runs: a database it creates and removes afterwards.
#[derive(Clone, Debug)]
pub enum BenchDatabase {
    /// A new SQLite file (refused if it exists: the benchmark never touches a database of
    /// someone's).
    Sqlite(std::path::PathBuf),
    /// A new schema of this PostgreSQL database, dropped afterwards.
    Postgres(String),
}

impl BenchDatabase {
    /// A database beside this one for another run of the same benchmark: a SQLite file named
    /// with `tag`; on PostgreSQL the same database (each run makes a schema of its own).
    pub fn another(&self, tag: &str) -> Self {
        match self {
            Self::Sqlite(path) => {
                let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
                let name = format!("{}-{tag}.db", stem.unwrap_or_default());
                Self::Sqlite(path.with_file_name(name))
            }
            Self::Postgres(url) => Self::Postgres(url.clone()),
        }
    }

    /// From `--database-url`: PostgreSQL, a schema of that database; SQLite, that file; the
    /// default (`default_url`), a new file under `dir`.
    pub fn from_url(url: &str, default_url: &str, dir: &std::path::Path) -> anyhow::Result<Self> {
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        let path = if url == default_url {
            std::fs::create_dir_all(dir)?;
            dir.join(format!("renewals-{}.db", uuid::Uuid::new_v4().simple()))
        } else {
            let path = url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"))
                .context("--database-url: sqlite://path or postgres://…")?;
            std::path::PathBuf::from(path.split('?').next().unwrap_or(path))
        };
        anyhow::ensure!(
            !path.exists(),
            "{} exists: the benchmark makes its own database and removes it; name a new file",
            path.display()
        );
        Ok(Self::Sqlite(path))
    }
}

/// Where the burst's processor runs.
#[derive(Clone, Debug)]
pub enum Processor {
    /// The service's in-process sandbox: its CPU and memory count in the service's process.
    InProcess,
    /// `billing sandbox-processor` started from this executable, in a process of its own: the
    /// service's CPU and memory are counted apart from the sandbox's.
    Standalone(std::path::PathBuf),
}

/// The standalone sandbox of one run, with the token that administers it.
pub(super) struct Standalone {
    sandbox: crate::chaos::processes::Sandbox,
    admin_token: String,
}

impl Standalone {
    /// The standalone sandbox `processor` asks for, started; `None` for the service's own.
    async fn of(processor: &Processor) -> anyhow::Result<Option<Self>> {
        match processor {
            Processor::InProcess => Ok(None),
            Processor::Standalone(binary) => Ok(Some(Self::start(binary).await?)),
        }
    }

    /// Stops `standalone`, if there is one.
    async fn stop(standalone: Option<Self>) {
        if let Some(standalone) = standalone {
            standalone.sandbox.stop().await;
        }
    }

    /// Starts `binary`'s sandbox, settling transactions after the in-process sandbox's delay.
    async fn start(binary: &std::path::Path) -> anyhow::Result<Self> {
        let admin_token = billing::secrets::random_token("sandbox_admin_", 32);
        let settle_delay = billing::processor::sandbox::SandboxConfig::default().settle_delay;
        let sandbox =
            crate::chaos::processes::Sandbox::start(binary, settle_delay, &admin_token).await?;
        Ok(Self {
            sandbox,
            admin_token,
        })
    }

    /// Its `/proc` file `name` (`stat`, `status`).
    fn proc_file(&self, name: &str) -> String {
        format!("/proc/{}/{name}", self.sandbox.pid().unwrap_or(0))
    }

    /// Registers the shop's merchant under `keys`, or points its events again (the same keys
    /// change only the URL), at the ingress of the service at `base`, as the in-process
    /// sandbox's go: at every start, since the service's port changes.
    async fn point_events(
        &self,
        http: &reqwest::Client,
        keys: &Value,
        base: &str,
        account: &AccountId,
    ) -> anyhow::Result<()> {
        let mut merchant = keys.clone();
        merchant["events_url"] = json!(format!("{base}/webhooks/processor/{}", account.as_str()));
        // 201 when it is new, 200 when its URL changed.
        let answer = http
            .post(format!("{}/_sandbox/merchants", self.sandbox.base))
            .bearer_auth(&self.admin_token)
            .json(&merchant)
            .send()
            .await?;
        let status = answer.status().as_u16();
        anyhow::ensure!(
            status == 200 || status == 201,
            "the sandbox refused the merchant: {status} {}",
            answer.text().await.unwrap_or_default()
        );
        Ok(())
    }
}

/// Runs the whole benchmark with `n` subscriptions in a database of its own (`database`),
/// which it removes afterwards, charging through `processor`.
pub async fn renewals(
    n: usize,
    database: &BenchDatabase,
    processor: &Processor,
) -> anyhow::Result<RenewalsReport> {
    let standalone = Standalone::of(processor).await?;
    let report = renewals_on(n, database, standalone.as_ref(), Variant::SERVICE, true).await;
    Standalone::stop(standalone).await;
    report
}

async fn renewals_on(
    n: usize,
    database: &BenchDatabase,
    standalone: Option<&Standalone>,
    variant: Variant,
    with_primitive: bool,
) -> anyhow::Result<RenewalsReport> {
    match database {
        BenchDatabase::Sqlite(path) => {
            let database_url = format!("sqlite://{}", path.display());
            let report = burst(&database_url, n, variant, with_primitive, standalone).await;
            // The database and its WAL and shared-memory files (a hundred MiB at a million).
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            report.map(|r| RenewalsReport {
                database: format!("SQLite, {}", path.display()),
                ..r
            })
        }
        BenchDatabase::Postgres(url) => {
            let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
            let schema_url = crate::chaos::fixtures::fresh_postgres_schema(url, &schema).await?;
            let report = burst(&schema_url, n, variant, with_primitive, standalone).await;
            crate::chaos::fixtures::drop_postgres_schema(url, &schema).await?;
            report.map(|r| RenewalsReport {
                database: format!(
                    "PostgreSQL, schema {schema} of {}",
                    billing::config::without_password(url)
                ),
                ..r
            })
        }
    }
}

/// Two renewal bursts of `n` on PostgreSQL, each in a fresh schema of `postgres_url`: one
/// node without the cluster machinery, then one node with it (leases, every write fenced):
/// what fencing costs a single node.
pub async fn fence_overhead(n: usize, postgres_url: &str) -> anyhow::Result<FenceReport> {
    let mut reports = Vec::new();
    for cluster in [false, true] {
        let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
        let url = crate::chaos::fixtures::fresh_postgres_schema(postgres_url, &schema).await?;
        let variant = Variant {
            cluster,
            ..Variant::SERVICE
        };
        let report = burst(&url, n, variant, false, None).await;
        crate::chaos::fixtures::drop_postgres_schema(postgres_url, &schema).await?;
        reports.push(report?);
    }
    let clustered = reports.pop().context("clustered run")?;
    let plain = reports.pop().context("plain run")?;
    Ok(FenceReport { plain, clustered })
}

/// The two runs of `fence_overhead`.
#[derive(Debug)]
pub struct FenceReport {
    pub plain: RenewalsReport,
    pub clustered: RenewalsReport,
}

impl std::fmt::Display for FenceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = |r: &RenewalsReport| r.settled as f64 / r.settle.as_secs_f64();
        let (plain, clustered) = (rate(&self.plain), rate(&self.clustered));
        writeln!(
            f,
            "renewal burst on PostgreSQL: {} subscriptions due at one instant, one node",
            self.plain.subscriptions
        )?;
        writeln!(
            f,
            "  without the cluster machinery   {plain:.0} renewals/s ({} settled in {:.2} s)",
            self.plain.settled,
            self.plain.settle.as_secs_f64()
        )?;
        writeln!(
            f,
            "  with leases and fenced writes   {clustered:.0} renewals/s ({} settled in {:.2} s)",
            self.clustered.settled,
            self.clustered.settle.as_secs_f64()
        )?;
        write!(
            f,
            "  cost of fencing                 {:.1} %",
            100.0 * (1.0 - clustered / plain)
        )
    }
}

/// One burst of `n` on `database_url`: seed, restart, make all due, wait until settled; then,
/// if `with_primitive`, the primitive limit. Charged through the `standalone` sandbox if
/// given, else the service's own.
async fn burst(
    database_url: &str,
    n: usize,
    variant: Variant,
    with_primitive: bool,
    standalone: Option<&Standalone>,
) -> anyhow::Result<RenewalsReport> {
    let database_url = database_url.to_owned();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    let (rss_baseline, _) = rss_mib();

    let (server, _) = start_as(&database_url, &http, variant).await?;
    let store = Store::connect(&database_url).await?;
    let shop = shop(&server, &store, &http, n, standalone).await?;
    let mail = match variant.notices {
        true => {
            let sink = crate::chaos::smtp::SmtpSink::start()?;
            turn_notices_on(&server, &http, &shop, sink.port).await?;
            Some(sink)
        }
        false => None,
    };

    let seed_started = Instant::now();
    let now = chrono::Utc::now().timestamp_millis();
    let mut ids = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let batch: Vec<Subscription> = (0..left.min(10_000)).map(|_| seeded(&shop, now)).collect();
        left -= batch.len();
        ids.extend(batch.iter().map(|s| s.id.clone()));
        crate::Raw(&store).seed_subscriptions(&batch).await?;
        crate::Raw(&store)
            .seed_paid_periods(&batch, 30 * DAY_MS)
            .await?;
    }
    crate::Raw(&store)
        .seed_invoice_series(&shop.account)
        .await?;
    crate::Raw(&store).analyze_seeded().await?;
    let seed = seed_started.elapsed();

    server.stop().await?;
    let (server, restart_to_ready) = start_as(&database_url, &http, variant).await?;
    if let Some(standalone) = standalone {
        standalone
            .point_events(&http, &shop.processor_keys, &server.base, &shop.account)
            .await?;
    }
    let (rss_held, _) = rss_mib();
    eprintln!(
        "held: {n} subscriptions; restart to ready {:.2} s; RSS held {rss_held:.1} MiB (baseline {rss_baseline:.1})",
        restart_to_ready.as_secs_f64()
    );

    // The burst: every subscription due at one instant a little ahead, as renewals are known
    // ahead in production: the scheduler has loaded their timers when they fall due (making
    // them due in the past would add up to its load interval, an artefact of the benchmark).
    let counted_before = crate::Raw(&store).row_counts().await?;
    let due_at = chrono::Utc::now().timestamp_millis() + DUE_AHEAD_MS;
    let made_due = crate::Raw(&store)
        .make_all_due(&shop.account, due_at)
        .await? as usize;
    anyhow::ensure!(made_due == n, "made {made_due} of {n} due");
    let ahead = due_at - chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(u64::try_from(ahead).unwrap_or(0))).await;
    let (user_before, kernel_before) = cpu_split("/proc/self/stat");
    let sandbox_cpu_before = standalone.map(|s| cpu_of(&s.proc_file("stat")));
    let bound = Duration::from_secs(120 + (n as u64) / 200);
    let since_due = || {
        Duration::from_millis(
            u64::try_from(chrono::Utc::now().timestamp_millis() - due_at).unwrap_or(0),
        )
    };
    let mut settled = 0;
    let mut reported = Instant::now();
    while since_due() < bound {
        settled = crate::Raw(&store)
            .count_renewed(&shop.account, due_at)
            .await? as usize;
        if settled >= n && store.count_pending_charges(&shop.account).await? == 0 {
            break;
        }
        // Progress for long runs, so that a run stopped early still says how fast it went.
        if reported.elapsed() >= Duration::from_secs(30) {
            reported = Instant::now();
            let elapsed = since_due().as_secs_f64();
            eprintln!(
                "burst: {settled} of {n} renewed after {elapsed:.0} s ({:.0}/s); RSS {:.1} MiB",
                settled as f64 / elapsed,
                rss_mib().0
            );
        }
        // Counting the renewed is a range of the account's due index that grows with N: poll
        // less often in big runs, so that the poll is not what loads the readers.
        tokio::time::sleep(Duration::from_millis(if n > 20_000 { 2_000 } else { 250 })).await;
    }
    // From the instant they fell due to the last renewal's write, not to the poll that saw it.
    let settle = match crate::Raw(&store)
        .last_renewed_at(&shop.account, due_at)
        .await?
    {
        Some(last) if settled >= n => {
            Duration::from_millis(u64::try_from(last - due_at).unwrap_or(0))
        }
        _ => since_due(),
    };
    let (user_after, kernel_after) = cpu_split("/proc/self/stat");
    let burst_kernel_cpu = kernel_after.saturating_sub(kernel_before);
    let burst_cpu = user_after.saturating_sub(user_before) + burst_kernel_cpu;
    let sandbox = standalone.zip(sandbox_cpu_before).map(|(s, before)| {
        let cpu = cpu_of(&s.proc_file("stat")).saturating_sub(before);
        (cpu, rss_of(&s.proc_file("status")).1)
    });
    let cpu_window = since_due();
    let (_, peak) = rss_mib();
    eprintln!(
        "burst: {settled} of {n} renewed in {:.2} s",
        settle.as_secs_f64()
    );
    server.stop().await?;
    let burst_rows = fixtures::rows_added(&counted_before, &crate::Raw(&store).row_counts().await?);
    let invoiced = if variant.invoices {
        Some(crate::Raw(&store).count_invoices(&shop.account).await? as usize)
    } else {
        None
    };
    let noticed = match &mail {
        Some(sink) => Some((
            crate::Raw(&store).count_notices(&shop.account).await? as usize,
            sink.accepted().values().sum(),
        )),
        None => None,
    };

    let (primitive, primitive_rows) = if with_primitive {
        let before = crate::Raw(&store).row_counts().await?;
        let primitive = Primitive {
            round_trips: round_trips(n).await?,
            rows: rows(&store, &shop, &ids).await?,
        };
        let added = fixtures::rows_added(&before, &crate::Raw(&store).row_counts().await?);
        (Some(primitive), Some(added))
    } else {
        (None, None)
    };
    Ok(RenewalsReport {
        database: String::new(),
        subscriptions: n,
        seed,
        restart_to_ready,
        rss_held_mib: rss_held,
        rss_baseline_mib: rss_baseline,
        settled,
        invoiced,
        noticed,
        settle,
        peak_rss_mib: peak,
        burst_cpu,
        burst_kernel_cpu,
        cpu_window,
        sandbox,
        primitive,
        burst_rows,
        primitive_rows,
    })
}

#[cfg(test)]
mod tests;
