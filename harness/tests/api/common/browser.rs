//! A real browser for tests: headless Chromium (Debian's `chromium`) driven over WebDriver by
//! its `chromedriver`, through fantoccini. `Browser::start` runs a chromedriver of its own on a
//! free port with a fresh profile; `close` ends the session and both processes. Screenshots go
//! to `test-artifacts/` at the workspace root (CI keeps them as artifacts).
//!
//! Without Chromium installed the browser tests say so and pass, unless
//! `BILLING_REQUIRE_BROWSER=1` (set by `.ci/run`, which installs it) makes that a failure.

use super::eventually;
use fantoccini::{Client, ClientBuilder, Locator};
use std::path::{Path, PathBuf};
use std::time::Duration;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// Where `.ci/run` installs axe-core (`npm install --prefix /opt/axe axe-core@4.10.3`).
const AXE_JS: &str = "/opt/axe/node_modules/axe-core/axe.min.js";

/// Flags that keep Chromium quiet on a machine with no network beyond loopback.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
];

pub struct Browser {
    pub client: Client,
    driver: tokio::process::Child,
    profile: PathBuf,
}

impl Browser {
    /// A phone-sized window (412 × 915), since most customers pay on a phone.
    pub async fn start() -> Option<Self> {
        Self::start_sized(412, 915).await
    }

    pub async fn start_sized(width: u32, height: u32) -> Option<Self> {
        if !Path::new(CHROMEDRIVER).exists() || !Path::new(CHROMIUM).exists() {
            let required = std::env::var("BILLING_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "Chromium required but missing: apt-get install chromium chromium-driver"
            );
            eprintln!("Chromium is not installed; skipping the browser test");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let driver = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let webdriver = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually(Duration::from_secs(20), || async {
            match http.get(format!("{webdriver}/status")).send().await {
                Ok(r) => r
                    .json::<serde_json::Value>()
                    .await
                    .is_ok_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            }
        })
        .await;
        let profile = std::env::temp_dir().join(format!(
            "billing-chromium-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push(format!("--window-size={width},{height}"));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({"binary": CHROMIUM, "args": args}),
        );
        // Several crates enable rustls providers (reqwest aws-lc-rs, sqlx ring), so rustls
        // cannot pick one for fantoccini by itself; the WebDriver link is plain HTTP anyway.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = ClientBuilder::rustls()
            .expect("tls roots")
            .capabilities(capabilities)
            .connect(&webdriver)
            .await
            .expect("a Chromium session");
        Some(Self {
            client,
            driver,
            profile,
        })
    }

    /// Saves the page as `test-artifacts/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-artifacts");
        std::fs::create_dir_all(&dir).expect("artifacts dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }

    /// Scrolls the page so that `css` is in the middle of the window (for a screenshot).
    pub async fn scroll_to(&self, css: &str) {
        self.client
            .execute(
                "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
                vec![serde_json::json!(css)],
            )
            .await
            .expect(css);
    }

    /// Types `text` into the element `css` after clearing it.
    pub async fn fill(&self, css: &str, text: &str) {
        let element = self.client.find(Locator::Css(css)).await.expect(css);
        element.clear().await.expect("clear");
        element.send_keys(text).await.expect("type");
    }

    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .expect(css)
            .click()
            .await
            .expect("click");
    }

    /// The visible text of `css`, or "" when it is not on the page.
    pub async fn text(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits until `css` shows text containing `needle`.
    pub async fn wait_for_text(&self, css: &str, needle: &str) {
        eventually(Duration::from_secs(30), || async {
            self.text(css).await.contains(needle)
        })
        .await;
    }

    /// The attribute `name` of `css`, or `None` when either is missing.
    pub async fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let element = self.client.find(Locator::Css(css)).await.ok()?;
        element.attr(name).await.ok().flatten()
    }

    /// Whether `css` is on the page and enabled, now.
    pub async fn is_enabled(&self, css: &str) -> bool {
        match self.client.find(Locator::Css(css)).await {
            Ok(element) => element.is_enabled().await.unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Waits until the attribute `name` of `css` contains `needle`, and returns it.
    pub async fn wait_for_attribute(&self, css: &str, name: &str, needle: &str) -> String {
        eventually(Duration::from_secs(30), || async {
            self.attribute(css, name)
                .await
                .is_some_and(|value| value.contains(needle))
        })
        .await;
        self.attribute(css, name).await.unwrap_or_default()
    }

    /// Waits until `css` is enabled (a button the page enables when it is ready).
    pub async fn wait_enabled(&self, css: &str) {
        eventually(Duration::from_secs(30), || self.is_enabled(css)).await;
    }

    /// Waits until the browser is on a URL starting with `prefix`, and returns it.
    pub async fn wait_for_url(&self, prefix: &str) -> url::Url {
        eventually(Duration::from_secs(30), || async {
            self.client
                .current_url()
                .await
                .is_ok_and(|u| u.as_str().starts_with(prefix))
        })
        .await;
        self.client.current_url().await.expect("url")
    }

    /// The WCAG 2 A and AA rules the page breaks, as axe-core (Deque's checker, installed by
    /// `.ci/run` with npm; `BILLING_AXE_JS` names another copy) finds them: `rule (impact):
    /// the elements`. `None` when axe-core is missing and the browser is not required.
    pub async fn accessibility_violations(&self) -> Option<Vec<String>> {
        let path = std::env::var("BILLING_AXE_JS").unwrap_or_else(|_| AXE_JS.to_owned());
        let Ok(axe) = std::fs::read_to_string(&path) else {
            let required = std::env::var("BILLING_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "axe-core required but missing at {path}: npm install --prefix /opt/axe axe-core"
            );
            eprintln!("axe-core is not installed; skipping the accessibility check");
            return None;
        };
        // Injected through WebDriver, which the page's Content-Security-Policy does not govern.
        self.client
            .execute(&format!("{axe}\nreturn true;"), vec![])
            .await
            .expect("load axe-core");
        let found = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
                   .then(r => done(r.violations.map(v =>
                     v.id + ' (' + v.impact + '): ' + v.nodes.map(n => n.target.join(' ')).join(', '))));",
                vec![],
            )
            .await
            .expect("run axe-core");
        Some(
            found
                .as_array()
                .map(|all| {
                    all.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    /// Ends the WebDriver session (Chromium exits), then chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
