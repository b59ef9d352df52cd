//! The README's walk-through, run as written: its shell blocks from "Five-minute walk-through"
//! up to "Configuration", in order, in one bash script against a fresh server, with the
//! receiver of its Python block listening; only the `export` lines that paste the values printed
//! at the first start are replaced by those values. A command the README shows that fails, or
//! answers other than the README says where it reads a field, fails this test.

use crate::common::{ADMIN_TOKEN, Backend, spawn_app};
use std::time::Duration;

/// The fenced blocks of `language` in `text`, in order.
fn blocks<'a>(text: &'a str, language: &str) -> Vec<&'a str> {
    let fence = format!("```{language}\n");
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&fence) {
        let body = &rest[start + fence.len()..];
        let end = body.find("```").expect("a closing fence");
        found.push(&body[..end]);
        rest = &body[end + 3..];
    }
    found
}

/// Whether Python has aiosmtpd, the walk-through's mail server; its absence skips the test
/// unless `BILLING_REQUIRE_MAIL_SERVER=1` (set by `.ci/run`, which installs it).
fn has_mail_server() -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", "import aiosmtpd"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        assert!(
            std::env::var("BILLING_REQUIRE_MAIL_SERVER").as_deref() != Ok("1"),
            "aiosmtpd required but missing: pip install aiosmtpd==1.4.6"
        );
        eprintln!("aiosmtpd is not installed; skipping the README's walk-through");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walk_through_runs_as_written() {
    if !has_mail_server() {
        return;
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let start = readme
        .find("## Five-minute walk-through")
        .expect("the walk-through");
    let end = readme[start..]
        .find("## Configuration")
        .map(|at| start + at)
        .expect("its end");
    let walk = &readme[start..end];
    let receiver = blocks(walk, "python");
    assert_eq!(receiver.len(), 1, "one receiver");
    let pasted = [
        "export KEY=",
        "export API=",
        "export ADMIN=",
        "export ACCT=",
    ];
    let mut script = String::from("set -e\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n");
    for block in blocks(walk, "sh") {
        for line in block.lines() {
            if !pasted.iter().any(|p| line.starts_with(p)) {
                script.push_str(line);
                script.push('\n');
            }
        }
    }
    // Wait (bounded) for the receiver to have the paused subscription's event before the
    // script ends and its receiver with it.
    script.push_str(
        "for i in $(seq 100); do curl -s \"$API/v1/webhook-endpoints/$WE/deliveries\" \
         -H \"Authorization: Bearer $KEY\" | grep -q '\"status\":\"delivered\"' && break; \
         sleep 0.1; done\n",
    );

    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let dir = std::env::temp_dir().join(format!("readme-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("receiver.py"), receiver[0]).expect("receiver.py");
    let run = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&dir)
        .env("KEY", &app.api_key)
        .env("API", &app.base)
        .env("ADMIN", ADMIN_TOKEN)
        .env("ACCT", &app.account_id)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the walk-through ends within two minutes")
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "the walk-through failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    for expected in [
        "\"type\":\"card\"",
        "/portal/bpt_",
        "\"refunded_amount_cents\":3000000",
        "\"status\":\"approved\"",
        "/checkout/cs_",
        "verified {",
        "subscription.paused",
        "SETP990000000",
        "No pudimos cobrar tu pago a",
        "Subject: Recibo de Test account: factura FV-",
    ] {
        assert!(
            stdout.contains(expected),
            "the walk-through's output lacks {expected}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
    }
}
