//! The throughput mode (`billing chaos cluster --nodes 1,2,3`): the same burst (M subscriptions
//! due at one instant, on the nodes' own timers, no faults, no action stream, no webhook
//! endpoints) renewed by 1, 2, 3… nodes on one PostgreSQL, each on a fresh schema, timed from
//! the instant they fall due until the last is settled. On one machine the nodes share its
//! cores, so the figure shows what leases, fencing and forwarding cost, not a speed-up.

use super::front::Front;
use super::run::{ADMIN_TOKEN, Cluster, SETTLE_DELAY, keep_if_broken, node_spec};
use super::{Options, workload};
use crate::audit::queries::Breach;
use crate::chaos::checks::{self, Expected};
use crate::chaos::processes::{Databases, Sandbox};
use crate::chaos::shop::Shop;
use anyhow::Context;
use billing::store::Store;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BURST_BOUND: Duration = Duration::from_secs(600);

/// One burst's figure.
#[derive(Debug)]
pub struct ThroughputReport {
    pub nodes: usize,
    pub subscriptions: usize,
    /// From the instant they fell due until none was undone.
    pub burst: Duration,
    pub breaches: Vec<Breach>,
    pub kept: Option<String>,
}

impl ThroughputReport {
    pub fn per_second(&self) -> f64 {
        self.subscriptions as f64 / self.burst.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for ThroughputReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} node{}: {} renewals in {:.2} s = {:.0} renewals/s, {} violations",
            self.nodes,
            if self.nodes == 1 { "" } else { "s" },
            self.subscriptions,
            self.burst.as_secs_f64(),
            self.per_second(),
            self.breaches.len()
        )?;
        for breach in self.breaches.iter().take(10) {
            write!(f, "\n  VIOLATION {}: {}", breach.invariant, breach.detail)?;
        }
        if let Some(kept) = &self.kept {
            write!(f, "\n  kept: {kept}")?;
        }
        Ok(())
    }
}

/// The burst once with `nodes` nodes (`options.nodes` is ignored).
pub async fn throughput(options: &Options, nodes: usize) -> anyhow::Result<ThroughputReport> {
    let seed = options.seed.wrapping_add(nodes as u64);
    let database = Databases::Postgres {
        url: options.postgres.clone(),
    }
    .fresh(seed)
    .await?;
    let tag = format!("{:08x}", rand::random::<u32>());
    let dir = options
        .dir
        .join(format!("cluster-throughput-{nodes}-{seed:016x}-{tag}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let sandbox = Sandbox::start(&options.binary, SETTLE_DELAY, ADMIN_TOKEN).await?;
    let mut cluster = Cluster::new(
        nodes.max(1),
        node_spec(options, &database.url, &dir),
        Front::start().await?,
        tag,
    )?;
    let outcome = burst(options, nodes, seed, &database.url, &sandbox, &mut cluster).await;
    cluster.stop_all().await;
    sandbox.stop().await;
    let mut report =
        outcome.with_context(|| format!("kept {}; logs {}", database.location, cluster.logs()))?;
    report.kept = keep_if_broken(report.breaches.is_empty(), database, &dir, &cluster).await?;
    Ok(report)
}

async fn burst(
    options: &Options,
    nodes: usize,
    seed: u64,
    database_url: &str,
    sandbox: &Sandbox,
    cluster: &mut Cluster,
) -> anyhow::Result<ThroughputReport> {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = cluster.http.clone();
    cluster.start(false).await?;
    cluster.wait_balanced(Duration::from_secs(120)).await?;
    let front = cluster.front.base.clone();
    // Straight to the sandbox: nothing of the harness's on the processor's path.
    let shop = Arc::new(
        Shop::open(
            &http,
            &front,
            ADMIN_TOKEN,
            &sandbox.base,
            &sandbox.base,
            &front,
        )
        .await?,
    );
    let store = Store::connect(database_url).await?;
    let lead = Duration::from_secs(3) + Duration::from_millis(10 * options.subscriptions as u64);
    let setup = workload::setup(
        &shop,
        &http,
        &front,
        &|_| String::new(),
        options.subscriptions,
        false,
        lead,
        &mut rng,
    )
    .await?;
    let wait = setup.due_at_ms - chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;
    let due = Instant::now();
    loop {
        let now = chrono::Utc::now().timestamp_millis();
        if super::judge::undone(&store, &shop.account, now)
            .await?
            .is_empty()
        {
            break;
        }
        anyhow::ensure!(
            due.elapsed() < BURST_BOUND,
            "the burst not done within {BURST_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let burst = due.elapsed();
    let mut expected = Expected::default();
    expected.approving.insert(setup.approving_method);
    expected.declining.insert(setup.declining_method);
    let (breaches, _) = checks::charges(&store, &shop, None, &expected).await?;
    Ok(ThroughputReport {
        nodes,
        subscriptions: options.subscriptions,
        burst,
        breaches,
        kept: None,
    })
}
