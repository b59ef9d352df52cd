//! The renewal benchmark with its processor in a process of its own (`billing bench renewals
//! --standalone-sandbox`): the executable's `sandbox-processor` charges every renewal and
//! sends its events to the service's ingress, and its CPU and memory are counted apart from
//! the service's.

use harness::bench::{BenchDatabase, Processor, renewals};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renewal_benchmark_charges_through_a_standalone_sandbox_counted_apart() {
    let dir = std::env::temp_dir().join("billing-tests").join("bench");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join(format!("standalone-{}.db", uuid::Uuid::new_v4().simple()));
    let binary = env!("CARGO_BIN_EXE_billing").into();
    let report = renewals(
        1_000,
        &BenchDatabase::Sqlite(file.clone()),
        &Processor::Standalone(binary),
    )
    .await
    .expect("the benchmark runs");
    assert_eq!(report.settled, 1_000, "{report}");
    let (cpu, peak_mib) = report.sandbox.expect("the sandbox's process is counted");
    // 1,000 transactions posted, settled and signed there, and 1,000 events sent from there:
    // tens of milliseconds of CPU, several of the kernel's 10 ms ticks.
    assert!(cpu > Duration::ZERO, "{report}");
    assert!(peak_mib > 1.0, "{report}");
    let shown = report.to_string();
    assert!(shown.contains("sandbox CPU per renewal"), "{shown}");
    assert!(
        report.primitive.is_some_and(|p| p.rate(1_000) > 0.0),
        "{report}"
    );
    assert!(!file.exists(), "the benchmark removes its database");
}
