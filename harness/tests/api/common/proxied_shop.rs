//! A shop whose processor is a fault-injection proxy (`proxy`) in front of the in-process
//! sandbox: a sandbox account with known keys (so tests can sign events), registered at the
//! sandbox with our ingress as its events URL, with a funded balance, a customer with a card,
//! and a plan; and the fast reconciler timing the fault tests run with.

use super::{ADMIN_TOKEN, TestApp, read};
use billing::domain::charge_purpose::ChargePurpose;
use billing::ids::AccountId;
use billing::processor::client::{CardDetails, ProcessorClient, ProcessorCredentials};
use billing::store::Store;
use billing::store::charges::{ChargeAttempt, NewCharge};
use harness::chaos::proxy::Proxy;
use reqwest::Method;
use serde_json::{Value, json};

pub const APPROVED_CARD: &str = "4242424242424242";
pub const DECLINED_CARD: &str = "4111111111111111";
pub const TOP_UP: i64 = 10_000_000;
pub const PLAN_MONTHLY: i64 = 3_000_000;
/// 150 bps of the plan's monthly amount.
pub const FEE: i64 = 45_000;
pub fn fast_reconciler(config: &mut billing::config::Config) {
    config.processor_timeout_ms = 1_000;
    config.reconcile_interval_ms = 100;
    config.processor_recheck_base_ms = 300;
    // A post whose answer was lost may reach the processor up to 6 s later (an hour in
    // production): past the held-up posts of these tests (3 s), short enough to wait for.
    config.in_flight_bound_ms = 6_000;
}

/// A sandbox account whose processor is a proxy in front of the in-process sandbox, with a
/// funded balance, a customer with a card, and a plan.
pub struct Shop {
    pub proxy: Proxy,
    pub account_id: String,
    pub key: String,
    pub events_secret: String,
    pub customer: String,
    pub method: String,
    pub plan: String,
    /// Straight to the sandbox, past the proxy: what the processor really holds.
    pub direct: ProcessorCredentials,
    pub store: Store,
}

impl Shop {
    pub async fn open(app: &TestApp, card: &str) -> Self {
        Self::open_at(app, card, &app.url("/sandbox/processor/v1"), &app.base).await
    }

    /// `open`, at the sandbox processor whose base URL is `sandbox` (administered with the
    /// server's admin token), its events sent to our ingress under `events_base` (the
    /// server's base, or a proxy in front of it).
    pub async fn open_at(app: &TestApp, card: &str, sandbox: &str, events_base: &str) -> Self {
        let proxy = Proxy::start(sandbox).await.expect("proxy");
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let keys = json!({"public_key": format!("pub_test_{unique}"), "private_key": format!("prv_test_{unique}"),
            "events_secret": format!("test_events_{unique}"), "integrity_secret": format!("test_integrity_{unique}")});
        let mut processor = keys.clone();
        processor["base_url"] = json!(proxy.base);
        let (status, account) = read(
            app.admin(Method::POST, "/admin/accounts")
                .json(&json!({"name": "Faulty processor", "sandbox": true, "processor": processor}))
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(status, 201, "{account}");
        let account_id = account["id"].as_str().expect("id").to_owned();
        // The sandbox behind the proxy learns the merchant's keys and where its events go.
        let mut merchant = keys.clone();
        merchant["events_url"] = json!(format!("{events_base}/webhooks/processor/{account_id}"));
        let registered = app
            .client
            .post(format!("{sandbox}/_sandbox/merchants"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&merchant)
            .send()
            .await
            .expect("send");
        assert_eq!(registered.status(), 201);
        let top_up = app
            .admin(
                Method::POST,
                &format!("/admin/accounts/{account_id}/balance/top-ups"),
            )
            .json(&json!({"amount_cents": TOP_UP}))
            .send()
            .await
            .expect("send");
        assert_eq!(top_up.status(), 201);
        // Tests poll the API while they wait.
        let unlimited = app
            .admin(Method::PATCH, &format!("/admin/accounts/{account_id}"))
            .json(&json!({"rate_limit_per_minute": 0}))
            .send()
            .await
            .expect("send");
        assert_eq!(unlimited.status(), 200);
        let direct = ProcessorCredentials::new(
            sandbox,
            keys["public_key"].as_str().expect("key"),
            keys["private_key"].as_str().expect("key"),
            keys["integrity_secret"].as_str().expect("key"),
        )
        .expect("credentials");
        let mut shop = Self {
            proxy,
            account_id,
            key: account["api_key"].as_str().expect("key").to_owned(),
            events_secret: keys["events_secret"].as_str().expect("secret").to_owned(),
            customer: String::new(),
            method: String::new(),
            plan: String::new(),
            direct,
            store: Store::connect(&app.database_url).await.expect("store"),
        };
        shop.customer = shop
            .call(
                app,
                Method::POST,
                "/v1/customers",
                json!({"email": "ana@example.co", "name": "Ana"}),
            )
            .await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let token = shop.card_token(card).await;
        let path = format!("/v1/customers/{}/payment-methods", shop.customer);
        let body = token.payment_method();
        shop.method = shop.call(app, Method::POST, &path, body).await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let plan = json!({"name": "Pro", "monthly_amount_cents": PLAN_MONTHLY, "annual_amount_cents": 30_000_000});
        shop.plan = shop.call(app, Method::POST, "/v1/plans", plan).await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        shop
    }

    /// A card tokenized at the sandbox as the browser does, with both acceptance tokens.
    pub async fn card_token(&self, number: &str) -> super::CardToken {
        let client = ProcessorClient::new().expect("client");
        let acceptance = client
            .acceptance_tokens(&self.direct)
            .await
            .expect("acceptance");
        let card = CardDetails {
            number: number.into(),
            cvc: "123".into(),
            exp_month: "08".into(),
            exp_year: "30".into(),
            card_holder: "Ana Gómez".into(),
        };
        let token = client
            .tokenize_card(&self.direct, &card)
            .await
            .expect("token");
        super::CardToken {
            token: token.id,
            acceptance: acceptance.acceptance_token,
            personal: acceptance.personal_auth_token,
        }
    }

    /// Calls the API with this shop's key; any status but 2xx fails the test.
    pub async fn call(&self, app: &TestApp, method: Method, path: &str, body: Value) -> Value {
        let mut request = app
            .client
            .request(method, app.url(path))
            .bearer_auth(&self.key);
        if !body.is_null() {
            request = request.json(&body);
        }
        let (status, out) = read(request.send().await.expect("send")).await;
        assert!((200..300).contains(&status), "{path}: {status} {out}");
        out
    }

    /// A subscription whose first charge is made at once; its id.
    pub async fn subscribe(&self, app: &TestApp) -> String {
        let body = json!({"customer_id": self.customer, "plan_id": self.plan, "cycle": "monthly",
            "payment_method_id": self.method});
        self.call(app, Method::POST, "/v1/subscriptions", body)
            .await["id"]
            .as_str()
            .expect("id")
            .to_owned()
    }

    pub async fn subscription(&self, app: &TestApp, id: &str) -> Value {
        self.call(
            app,
            Method::GET,
            &format!("/v1/subscriptions/{id}"),
            Value::Null,
        )
        .await
    }

    /// The types of the subscription's events, oldest first.
    pub async fn event_types(&self, app: &TestApp, id: &str) -> Vec<String> {
        let path = format!("/v1/events?subscription_id={id}&limit=100");
        let page = self.call(app, Method::GET, &path, Value::Null).await;
        let mut types: Vec<String> = page["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|e| e["type"].as_str().expect("type").to_owned())
            .collect();
        types.reverse();
        types
    }

    /// (available, reserved) cents.
    pub async fn balance(&self, app: &TestApp) -> (i64, i64) {
        let balance = self
            .call(app, Method::GET, "/v1/balance", Value::Null)
            .await;
        (
            balance["available_cents"].as_i64().expect("available"),
            balance["reserved_cents"].as_i64().expect("reserved"),
        )
    }

    /// The references posted to `POST /transactions`, in order (the charge ids).
    pub fn posted_references(&self) -> Vec<String> {
        self.proxy
            .seen("POST", "/transactions")
            .iter()
            .map(|seen| {
                let body: Value = serde_json::from_str(&seen.body).expect("json body");
                body["reference"].as_str().expect("reference").to_owned()
            })
            .collect()
    }

    pub async fn charge(&self, id: &str) -> ChargeAttempt {
        self.store
            .charge_by_id(&billing::ids::ChargeAttemptId::parse(id).expect("a charge\'s id"))
            .await
            .expect("db")
            .expect("charge")
    }

    /// What the processor itself holds under `reference`.
    pub async fn at_processor(&self, reference: &str) -> Option<String> {
        ProcessorClient::new()
            .expect("client")
            .find_transaction_by_reference(&self.direct, reference)
            .await
            .expect("lookup")
            .map(|tx| tx.status)
    }

    /// A pending charge recorded (fee reserved) but never posted, as after a crash between
    /// recording and posting.
    pub async fn unposted_charge(&self, subscription_id: Option<&str>) -> ChargeAttempt {
        self.store
            .begin_charge(NewCharge {
                account: AccountId::parse(&self.account_id).expect("an account's id"),
                subscription_id: subscription_id
                    .map(|id| billing::ids::SubscriptionId::parse(id).expect("an id")),
                customer_id: billing::ids::CustomerId::parse(&self.customer).expect("an id"),
                payment_method_id: billing::ids::PaymentMethodId::parse(&self.method)
                    .expect("an id"),
                amount_cents: PLAN_MONTHLY,
                fee_cents: FEE,
                purpose: ChargePurpose::Manual,
                period_start: None,
                pending_change: None,
                lines: Vec::new(),
                now_ms: chrono::Utc::now().timestamp_millis(),
            })
            .await
            .expect("charge")
    }
}
