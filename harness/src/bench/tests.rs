//! The benchmark's own rules: where its databases go, and what it reads from `/proc`.

use super::*;

const DEFAULT: &str = "sqlite://billing.db";

#[test]
fn the_default_url_makes_a_new_file_under_the_directory() {
    let dir = std::env::temp_dir().join(format!("bench-{}", uuid::Uuid::new_v4().simple()));
    let BenchDatabase::Sqlite(path) =
        BenchDatabase::from_url(DEFAULT, DEFAULT, &dir).expect("test setup")
    else {
        panic!("SQLite expected");
    };
    assert!(path.starts_with(&dir) && !path.exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_existing_sqlite_file_is_never_used() {
    let file = std::env::temp_dir().join(format!("bench-{}.db", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, b"someone's data").expect("test setup");
    let url = format!("sqlite://{}", file.display());
    let refused = BenchDatabase::from_url(&url, DEFAULT, std::path::Path::new("unused"));
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(std::fs::read(&file).expect("test setup"), b"someone's data");
    std::fs::remove_file(&file).expect("test setup");
    let fresh = BenchDatabase::from_url(&url, DEFAULT, std::path::Path::new("unused"));
    assert!(matches!(fresh, Ok(BenchDatabase::Sqlite(path)) if path == file));
}

#[test]
fn a_postgres_url_is_a_schema_of_that_database() {
    let url = "postgres://postgres@127.0.0.1:5432/postgres";
    assert!(matches!(
        BenchDatabase::from_url(url, DEFAULT, std::path::Path::new("unused")),
        Ok(BenchDatabase::Postgres(named)) if named == url
    ));
}

/// The whole benchmark, small: every subscription renewed, and the burst timed from the
/// instant they fell due to the last renewal's write, which is no later than the poll that
/// saw it (that poll may come at once or a poll interval later, as the machine's load has it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_burst_is_timed_from_the_due_instant_to_the_last_renewal() {
    let file = std::env::temp_dir().join(format!("bench-{}.db", uuid::Uuid::new_v4().simple()));
    let started = Instant::now();
    let report = renewals(
        50,
        &BenchDatabase::Sqlite(file.clone()),
        &Processor::InProcess,
    )
    .await
    .expect("the benchmark runs");
    assert_eq!(report.settled, 50, "{report}");
    assert!(report.settle > Duration::ZERO, "{report}");
    // The run's wall time holds the seeding, the restart and the 3 s lead before the rows
    // fall due, none of which is the settle time; the window the CPU was counted over ends
    // at the poll that saw the last renewal, never before its write.
    let lead = Duration::from_millis(DUE_AHEAD_MS as u64);
    assert!(
        report.settle + lead < started.elapsed(),
        "settle {:?} of a run of {:?}",
        report.settle,
        started.elapsed()
    );
    assert!(report.settle <= report.cpu_window, "{report}");
    assert!(report.burst_kernel_cpu <= report.burst_cpu, "{report}");
    assert!(
        report.primitive.is_some_and(|p| p.rate(50) > 0.0),
        "{report}"
    );
    // The limit is for the same work: the rows it writes are the burst's, table by table.
    assert!(report.burst_rows.get("invoices") == Some(&50), "{report}");
    assert_eq!(
        report.primitive_rows.as_ref(),
        Some(&report.burst_rows),
        "{report}"
    );
    assert!(!file.exists(), "the benchmark removes its database");
}

/// User and system time are the 14th and 15th fields of a `stat` file, counted after the
/// command's closing parenthesis (a command may hold spaces and parentheses).
#[test]
fn the_kernel_share_reads_system_time_apart_from_user_time() {
    let path = std::env::temp_dir().join(format!("stat-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(
        &path,
        "4242 (billing (a b)) S 1 4242 4242 0 -1 4194560 9 0 0 0 1234 56 0 0 20 0 9 0\n",
    )
    .expect("write");
    let path = path.display().to_string();
    let (user, system) = cpu_split(&path);
    assert_eq!(user, Duration::from_millis(12_340));
    assert_eq!(system, Duration::from_millis(560));
    assert_eq!(cpu_of(&path), Duration::from_millis(12_900));
    std::fs::remove_file(&path).expect("remove");
    assert_eq!(
        cpu_split("/nonexistent/stat"),
        (Duration::ZERO, Duration::ZERO)
    );
}

#[test]
fn process_cpu_grows_with_work() {
    let before = process_cpu();
    let started = Instant::now();
    let mut x = 0u64;
    // Busy until the kernel has counted some of it (ticks of 10 ms), within a bound.
    while process_cpu() <= before {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no CPU counted for 20 s of work"
        );
        for _ in 0..1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }
}
