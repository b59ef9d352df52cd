//! The processes and the database of one chaos run: the real `billing serve` (killed with
//! SIGKILL and started again on the same database and port), the standalone sandbox processor
//! (its own process, so that it outlives the server's kill and its transactions can be
//! compared with our charges afterwards), and a fresh SQLite file or PostgreSQL schema.

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a process may take to come up before the run fails.
const START_BOUND: Duration = Duration::from_secs(60);

/// The standalone sandbox processor (`billing sandbox-processor`).
pub struct Sandbox {
    child: Child,
    /// Its protocol's base URL (`http://ADDR/v1`).
    pub base: String,
}

impl Sandbox {
    /// Starts it on a port of its choosing, administered with `admin_token`, and reads the
    /// address it prints.
    pub async fn start(
        binary: &Path,
        settle_delay: Duration,
        admin_token: &str,
    ) -> anyhow::Result<Self> {
        let settle = settle_delay.as_millis().to_string();
        let args = [
            "sandbox-processor",
            "--bind",
            "127.0.0.1:0",
            "--settle-delay-ms",
            &settle,
        ];
        let (child, base) = start_peer(binary, &args, admin_token, "sandbox processor at ").await?;
        Ok(Self { child, base })
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Starts a sandbox (`args` name its command) administered with `admin_token`, and reads the
/// address it prints on its first line after `announce`.
pub(crate) async fn start_peer(
    binary: &Path,
    args: &[&str],
    admin_token: &str,
    announce: &str,
) -> anyhow::Result<(Child, String)> {
    let mut child = Command::new(binary)
        .args(args)
        // In the environment, not the arguments, where `ps` would show it.
        .env("BILLING_SANDBOX_ADMIN_TOKEN", admin_token)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stdout = child.stdout.take().context("the sandbox's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(START_BOUND, lines.next_line())
        .await
        .with_context(|| format!("`{}` did not say where it listens", args[0]))??
        .with_context(|| format!("`{}` exited before listening", args[0]))?;
    let base = line
        .strip_prefix(announce)
        .with_context(|| format!("unexpected first line from `{}`: {line}", args[0]))?
        .trim()
        .to_owned();
    // Its log lines go to the same pipe: read them, or a full pipe would stall it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, base))
}

/// What the server is started with, the same at every start of one run.
#[derive(Clone)]
pub struct ServerSpec {
    pub binary: PathBuf,
    pub database_url: String,
    pub port: u16,
    pub admin_token: String,
    /// The server's output (its log) goes here, appended across restarts, for a run that
    /// breaks.
    pub log: PathBuf,
    pub processor_timeout: Duration,
    pub reconcile_interval: Duration,
    pub recheck_base: Duration,
    /// How long the server's shard leases last (PostgreSQL).
    pub timer_lease: Duration,
    /// The sandbox DIAN the account files with (its service URL), when the run has DIAN on.
    pub dian: Option<String>,
}

/// A running `billing serve`.
pub struct Server {
    child: Child,
    pub base: String,
}

impl Server {
    /// Starts the server and waits (bounded) until `/readyz` answers 200.
    pub async fn start(spec: &ServerSpec, http: &reqwest::Client) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .with_context(|| format!("opening {}", spec.log.display()))?;
        let mut command = Command::new(&spec.binary);
        if let Some(dian) = &spec.dian {
            // DIAN's calls as short as the processor's, and their retries as quick.
            command
                .env("BILLING_DIAN_SANDBOX_URL", dian)
                .env(
                    "BILLING_DIAN_TIMEOUT_MS",
                    spec.processor_timeout.as_millis().to_string(),
                )
                .env("BILLING_DIAN_INTERVAL_MS", "100")
                .env(
                    "BILLING_DIAN_RETRY_BASE_MS",
                    spec.recheck_base.as_millis().to_string(),
                );
        }
        let mut child = command
            .arg("serve")
            .env("DATABASE_URL", &spec.database_url)
            .env("BILLING_BIND", format!("127.0.0.1:{}", spec.port))
            .env("BILLING_ADMIN_TOKEN", &spec.admin_token)
            .env(
                "BILLING_PROCESSOR_TIMEOUT_MS",
                spec.processor_timeout.as_millis().to_string(),
            )
            .env(
                "BILLING_RECONCILE_INTERVAL_MS",
                spec.reconcile_interval.as_millis().to_string(),
            )
            .env(
                "BILLING_PROCESSOR_RECHECK_BASE_MS",
                spec.recheck_base.as_millis().to_string(),
            )
            .env(
                "BILLING_LEASE_TTL_MS",
                spec.timer_lease.as_millis().to_string(),
            )
            // An SMTP answer awaited as long as the processor's, notices looked for often.
            .env(
                "BILLING_SMTP_TIMEOUT_MS",
                spec.processor_timeout.as_millis().to_string(),
            )
            .env("BILLING_NOTICES_INTERVAL_MS", "100")
            .env("RUST_LOG", "warn,sqlx=error,sea_orm=error")
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", spec.binary.display()))?;
        let base = format!("http://127.0.0.1:{}", spec.port);
        let deadline = tokio::time::Instant::now() + START_BOUND;
        loop {
            let ready = http
                .get(format!("{base}/readyz"))
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ready {
                return Ok(Self { child, base });
            }
            if let Some(status) = child.try_wait()? {
                anyhow::bail!(
                    "billing serve exited ({status}) before it was ready; see {}",
                    spec.log.display()
                );
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "billing serve not ready within {START_BOUND:?}; see {}",
                spec.log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no shutdown hook runs, in-flight work is lost as in a crash.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}

/// A port free now, for a server that must come back on the same address after a kill or a
/// restart (the sandbox keeps sending its events there, the other nodes forward to it). Chosen
/// below the kernel's ephemeral range: a port the kernel hands out (a bind to port 0) may,
/// while the server is down, become the local port of any outgoing connection on the machine
/// (a database connection, an HTTP client of a test running beside), and the server's restart
/// then fails with "address in use"; a port below that range is only ever taken by a bind that
/// names it.
pub fn free_port() -> anyhow::Result<u16> {
    let Some(ports) = chosen_ports() else {
        // Almost every port is ephemeral here: take one the kernel hands out.
        return Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port());
    };
    for _ in 0..1_000 {
        let port = rand::random_range(ports.clone());
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port in {ports:?}")
}

/// The lowest port `free_port` chooses: above the usual services' (PostgreSQL, Redis, ...).
const FIRST_CHOSEN_PORT: u16 = 10_000;

/// The ports `free_port` chooses from: from `FIRST_CHOSEN_PORT` up to the ephemeral range, or
/// none when that range leaves (almost) nothing below it.
fn chosen_ports() -> Option<std::ops::Range<u16>> {
    let below = ephemeral_ports().0;
    (below > FIRST_CHOSEN_PORT + 1_000).then_some(FIRST_CHOSEN_PORT..below)
}

/// The kernel's range of ephemeral ports, first and last (Linux's default when it cannot be
/// read).
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| {
            let mut ports = range.split_whitespace().map(str::parse::<u16>);
            Some((ports.next()?.ok()?, ports.next()?.ok()?))
        })
        .unwrap_or((32_768, 60_999))
}

/// Where runs keep their databases: SQLite files in a directory, or schemas in one
/// PostgreSQL database.
#[derive(Clone, Debug)]
pub enum Databases {
    Sqlite { dir: PathBuf },
    Postgres { url: String },
}

/// One run's fresh database.
pub struct FreshDatabase {
    pub url: String,
    /// Where a person finds it after a broken run.
    pub location: String,
    cleanup: Cleanup,
}

enum Cleanup {
    Files(PathBuf),
    Schema { url: String, schema: String },
}

impl Databases {
    /// A fresh database named after the run's seed.
    pub async fn fresh(&self, seed: u64) -> anyhow::Result<FreshDatabase> {
        let name = format!("chaos_{seed:016x}_{}", uuid::Uuid::new_v4().simple());
        match self {
            Databases::Sqlite { dir } => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let path = dir.join(format!("{name}.db"));
                Ok(FreshDatabase {
                    url: format!("sqlite://{}", path.display()),
                    location: path.display().to_string(),
                    cleanup: Cleanup::Files(path),
                })
            }
            Databases::Postgres { url } => {
                let with_schema = crate::chaos::fixtures::fresh_postgres_schema(url, &name)
                    .await
                    .with_context(|| format!("creating schema {name}"))?;
                Ok(FreshDatabase {
                    url: with_schema,
                    location: format!("schema {name} of {url}"),
                    cleanup: Cleanup::Schema {
                        url: url.clone(),
                        schema: name,
                    },
                })
            }
        }
    }
}

impl FreshDatabase {
    /// Removes it: only after a clean run, so a broken one can be inspected.
    pub async fn remove(self) -> anyhow::Result<()> {
        match self.cleanup {
            Cleanup::Files(path) => {
                // The database and its WAL and shared-memory files.
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
                Ok(())
            }
            Cleanup::Schema { url, schema } => {
                crate::chaos::fixtures::drop_postgres_schema(&url, &schema).await?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{chosen_ports, ephemeral_ports, free_port};

    /// A server's port is never one an outgoing connection can be given while the server is
    /// down for a restart.
    #[test]
    fn a_chosen_port_is_free_and_outside_the_ephemeral_range() {
        let (first, last) = ephemeral_ports();
        assert!(first <= last);
        // A kernel whose range leaves (almost) nothing below it: ports are handed out there.
        let chosen = chosen_ports().unwrap_or(1..u16::MAX);
        assert!(chosen.end <= first || chosen == (1..u16::MAX));
        for _ in 0..50 {
            let port = free_port().expect("a port");
            assert!(chosen.contains(&port), "{port} is outside {chosen:?}");
            std::net::TcpListener::bind(("127.0.0.1", port)).expect("free");
        }
    }
}
