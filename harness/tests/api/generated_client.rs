//! A client generated from `/openapi.json` works: openapi-python-client (pinned below) generates
//! a Python client from a fresh server's document, and `tests/client/walkthrough.py` runs the
//! README's walk-through through that client's functions and models against the same server.
//! An answer the generated client cannot parse, or parses as another type than the document
//! promised, fails the test with the script's output.
//!
//! Without the pinned generator the test says so and passes, unless
//! `BILLING_REQUIRE_CLIENT_GENERATOR=1` (set by `.ci/run`, which installs it) makes that a
//! failure.

use crate::common::{ADMIN_TOKEN, Backend, spawn_app};
use std::path::Path;
use std::process::Output;
use std::time::Duration;
use tokio::process::Command;

const GENERATOR: &str = "openapi-python-client";
/// `.ci/run` installs this version; another one may generate other names.
const PINNED: &str = "0.29.1";

/// Whether the pinned generator is installed; panics when it is required but missing.
async fn generator_present() -> bool {
    let version = Command::new(GENERATOR).arg("--version").output().await;
    let found = match &version {
        Ok(output) => String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        Err(err) => err.to_string(),
    };
    if found.ends_with(&format!("version: {PINNED}")) {
        return true;
    }
    let required = std::env::var("BILLING_REQUIRE_CLIENT_GENERATOR").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{GENERATOR} {PINNED} required but not found ({found}): pip install '{GENERATOR}=={PINNED}'"
    );
    eprintln!(
        "{GENERATOR} {PINNED} is not installed ({found}); skipping the generated client test"
    );
    false
}

/// Runs `command` for at most `within`, failing with its output if it fails.
async fn run(command: &mut Command, within: Duration, what: &str) -> Output {
    let output = tokio::time::timeout(within, command.kill_on_drop(true).output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not end within {within:?}"))
        .unwrap_or_else(|err| panic!("{what} did not start: {err}"));
    assert!(
        output.status.success(),
        "{what} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walk_through_runs_through_a_generated_python_client() {
    if !generator_present().await {
        return;
    }
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let document = app
        .client
        .get(format!("{}/openapi.json", app.base))
        .send()
        .await
        .expect("GET /openapi.json")
        .text()
        .await
        .expect("the document");
    let dir = std::env::temp_dir().join(format!(
        "generated-client-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("openapi.json"), document).expect("openapi.json");
    let package = dir.join("billing_client");
    run(
        Command::new(GENERATOR)
            .args(["generate", "--path", "openapi.json", "--meta", "none"])
            .arg("--output-path")
            .arg(&package)
            .current_dir(&dir),
        Duration::from_secs(120),
        "the generator",
    )
    .await;

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/client/walkthrough.py");
    let output = run(
        Command::new("python3")
            .arg(script)
            .args([&app.base, &app.api_key, ADMIN_TOKEN])
            .arg(&package)
            .current_dir(&dir),
        Duration::from_secs(180),
        "the walk-through through the generated client",
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("the walk-through ran through the generated client"),
        "the script did not reach its end\n{stdout}"
    );
}
