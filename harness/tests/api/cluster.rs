//! Issue 15's proof, bounded for CI: three `billing serve` nodes on one PostgreSQL schema with
//! the standalone sandbox and a round-robin front, a renewal burst on the nodes' own timers and
//! a stream of API actions sent to random nodes, through each scenario of
//! `harness::chaos::cluster` (a node killed, stopped past its lease, cut from the database,
//! restarted in turn; all started together on an empty database), and not one violation of the
//! money and webhook invariants afterwards. PostgreSQL only: SQLite is single-node.
//!
//! The seed comes from the time unless `BILLING_CHAOS_SEED` is set; a failure prints each run's
//! line, and `billing chaos cluster --scenarios <it> --seed <its seed> --subscriptions 30
//! --node-lease-ttl-ms 2000 --node-lease-renew-ms 400` runs it again.

use crate::common::postgres_database;
use harness::chaos::cluster::{Options, Scenario};
use std::time::Duration;

fn options(postgres: String) -> Options {
    let seed = std::env::var("BILLING_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| chrono::Utc::now().timestamp_micros() as u64);
    Options {
        binary: env!("CARGO_BIN_EXE_billing").into(),
        dir: std::env::temp_dir().join("billing-tests").join("cluster"),
        postgres,
        nodes: 3,
        // Small: CI runs on two cores, which five processes and PostgreSQL share.
        subscriptions: 30,
        seed,
        // Short leases, so a failover takes seconds.
        lease_ttl: Duration::from_millis(2_000),
        lease_renew: Duration::from_millis(400),
        action_workers: 2,
        settle_bound: Duration::from_secs(60),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_break_no_invariant_under_node_faults() {
    let Some(database) = postgres_database().await else {
        return;
    };
    let options = options(database);
    let mut lines = Vec::new();
    let summary = harness::chaos::cluster::run(&options, &Scenario::ALL, 1, |_, _, report| {
        let line = match report {
            Ok(report) => format!("{report}"),
            Err(err) => format!("could not run: {err:#}"),
        };
        eprintln!("{line}");
        lines.push(line);
    })
    .await;
    assert!(summary.is_clean(), "{summary}\n{}", lines.join("\n"));
    assert!(summary.charges > 0, "nothing was charged: {summary}");
}
