//! Crash safety: the real `billing` process is killed in the middle of a burst of due
//! renewals, restarted on the same database, and every subscription is charged exactly once
//! for the period.

use crate::common::{ADMIN_TOKEN, Backend, database_url, eventually, wait_until_ready};
use billing::processor::client::{CardDetails, ProcessorClient, ProcessorCredentials};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::process::{Child, Command};

const SUBSCRIPTIONS: usize = 40;

pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
}

/// Starts `billing` on `database_url` at `port`. Its log goes to a file whose path the test
/// prints (shown when the test fails): a 500 is explained there.
pub(crate) async fn start(database_url: &str, port: u16) -> Server {
    let dir = std::env::temp_dir().join("billing-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("crash-{}.log", uuid::Uuid::new_v4().simple()));
    let log = std::fs::File::create(&path).expect("log file");
    eprintln!("server on port {port} logs to {}", path.display());
    let child = Command::new(env!("CARGO_BIN_EXE_billing"))
        .env("DATABASE_URL", database_url)
        .env("BILLING_BIND", format!("127.0.0.1:{port}"))
        .env("BILLING_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "warn")
        .env_remove("BILLING_LOG_FORMAT")
        .stdout(log)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn billing");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    wait_until_ready(&client, &base, Duration::from_secs(60)).await;
    Server { child, base }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

pub(crate) async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    key: &str,
    body: Value,
) -> Value {
    let response = client
        .request(method, url)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("send");
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {body}");
    body
}

/// A shop on a running `billing` process: a sandbox account (no rate limit) with a funded
/// balance, its processor credentials, and one plan.
pub(crate) struct ProcessShop {
    client: reqwest::Client,
    base: String,
    pub(crate) key: String,
    pub(crate) account_id: String,
    creds: ProcessorCredentials,
    processor: ProcessorClient,
    plan: String,
}

impl ProcessShop {
    pub(crate) async fn open(
        client: &reqwest::Client,
        database_url: &str,
        base: &str,
        balance_cents: i64,
    ) -> Self {
        let post = reqwest::Method::POST;
        let account = call(
            client,
            post.clone(),
            format!("{base}/admin/accounts"),
            ADMIN_TOKEN,
            json!({"name": "Shop", "sandbox": true, "rate_limit_per_minute": 0}),
        )
        .await;
        let key = account["api_key"].as_str().expect("key");
        let account_id = account["id"].as_str().expect("id");
        call(
            client,
            post,
            format!("{base}/admin/accounts/{account_id}/balance/top-ups"),
            ADMIN_TOKEN,
            json!({"amount_cents": balance_cents}),
        )
        .await;
        let plan = call(
            client,
            reqwest::Method::POST,
            format!("{base}/v1/plans"),
            key,
            json!({"name": "P", "monthly_amount_cents": 100_000, "annual_amount_cents": 1_000_000}),
        )
        .await;
        let store = billing::store::Store::connect(database_url)
            .await
            .expect("store");
        let row = store
            .account(&billing::ids::AccountId::parse(account_id).expect("an account's id"))
            .await
            .expect("db")
            .expect("account");
        let creds = ProcessorCredentials::new(
            format!("{base}/sandbox/processor/v1"),
            row.processor_public_key,
            row.processor_private_key,
            row.processor_integrity_secret,
        )
        .expect("creds");
        Self {
            client: client.clone(),
            base: base.to_owned(),
            key: key.to_owned(),
            account_id: account_id.to_owned(),
            creds,
            processor: ProcessorClient::new().expect("client"),
            plan: plan["id"].as_str().expect("id").to_owned(),
        }
    }

    /// Customer `i` with an approving card, subscribed monthly with `metadata`; its id.
    pub(crate) async fn subscribe(&self, i: usize, metadata: Value) -> String {
        let (base, key, post) = (&self.base, &self.key, reqwest::Method::POST);
        let customer = call(
            &self.client,
            post.clone(),
            format!("{base}/v1/customers"),
            key,
            json!({"email": format!("c{i}@x.co"), "name": "Customer"}),
        )
        .await;
        let customer = customer["id"].as_str().expect("id").to_owned();
        let acceptance = self
            .processor
            .acceptance_tokens(&self.creds)
            .await
            .expect("acceptance");
        let card = CardDetails {
            number: "4242424242424242".into(),
            cvc: "123".into(),
            exp_month: "08".into(),
            exp_year: "30".into(),
            card_holder: "Card Holder".into(),
        };
        let token = self
            .processor
            .tokenize_card(&self.creds, &card)
            .await
            .expect("token");
        let method = call(
            &self.client,
            post.clone(),
            format!("{base}/v1/customers/{customer}/payment-methods"),
            key,
            json!({"card_token": token.id, "acceptance_token": acceptance.acceptance_token, "accept_personal_auth": acceptance.personal_auth_token}),
        )
        .await;
        let sub = call(
            &self.client,
            post,
            format!("{base}/v1/subscriptions"),
            key,
            json!({"customer_id": customer, "plan_id": self.plan, "cycle": "monthly",
                   "payment_method_id": method["id"], "metadata": metadata}),
        )
        .await;
        sub["id"].as_str().expect("id").to_owned()
    }
}

async fn killed_mid_renewal_burst_charges_each_period_once(backend: Backend) {
    let Some(url) = database_url(backend).await else {
        return;
    };
    let port = free_port();
    let mut server = start(&url, port).await;
    let client = reqwest::Client::new();
    let base = server.base.clone();
    let post = reqwest::Method::POST;
    let shop = ProcessShop::open(&client, &url, &base, 1_000_000_000).await;
    let (key, account_id) = (shop.key.clone(), shop.account_id.clone());
    let store = billing::store::Store::connect(&url).await.expect("store");
    let mut subscriptions = Vec::new();
    for i in 0..SUBSCRIPTIONS {
        subscriptions.push(shop.subscribe(i, Value::Null).await);
    }
    // Let the first charges settle, then start a month's renewals and kill the process
    // while they run.
    call(
        &client,
        post.clone(),
        format!("{base}/v1/test-helpers/clock/advance"),
        &key,
        json!({"seconds": 1}),
    )
    .await;
    let advance = {
        let (client, key, base) = (client.clone(), key.clone(), base.clone());
        tokio::spawn(async move {
            let _ = client
                .post(format!("{base}/v1/test-helpers/clock/advance"))
                .bearer_auth(key)
                .json(&json!({"seconds": 31 * 86_400}))
                .send()
                .await;
        })
    };
    let account = billing::ids::AccountId::parse(&account_id).expect("an account's id");
    eventually(Duration::from_secs(60), || async {
        let renewing = store.count_pending_charges(&account).await.expect("db");
        let events = store
            .list_events(
                &account,
                Some("charge.approved"),
                None,
                &billing::store::PageRequest {
                    limit: 100,
                    cursor: None,
                },
            )
            .await
            .expect("db")
            .items
            .len();
        renewing > 0 || events > SUBSCRIPTIONS
    })
    .await;
    server.child.kill().await.expect("kill");
    let _ = advance.await;

    let server = start(&url, port).await;
    call(
        &client,
        post.clone(),
        format!("{}/v1/test-helpers/clock/advance", server.base),
        &key,
        json!({"seconds": 1}),
    )
    .await;
    eventually(Duration::from_secs(60), || async {
        store.count_pending_charges(&account).await.expect("db") == 0
    })
    .await;

    for id in &subscriptions {
        let sub = call(
            &client,
            reqwest::Method::GET,
            format!("{}/v1/subscriptions/{id}", server.base),
            &key,
            Value::Null,
        )
        .await;
        assert_eq!(sub["status"], "active", "{sub}");
        let events = call(
            &client,
            reqwest::Method::GET,
            format!(
                "{}/v1/events?subscription_id={id}&type=charge.approved",
                server.base
            ),
            &key,
            Value::Null,
        )
        .await;
        let approved = events["data"].as_array().expect("data").len();
        assert_eq!(
            approved, 2,
            "{id}: the first period and one renewal, each charged once"
        );
    }
    let balance = call(
        &client,
        reqwest::Method::GET,
        format!("{}/v1/balance", server.base),
        &key,
        Value::Null,
    )
    .await;
    assert_eq!(
        balance["available_cents"],
        1_000_000_000 - (2 * SUBSCRIPTIONS as i64) * 1_500
    );
    assert_eq!(balance["reserved_cents"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_mid_renewal_burst_charges_each_period_once() {
    killed_mid_renewal_burst_charges_each_period_once(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_mid_renewal_burst_charges_each_period_once() {
    killed_mid_renewal_burst_charges_each_period_once(Backend::Postgres).await;
}
