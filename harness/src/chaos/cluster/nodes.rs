//! The nodes of a cluster run: N `billing serve` child processes on loopback, one PostgreSQL
//! schema, each with its own port, `BILLING_NODE_URL`, short leases and a database
//! `application_name` of its own (so that `pg_stat_activity` tells whose connections are
//! whose), and the signals a run sends them: SIGKILL, SIGSTOP/SIGCONT, SIGTERM. A node keeps
//! its port and URL across restarts, as a redeployed replica keeps its address.

use anyhow::Context;
use serde::Deserialize;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long a node may take to answer `/readyz` once started.
const START_BOUND: Duration = Duration::from_secs(60);
/// How long a node may take to exit after SIGTERM before the run calls it stuck.
const EXIT_BOUND: Duration = Duration::from_secs(30);

/// What every node of a run is started with.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub binary: PathBuf,
    /// The run's schema (a `search_path` option already in it).
    pub database_url: String,
    pub admin_token: String,
    pub lease_ttl: Duration,
    pub lease_renew: Duration,
    pub processor_timeout: Duration,
    pub reconcile_interval: Duration,
    pub recheck_base: Duration,
    /// The due-row claim of builds before issue 15 (`BILLING_TIMER_LEASE_MS`); short, so that
    /// a killed process's claims do not hold its renewals for the production 5 minutes.
    pub timer_lease: Duration,
    /// Where the nodes' logs go (`node<N>.log`, appended across restarts).
    pub dir: PathBuf,
    pub log_level: String,
}

/// One node slot: its address and log, with the process when one runs.
pub struct Node {
    /// 1-based, as in its `application_name` (`node1_<tag>`…).
    pub index: usize,
    pub port: u16,
    pub base: String,
    pub log: PathBuf,
    child: Option<Child>,
    /// Whether it is stopped by SIGSTOP.
    pub paused: bool,
    /// Whether the balancer stops sending it requests (before a graceful shutdown).
    pub drained: bool,
    /// Makes its `application_name` unique on a PostgreSQL server that other runs share.
    pub app_tag: String,
}

impl Node {
    pub fn new(index: usize, spec: &NodeSpec) -> anyhow::Result<Self> {
        let port = crate::chaos::processes::free_port()?;
        Ok(Self {
            index,
            port,
            base: format!("http://127.0.0.1:{port}"),
            log: spec.dir.join(format!("node{index}.log")),
            child: None,
            paused: false,
            drained: false,
            app_tag: String::new(),
        })
    }

    pub fn application_name(&self) -> String {
        format!("node{}_{}", self.index, self.app_tag)
    }

    /// Starts the process without waiting for it to be ready (nodes of a cold start begin
    /// together); `wait_ready` waits.
    pub fn spawn(&mut self, spec: &NodeSpec) -> anyhow::Result<()> {
        anyhow::ensure!(self.child.is_none(), "node {} already runs", self.index);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let separator = if spec.database_url.contains('?') {
            '&'
        } else {
            '?'
        };
        // sqlx reads `application_name` from the URL and sends it at connect.
        let database_url = format!(
            "{}{separator}application_name={}",
            spec.database_url,
            self.application_name()
        );
        let ms = |d: Duration| d.as_millis().to_string();
        let child = Command::new(&spec.binary)
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("BILLING_BIND", format!("127.0.0.1:{}", self.port))
            .env("BILLING_NODE_URL", &self.base)
            .env("BILLING_ADMIN_TOKEN", &spec.admin_token)
            .env("BILLING_LEASE_TTL_MS", ms(spec.lease_ttl))
            .env("BILLING_LEASE_RENEW_MS", ms(spec.lease_renew))
            .env("BILLING_PROCESSOR_TIMEOUT_MS", ms(spec.processor_timeout))
            .env("BILLING_RECONCILE_INTERVAL_MS", ms(spec.reconcile_interval))
            .env("BILLING_PROCESSOR_RECHECK_BASE_MS", ms(spec.recheck_base))
            .env("BILLING_TIMER_LEASE_MS", ms(spec.timer_lease))
            .env("RUST_LOG", &spec.log_level)
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", spec.binary.display()))?;
        self.child = Some(child);
        self.paused = false;
        self.drained = false;
        Ok(())
    }

    /// Waits (bounded) until `/readyz` answers 200; an exit before that is an error.
    pub async fn wait_ready(&mut self, http: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + START_BOUND;
        loop {
            let ready = http
                .get(format!("{}/readyz", self.base))
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ready {
                return Ok(());
            }
            let child = self.child.as_mut().context("node not started")?;
            if let Some(status) = child.try_wait()? {
                self.child = None;
                anyhow::bail!(
                    "node {} exited ({status}) before it was ready; see {}",
                    self.index,
                    self.log.display()
                );
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "node {} not ready within {START_BOUND:?}; see {}",
                self.index,
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Running and not stopped: a node requests may be sent to.
    pub fn is_live(&self) -> bool {
        self.child.is_some() && !self.paused && !self.drained
    }

    fn pid(&self) -> anyhow::Result<u32> {
        self.child
            .as_ref()
            .and_then(Child::id)
            .with_context(|| format!("node {} has no process", self.index))
    }

    /// Sends `signal` (a `kill -s` name) to this node's process, by its id.
    async fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid()?;
        let status = Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .stdin(Stdio::null())
            .status()
            .await
            .context("running kill")?;
        anyhow::ensure!(status.success(), "kill -s {signal} {pid} failed");
        Ok(())
    }

    /// SIGKILL: no shutdown hook runs, its leases are left to expire.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if self.paused {
            // A stopped process dies on SIGKILL too; nothing to resume.
            self.paused = false;
        }
        let mut child = self.child.take().context("node not running")?;
        child.kill().await?;
        Ok(())
    }

    /// SIGSTOP: the process freezes with its connections, leases and in-flight work.
    pub async fn pause(&mut self) -> anyhow::Result<()> {
        self.signal("STOP").await?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT after `pause`.
    pub async fn resume(&mut self) -> anyhow::Result<()> {
        self.signal("CONT").await?;
        self.paused = false;
        Ok(())
    }

    /// SIGTERM, then waits (bounded) for the exit: a graceful shutdown.
    pub async fn terminate(&mut self) -> anyhow::Result<()> {
        self.signal("TERM").await?;
        let mut child = self.child.take().context("node not running")?;
        match tokio::time::timeout(EXIT_BOUND, child.wait()).await {
            Ok(status) => {
                status?;
                Ok(())
            }
            Err(_) => {
                let _ = child.kill().await;
                anyhow::bail!(
                    "node {} still running {EXIT_BOUND:?} after SIGTERM; see {}",
                    self.index,
                    self.log.display()
                )
            }
        }
    }

    /// The node's view of the cluster (`GET /admin/cluster`), or None where the build has none.
    pub async fn cluster(
        &self,
        http: &reqwest::Client,
        admin_token: &str,
    ) -> anyhow::Result<Option<ClusterView>> {
        let response = http
            .get(format!("{}/admin/cluster", self.base))
            .bearer_auth(admin_token)
            .timeout(Duration::from_secs(5))
            .send()
            .await?;
        if response.status() == 404 {
            return Ok(None);
        }
        anyhow::ensure!(
            response.status().is_success(),
            "GET /admin/cluster at node {}: {}",
            self.index,
            response.status()
        );
        Ok(Some(response.json().await?))
    }
}

/// `GET /admin/cluster`.
#[derive(Clone, Debug, Deserialize)]
pub struct ClusterView {
    /// This node's id.
    pub node: String,
    pub nodes: Vec<ClusterNode>,
    pub shards_owned: Vec<u16>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ClusterNode {
    pub id: String,
    pub url: String,
    pub live: bool,
    pub shards: u64,
}
