//! Issue 13's fault-injection harness, bounded for CI: two short `billing chaos` runs per
//! database through the same code as the command (`harness::chaos::run`): the real server
//! killed mid-burst with processor and event faults on, clients that hang up, and not one
//! violation of the money invariants afterwards; and one run per database with DIAN on (its
//! calls faulted too, the kill landing while documents are filed): every invoice accepted by
//! the standalone sandbox DIAN, once; and one run per database with notices on (the SMTP sink
//! behind a fault proxy): each notice ends once per cause, none sent outside Ley 2300's hours.
//! Longer runs: `billing chaos --runs 100 [--dian] [--notices]`.
//!
//! The seed comes from the time unless `BILLING_CHAOS_SEED` is set; a failure prints each run's
//! seed, and `billing chaos --runs 1 --seed <it> --subscriptions 12` runs it again.

use crate::common::postgres_database;
use harness::chaos::Options;
use std::time::Duration;

const RUNS: usize = 2;

fn options(postgres: Option<String>, dian: bool, notices: bool) -> Options {
    let seed = std::env::var("BILLING_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| chrono::Utc::now().timestamp_micros() as u64);
    Options {
        binary: env!("CARGO_BIN_EXE_billing").into(),
        dir: std::env::temp_dir().join("billing-tests").join("chaos"),
        postgres,
        // Small: CI runs the suite on two cores. Enough for the kill to land mid-burst.
        subscriptions: 12,
        seed,
        fault_rate: 0.3,
        hang_ups: 2,
        settle_bound: Duration::from_secs(90),
        timer_lease: Duration::from_secs(5),
        dian,
        notices,
    }
}

async fn runs_break_no_invariant(postgres: Option<String>, dian: bool) {
    runs_of(postgres, dian, false).await;
}

async fn runs_of(postgres: Option<String>, dian: bool, notices: bool) {
    // DIAN's run makes its certificate with the `openssl` command, one of DIAN's tools.
    if dian && !has_openssl() {
        assert!(
            std::env::var("BILLING_REQUIRE_DIAN_TOOLS").as_deref() != Ok("1"),
            "`openssl` is not installed, and BILLING_REQUIRE_DIAN_TOOLS=1"
        );
        eprintln!("skipped: `openssl` is not installed");
        return;
    }
    let options = options(postgres, dian, notices);
    let runs = if dian || notices { 1 } else { RUNS };
    let (mut lines, mut filed, mut mailed) = (Vec::new(), 0, 0);
    let summary = harness::chaos::run(&options, runs, |index, report| {
        let line = match report {
            Ok(report) => {
                filed += report.dian.map_or(0, |tally| tally.documents);
                mailed += report.notices.as_ref().map_or(0, |tally| tally.sent);
                format!("run {} {report}", index + 1)
            }
            Err(err) => format!("run {} could not run: {err:#}", index + 1),
        };
        eprintln!("{line}");
        lines.push(line);
    })
    .await;
    assert!(summary.is_clean(), "{summary}\n{}", lines.join("\n"));
    assert!(summary.charges > 0, "nothing was charged: {summary}");
    if notices {
        // Every subscription's first charge was approved: a receipt each at least.
        assert!(
            mailed >= options.subscriptions,
            "{mailed} notices sent: {}",
            lines.join("\n")
        );
    }
    if dian {
        // Every approved charge of the run is an invoice, so at least one per subscription.
        assert!(
            filed >= options.subscriptions,
            "{filed} electronic documents: {}",
            lines.join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_chaos_runs_break_no_invariant() {
    runs_break_no_invariant(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_chaos_run_with_dian_files_every_invoice_once() {
    runs_break_no_invariant(None, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_chaos_run_with_dian_files_every_invoice_once() {
    let Some(database) = postgres_database().await else {
        return;
    };
    runs_break_no_invariant(Some(database), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_chaos_runs_break_no_invariant() {
    let Some(database) = postgres_database().await else {
        return;
    };
    runs_break_no_invariant(Some(database), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_chaos_run_with_notices_ends_each_notice_once_within_the_law() {
    runs_of(None, false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_chaos_run_with_notices_ends_each_notice_once_within_the_law() {
    let Some(database) = postgres_database().await else {
        return;
    };
    runs_of(Some(database), false, true).await;
}

fn has_openssl() -> bool {
    std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|out| out.status.success())
}
