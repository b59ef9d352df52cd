//! Issue 13, items 1, 2 and 7: a processor that fails after acting, rate-limits, times out or
//! refuses never makes the service charge a period twice or lose a charge (CONTRACT §7). The
//! account's processor is a fault-injection proxy (`common::proxy`) in front of the in-process
//! sandbox, whose events still reach the ingress directly. The reconciler runs every 100 ms
//! and rechecks unknown outcomes from 300 ms on, so its passes are awaited, not slept through.

use crate::common::{ADMIN_TOKEN, TestApp, eventually, read};
use billing::chaos::proxy::{Fault, Proxy};
use billing::ids::AccountId;
use billing::processor::client::{CardDetails, ProcessorClient, ProcessorCredentials};
use billing::store::Store;
use billing::store::charges::{ChargeAttempt, NewCharge};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(config = super::fast_reconciler;
    a_create_answered_500_after_the_processor_acted_then_a_429_lookup_stays_pending_until_approved,
    a_create_answered_429_is_asked_again_found_unseen_and_posted_again_under_its_reference,
    a_create_that_times_out_after_the_processor_acted_is_found_not_posted_again,
    a_failing_lookup_in_the_reconciler_never_posts_again,
    a_definite_refusal_of_a_repost_settles_the_charge_as_error_and_releases_the_fee,
    one_failing_charge_does_not_stop_the_reconciler,
    a_checkout_paid_while_the_processor_rate_limits_is_posted_again_and_completes,
);

pub(crate) const APPROVED_CARD: &str = "4242424242424242";
pub(crate) const DECLINED_CARD: &str = "4111111111111111";
pub(crate) const TOP_UP: i64 = 10_000_000;
pub(crate) const PLAN_MONTHLY: i64 = 3_000_000;
/// 150 bps of the plan's monthly amount.
pub(crate) const FEE: i64 = 45_000;
const BOUND: Duration = Duration::from_secs(30);

pub(crate) fn fast_reconciler(config: &mut billing::config::Config) {
    config.processor_timeout_ms = 1_000;
    config.reconcile_interval_ms = 100;
    config.processor_recheck_base_ms = 300;
}

/// A sandbox account whose processor is a proxy in front of the in-process sandbox, with a
/// funded balance, a customer with a card, and a plan.
pub(crate) struct Shop {
    pub(crate) proxy: Proxy,
    pub(crate) account_id: String,
    pub(crate) key: String,
    pub(crate) events_secret: String,
    pub(crate) customer: String,
    pub(crate) method: String,
    pub(crate) plan: String,
    /// Straight to the sandbox, past the proxy: what the processor really holds.
    pub(crate) direct: ProcessorCredentials,
    pub(crate) store: Store,
}

impl Shop {
    pub(crate) async fn open(app: &TestApp, card: &str) -> Self {
        let sandbox = app.url("/sandbox/processor/v1");
        let proxy = Proxy::start(&sandbox).await.expect("proxy");
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
        merchant["events_url"] = json!(app.url(&format!("/webhooks/processor/{account_id}")));
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
            &sandbox,
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
        let (token, acceptance) = shop.card_token(card).await;
        let path = format!("/v1/customers/{}/payment-methods", shop.customer);
        let body = json!({"card_token": token, "acceptance_token": acceptance});
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

    /// A card tokenized at the sandbox as the browser does: (token, acceptance token).
    pub(crate) async fn card_token(&self, number: &str) -> (String, String) {
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
        (token.id, acceptance.acceptance_token)
    }

    /// Calls the API with this shop's key; any status but 2xx fails the test.
    pub(crate) async fn call(
        &self,
        app: &TestApp,
        method: Method,
        path: &str,
        body: Value,
    ) -> Value {
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
    pub(crate) async fn subscribe(&self, app: &TestApp) -> String {
        let body = json!({"customer_id": self.customer, "plan_id": self.plan, "cycle": "monthly",
            "payment_method_id": self.method});
        self.call(app, Method::POST, "/v1/subscriptions", body)
            .await["id"]
            .as_str()
            .expect("id")
            .to_owned()
    }

    pub(crate) async fn subscription(&self, app: &TestApp, id: &str) -> Value {
        self.call(
            app,
            Method::GET,
            &format!("/v1/subscriptions/{id}"),
            Value::Null,
        )
        .await
    }

    /// The types of the subscription's events, oldest first.
    pub(crate) async fn event_types(&self, app: &TestApp, id: &str) -> Vec<String> {
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
    pub(crate) async fn balance(&self, app: &TestApp) -> (i64, i64) {
        let balance = self
            .call(app, Method::GET, "/v1/balance", Value::Null)
            .await;
        (
            balance["available_cents"].as_i64().expect("available"),
            balance["reserved_cents"].as_i64().expect("reserved"),
        )
    }

    /// The references posted to `POST /transactions`, in order (the charge ids).
    pub(crate) fn posted_references(&self) -> Vec<String> {
        self.proxy
            .seen("POST", "/transactions")
            .iter()
            .map(|seen| {
                let body: Value = serde_json::from_str(&seen.body).expect("json body");
                body["reference"].as_str().expect("reference").to_owned()
            })
            .collect()
    }

    pub(crate) async fn charge(&self, id: &str) -> ChargeAttempt {
        self.store
            .charge_by_id(id)
            .await
            .expect("db")
            .expect("charge")
    }

    /// What the processor itself holds under `reference`.
    pub(crate) async fn at_processor(&self, reference: &str) -> Option<String> {
        ProcessorClient::new()
            .expect("client")
            .find_transaction_by_reference(&self.direct, reference)
            .await
            .expect("lookup")
            .map(|tx| tx.status)
    }

    /// A pending charge recorded (fee reserved) but never posted, as after a crash between
    /// recording and posting.
    pub(crate) async fn unposted_charge(&self, subscription_id: Option<&str>) -> ChargeAttempt {
        self.store
            .begin_charge(NewCharge {
                account: AccountId::from_stored(self.account_id.clone()),
                subscription_id: subscription_id.map(str::to_owned),
                customer_id: self.customer.clone(),
                payment_method_id: self.method.clone(),
                amount_cents: PLAN_MONTHLY,
                fee_cents: FEE,
                purpose: "manual",
                period_start: None,
                pending_change: None,
                now_ms: chrono::Utc::now().timestamp_millis(),
            })
            .await
            .expect("charge")
    }
}

fn rate_limited() -> Fault {
    Fault::Answer(
        429,
        json!({"error": {"type": "RATE_LIMIT_ERROR", "reason": "Demasiadas solicitudes"}}),
    )
}

/// A subscription whose first charge approved: active, one `charge.approved`, no decline.
async fn assert_paid_once(app: &TestApp, shop: &Shop, id: &str) {
    eventually(BOUND, || async {
        shop.event_types(app, id)
            .await
            .contains(&"charge.approved".to_owned())
    })
    .await;
    let sub = shop.subscription(app, id).await;
    assert_eq!(sub["status"], "active", "{sub}");
    assert_eq!(sub["failed_attempts"], 0);
    let types = shop.event_types(app, id).await;
    assert_eq!(
        types.iter().filter(|t| *t == "charge.approved").count(),
        1,
        "{types:?}"
    );
    assert!(
        !types
            .iter()
            .any(|t| t == "charge.declined" || t == "subscription.past_due"),
        "an unknown outcome is never a decline: {types:?}"
    );
    assert_eq!(
        shop.balance(app).await,
        (TOP_UP - FEE, 0),
        "one fee, nothing reserved"
    );
}

async fn a_create_answered_500_after_the_processor_acted_then_a_429_lookup_stays_pending_until_approved(
    app: TestApp,
) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    shop.proxy
        .fail("POST", "/transactions", Fault::ForwardThenAnswer(500), 1);
    shop.proxy.fail("GET", "/transactions", rate_limited(), 1);
    let id = shop.subscribe(&app).await;
    assert_paid_once(&app, &shop, &id).await;
    let references = shop.posted_references();
    assert_eq!(references.len(), 1, "posted once: {references:?}");
    let charge = shop.charge(&references[0]).await;
    assert_eq!(charge.status, "approved");
    assert_eq!(charge.subscription_id.as_deref(), Some(id.as_str()));
    assert_eq!(
        shop.at_processor(&references[0]).await.as_deref(),
        Some("APPROVED")
    );
}

async fn a_create_answered_429_is_asked_again_found_unseen_and_posted_again_under_its_reference(
    app: TestApp,
) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    shop.proxy.fail("POST", "/transactions", rate_limited(), 1);
    let id = shop.subscribe(&app).await;
    assert_paid_once(&app, &shop, &id).await;
    let references = shop.posted_references();
    assert_eq!(references.len(), 2, "the 429 and the post after the lookup");
    let posts = shop.proxy.seen("POST", "/transactions");
    assert!(posts[0].fault.is_some() && posts[1].fault.is_none());
    assert_eq!(
        references[0], references[1],
        "the same reference both times"
    );
    assert!(
        !shop.proxy.seen("GET", "/transactions").is_empty(),
        "asked by reference before posting again"
    );
    assert_eq!(shop.charge(&references[0]).await.status, "approved");
    assert_eq!(
        shop.at_processor(&references[0]).await.as_deref(),
        Some("APPROVED")
    );
}

async fn a_create_that_times_out_after_the_processor_acted_is_found_not_posted_again(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    // Past the client's 1-second timeout.
    shop.proxy.fail(
        "POST",
        "/transactions",
        Fault::ForwardThenDelay(Duration::from_secs(3)),
        1,
    );
    let id = shop.subscribe(&app).await;
    assert_paid_once(&app, &shop, &id).await;
    assert_eq!(shop.posted_references().len(), 1, "found, not posted again");

    // The same when the connection closes without an answer after the processor acted.
    let shop = Shop::open(&app, APPROVED_CARD).await;
    shop.proxy
        .fail("POST", "/transactions", Fault::ForwardThenDrop, 1);
    let id = shop.subscribe(&app).await;
    assert_paid_once(&app, &shop, &id).await;
    assert_eq!(shop.posted_references().len(), 1, "found, not posted again");
}

async fn a_failing_lookup_in_the_reconciler_never_posts_again(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    shop.proxy.fail("POST", "/transactions", rate_limited(), 1);
    // Lookups by reference fail: answered 503, or the connection reset.
    shop.proxy.fail("GET", "/transactions", Fault::Reset, 1);
    shop.proxy
        .always("GET", "/transactions", Fault::ForwardThenAnswer(503));
    let id = shop.subscribe(&app).await;
    // Asked about three times (the backoff's first waits), each lookup failing.
    eventually(BOUND, || async {
        shop.proxy.seen("GET", "/transactions").len() >= 3
    })
    .await;
    let references = shop.posted_references();
    assert_eq!(references.len(), 1, "a failed lookup is not \"never seen\"");
    let charge = shop.charge(&references[0]).await;
    assert_eq!(charge.status, "pending");
    assert_eq!(
        shop.balance(&app).await,
        (TOP_UP - FEE, FEE),
        "fee still reserved"
    );
    let sub = shop.subscription(&app, &id).await;
    assert_eq!(sub["status"], "active");
    let recheck = shop
        .store
        .charge_recheck(&charge.id)
        .await
        .expect("db")
        .expect("a recheck is scheduled");
    assert!(recheck.attempts >= 3, "{recheck:?}");
    assert!(
        recheck
            .last_reason
            .as_deref()
            .is_some_and(|r| r.contains("lookup")),
        "{recheck:?}"
    );
    // The processor answers again: found never seen, posted under the same reference.
    shop.proxy.clear();
    assert_paid_once(&app, &shop, &id).await;
    let references = shop.posted_references();
    assert_eq!(references.len(), 2);
    assert_eq!(references[0], references[1]);
}

async fn a_definite_refusal_of_a_repost_settles_the_charge_as_error_and_releases_the_fee(
    app: TestApp,
) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    shop.proxy.fail("POST", "/transactions", rate_limited(), 1);
    let invalid = json!({"error": {"type": "INPUT_VALIDATION_ERROR",
        "messages": {"payment_source_id": ["Fuente de pago inválida"]}}});
    shop.proxy
        .always("POST", "/transactions", Fault::Answer(422, invalid));
    let id = shop.subscribe(&app).await;
    eventually(BOUND, || async {
        shop.subscription(&app, &id).await["status"] == "past_due"
    })
    .await;
    let references = shop.posted_references();
    assert_eq!(references.len(), 2, "the 429, then the refused post");
    let charge = shop.charge(&references[0]).await;
    assert_eq!(charge.status, "error");
    assert!(
        charge
            .processor_message
            .as_deref()
            .is_some_and(|m| m.contains("Fuente de pago inválida")),
        "the processor's message is kept: {charge:?}"
    );
    assert_eq!(shop.balance(&app).await, (TOP_UP, 0), "the fee is released");
    let types = shop.event_types(&app, &id).await;
    assert!(types.contains(&"charge.declined".to_owned()), "{types:?}");
    assert!(
        types.contains(&"subscription.past_due".to_owned()),
        "{types:?}"
    );
    assert_eq!(shop.at_processor(&references[0]).await, None);
}

async fn one_failing_charge_does_not_stop_the_reconciler(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    // A charge whose answer cannot be applied: its subscription is gone, so its actor fails
    // (the processor approved it, and keeps saying so).
    let broken = shop.unposted_charge(Some("sub_gone")).await;
    let client = ProcessorClient::new().expect("client");
    let source = shop
        .store
        .payment_method(
            &AccountId::from_stored(shop.account_id.clone()),
            &shop.method,
        )
        .await
        .expect("db")
        .expect("method")
        .processor_payment_source_id;
    let posted = client
        .create_transaction(
            &shop.direct,
            &billing::processor::client::NewTransaction {
                amount_in_cents: broken.amount_cents,
                currency: "COP".into(),
                reference: broken.reference.clone(),
                payment_source_id: source,
                customer_email: "ana@example.co".into(),
            },
        )
        .await;
    assert!(posted.transaction().is_some(), "{posted:?}");
    // Then one that was never posted: the reconciler must get to it.
    let orphan = shop.unposted_charge(None).await;
    eventually(Duration::from_secs(45), || async {
        shop.charge(&orphan.id).await.status == "approved"
    })
    .await;
    assert_eq!(shop.charge(&broken.id).await.status, "pending");
    let recheck = shop
        .store
        .charge_recheck(&broken.id)
        .await
        .expect("db")
        .expect("the failing charge is asked about again later");
    assert!(recheck.attempts >= 1);
}

async fn a_checkout_paid_while_the_processor_rate_limits_is_posted_again_and_completes(
    app: TestApp,
) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let body = json!({"plan_id": shop.plan, "cycle": "monthly",
        "customer": {"email": "ana@example.co", "name": "Ana Gómez"}});
    let session = shop
        .call(&app, Method::POST, "/v1/checkout-sessions", body)
        .await;
    let id = session["id"].as_str().expect("id");
    let (token, acceptance) = shop.card_token(APPROVED_CARD).await;
    shop.proxy.fail("POST", "/transactions", rate_limited(), 1);
    // The page's request waits for the outcome, asking the processor itself meanwhile.
    let (status, out) = read(
        app.client
            .post(app.url(&format!("/checkout/{id}/complete")))
            .json(&json!({"card_token": token, "acceptance_token": acceptance}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "a 429 is not a decline: {out}");
    assert_eq!(out["status"], "complete");
    let references = shop.posted_references();
    assert_eq!(
        references.len(),
        2,
        "the 429, then the post after the lookup"
    );
    assert_eq!(references[0], references[1]);
    assert_eq!(shop.charge(&references[0]).await.status, "approved");
    assert_eq!(shop.balance(&app).await, (TOP_UP - FEE, 0));
}
