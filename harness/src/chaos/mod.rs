//! The fault-injection harness behind `billing chaos` (and its bounded runs in
//! `tests/api/chaos.rs`): does money stay right when the processor, the network, the clients
//! and the process itself fail during a burst of renewals?
//!
//! One run, on a fresh database (a SQLite file, or a schema of the PostgreSQL database given):
//! 1. starts the standalone sandbox processor (`billing sandbox-processor`) as its own process,
//!    a fault proxy in front of it and another in front of our ingress (its events' way in),
//!    and the real `billing serve` with a short processor timeout and a fast reconciler;
//! 2. through the API, without faults: an account whose processor is the proxy, M monthly
//!    subscriptions paid for their first period (one in five then moved to a card that
//!    declines), and a few customers for the hang-ups below;
//! 3. turns random faults on (each processor request independently: its answer dropped or
//!    held past the timeout after the processor acted, a 500 after it acted, the request held
//!    until after the timeout, 429 or 500 without forwarding, a reset; each event duplicated,
//!    delayed, answered but lost, or refused), moves the test clock a month so that every
//!    subscription renews, and `kill -9`s the server after a seeded number of its renewals;
//! 4. starts the server again on the same database, creates subscriptions under an
//!    Idempotency-Key with clients that hang up, then retry until answered;
//! 5. turns the faults off, waits (bounded) until no charge is pending and no due renewal is
//!    undone, and checks (`checks`): the invariant checker, the processor's transactions one
//!    to one with our charges, each charge ended as its card decides, one subscription per key.
//!
//! With `dian`, the account files its invoices with a standalone sandbox DIAN behind a third
//! fault proxy, and the checks add DIAN's side (`dian`). With `notices`, the account e-mails
//! its notices to a real SMTP server behind a TCP fault proxy (`smtp`: refused, busy, hung,
//! dropped after the data, refused for good), and the checks add the notices' (`notices`):
//! each ends once per cause, nothing sent is lost, none outside Ley 2300's hours.
//!
//! A run whose checks fail keeps its database and the server's log and names them.

pub mod checks;
pub mod cluster;
pub mod dian;
pub mod fixtures;
pub mod notices;
pub mod processes;
pub mod proxy;
mod run;
pub mod shop;
pub mod smtp;

use crate::audit::queries::Breach;
use processes::Databases;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `billing` executable to start (the server and the sandbox processor).
    pub binary: PathBuf,
    /// Where SQLite databases and server logs go.
    pub dir: PathBuf,
    /// A PostgreSQL database to make each run's schema in, instead of SQLite files.
    pub postgres: Option<String>,
    pub subscriptions: usize,
    /// Run `i` uses `seed + i`; `--runs 1 --seed <that>` runs it again.
    pub seed: u64,
    /// The share of processor requests, and of events, that get a fault while faults are on.
    pub fault_rate: f64,
    /// Creates whose client hangs up, per run.
    pub hang_ups: usize,
    /// How long a run may take to settle once its faults are off.
    pub settle_bound: Duration,
    /// The server's lease on the due rows it loads (`BILLING_TIMER_LEASE_MS`, PostgreSQL):
    /// renewals the killed server had claimed wait this long for the restarted one, so it
    /// must be well under `settle_bound` (the production lease is 5 minutes).
    pub timer_lease: Duration,
    /// DIAN on (`dian`): documents filed with a standalone sandbox DIAN behind a fault proxy.
    pub dian: bool,
    /// Notices on (`notices`): e-mailed to an SMTP sink behind a fault proxy, and judged.
    pub notices: bool,
}

impl Options {
    fn databases(&self) -> Databases {
        match &self.postgres {
            Some(url) => Databases::Postgres { url: url.clone() },
            None => Databases::Sqlite {
                dir: self.dir.clone(),
            },
        }
    }
}

/// What one run did and found.
#[derive(Debug)]
pub struct RunReport {
    pub seed: u64,
    pub subscriptions: usize,
    pub tally: checks::Tally,
    /// Processor requests faulted, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// Events faulted on their way to the ingress.
    pub event_faults: usize,
    /// Renewal charges recorded when the server was killed.
    pub killed_after: u64,
    /// Charges pending (outcome not yet applied) when it was killed.
    pub pending_at_kill: u64,
    /// Clients that hung up before their answer came.
    pub hang_ups: usize,
    /// With DIAN on: what was filed and what the kill interrupted.
    pub dian: Option<dian::DianTally>,
    /// With notices on: how they ended.
    pub notices: Option<notices::NoticeTally>,
    pub breaches: Vec<Breach>,
    pub elapsed: Duration,
    /// Where the database and log of a broken run are kept.
    pub kept: Option<String>,
}

impl std::fmt::Display for RunReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        write!(
            f,
            "seed {:#018x}: {} subscriptions, {} charges ({} approved, {} declined), \
             {} processor faults ({}), {} event faults, killed at {} renewals ({} pending), \
             {} hang-ups: {} violations in {:.1} s",
            self.seed,
            self.subscriptions,
            self.tally.charges,
            self.tally.approved,
            self.tally.declined,
            self.faults.values().sum::<usize>(),
            faults.join(", "),
            self.event_faults,
            self.killed_after,
            self.pending_at_kill,
            self.hang_ups,
            self.breaches.len(),
            self.elapsed.as_secs_f64()
        )?;
        if let Some(dian) = &self.dian {
            write!(f, "\n  DIAN: {dian}")?;
        }
        if let Some(notices) = &self.notices {
            write!(f, "\n  notices: {notices}")?;
        }
        for breach in &self.breaches {
            write!(f, "\n  VIOLATION {}: {}", breach.invariant, breach.detail)?;
        }
        if let Some(kept) = &self.kept {
            write!(f, "\n  kept: {kept}")?;
        }
        Ok(())
    }
}

/// The runs together.
#[derive(Debug, Default)]
pub struct Summary {
    pub runs: usize,
    pub violations: usize,
    /// Runs that could not be carried out (a process that did not start, a setup call that
    /// failed): not violations, but not a pass either.
    pub errors: usize,
    pub charges: usize,
    pub elapsed: Duration,
}

impl Summary {
    pub fn is_clean(&self) -> bool {
        self.violations == 0 && self.errors == 0
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "chaos: {} runs, {} violations, {} errors, {} charges, {:.1} s",
            self.runs,
            self.violations,
            self.errors,
            self.charges,
            self.elapsed.as_secs_f64()
        )
    }
}

/// One run (`index` picks its seed); an error is a run that could not be carried out.
pub async fn run_once(options: &Options, index: usize) -> anyhow::Result<RunReport> {
    run::run_once(options, index).await
}

/// `runs` runs one after the other; `each` sees every run's report (or why it failed).
pub async fn run(
    options: &Options,
    runs: usize,
    mut each: impl FnMut(usize, &anyhow::Result<RunReport>),
) -> Summary {
    let started = Instant::now();
    let mut summary = Summary::default();
    for index in 0..runs {
        let report = run_once(options, index).await;
        each(index, &report);
        summary.runs += 1;
        match report {
            Ok(report) => {
                summary.violations += report.breaches.len();
                summary.charges += report.tally.charges;
            }
            Err(_) => summary.errors += 1,
        }
    }
    summary.elapsed = started.elapsed();
    summary
}
