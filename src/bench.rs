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

use crate::config::Config;
use crate::ids::{AccountId, SubscriptionId};
use crate::processor::client::{
    CardDetails, NewTransaction, ProcessorClient, ProcessorCredentials, SourceKind,
};
use crate::store::Store;
use crate::store::subscriptions::Subscription;
use anyhow::Context;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
const AMOUNT: i64 = 100_000;
/// The same bound as the scheduler's concurrency of due timers.
const CONCURRENCY: usize = crate::actors::RENEWALS_AT_ONCE;
const DAY_MS: i64 = 86_400_000;
/// How far ahead of making them due the burst's subscriptions fall due: more than the
/// scheduler's load interval (2 s), so their timers are loaded when they do.
const DUE_AHEAD_MS: i64 = 3_000;

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
}

impl std::fmt::Display for RenewalsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.subscriptions as f64;
        let rate = self.settled as f64 / self.settle.as_secs_f64();
        writeln!(
            f,
            "renewal burst: {} subscriptions due at one instant ({})",
            self.subscriptions, self.database
        )?;
        writeln!(
            f,
            "  seeded in                 {:.1} s",
            self.seed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  restart to ready          {:.2} s (N held, every due timer armed)",
            self.restart_to_ready.as_secs_f64()
        )?;
        writeln!(
            f,
            "  RSS held after restart    {:.1} MiB (baseline before seeding {:.1} MiB)",
            self.rss_held_mib, self.rss_baseline_mib
        )?;
        writeln!(
            f,
            "  RSS per subscription      {:.0} bytes (held − baseline)",
            (self.rss_held_mib - self.rss_baseline_mib).max(0.0) * 1_048_576.0 / n
        )?;
        writeln!(
            f,
            "  settled                   {} of {}",
            self.settled, self.subscriptions
        )?;
        writeln!(
            f,
            "  settle time               {:.2} s",
            self.settle.as_secs_f64()
        )?;
        writeln!(f, "  renewals/s                {rate:.0}")?;
        let per_renewal = |cpu: Duration| cpu.as_secs_f64() * 1e6 / self.settled.max(1) as f64;
        let share = |cpu: Duration| 100.0 * cpu.as_secs_f64() / self.cpu_window.as_secs_f64();
        let whose = if self.sandbox.is_some() {
            "the service's process"
        } else {
            "process"
        };
        writeln!(
            f,
            "  CPU per renewal           {:.0} µs ({whose} CPU {:.1} s over the burst, {:.0} % of 1 core)",
            per_renewal(self.burst_cpu),
            self.burst_cpu.as_secs_f64(),
            share(self.burst_cpu)
        )?;
        writeln!(
            f,
            "  kernel share of its CPU   {:.1} % (system time {:.1} s)",
            100.0 * self.burst_kernel_cpu.as_secs_f64() / self.burst_cpu.as_secs_f64().max(1e-9),
            self.burst_kernel_cpu.as_secs_f64()
        )?;
        if let Some((cpu, _)) = self.sandbox {
            writeln!(
                f,
                "  sandbox CPU per renewal   {:.0} µs (its own process: {:.1} s, {:.0} % of 1 core)",
                per_renewal(cpu),
                cpu.as_secs_f64(),
                share(cpu)
            )?;
        }
        writeln!(
            f,
            "  peak RSS                  {:.1} MiB",
            self.peak_rss_mib
        )?;
        if let Some((_, peak)) = self.sandbox {
            writeln!(f, "  sandbox peak RSS          {peak:.1} MiB")?;
        }
        let Some(primitive) = self.primitive else {
            return Ok(());
        };
        let limit = primitive.rate(self.subscriptions);
        writeln!(
            f,
            "  primitive limit           {limit:.0}/s: processor round trips {:.2} s ({:.0}/s), rows as multi-row statements {:.2} s ({:.0}/s)",
            primitive.round_trips.as_secs_f64(),
            n / primitive.round_trips.as_secs_f64(),
            primitive.rows.as_secs_f64(),
            n / primitive.rows.as_secs_f64()
        )?;
        write!(
            f,
            "  renewals / limit          {:.0} %",
            100.0 * rate / limit
        )
    }
}

/// Resident set size now and at its peak (VmRSS, VmHWM), in MiB.
pub fn rss_mib() -> (f64, f64) {
    rss_of("/proc/self/status")
}

/// `rss_mib` of the process whose `status` file is at `status`.
fn rss_of(status: &str) -> (f64, f64) {
    let status = std::fs::read_to_string(status).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time (user + system) this process has used, from `/proc/self/stat` (in clock ticks of
/// 1/100 s, Linux's fixed `USER_HZ`); zero where that file is absent.
pub fn process_cpu() -> Duration {
    cpu_of("/proc/self/stat")
}

/// `process_cpu` of the process whose `stat` file is at `stat`.
fn cpu_of(stat: &str) -> Duration {
    let (user, system) = cpu_split(stat);
    user + system
}

/// The user and the system (kernel) CPU time of the process whose `stat` file is at `stat`.
fn cpu_split(stat: &str) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(stat).unwrap_or_default();
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis,
    // where utime and stime are the 12th and 13th.
    let mut ticks = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split_whitespace()
        .skip(11)
        .map(|t| t.parse::<u64>().unwrap_or(0));
    let mut next = || Duration::from_millis(ticks.next().unwrap_or(0) * 10);
    let user = next();
    (user, next())
}

struct Server {
    base: String,
    shutdown: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Starts the service on a random port and waits for `/readyz`; returns it and the time taken.
async fn start(database_url: &str, http: &reqwest::Client) -> anyhow::Result<(Server, Duration)> {
    start_as(database_url, http, true).await
}

/// `start`, with the cluster machinery (leases, fenced writes; PostgreSQL only) or without it.
async fn start_as(
    database_url: &str,
    http: &reqwest::Client,
    cluster: bool,
) -> anyhow::Result<(Server, Duration)> {
    let started = Instant::now();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let mut config = Config::new(database_url.to_owned());
    config.admin_token = Some(ADMIN_TOKEN.to_owned());
    config.single_node = !cluster;
    let (shutdown, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(crate::run(config, listener, async {
        let _ = rx.await;
    }));
    loop {
        if http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            break;
        }
        anyhow::ensure!(!task.is_finished(), "the service stopped while starting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((
        Server {
            base,
            shutdown,
            task,
        },
        started.elapsed(),
    ))
}

impl Server {
    async fn stop(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(());
        self.task.await??;
        Ok(())
    }
}

async fn call(
    http: &reqwest::Client,
    request: reqwest::RequestBuilder,
    expect: u16,
) -> anyhow::Result<Value> {
    let _ = http;
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    anyhow::ensure!(status == expect, "expected {expect}, got {status}: {body}");
    Ok(body)
}

/// The account, its customer's payment method and plan, made through the API as an
/// integrator would.
struct Shop {
    key: String,
    account: AccountId,
    customer: String,
    plan: String,
    method: String,
    /// The merchant's keys at the standalone sandbox (unused with the in-process one).
    processor_keys: Value,
}

async fn shop(
    server: &Server,
    store: &Store,
    http: &reqwest::Client,
    n: usize,
    standalone: Option<&Standalone>,
) -> anyhow::Result<Shop> {
    let base = &server.base;
    let mut new_account = json!({"name": "bench", "sandbox": true, "rate_limit_per_minute": 0,
        "status_rate_limit_per_minute": 0});
    // With the standalone sandbox: the account's processor is it, under keys made here.
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let keys = json!({"public_key": format!("pub_test_{unique}"),
        "private_key": format!("prv_test_{unique}"),
        "events_secret": format!("test_events_{unique}"),
        "integrity_secret": format!("test_integrity_{unique}")});
    if let Some(standalone) = standalone {
        let mut processor = keys.clone();
        processor["base_url"] = json!(standalone.sandbox.base);
        new_account["processor"] = processor;
    }
    let account = call(
        http,
        http.post(format!("{base}/admin/accounts"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&new_account),
        201,
    )
    .await?;
    let key = account["api_key"].as_str().context("api_key")?.to_owned();
    let account_id = AccountId::from_stored(account["id"].as_str().context("id")?.to_owned());
    if let Some(standalone) = standalone {
        standalone
            .point_events(http, &keys, base, &account_id)
            .await?;
    }
    // Twice (with room to spare) the fees of the burst and of the primitive's rows.
    let fees = 4 * (n as i64 + 10) * 1_500;
    call(
        http,
        http.post(format!(
            "{base}/admin/accounts/{}/balance/top-ups",
            account_id.as_str()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"amount_cents": fees})),
        201,
    )
    .await?;
    let plan = call(
        http,
        http.post(format!("{base}/v1/plans")).bearer_auth(&key).json(
            &json!({"name": "Bench", "monthly_amount_cents": AMOUNT, "annual_amount_cents": AMOUNT * 10}),
        ),
        201,
    )
    .await?;
    let customer = call(
        http,
        http.post(format!("{base}/v1/customers"))
            .bearer_auth(&key)
            .json(&json!({"email": "bench@example.co", "name": "Bench"})),
        201,
    )
    .await?;
    let customer = customer["id"].as_str().context("id")?.to_owned();
    let row = store.account(&account_id).await?.context("account row")?;
    let creds = ProcessorCredentials::new(
        account["processor"]["base_url"]
            .as_str()
            .context("base_url")?,
        row.processor_public_key.clone(),
        row.processor_private_key.clone(),
        row.processor_integrity_secret.clone(),
    )?;
    let client = ProcessorClient::new()?;
    let (acceptance, token) = approved_card(&client, &creds).await?;
    let method = call(
        http,
        http.post(format!("{base}/v1/customers/{customer}/payment-methods"))
            .bearer_auth(&key)
            .json(
                &json!({"card_token": token.id, "acceptance_token": acceptance.acceptance_token, "accept_personal_auth": acceptance.personal_auth_token}),
            ),
        201,
    )
    .await?;
    Ok(Shop {
        key,
        account: account_id,
        customer,
        plan: plan["id"].as_str().context("id")?.to_owned(),
        method: method["id"].as_str().context("id")?.to_owned(),
        processor_keys: keys,
    })
}

/// The processor's acceptance tokens and a token of the card it approves, as a browser would
/// get them.
async fn approved_card(
    client: &ProcessorClient,
    creds: &ProcessorCredentials,
) -> anyhow::Result<(
    crate::processor::client::AcceptanceTokens,
    crate::processor::client::CardToken,
)> {
    let acceptance = client.acceptance_tokens(creds).await?;
    let card = CardDetails {
        number: "4242424242424242".into(),
        cvc: "123".into(),
        exp_month: "08".into(),
        exp_year: "30".into(),
        card_holder: "Bench".into(),
    };
    Ok((acceptance, client.tokenize_card(creds, &card).await?))
}

fn seeded(shop: &Shop, now: i64) -> Subscription {
    let far = now + 365 * DAY_MS;
    Subscription {
        id: SubscriptionId::generate().into_string(),
        account_id: shop.account.as_str().to_owned(),
        customer_id: shop.customer.clone(),
        plan_id: shop.plan.clone(),
        cycle: "monthly".into(),
        status: "active".into(),
        current_period_start: now,
        current_period_end: far,
        next_charge_date: far,
        default_payment_method_id: shop.method.clone(),
        trial_end: None,
        cancel_at_period_end: false,
        failed_attempts: 0,
        first_failure_at: None,
        metadata: Some(r#"{"bench":true}"#.into()),
        anchor: now,
        period_index: 0,
        next_cycle: None,
        period_cycle: "monthly".into(),
        version: 0,
        due_at: Some(far),
        created_at: now,
        updated_at: now,
    }
}

/// A running service with one account, `subscriptions` trialing subscriptions made through
/// the API, and its API key: the API benchmark's fixture.
pub struct Fixture {
    pub base: String,
    pub api_key: String,
    pub database_url: String,
    pub account_id: String,
    pub subscription_id: String,
    server: Server,
}

impl Fixture {
    pub async fn start(dir: &std::path::Path, subscriptions: usize) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("api-{}.db", uuid::Uuid::new_v4().simple()));
        let database_url = format!("sqlite://{}", path.display());
        let http = reqwest::Client::new();
        let (server, _) = start(&database_url, &http).await?;
        let store = Store::connect(&database_url).await?;
        let shop = shop(&server, &store, &http, 10, None).await?;
        let mut last = String::new();
        for _ in 0..subscriptions {
            let sub = call(
                &http,
                http.post(format!("{}/v1/subscriptions", server.base))
                    .bearer_auth(&shop.key)
                    .json(&json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
                        "payment_method_id": shop.method, "trial_days": 30, "metadata": {"bench": true}})),
                201,
            )
            .await?;
            last = sub["id"].as_str().context("id")?.to_owned();
        }
        Ok(Self {
            base: server.base.clone(),
            api_key: shop.key.clone(),
            database_url,
            account_id: shop.account.as_str().to_owned(),
            subscription_id: last,
            server,
        })
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.server.stop().await
    }
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
struct Standalone {
    sandbox: crate::chaos::processes::Sandbox,
    admin_token: String,
}

impl Standalone {
    /// Starts `binary`'s sandbox, settling transactions after the in-process sandbox's delay.
    async fn start(binary: &std::path::Path) -> anyhow::Result<Self> {
        let admin_token = crate::secrets::random_token("sandbox_admin_", 32);
        let settle_delay = crate::processor::sandbox::SandboxConfig::default().settle_delay;
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
    let standalone = match processor {
        Processor::InProcess => None,
        Processor::Standalone(binary) => Some(Standalone::start(binary).await?),
    };
    let report = renewals_on(n, database, standalone.as_ref()).await;
    if let Some(standalone) = standalone {
        standalone.sandbox.stop().await;
    }
    report
}

async fn renewals_on(
    n: usize,
    database: &BenchDatabase,
    standalone: Option<&Standalone>,
) -> anyhow::Result<RenewalsReport> {
    match database {
        BenchDatabase::Sqlite(path) => {
            let database_url = format!("sqlite://{}", path.display());
            let report = burst(&database_url, n, true, true, standalone).await;
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
            let schema_url = crate::store::chaos::fresh_postgres_schema(url, &schema).await?;
            let report = burst(&schema_url, n, true, true, standalone).await;
            crate::store::chaos::drop_postgres_schema(url, &schema).await?;
            report.map(|r| RenewalsReport {
                database: format!(
                    "PostgreSQL, schema {schema} of {}",
                    crate::config::without_password(url)
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
        let url = crate::store::chaos::fresh_postgres_schema(postgres_url, &schema).await?;
        let report = burst(&url, n, cluster, false, None).await;
        crate::store::chaos::drop_postgres_schema(postgres_url, &schema).await?;
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
    cluster: bool,
    with_primitive: bool,
    standalone: Option<&Standalone>,
) -> anyhow::Result<RenewalsReport> {
    let database_url = database_url.to_owned();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    let (rss_baseline, _) = rss_mib();

    let (server, _) = start_as(&database_url, &http, cluster).await?;
    let store = Store::connect(&database_url).await?;
    let shop = shop(&server, &store, &http, n, standalone).await?;

    let seed_started = Instant::now();
    let now = chrono::Utc::now().timestamp_millis();
    let mut ids = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let batch: Vec<Subscription> = (0..left.min(10_000)).map(|_| seeded(&shop, now)).collect();
        left -= batch.len();
        ids.extend(batch.iter().map(|s| s.id.clone()));
        store.seed_subscriptions(&batch).await?;
        store.seed_paid_periods(&batch, 30 * DAY_MS).await?;
    }
    store.analyze_seeded().await?;
    let seed = seed_started.elapsed();

    server.stop().await?;
    let (server, restart_to_ready) = start_as(&database_url, &http, cluster).await?;
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
    let due_at = chrono::Utc::now().timestamp_millis() + DUE_AHEAD_MS;
    let made_due = store.make_all_due(&shop.account, due_at).await? as usize;
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
        settled = store.count_renewed(&shop.account, due_at).await? as usize;
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
    let settle = match store.last_renewed_at(&shop.account, due_at).await? {
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

    let primitive = if with_primitive {
        Some(Primitive {
            round_trips: round_trips(n).await?,
            rows: rows(&store, &shop, &ids).await?,
        })
    } else {
        None
    };
    Ok(RenewalsReport {
        database: String::new(),
        subscriptions: n,
        seed,
        restart_to_ready,
        rss_held_mib: rss_held,
        rss_baseline_mib: rss_baseline,
        settled,
        settle,
        peak_rss_mib: peak,
        burst_cpu,
        burst_kernel_cpu,
        cpu_window,
        sandbox,
        primitive,
    })
}

/// The machine's limit for the work of `n` renewals, measured beside the burst: the processor
/// round trips alone (`round_trips`), then the rows alone (`rows`). Neither has actors,
/// channels to a writer or per-statement hops: what is left is what the work itself costs here.
#[derive(Debug, Clone, Copy)]
pub struct Primitive {
    pub round_trips: Duration,
    pub rows: Duration,
}

impl Primitive {
    /// Renewals per second if both parts ran one after the other on this machine.
    pub fn rate(&self, n: usize) -> f64 {
        n as f64 / (self.round_trips + self.rows).as_secs_f64()
    }
}

/// The processor's part of `n` renewals over loopback HTTP, with the scheduler's concurrency:
/// create the transaction at a standalone sandbox in this process (settling at once), then
/// receive its signed `transaction.updated` at a bare receiver, which checks the signature as
/// the ingress does. The same whichever sandbox the burst charged through: the machine's limit.
async fn round_trips(n: usize) -> anyhow::Result<Duration> {
    use axum::{Router, extract::State, http::HeaderMap, routing::post};
    type Waiting = Arc<dashmap::DashMap<String, tokio::sync::oneshot::Sender<()>>>;
    const EVENTS_SECRET: &str = "primitive_events_secret";

    async fn receive(
        State(waiting): State<Waiting>,
        headers: HeaderMap,
        body: axum::body::Bytes,
    ) -> axum::http::StatusCode {
        let event = crate::processor::signature::parse_event(&body);
        let header = headers
            .get("x-event-checksum")
            .and_then(|v| v.to_str().ok());
        let signed = event.as_ref().and_then(|event| {
            crate::processor::signature::authenticate_event(event, header, EVENTS_SECRET)
        });
        let reference = event.as_ref().and_then(|event| {
            event["data"]["transaction"]["reference"]
                .as_str()
                .map(str::to_owned)
        });
        match (signed, reference) {
            (Some(_), Some(reference)) => {
                if let Some((_, done)) = waiting.remove(&reference) {
                    let _ = done.send(());
                }
                axum::http::StatusCode::OK
            }
            _ => axum::http::StatusCode::UNAUTHORIZED,
        }
    }

    let waiting: Waiting = Arc::default();
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let events_url = format!("http://{}/events", receiver.local_addr()?);
    let router = Router::new()
        .route("/events", post(receive))
        .with_state(Arc::clone(&waiting));
    let receiving = tokio::spawn(async move { axum::serve(receiver, router).await });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sandbox_base = format!("http://{}/v1", listener.local_addr()?);
    let config = crate::processor::sandbox::SandboxConfig {
        settle_delay: Duration::from_millis(0),
        ..Default::default()
    };
    // A sandbox of its own, administered with a token only this function knows.
    let admin_token = crate::secrets::random_token("sandbox_admin_", 32);
    let sandbox = tokio::spawn(crate::processor::sandbox::serve_standalone(
        listener,
        config,
        crate::processor::sandbox::AdminAuth::from_token(&admin_token),
    ));
    let http = reqwest::Client::new();
    let merchant = call(
        &http,
        http.post(format!("{sandbox_base}/_sandbox/merchants"))
            .bearer_auth(&admin_token)
            .json(&json!({"events_url": events_url, "events_secret": EVENTS_SECRET})),
        201,
    )
    .await?;
    let key = |name: &str| -> anyhow::Result<String> {
        Ok(merchant[name].as_str().context("merchant key")?.to_owned())
    };
    let creds = ProcessorCredentials::new(
        sandbox_base,
        key("public_key")?,
        key("private_key")?,
        key("integrity_secret")?,
    )?;
    let client = ProcessorClient::new()?;
    let (acceptance, token) = approved_card(&client, &creds).await?;
    let source = client
        .create_payment_source(
            &creds,
            &crate::processor::client::NewPaymentSource {
                kind: SourceKind::Card,
                token: token.id,
                customer_email: "bench@example.co".into(),
                acceptance_token: acceptance.acceptance_token,
                accept_personal_auth: acceptance.personal_auth_token,
            },
        )
        .await?;

    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    let run = uuid::Uuid::new_v4().simple().to_string();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let permit = Arc::clone(&slots).acquire_owned().await?;
        let (client, creds, waiting) = (client.clone(), creds.clone(), Arc::clone(&waiting));
        let reference = format!("prim_{run}_{i}");
        tasks.spawn(async move {
            let _permit = permit;
            let (done, arrived) = tokio::sync::oneshot::channel();
            waiting.insert(reference.clone(), done);
            let posted = client
                .create_transaction(
                    &creds,
                    &NewTransaction {
                        source_kind: SourceKind::Card,
                        recurrent: true,
                        amount_in_cents: AMOUNT,
                        currency: "COP".into(),
                        reference,
                        payment_source_id: source.id,
                        customer_email: "bench@example.co".into(),
                    },
                )
                .await;
            anyhow::ensure!(
                posted.transaction().is_some(),
                "the sandbox did not take the transaction: {posted:?}"
            );
            tokio::time::timeout(Duration::from_secs(60), arrived)
                .await
                .context("no event within 60 s")?
                .context("receiver gone")?;
            Ok::<_, anyhow::Error>(())
        });
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let elapsed = started.elapsed();
    sandbox.abort();
    receiving.abort();
    Ok(elapsed)
}

/// The rows of `ids`' renewals, written as multi-row statements of 500 renewals per
/// transaction (`Store::write_renewal_rows`), each with its event's JSON body as the service
/// writes it.
async fn rows(store: &Store, shop: &Shop, ids: &[String]) -> anyhow::Result<Duration> {
    let account = store.account(&shop.account).await?.context("account")?;
    let fee = crate::accounts::fee_schedule(&account).fee_for(AMOUNT);
    let now = chrono::Utc::now().timestamp_millis();
    // A period no renewal of the burst charged: the one-charge-per-period index stays quiet.
    let period_start = now + 400 * DAY_MS;
    let started = Instant::now();
    let renewals: Vec<crate::store::bench::RenewalRows> = ids
        .iter()
        .map(|id| {
            let charge_id = crate::ids::ChargeAttemptId::generate().into_string();
            let event_body = json!({
                "type": "charge.approved",
                "data": {"subscription_id": id, "charge_id": charge_id, "amount_in_cents": AMOUNT,
                         "currency": "COP", "status": "APPROVED", "metadata": {}},
            })
            .to_string();
            crate::store::bench::RenewalRows {
                account: shop.account.clone(),
                subscription_id: id.clone(),
                customer_id: shop.customer.clone(),
                payment_method_id: shop.method.clone(),
                transaction_id: format!("tx_{charge_id}"),
                charge_id,
                amount_cents: AMOUNT,
                fee_cents: fee,
                period_start,
                event_body,
            }
        })
        .collect();
    store.write_renewal_rows(&renewals, 500, now).await?;
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = "sqlite://billing.db";

    #[test]
    fn the_default_url_makes_a_new_file_under_the_directory() {
        let dir = std::env::temp_dir().join(format!("bench-{}", uuid::Uuid::new_v4().simple()));
        let BenchDatabase::Sqlite(path) =
            BenchDatabase::from_url(DEFAULT, DEFAULT, &dir).expect("test setup")
        else {
            panic!("SQLite expected");
        };
        assert!(path.starts_with(&dir) && !path.exists());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_existing_sqlite_file_is_never_used() {
        let file = std::env::temp_dir().join(format!("bench-{}.db", uuid::Uuid::new_v4().simple()));
        std::fs::write(&file, b"someone's data").expect("test setup");
        let url = format!("sqlite://{}", file.display());
        let refused = BenchDatabase::from_url(&url, DEFAULT, std::path::Path::new("unused"));
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(std::fs::read(&file).expect("test setup"), b"someone's data");
        std::fs::remove_file(&file).expect("test setup");
        let fresh = BenchDatabase::from_url(&url, DEFAULT, std::path::Path::new("unused"));
        assert!(matches!(fresh, Ok(BenchDatabase::Sqlite(path)) if path == file));
    }

    #[test]
    fn a_postgres_url_is_a_schema_of_that_database() {
        let url = "postgres://postgres@127.0.0.1:5432/postgres";
        assert!(matches!(
            BenchDatabase::from_url(url, DEFAULT, std::path::Path::new("unused")),
            Ok(BenchDatabase::Postgres(named)) if named == url
        ));
    }

    /// The whole benchmark, small: every subscription renewed, and the burst timed from the
    /// instant they fell due to the last renewal's write, which is no later than the poll that
    /// saw it (that poll may come at once or a poll interval later, as the machine's load has it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_burst_is_timed_from_the_due_instant_to_the_last_renewal() {
        let file = std::env::temp_dir().join(format!("bench-{}.db", uuid::Uuid::new_v4().simple()));
        let started = Instant::now();
        let report = renewals(
            50,
            &BenchDatabase::Sqlite(file.clone()),
            &Processor::InProcess,
        )
        .await
        .expect("the benchmark runs");
        assert_eq!(report.settled, 50, "{report}");
        assert!(report.settle > Duration::ZERO, "{report}");
        // The run's wall time holds the seeding, the restart and the 3 s lead before the rows
        // fall due, none of which is the settle time; the window the CPU was counted over ends
        // at the poll that saw the last renewal, never before its write.
        let lead = Duration::from_millis(DUE_AHEAD_MS as u64);
        assert!(
            report.settle + lead < started.elapsed(),
            "settle {:?} of a run of {:?}",
            report.settle,
            started.elapsed()
        );
        assert!(report.settle <= report.cpu_window, "{report}");
        assert!(report.burst_kernel_cpu <= report.burst_cpu, "{report}");
        assert!(
            report.primitive.is_some_and(|p| p.rate(50) > 0.0),
            "{report}"
        );
        assert!(!file.exists(), "the benchmark removes its database");
    }

    /// User and system time are the 14th and 15th fields of a `stat` file, counted after the
    /// command's closing parenthesis (a command may hold spaces and parentheses).
    #[test]
    fn the_kernel_share_reads_system_time_apart_from_user_time() {
        let path = std::env::temp_dir().join(format!("stat-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(
            &path,
            "4242 (billing (a b)) S 1 4242 4242 0 -1 4194560 9 0 0 0 1234 56 0 0 20 0 9 0\n",
        )
        .expect("write");
        let path = path.display().to_string();
        let (user, system) = cpu_split(&path);
        assert_eq!(user, Duration::from_millis(12_340));
        assert_eq!(system, Duration::from_millis(560));
        assert_eq!(cpu_of(&path), Duration::from_millis(12_900));
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(
            cpu_split("/nonexistent/stat"),
            (Duration::ZERO, Duration::ZERO)
        );
    }

    #[test]
    fn process_cpu_grows_with_work() {
        let before = process_cpu();
        let started = Instant::now();
        let mut x = 0u64;
        // Busy until the kernel has counted some of it (ticks of 10 ms), within a bound.
        while process_cpu() <= before {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no CPU counted for 20 s of work"
            );
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
    }
}
