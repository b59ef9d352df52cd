//! The multi-node harness behind `billing chaos cluster` (and its bounded runs in
//! `tests/api/cluster.rs`): do several `billing serve` processes on one PostgreSQL database
//! keep money right, each subscription acted on by one node, when nodes die, freeze, lose their
//! database connections, restart one by one, or start together on an empty database?
//!
//! One run, on a fresh PostgreSQL schema:
//! 1. starts the standalone sandbox processor, a pass-through proxy in front of it (it records
//!    every reference posted, for the processor-side check), a round-robin front over the live
//!    nodes (the load balancer: the sandbox merchant's `events_url` and one way to the API), a
//!    webhook receiver, and N `billing serve` nodes on loopback, each with its own
//!    `BILLING_NODE_URL`, short leases and database `application_name`;
//! 2. through the API: two webhook endpoints at the receiver, an account paying through the
//!    sandbox, M subscriptions whose first charge falls due at one instant a few seconds
//!    ahead (one in five on a card that declines), so that the nodes' own timers drive the
//!    burst;
//! 3. from that instant, a stream of actions to random nodes (`workload`), and at a seeded
//!    point of the burst the scenario's fault (`Scenario`);
//! 4. waits (bounded, never a fixed sleep) until nothing is pending, no due renewal is undone
//!    and no delivery is pending, then judges: `checks::charges` (the invariant checker; each
//!    charge as its card decides; each processor transaction exactly one of our charges),
//!    `judge::webhooks` (each event at each subscribed endpoint, once per attempt), and every
//!    API answer other than 500.
//!
//! A run prints one line; a broken run keeps its schema and the nodes' logs and names them.
//! `throughput` is the other mode: a fixed burst renewed by 1, 2, 3… nodes, in renewals/s.

pub mod front;
pub mod judge;
pub mod nodes;
pub mod receiver;
mod run;
mod throughput;
pub mod workload;

use crate::audit::queries::Breach;
use std::path::PathBuf;
use std::time::Duration;

pub use throughput::{ThroughputReport, throughput};

/// The fault a run injects mid-burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// SIGKILL of a node that owns shards; it is started again once its renewals are done.
    Kill,
    /// SIGSTOP of a node that owns shards for twice the lease and more, then SIGCONT: it wakes
    /// believing it still owns them (the fencing test).
    Pause,
    /// `pg_terminate_backend` of every connection of one node.
    TerminateDb,
    /// Each node in turn: drained from the front, SIGTERM, started again.
    Rolling,
    /// Every node started at once on the empty database; no fault after.
    ColdStart,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::Kill,
        Scenario::Pause,
        Scenario::TerminateDb,
        Scenario::Rolling,
        Scenario::ColdStart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Kill => "kill",
            Scenario::Pause => "pause",
            Scenario::TerminateDb => "terminate-db",
            Scenario::Rolling => "rolling",
            Scenario::ColdStart => "cold-start",
        }
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Scenario::ALL.iter().map(|c| c.name()).collect();
                format!("unknown scenario {s:?}; one of {}", names.join(", "))
            })
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `billing` executable the nodes and the sandbox run.
    pub binary: PathBuf,
    /// Where the nodes' logs go (kept only for runs that break).
    pub dir: PathBuf,
    /// The PostgreSQL database each run makes its schema in.
    pub postgres: String,
    pub nodes: usize,
    pub subscriptions: usize,
    /// Run `i` uses `seed + i`.
    pub seed: u64,
    pub lease_ttl: Duration,
    pub lease_renew: Duration,
    /// Concurrent loops of API actions during the burst (0: none).
    pub action_workers: usize,
    /// How long a run may take to settle after its fault.
    pub settle_bound: Duration,
}

/// What one run did and found.
#[derive(Debug)]
pub struct RunReport {
    pub scenario: Scenario,
    pub seed: u64,
    pub nodes: usize,
    pub subscriptions: usize,
    pub charges: crate::chaos::checks::Tally,
    pub actions: workload::ActionTally,
    pub webhooks: judge::WebhookTally,
    /// What the fault did, in words (which node, what it owned, what was left).
    pub fault: String,
    /// From the fault until every due renewal of the node's shards was done (kill, rolling).
    pub failover: Option<Duration>,
    pub breaches: Vec<Breach>,
    pub elapsed: Duration,
    /// Where the schema and logs of a broken run are kept.
    pub kept: Option<String>,
}

impl std::fmt::Display for RunReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} seed {:#018x}: {} nodes, {} subscriptions, {} charges ({} approved, {} declined), \
             {}, {} webhooks received for {} attempts ({} twice, {} resent after an interruption); {}",
            self.scenario,
            self.seed,
            self.nodes,
            self.subscriptions,
            self.charges.charges,
            self.charges.approved,
            self.charges.declined,
            self.actions.summary(),
            self.webhooks.received,
            self.webhooks.attempts,
            self.webhooks.received_twice,
            self.webhooks.resent_after_interruption,
            self.fault,
        )?;
        if let Some(failover) = self.failover {
            write!(f, "; failover {:.2} s", failover.as_secs_f64())?;
        }
        write!(
            f,
            ": {} violations in {:.1} s",
            self.breaches.len(),
            self.elapsed.as_secs_f64()
        )?;
        // Grouped by invariant, a few examples each: one kind of fault can break one
        // invariant hundreds of times and hide the others.
        let mut kinds: Vec<(&str, Vec<&Breach>)> = Vec::new();
        for breach in &self.breaches {
            match kinds.iter_mut().find(|(k, _)| *k == breach.invariant) {
                Some((_, list)) => list.push(breach),
                None => kinds.push((breach.invariant, vec![breach])),
            }
        }
        for (invariant, list) in kinds {
            write!(f, "\n  VIOLATION {invariant} ({} times)", list.len())?;
            for breach in list.iter().take(LISTED_PER_KIND) {
                write!(f, "\n    {}", breach.detail)?;
            }
        }
        if let Some(kept) = &self.kept {
            write!(f, "\n  kept: {kept}")?;
        }
        Ok(())
    }
}

/// Examples a run's line gives of each invariant broken (the kept schema and logs hold the
/// rest).
const LISTED_PER_KIND: usize = 3;

/// The runs together.
#[derive(Debug, Default)]
pub struct Summary {
    pub runs: usize,
    pub violations: usize,
    pub errors: usize,
    pub charges: usize,
    /// The longest failover after SIGKILL, and after SIGTERM.
    pub failover_kill: Option<Duration>,
    pub failover_graceful: Option<Duration>,
    pub elapsed: Duration,
}

impl Summary {
    pub fn is_clean(&self) -> bool {
        self.violations == 0 && self.errors == 0
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = |d: Option<Duration>| {
            d.map_or("n/a".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()))
        };
        write!(
            f,
            "chaos cluster: {} runs, {} violations, {} errors, {} charges, longest failover \
             {} after kill -9, {} after SIGTERM, {:.1} s",
            self.runs,
            self.violations,
            self.errors,
            self.charges,
            secs(self.failover_kill),
            secs(self.failover_graceful),
            self.elapsed.as_secs_f64()
        )
    }
}

/// One run of `scenario` (`index` picks its seed); an error is a run that could not be carried
/// out.
pub async fn run_once(
    options: &Options,
    scenario: Scenario,
    index: usize,
) -> anyhow::Result<RunReport> {
    run::run_once(options, scenario, options.seed.wrapping_add(index as u64)).await
}

/// Each of `scenarios`, `runs` times, one after the other; `each` sees every report.
pub async fn run(
    options: &Options,
    scenarios: &[Scenario],
    runs: usize,
    mut each: impl FnMut(Scenario, usize, &anyhow::Result<RunReport>),
) -> Summary {
    let started = std::time::Instant::now();
    let mut summary = Summary::default();
    let mut index = 0;
    for _ in 0..runs {
        for &scenario in scenarios {
            let report = run_once(options, scenario, index).await;
            each(scenario, index, &report);
            index += 1;
            summary.runs += 1;
            match report {
                Ok(report) => {
                    summary.violations += report.breaches.len();
                    summary.charges += report.charges.charges;
                    let slot = match scenario {
                        Scenario::Kill => Some(&mut summary.failover_kill),
                        Scenario::Rolling => Some(&mut summary.failover_graceful),
                        _ => None,
                    };
                    if let (Some(slot), Some(failover)) = (slot, report.failover) {
                        *slot = Some(slot.map_or(failover, |s| s.max(failover)));
                    }
                }
                Err(_) => summary.errors += 1,
            }
        }
    }
    summary.elapsed = started.elapsed();
    summary
}
