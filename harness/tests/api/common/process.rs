//! The real `billing serve` as a child process, its stdout and stderr captured in files:
//! for what only a process of its own shows, its log output and its own (process-global)
//! metrics registry, which the servers `spawn_app` starts inside the test process share.

use super::{ADMIN_TOKEN, TestApp, wait_until_ready};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

pub struct ServerProcess {
    child: Child,
    pub base: String,
    pub database_url: String,
    output: PathBuf,
    errors: PathBuf,
}

impl ServerProcess {
    /// Starts `billing serve --admin-token <ADMIN_TOKEN>` on a free port of 127.0.0.1 with
    /// `RUST_LOG=rust_log`, and waits (bounded) until it is ready.
    pub async fn start(database_url: &str, rust_log: &str) -> Self {
        Self::start_with(database_url, rust_log, &[]).await
    }

    /// `start` with more arguments for `billing serve`.
    pub async fn start_with(database_url: &str, rust_log: &str, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join("billing-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let name = uuid::Uuid::new_v4().simple();
        let output = dir.join(format!("server-{name}.log"));
        let errors = dir.join(format!("server-{name}.err"));
        let file = std::fs::File::create(&output).expect("output file");
        let error_file = std::fs::File::create(&errors).expect("errors file");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_billing"))
            .args(["serve", "--admin-token", ADMIN_TOKEN])
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(["--database-url", database_url])
            .args(args)
            .env("RUST_LOG", rust_log)
            .env_remove("BILLING_ADMIN_TOKEN")
            .env_remove("BILLING_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(error_file)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn billing serve");
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        wait_until_ready(&client, &base, Duration::from_secs(60)).await;
        Self {
            child,
            base,
            database_url: database_url.to_owned(),
            output,
            errors,
        }
    }

    /// A `TestApp` for this server, with no account yet.
    pub fn app(&self) -> TestApp {
        TestApp::attached(self.base.clone(), self.database_url.clone())
    }

    /// Stops the server as an operator would (SIGTERM, so its shutdown runs and logs too;
    /// SIGKILL if it has not exited within 30 s) and returns everything it wrote.
    pub async fn stop(self) -> String {
        let (stdout, stderr) = self.stop_split().await;
        stdout + &stderr
    }

    /// `stop`, returning what it wrote to stdout and to stderr apart.
    pub async fn stop_split(mut self) -> (String, String) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        let read = |path: &PathBuf| {
            let bytes = std::fs::read(path).expect("read output");
            let _ = std::fs::remove_file(path);
            String::from_utf8_lossy(&bytes).into_owned()
        };
        (read(&self.output), read(&self.errors))
    }
}
