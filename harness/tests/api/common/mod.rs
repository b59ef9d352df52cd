//! `spawn_app()`: the real service on a random port, against a fresh SQLite file or a fresh
//! PostgreSQL schema, with an account to call it as.

pub mod browser;
pub mod process;
pub mod proxied_shop;
pub mod receiver;

use reqwest::{Client, Method, RequestBuilder, Response};
use serde_json::{Value, json};
use std::future::Future;
use std::time::Duration;
use tokio::sync::oneshot;

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct TestApp {
    pub base: String,
    pub client: Client,
    pub api_key: String,
    pub account_id: String,
    pub database_url: String,
    shutdown: Option<oneshot::Sender<()>>,
    /// The server's task, when it runs in this process.
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The PostgreSQL server tests use; `.ci/run` sets `BILLING_REQUIRE_POSTGRES=1` so that an
/// unreachable server fails the run instead of skipping.
fn postgres_base() -> String {
    std::env::var("BILLING_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
}

/// The PostgreSQL database tests make their schemas in (created if missing); `None` only when
/// the server is unreachable and not required.
pub async fn postgres_database() -> Option<String> {
    use sea_orm::{ConnectionTrait, Database};
    let base = postgres_base();
    let required = std::env::var("BILLING_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    let admin = match Database::connect(format!("{base}/postgres")).await {
        Ok(conn) => conn,
        Err(err) if !required => {
            eprintln!("PostgreSQL unreachable ({err}); skipping the PostgreSQL variant");
            return None;
        }
        Err(err) => panic!("PostgreSQL required but unreachable: {err}"),
    };
    // One database for all test runs, one schema per test: schemas are cheap to create.
    let _ = admin
        .execute_unprepared("CREATE DATABASE billing_test")
        .await;
    Some(format!("{base}/billing_test"))
}

async fn fresh_postgres_url() -> Option<String> {
    use sea_orm::{ConnectionTrait, Database};
    let database = postgres_database().await?;
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let db = Database::connect(&database)
        .await
        .expect("connect billing_test");
    db.execute_unprepared(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create schema");
    Some(format!("{database}?options=-c%20search_path%3D{schema}"))
}

fn fresh_sqlite_url() -> String {
    let dir = std::env::temp_dir().join("billing-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    format!(
        "sqlite://{}",
        dir.join(format!("{}.db", uuid::Uuid::new_v4().simple()))
            .display()
    )
}

pub async fn database_url(backend: Backend) -> Option<String> {
    match backend {
        Backend::Sqlite => Some(fresh_sqlite_url()),
        Backend::Postgres => fresh_postgres_url().await,
    }
}

/// Waits (at most `within`) until the server at `base` answers `/readyz` with 200.
pub async fn wait_until_ready(client: &Client, base: &str, within: Duration) {
    eventually(within, || async {
        client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
}

/// Starts the service; `None` only when PostgreSQL is unavailable and not required.
pub async fn spawn_app(backend: Backend) -> Option<TestApp> {
    spawn_app_with(backend, default_config).await
}

/// `spawn_app` with `configure` applied to the configuration first.
pub async fn spawn_app_with(
    backend: Backend,
    configure: fn(&mut billing::config::Config),
) -> Option<TestApp> {
    let database_url = database_url(backend).await?;
    Some(spawn_on_with(database_url, configure).await)
}

/// The configuration tests run with unless they say otherwise: the defaults.
pub fn default_config(_: &mut billing::config::Config) {}

pub async fn spawn_on(database_url: String) -> TestApp {
    spawn_on_with(database_url, default_config).await
}

pub async fn spawn_on_with(
    database_url: String,
    configure: fn(&mut billing::config::Config),
) -> TestApp {
    let mut app = start_server(database_url, configure).await;
    let account = app.create_account("Test account").await;
    app.api_key = account["api_key"].as_str().expect("api_key").to_owned();
    app.account_id = account["id"].as_str().expect("id").to_owned();
    app
}

/// Another node serving `app`'s database (PostgreSQL), called as `app`'s account.
pub async fn spawn_node(app: &TestApp) -> TestApp {
    let mut node = start_server(app.database_url.clone(), default_config).await;
    node.api_key = app.api_key.clone();
    node.account_id = app.account_id.clone();
    node
}

/// The server on `database_url`, ready, with no account made yet.
async fn start_server(
    database_url: String,
    configure: fn(&mut billing::config::Config),
) -> TestApp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let mut config = billing::config::Config::new(database_url.clone());
    config.admin_token = Some(ADMIN_TOKEN.to_owned());
    // Tests that look at live actors must not race their idle stop on a loaded machine.
    config.actor_idle_secs = 120;
    // Purge expired Idempotency-Keys every second, so that a test sees it happen.
    config.idempotency_purge_secs = 1;
    configure(&mut config);
    let (tx, rx) = oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        if let Err(err) = billing::run(config, listener, async {
            let _ = rx.await;
        })
        .await
        {
            panic!("server failed: {err:#}");
        }
    });
    let client = Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    wait_until_ready(&client, &base, Duration::from_secs(30)).await;
    TestApp {
        base,
        client,
        api_key: String::new(),
        account_id: String::new(),
        database_url,
        shutdown: Some(tx),
        served: Some(served),
    }
}

impl TestApp {
    /// A `TestApp` for a server running elsewhere (a child process), with no account yet:
    /// set `api_key` and `account_id` once one is made.
    pub fn attached(base: String, database_url: String) -> Self {
        Self {
            base,
            client: Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
            api_key: String::new(),
            account_id: String::new(),
            database_url,
            shutdown: None,
            served: None,
        }
    }

    /// Stops the server (when it runs in this process) and waits until it has let go of
    /// everything: a SQLite file is then free for the next server.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.expect("the server stopped cleanly");
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client
            .request(method, self.url(path))
            .bearer_auth(&self.api_key)
    }

    pub fn admin(&self, method: Method, path: &str) -> RequestBuilder {
        self.client
            .request(method, self.url(path))
            .bearer_auth(ADMIN_TOKEN)
    }

    pub async fn get(&self, path: &str) -> Response {
        self.request(Method::GET, path).send().await.expect("send")
    }

    pub async fn post(&self, path: &str, body: Value) -> Response {
        self.request(Method::POST, path)
            .json(&body)
            .send()
            .await
            .expect("send")
    }

    /// A sandbox account made through the admin API, as JSON (with its API key).
    pub async fn create_account(&self, name: &str) -> Value {
        let response = self
            .admin(Method::POST, "/admin/accounts")
            .json(&json!({"name": name, "sandbox": true}))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 201);
        response.json().await.expect("json")
    }

    /// The same server, called as another account (`account` as `create_account` returns
    /// it). Dropping it stops nothing.
    pub fn as_account(&self, account: &Value) -> TestApp {
        TestApp {
            base: self.base.clone(),
            client: self.client.clone(),
            api_key: account["api_key"].as_str().expect("api_key").to_owned(),
            account_id: account["id"].as_str().expect("id").to_owned(),
            database_url: self.database_url.clone(),
            shutdown: None,
            served: None,
        }
    }

    /// Adds `cents` to this account's prepaid balance, as an operator.
    pub async fn top_up(&self, cents: i64) {
        let response = self
            .admin(
                Method::POST,
                &format!("/admin/accounts/{}/balance/top-ups", self.account_id),
            )
            .json(&json!({"amount_cents": cents}))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 201);
    }

    /// Lifts this account's API rate limit (bursts and polling loops in tests).
    pub async fn lift_rate_limit(&self) {
        let response = self
            .admin(
                Method::PATCH,
                &format!("/admin/accounts/{}", self.account_id),
            )
            .json(&json!({"rate_limit_per_minute": 0}))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 200);
    }

    pub async fn create_plan(&self, name: &str, monthly: i64, annual: i64) -> Value {
        let response = self
            .post("/v1/plans", json!({"name": name, "monthly_amount_cents": monthly, "annual_amount_cents": annual}))
            .await;
        assert_eq!(response.status(), 201);
        response.json().await.expect("json")
    }
}

/// The account's sandbox processor as our service talks to it: a client and the account's
/// credentials (read from the database, where the private key is kept).
pub async fn sandbox_processor(
    app: &TestApp,
) -> (
    billing::processor::client::ProcessorClient,
    billing::processor::client::ProcessorCredentials,
) {
    let (_, account) = read(app.get("/v1/account").await).await;
    let store = billing::store::Store::connect(&app.database_url)
        .await
        .expect("store");
    let row = store
        .account(&billing::ids::AccountId::parse(&app.account_id).expect("an account's id"))
        .await
        .expect("db")
        .expect("account");
    let creds = billing::processor::client::ProcessorCredentials::new(
        account["processor"]["base_url"].as_str().expect("url"),
        row.processor_public_key,
        row.processor_private_key,
        row.processor_integrity_secret,
    )
    .expect("creds");
    let client = billing::processor::client::ProcessorClient::new().expect("client");
    (client, creds)
}

/// A card tokenized at the account's sandbox processor, as the browser would, with both
/// acceptance tokens.
pub async fn card_token(app: &TestApp, number: &str) -> CardToken {
    card_token_expiring(app, number, "08", "30").await
}

/// A card token as `card_token`'s, of a card that expires at the end of `month` (`"08"`) of
/// `year` (`"30"`).
pub async fn card_token_expiring(
    app: &TestApp,
    number: &str,
    month: &str,
    year: &str,
) -> CardToken {
    let (client, creds) = sandbox_processor(app).await;
    let acceptance = client.acceptance_tokens(&creds).await.expect("acceptance");
    let card = billing::processor::client::CardDetails {
        number: number.into(),
        cvc: "123".into(),
        exp_month: month.into(),
        exp_year: year.into(),
        card_holder: "Ana Gómez".into(),
    };
    let token = client.tokenize_card(&creds, &card).await.expect("token");
    CardToken {
        token: token.id,
        acceptance: acceptance.acceptance_token,
        personal: acceptance.personal_auth_token,
    }
}

/// A card token made at the sandbox as a browser makes it, with the two acceptance tokens
/// the customer accepted (the processor's end-user policy and the personal-data authorization).
pub struct CardToken {
    pub token: String,
    pub acceptance: String,
    pub personal: String,
}

impl CardToken {
    /// The body of `POST /v1/customers/{id}/payment-methods` for this card.
    pub fn payment_method(&self) -> serde_json::Value {
        serde_json::json!({"card_token": self.token, "acceptance_token": self.acceptance,
            "accept_personal_auth": self.personal})
    }
}

/// Reads a response as (status, JSON body).
pub async fn read(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Waits until `condition` holds, polling, and fails the test after `bound`.
pub async fn eventually<F, Fut>(bound: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if condition().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Declares each scenario `async fn name(app: TestApp)` as two tests, one per database;
/// `db_tests!(config = f; …)` starts their apps with `f` applied to the configuration (`f`
/// is a path from the crate root, e.g. `crate::common::proxied_shop::fast_reconciler`).
#[macro_export]
macro_rules! db_tests {
    (config = $config:path; $($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let app = $crate::common::spawn_app_with($crate::common::Backend::Sqlite, $config).await;
                    super::$name(app.expect("sqlite always runs")).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(app) = $crate::common::spawn_app_with($crate::common::Backend::Postgres, $config).await {
                        super::$name(app).await;
                    }
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        $crate::db_tests!(config = $crate::common::default_config; $($name),*);
    };
}

/// Fails unless the invariant checker (`harness::audit`) finds the database and the sandbox
/// processor in agreement once the app has settled (bounded wait for charges in flight).
pub async fn assert_invariants(app: &TestApp) {
    let store = billing::store::Store::connect(&app.database_url)
        .await
        .expect("store");
    let charger = billing::charges::Charger::new(
        store.clone(),
        billing::processor::client::ProcessorClient::new().expect("client"),
        app.base.clone(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let report = harness::audit::audit(&store, &charger, chrono::Utc::now().timestamp_millis())
            .await
            .expect("audit");
        if report.is_clean() && report.pending == 0 {
            assert!(report.charges > 0, "nothing was audited");
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "invariants broken: {report:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the SQLite database of `app` (its file and its WAL, as on disk now) holds `needle`
/// anywhere: for the claims that a secret is stored only hashed.
pub fn sqlite_files_hold(app: &TestApp, needle: &str) -> bool {
    let path = app
        .database_url
        .strip_prefix("sqlite://")
        .expect("sqlite url")
        .to_owned();
    let mut stored = Vec::new();
    for file in [path.clone(), format!("{path}-wal")] {
        if let Ok(bytes) = std::fs::read(&file) {
            stored.extend(bytes);
        }
    }
    stored
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}
