//! One cluster run, start to finish (see `crate::chaos::cluster` for the story).

use super::front::Front;
use super::judge::{self, pending_deliveries, undone};
use super::nodes::{ClusterView, Node, NodeSpec};
use super::receiver::Receiver;
use super::workload::{self, Actions, Targets};
use super::{Options, RunReport, Scenario};
use crate::audit::queries::Breach;
use crate::chaos::checks::{self, Expected};
use crate::chaos::processes::{Databases, Sandbox};
use crate::chaos::proxy::Proxy;
use crate::chaos::shop::Shop;
use anyhow::Context;
use billing::store::Store;
use billing::store::ownership::{SHARDS, shard_of};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) const ADMIN_TOKEN: &str = "cluster-admin-token-0123456789";
pub(super) const SETTLE_DELAY: Duration = Duration::from_millis(20);
/// Bounds of the waits of a run; reaching one is reported, never slept through.
const BURST_BOUND: Duration = Duration::from_secs(120);
const FAILOVER_BOUND: Duration = Duration::from_secs(120);
/// How long the action stream may go on after the fault while waiting for the burst to end.
const ACTIONS_AFTER_FAULT: Duration = Duration::from_secs(30);

/// What every node is started with, apart from leases and paths.
pub(super) fn node_spec(options: &Options, database_url: &str, dir: &std::path::Path) -> NodeSpec {
    NodeSpec {
        binary: options.binary.clone(),
        database_url: database_url.to_owned(),
        admin_token: ADMIN_TOKEN.to_owned(),
        lease_ttl: options.lease_ttl,
        lease_renew: options.lease_renew,
        processor_timeout: Duration::from_secs(2),
        reconcile_interval: Duration::from_millis(200),
        recheck_base: Duration::from_millis(300),
        timer_lease: Duration::from_secs(5),
        dir: dir.to_owned(),
        log_level: "warn,billing=info,sqlx=error,sea_orm=error".to_owned(),
    }
}

/// The nodes of a run and the places that must know which of them are live.
pub(super) struct Cluster {
    pub nodes: Vec<Node>,
    pub spec: NodeSpec,
    pub http: reqwest::Client,
    pub front: Front,
    pub targets: Targets,
}

impl Cluster {
    /// `tag` makes the nodes' application names unique: runs (and tests) share one
    /// PostgreSQL server.
    pub fn new(count: usize, spec: NodeSpec, front: Front, tag: String) -> anyhow::Result<Self> {
        let mut nodes = Vec::with_capacity(count);
        for index in 1..=count {
            let mut node = Node::new(index, &spec)?;
            node.app_tag = tag.clone();
            nodes.push(node);
        }
        let targets = Targets {
            live: Arc::default(),
            front: front.base.clone(),
        };
        Ok(Self {
            nodes,
            spec,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            front,
            targets,
        })
    }

    /// Tells the front and the action stream which nodes are live now.
    pub fn publish(&self) {
        let live: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.is_live())
            .map(|n| n.base.clone())
            .collect();
        self.front.set_live(live.clone());
        self.targets.set_live(live);
    }

    /// Starts the nodes: all at once on the empty database (`together`), or the first alone
    /// (it migrates) and then the rest together.
    pub async fn start(&mut self, together: bool) -> anyhow::Result<()> {
        let first = if together { 0 } else { 1 };
        if !together {
            self.nodes[0].spawn(&self.spec)?;
            self.nodes[0].wait_ready(&self.http).await?;
        }
        for node in &mut self.nodes[first..] {
            node.spawn(&self.spec)?;
        }
        for node in &mut self.nodes[first..] {
            node.wait_ready(&self.http).await?;
        }
        self.publish();
        Ok(())
    }

    /// Starts node `i` again on its port and waits until it is ready.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].spawn(&self.spec)?;
        self.nodes[i].wait_ready(&self.http).await?;
        self.publish();
        Ok(())
    }

    /// Each live node's view of the cluster; None where the build has no `/admin/cluster`.
    pub async fn views(&self) -> Vec<(usize, Option<ClusterView>)> {
        let mut views = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if node.is_live() {
                let view = node.cluster(&self.http, ADMIN_TOKEN).await.ok().flatten();
                views.push((i, view));
            }
        }
        views
    }

    /// Waits (bounded) until the live nodes agree that every shard is owned and each of them
    /// owns some: leases spread after a start. Builds without `/admin/cluster` pass at once.
    pub async fn wait_balanced(&self, bound: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let views = self.views().await;
            if views.iter().all(|(_, v)| v.is_none()) {
                return Ok(());
            }
            let owned: usize = views
                .iter()
                .filter_map(|(_, v)| v.as_ref())
                .map(|v| v.shards_owned.len())
                .sum();
            let each = views
                .iter()
                .all(|(_, v)| v.as_ref().is_some_and(|v| !v.shards_owned.is_empty()));
            if each && owned == usize::from(SHARDS) {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "leases not spread over the {} live nodes within {bound:?}: {owned} shards owned",
                views.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A victim for a fault: the live node owning the most shards (by its own view), or a
    /// seeded one where the build cannot tell; with the shards it owns (None: unknown).
    pub async fn victim(&self, rng: &mut StdRng) -> (usize, Option<BTreeSet<u16>>) {
        let views = self.views().await;
        let best = views
            .iter()
            .filter_map(|(i, v)| v.as_ref().map(|v| (*i, v)))
            .max_by_key(|(_, v)| v.shards_owned.len());
        match best {
            Some((i, view)) => (i, Some(view.shards_owned.iter().copied().collect())),
            None => {
                let live: Vec<usize> = views.iter().map(|(i, _)| *i).collect();
                (live[rng.random_range(0..live.len())], None)
            }
        }
    }

    pub async fn stop_all(&mut self) {
        for node in &mut self.nodes {
            if node.paused {
                let _ = node.resume().await;
            }
            if node.is_running() {
                let _ = node.kill().await;
            }
        }
    }

    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.log.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The subscriptions of `shards` (all when None) still undone at `now`.
async fn undone_in(
    store: &Store,
    shop: &Shop,
    shards: Option<&BTreeSet<u16>>,
) -> anyhow::Result<usize> {
    let now = chrono::Utc::now().timestamp_millis();
    Ok(undone(store, &shop.account, now)
        .await?
        .iter()
        .filter(|id| shards.is_none_or(|s| s.contains(&shard_of(id))))
        .count())
}

/// Waits (bounded) until no due renewal of `shards` is undone; how long it took from `since`.
async fn wait_done(
    store: &Store,
    shop: &Shop,
    shards: Option<&BTreeSet<u16>>,
    since: Instant,
    bound: Duration,
) -> anyhow::Result<Duration> {
    loop {
        if undone_in(store, shop, shards).await? == 0 {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(
            since.elapsed() < bound,
            "due renewals still undone {bound:?} after the fault"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until nothing of the account is pending: charges, due renewals, deliveries.
async fn wait_settled(store: &Store, shop: &Shop, bound: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let undone = undone_in(store, shop, None).await?;
        let deliveries = pending_deliveries(store, &shop.account).await?;
        if undone == 0 && deliveries == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{undone} due renewals undone or charges pending, {deliveries} deliveries pending \
             after {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) async fn run_once(
    options: &Options,
    scenario: Scenario,
    seed: u64,
) -> anyhow::Result<RunReport> {
    let started = Instant::now();
    let database = Databases::Postgres {
        url: options.postgres.clone(),
    }
    .fresh(seed)
    .await?;
    // The tag too: a run of the same seed again must not remove a broken run's logs.
    let tag = format!("{:08x}", rand::random::<u32>());
    let dir = options
        .dir
        .join(format!("cluster-{scenario}-{seed:016x}-{tag}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let sandbox = Sandbox::start(&options.binary, SETTLE_DELAY, ADMIN_TOKEN).await?;
    let cluster = Cluster::new(
        options.nodes.max(1),
        node_spec(options, &database.url, &dir),
        Front::start().await?,
        tag,
    )?;
    let mut cluster = cluster;
    let outcome = with_processes(
        options,
        scenario,
        seed,
        &database.url,
        &sandbox,
        &mut cluster,
    )
    .await;
    cluster.stop_all().await;
    sandbox.stop().await;
    let mut report = outcome.with_context(|| {
        format!(
            "{scenario} seed {seed:#018x}; kept {}; logs {}",
            database.location,
            cluster.logs()
        )
    })?;
    report.elapsed = started.elapsed();
    report.kept = keep_if_broken(report.breaches.is_empty(), database, &dir, &cluster).await?;
    Ok(report)
}

/// After a run: a clean run's schema and logs are removed; a broken run's are kept, and named
/// (the answer).
pub(super) async fn keep_if_broken(
    clean: bool,
    database: crate::chaos::processes::FreshDatabase,
    dir: &std::path::Path,
    cluster: &Cluster,
) -> anyhow::Result<Option<String>> {
    if clean {
        database.remove().await?;
        let _ = std::fs::remove_dir_all(dir);
        return Ok(None);
    }
    Ok(Some(format!(
        "{}; logs {}",
        database.location,
        cluster.logs()
    )))
}

async fn with_processes(
    options: &Options,
    scenario: Scenario,
    seed: u64,
    database_url: &str,
    sandbox: &Sandbox,
    cluster: &mut Cluster,
) -> anyhow::Result<RunReport> {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = cluster.http.clone();
    let processor = Proxy::start(&sandbox.base).await?;
    let receiver = Receiver::start().await?;
    cluster.start(scenario == Scenario::ColdStart).await?;
    cluster.wait_balanced(BURST_BOUND).await?;
    let front = cluster.front.base.clone();
    let shop = Arc::new(
        Shop::open(
            &http,
            &front,
            ADMIN_TOKEN,
            &processor.base,
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
        &|n| receiver.url(n),
        options.subscriptions,
        true,
        lead,
        &mut rng,
    )
    .await?;
    let mut expected = Expected::default();
    expected.approving.insert(setup.approving_method.clone());
    expected.declining.insert(setup.declining_method.clone());
    let baseline = crate::Raw(&store).count_charges(&shop.account).await?;

    // The burst falls due on the nodes' own timers; the actions start with it.
    let wait = setup.due_at_ms - chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;
    let actions = (options.action_workers > 0).then(|| {
        Actions::start(
            &http,
            cluster.targets.clone(),
            shop.key().to_owned(),
            ADMIN_TOKEN.to_owned(),
            shop.account.as_str().to_owned(),
            setup.subscriptions.clone(),
            [shop.plan().to_owned(), setup.plan_b.clone()],
            options.action_workers,
            seed,
        )
    });

    // The fault lands once a seeded share of the burst's charges is recorded.
    let trigger = rng.random_range(1..=(options.subscriptions as u64 / 3).max(1));
    let deadline = tokio::time::Instant::now() + BURST_BOUND;
    while crate::Raw(&store).count_charges(&shop.account).await? - baseline < trigger
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut interruptions = Vec::new();
    let fault_at = judge::clock(chrono::Utc::now().timestamp_millis());
    let fault = inject(
        options,
        scenario,
        cluster,
        &store,
        &shop,
        &mut rng,
        &mut interruptions,
    )
    .await;
    // Whatever the fault did, the action stream stops and the run settles and is judged.
    let burst_over = wait_done(&store, &shop, None, Instant::now(), ACTIONS_AFTER_FAULT)
        .await
        .is_ok();
    let tally = match actions {
        Some(actions) => actions.finish().await,
        None => workload::ActionTally::default(),
    };
    let (fault, failover) = fault?;
    let fault = format!("{fault} (from {fault_at})");
    let settled = wait_settled(&store, &shop, options.settle_bound).await;

    let (mut breaches, charges) =
        checks::charges(&store, &shop, Some(&processor), &expected).await?;
    let endpoints: BTreeMap<usize, (String, Vec<&'static str>)> = workload::endpoint_types()
        .into_iter()
        .filter_map(|(n, types)| setup.endpoints.get(&n).map(|id| (n, (id.clone(), types))))
        .collect();
    let (webhook_breaches, webhooks) = judge::webhooks(
        &store,
        &shop.account,
        &endpoints,
        &receiver.received(),
        &interruptions,
    )
    .await?;
    breaches.extend(webhook_breaches);
    for error in &tally.server_errors {
        let during_interruption = interruptions
            .iter()
            .any(|(began, ended)| error.sent <= *ended && *began <= error.answered);
        if !during_interruption {
            breaches.push(Breach {
                invariant: "an API request answered 500",
                detail: error.what.clone(),
            });
        }
    }
    if let Err(err) = settled {
        breaches.push(Breach {
            invariant: "work left undone after the fault",
            detail: format!(
                "{err:#}{}",
                if burst_over {
                    ""
                } else {
                    " (the burst never ended)"
                }
            ),
        });
    }
    Ok(RunReport {
        scenario,
        seed,
        nodes: cluster.nodes.len(),
        subscriptions: options.subscriptions,
        charges,
        actions: tally,
        webhooks,
        fault,
        failover,
        breaches,
        elapsed: Duration::ZERO,
        kept: None,
    })
}

fn describe_shards(shards: Option<&BTreeSet<u16>>) -> String {
    shards.map_or("shards unknown".to_owned(), |s| {
        format!("{} shards", s.len())
    })
}

/// The scenario's fault: what it did in words, and the failover time it measured.
async fn inject(
    options: &Options,
    scenario: Scenario,
    cluster: &mut Cluster,
    store: &Store,
    shop: &Shop,
    rng: &mut StdRng,
    interruptions: &mut Vec<(Instant, Instant)>,
) -> anyhow::Result<(String, Option<Duration>)> {
    // Bytes a killed node (or one cut from its database) had already sent still arrive.
    const ON_THE_WIRE: Duration = Duration::from_millis(500);
    match scenario {
        Scenario::ColdStart => Ok((
            format!("{} nodes started together", cluster.nodes.len()),
            None,
        )),
        Scenario::Kill => {
            let (i, shards) = cluster.victim(rng).await;
            let left = undone_in(store, shop, shards.as_ref()).await?;
            let at = Instant::now();
            cluster.nodes[i].kill().await?;
            interruptions.push((at, at + ON_THE_WIRE));
            cluster.publish();
            let failover = wait_done(store, shop, shards.as_ref(), at, FAILOVER_BOUND).await?;
            cluster.restart(i).await?;
            Ok((
                format!(
                    "node{} killed holding {} with {left} renewals undone, started again",
                    i + 1,
                    describe_shards(shards.as_ref())
                ),
                (left > 0).then_some(failover),
            ))
        }
        Scenario::Pause => {
            let (i, shards) = cluster.victim(rng).await;
            let left = undone_in(store, shop, shards.as_ref()).await?;
            // Stopped for twice the lease and a second more: its leases expire and the
            // others take its shards while it still believes it holds them.
            let frozen = options.lease_ttl * 2 + Duration::from_secs(1);
            let at = Instant::now();
            cluster.nodes[i].pause().await?;
            cluster.publish();
            tokio::time::sleep(frozen).await;
            let woken = Instant::now();
            cluster.nodes[i].resume().await?;
            interruptions.push((at, woken));
            cluster.publish();
            Ok((
                format!(
                    "node{} stopped {:.1} s holding {} with {left} renewals undone",
                    i + 1,
                    frozen.as_secs_f64(),
                    describe_shards(shards.as_ref())
                ),
                None,
            ))
        }
        Scenario::TerminateDb => {
            let (i, shards) = cluster.victim(rng).await;
            let name = cluster.nodes[i].application_name();
            let at = Instant::now();
            let terminated =
                crate::chaos::fixtures::terminate_backends(&options.postgres, &name).await?;
            interruptions.push((at, at + ON_THE_WIRE));
            Ok((
                format!(
                    "{terminated} database connections of node{} ({}) terminated",
                    i + 1,
                    describe_shards(shards.as_ref())
                ),
                None,
            ))
        }
        Scenario::Rolling => {
            let mut measured: Option<Duration> = None;
            let mut parts = Vec::new();
            for i in 0..cluster.nodes.len() {
                let shards = cluster.nodes[i]
                    .cluster(&cluster.http, ADMIN_TOKEN)
                    .await
                    .ok()
                    .flatten()
                    .map(|v| v.shards_owned.into_iter().collect::<BTreeSet<u16>>());
                // A balancer drains a replica before it is stopped.
                cluster.nodes[i].drained = true;
                cluster.publish();
                let left = undone_in(store, shop, shards.as_ref()).await?;
                let at = Instant::now();
                cluster.nodes[i].terminate().await?;
                cluster.publish();
                if left > 0 {
                    let took = wait_done(store, shop, shards.as_ref(), at, FAILOVER_BOUND).await?;
                    measured = Some(measured.map_or(took, |m| m.max(took)));
                    parts.push(format!("node{} {left} undone", i + 1));
                }
                cluster.restart(i).await?;
                cluster.wait_balanced(BURST_BOUND).await?;
            }
            Ok((
                format!(
                    "each node SIGTERMed and started again in turn{}",
                    if parts.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", parts.join(", "))
                    }
                ),
                measured,
            ))
        }
    }
}
