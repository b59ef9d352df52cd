//! `cargo bench --bench renewals`: the renewal burst (see `harness::bench`) with N = 10,000,
//! or `BENCH_SUBSCRIPTIONS`, on a new SQLite file, or on a new schema of the PostgreSQL database
//! `BENCH_DATABASE_URL` names. Bigger runs: `billing bench renewals --subscriptions N`.

/// The allocator the `billing` binary uses (see `src/main.rs`), so the figures match it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; nothing to parse.
    let n = std::env::var("BENCH_SUBSCRIPTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-data");
    let database = match std::env::var("BENCH_DATABASE_URL") {
        Ok(url) => harness::bench::BenchDatabase::from_url(&url, "", &dir)?,
        Err(_) => harness::bench::BenchDatabase::Sqlite(
            dir.join(format!("renewals-{}.db", std::process::id())),
        ),
    };
    std::fs::create_dir_all(&dir)?;
    let report = runtime.block_on(harness::bench::renewals(
        n,
        &database,
        &harness::bench::Processor::InProcess,
    ))?;
    println!("{report}");
    Ok(())
}
