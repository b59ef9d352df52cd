//! Issue 3 through the running service: payment methods made at the in-process sandbox
//! processor, charges that settle through the real signed ingress, and fees applied once.

use crate::common::{TestApp, eventually, read};
use billing::charges::{ChargeError, ChargeRequest, Charger};
use billing::domain::charge_purpose::ChargePurpose;
use billing::domain::charge_status::ChargeStatus;
use billing::ids::AccountId;
use billing::processor::client::{CardDetails, ProcessorClient, ProcessorCredentials};
use billing::processor::signature::event_checksum;
use billing::store::Store;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    card_token_becomes_a_payment_method,
    charge_goes_pending_to_approved_through_the_ingress_with_the_fee_deducted,
    declined_charge_releases_the_reservation,
    fee_is_charged_once_however_often_the_outcome_arrives,
    concurrent_charges_never_overdraw_a_small_balance,
    ingress_answers,
);

const EVENTS_SECRET: &str = "test_events_given_secret";

/// An account whose processor keys the test knows, so it can sign events itself.
async fn known_keys_account(app: &TestApp) -> (String, String) {
    let response = app
        .admin(Method::POST, "/admin/accounts")
        .json(&json!({"name": "Keys", "sandbox": true, "processor": {
            "public_key": format!("pub_test_{}", uuid::Uuid::new_v4().simple()),
            "private_key": format!("prv_test_{}", uuid::Uuid::new_v4().simple()),
            "events_secret": EVENTS_SECRET, "integrity_secret": "test_integrity_given"}}))
        .send()
        .await
        .expect("send");
    let (status, body) = read(response).await;
    assert_eq!(status, 201, "{body}");
    (
        body["id"].as_str().expect("id").to_owned(),
        body["api_key"].as_str().expect("key").to_owned(),
    )
}

struct Fixture {
    account_id: String,
    key: String,
    customer_id: String,
}

impl Fixture {
    async fn new(app: &TestApp) -> Self {
        let (account_id, key) = known_keys_account(app).await;
        let customer = app
            .client
            .post(app.url("/v1/customers"))
            .bearer_auth(&key)
            .json(&json!({"email": "ana@example.co", "name": "Ana"}))
            .send()
            .await
            .expect("send");
        let customer: Value = customer.json().await.expect("json");
        Self {
            account_id,
            key,
            customer_id: customer["id"].as_str().expect("id").to_owned(),
        }
    }

    async fn credentials(&self, app: &TestApp) -> ProcessorCredentials {
        let account: Value = app
            .client
            .get(app.url("/v1/account"))
            .bearer_auth(&self.key)
            .send()
            .await
            .expect("send")
            .json()
            .await
            .expect("json");
        let store = Store::connect(&app.database_url).await.expect("store");
        let row = store
            .account(&AccountId::parse(&self.account_id).expect("an account's id"))
            .await
            .expect("db")
            .expect("account");
        ProcessorCredentials::new(
            account["processor"]["base_url"].as_str().expect("base"),
            row.processor_public_key,
            row.processor_private_key,
            row.processor_integrity_secret,
        )
        .expect("credentials")
    }

    /// Tokenizes `number` at the sandbox as a browser would, and attaches it.
    async fn payment_method(&self, app: &TestApp, number: &str) -> Value {
        let client = ProcessorClient::new().expect("client");
        let creds = self.credentials(app).await;
        let acceptance = client.acceptance_tokens(&creds).await.expect("acceptance");
        let card = CardDetails {
            number: number.to_owned(),
            cvc: "123".into(),
            exp_month: "08".into(),
            exp_year: "30".into(),
            card_holder: "Ana Gómez".into(),
        };
        let token = client.tokenize_card(&creds, &card).await.expect("token");
        let response = app
            .client
            .post(app.url(&format!(
                "/v1/customers/{}/payment-methods",
                self.customer_id
            )))
            .bearer_auth(&self.key)
            .json(&json!({"card_token": token.id, "acceptance_token": acceptance.acceptance_token, "accept_personal_auth": acceptance.personal_auth_token}))
            .send()
            .await
            .expect("send");
        let (status, body) = read(response).await;
        assert_eq!(status, 201, "{body}");
        body
    }

    async fn top_up(&self, app: &TestApp, amount: i64) {
        let response = app
            .admin(
                Method::POST,
                &format!("/admin/accounts/{}/balance/top-ups", self.account_id),
            )
            .json(&json!({"amount_cents": amount}))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 201);
    }

    async fn balance(&self, app: &TestApp) -> Value {
        app.client
            .get(app.url("/v1/balance"))
            .bearer_auth(&self.key)
            .send()
            .await
            .expect("send")
            .json()
            .await
            .expect("json")
    }

    async fn charger(&self, app: &TestApp) -> (Charger, Store, billing::store::accounts::Account) {
        let store = Store::connect(&app.database_url).await.expect("store");
        let account = store
            .account(&AccountId::parse(&self.account_id).expect("an account's id"))
            .await
            .expect("db")
            .expect("account");
        (
            Charger::new(
                store.clone(),
                ProcessorClient::new().expect("client"),
                app.base.clone(),
            ),
            store,
            account,
        )
    }

    fn request(&self, method: &Value, amount: i64) -> ChargeRequest {
        ChargeRequest {
            subscription_id: None,
            customer_id: billing::ids::CustomerId::parse(&self.customer_id).expect("an id"),
            payment_method_id: billing::ids::PaymentMethodId::parse(
                method["id"].as_str().expect("id"),
            )
            .expect("an id"),
            amount_cents: amount,
            purpose: ChargePurpose::Manual,
            period_start: None,
        }
    }
}

async fn wait_final(
    store: &Store,
    account: &str,
    charge_id: &str,
) -> billing::store::charges::ChargeAttempt {
    let account = AccountId::parse(account).expect("an account's id");
    let fetch = || async {
        store
            .charge(
                &account,
                &billing::ids::ChargeAttemptId::parse(charge_id).expect("a charge\'s id"),
            )
            .await
            .expect("db")
            .expect("charge")
    };
    eventually(Duration::from_secs(15), || async {
        fetch().await.status != ChargeStatus::Pending
    })
    .await;
    fetch().await
}

async fn card_token_becomes_a_payment_method(app: TestApp) {
    let fixture = Fixture::new(&app).await;
    let method = fixture.payment_method(&app, "4242 4242 4242 4242").await;
    assert!(
        method["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("pm_"))
    );
    assert_eq!(method["last4"], "4242");
    assert_eq!(method["brand"], "VISA");
    let list: Value = app
        .client
        .get(app.url(&format!(
            "/v1/customers/{}/payment-methods",
            fixture.customer_id
        )))
        .bearer_auth(&fixture.key)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(list["data"][0]["id"], method["id"]);

    // Adopting an existing payment source by id (a migration) works too.
    let adopt = app
        .client
        .post(app.url(&format!(
            "/v1/customers/{}/payment-methods",
            fixture.customer_id
        )))
        .bearer_auth(&fixture.key)
        .json(&json!({"processor_payment_source_id": method["processor_payment_source_id"]}))
        .send()
        .await
        .expect("send");
    assert_eq!(adopt.status(), 201);

    // A token the processor does not know: 422 processor_error with its message.
    let bad = app
        .client
        .post(app.url(&format!(
            "/v1/customers/{}/payment-methods",
            fixture.customer_id
        )))
        .bearer_auth(&fixture.key)
        .json(&json!({"card_token": "tok_bogus", "acceptance_token": "acc_bogus", "accept_personal_auth": "acc_bogus_pd"}))
        .send()
        .await
        .expect("send");
    let (status, body) = read(bad).await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["type"], "processor_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("acceptance_token"))
    );
}

async fn charge_goes_pending_to_approved_through_the_ingress_with_the_fee_deducted(app: TestApp) {
    let fixture = Fixture::new(&app).await;
    let method = fixture.payment_method(&app, "4242424242424242").await;
    fixture.top_up(&app, 100_000).await;
    let (charger, store, account) = fixture.charger(&app).await;

    let charge = charger
        .charge(&account, fixture.request(&method, 4_990_000))
        .await
        .expect("charge");
    assert_eq!(
        charge.status,
        ChargeStatus::Pending,
        "the processor answers 201 PENDING"
    );
    assert_eq!(charge.fee_cents, 74_850, "150 bps of 4,990,000");
    let balance = fixture.balance(&app).await;
    assert_eq!(
        (
            balance["available_cents"].as_i64(),
            balance["reserved_cents"].as_i64()
        ),
        (Some(25_150), Some(74_850))
    );

    let settled = wait_final(&store, &fixture.account_id, charge.id.as_str()).await;
    assert_eq!(settled.status, ChargeStatus::Approved);
    assert_eq!(settled.processor_status.as_deref(), Some("APPROVED"));
    assert!(settled.processor_transaction_id.is_some());
    let balance = fixture.balance(&app).await;
    assert_eq!(
        (
            balance["available_cents"].as_i64(),
            balance["reserved_cents"].as_i64()
        ),
        (Some(25_150), Some(0))
    );
    assert_eq!(
        store
            .count_processor_events(
                &AccountId::parse(&fixture.account_id).expect("an account's id")
            )
            .await
            .expect("db"),
        1,
        "the outcome came through the signed ingress"
    );
    let ledger: Value = app
        .client
        .get(app.url("/v1/balance/transactions"))
        .bearer_auth(&fixture.key)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(ledger["data"][0]["type"], "fee");
    assert_eq!(ledger["data"][0]["amount_cents"], -74_850);
    assert_eq!(ledger["data"][0]["charge_attempt_id"], charge.id.as_str());
}

async fn declined_charge_releases_the_reservation(app: TestApp) {
    let fixture = Fixture::new(&app).await;
    let method = fixture.payment_method(&app, "4111111111111111").await;
    fixture.top_up(&app, 10_000).await;
    let (charger, store, account) = fixture.charger(&app).await;
    let charge = charger
        .charge(&account, fixture.request(&method, 100_000))
        .await
        .expect("charge");
    let settled = wait_final(&store, &fixture.account_id, charge.id.as_str()).await;
    assert_eq!(settled.status, ChargeStatus::Declined);
    assert_eq!(settled.processor_status.as_deref(), Some("DECLINED"));
    let balance = fixture.balance(&app).await;
    assert_eq!(
        (
            balance["available_cents"].as_i64(),
            balance["reserved_cents"].as_i64()
        ),
        (Some(10_000), Some(0))
    );

    // Too little balance for the fee: refused before any processor call, nothing recorded.
    let error = charger
        .charge(&account, fixture.request(&method, 1_000_000_000))
        .await;
    assert!(matches!(error, Err(ChargeError::InsufficientBalance)));
}

fn signed_event(transaction: Value, timestamp: i64) -> Value {
    let mut event = json!({
        "event": "transaction.updated",
        "data": {"transaction": transaction},
        "environment": "test",
        "signature": {"properties": ["transaction.id", "transaction.status", "transaction.amount_in_cents"]},
        "timestamp": timestamp,
    });
    event["signature"]["checksum"] =
        json!(event_checksum(&event, EVENTS_SECRET).expect("checksum"));
    event
}

async fn fee_is_charged_once_however_often_the_outcome_arrives(app: TestApp) {
    let fixture = Fixture::new(&app).await;
    let method = fixture.payment_method(&app, "4242424242424242").await;
    fixture.top_up(&app, 100_000).await;
    let (charger, store, account) = fixture.charger(&app).await;
    let charge = charger
        .charge(&account, fixture.request(&method, 1_000_000))
        .await
        .expect("charge");
    let settled = wait_final(&store, &fixture.account_id, charge.id.as_str()).await;
    let transaction = json!({"id": settled.processor_transaction_id, "status": "APPROVED",
        "amount_in_cents": 1_000_000, "reference": settled.reference});
    // The same event twice, and two more copies with other timestamps (other checksums).
    let ingress = app.url(&format!("/webhooks/processor/{}", fixture.account_id));
    for timestamp in [1, 1, 2, 3] {
        let response = app
            .client
            .post(&ingress)
            .json(&signed_event(transaction.clone(), timestamp))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 200);
    }
    // And a poll of the processor, concurrently with one more event.
    let (poll, _) = tokio::join!(
        charger.poll(&account, &settled),
        app.client
            .post(&ingress)
            .json(&signed_event(transaction.clone(), 4))
            .send()
    );
    poll.expect("poll");
    let balance = fixture.balance(&app).await;
    assert_eq!(
        balance["available_cents"],
        100_000 - 15_000,
        "one fee of 150 bps of 1,000,000"
    );
    let ledger: Value = app
        .client
        .get(app.url("/v1/balance/transactions"))
        .bearer_auth(&fixture.key)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let fees = ledger["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter(|row| row["type"] == "fee")
        .count();
    assert_eq!(fees, 1);
}

async fn concurrent_charges_never_overdraw_a_small_balance(app: TestApp) {
    let fixture = Fixture::new(&app).await;
    let method = fixture.payment_method(&app, "4242424242424242").await;
    // Room for exactly three fees of 1,500 cents.
    fixture.top_up(&app, 4_500).await;
    let (charger, store, account) = fixture.charger(&app).await;
    let attempts = (0..10).map(|_| charger.charge(&account, fixture.request(&method, 100_000)));
    let results = futures::future::join_all(attempts).await;
    let started: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(ChargeError::InsufficientBalance)))
        .count();
    assert_eq!((started.len(), refused), (3, 7));
    for charge in &started {
        assert_eq!(
            wait_final(&store, &fixture.account_id, charge.id.as_str())
                .await
                .status,
            ChargeStatus::Approved
        );
    }
    let balance = fixture.balance(&app).await;
    assert_eq!(
        (
            balance["available_cents"].as_i64(),
            balance["reserved_cents"].as_i64()
        ),
        (Some(0), Some(0))
    );
}

async fn ingress_answers(app: TestApp) {
    let fixture = Fixture::new(&app).await;
    let ingress = app.url(&format!("/webhooks/processor/{}", fixture.account_id));
    let transaction = json!({"id": "1-1-1", "status": "APPROVED", "amount_in_cents": 5000, "reference": "ch_unknown"});
    let event = signed_event(transaction, 1_530_291_411);

    let ok = app
        .client
        .post(&ingress)
        .json(&event)
        .send()
        .await
        .expect("send");
    let (status, body) = read(ok).await;
    assert_eq!((status, body["first_delivery"].clone()), (200, json!(true)));
    let repeat = app
        .client
        .post(&ingress)
        .json(&event)
        .send()
        .await
        .expect("send");
    let (status, body) = read(repeat).await;
    assert_eq!(
        (status, body["first_delivery"].clone()),
        (200, json!(false)),
        "a duplicate changes nothing"
    );

    let mut forged = event.clone();
    forged["data"]["transaction"]["amount_in_cents"] = json!(1);
    assert_eq!(
        app.client
            .post(&ingress)
            .json(&forged)
            .send()
            .await
            .expect("send")
            .status(),
        401
    );
    let mut unsigned = event.clone();
    unsigned.as_object_mut().map(|o| o.remove("signature"));
    assert_eq!(
        app.client
            .post(&ingress)
            .json(&unsigned)
            .send()
            .await
            .expect("send")
            .status(),
        401
    );
    let wrong_header = app
        .client
        .post(&ingress)
        .header("X-Event-Checksum", "00")
        .json(&event)
        .send()
        .await
        .expect("send");
    assert_eq!(wrong_header.status(), 401);
    let upper = app
        .client
        .post(&ingress)
        .header(
            "X-Event-Checksum",
            event["signature"]["checksum"]
                .as_str()
                .expect("c")
                .to_uppercase(),
        )
        .json(&event)
        .send()
        .await
        .expect("send");
    assert_eq!(upper.status(), 200, "checksums compare case-insensitively");

    assert_eq!(
        app.client
            .post(&ingress)
            .body("{not json")
            .send()
            .await
            .expect("send")
            .status(),
        400
    );
    let huge = format!("{{\"pad\": \"{}\"}}", "x".repeat(70_000));
    let (status, body) = read(
        app.client
            .post(&ingress)
            .body(huge)
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["type"], "invalid_request");

    // A storage failure answers 500, so that the processor retries.
    {
        use sea_orm::{ConnectionTrait, Database};
        let db = Database::connect(&app.database_url).await.expect("db");
        db.execute_unprepared("DROP TABLE processor_events")
            .await
            .expect("drop");
    }
    let fresh = signed_event(
        json!({"id": "2-2-2", "status": "APPROVED", "amount_in_cents": 1, "reference": "x"}),
        7,
    );
    assert_eq!(
        app.client
            .post(&ingress)
            .json(&fresh)
            .send()
            .await
            .expect("send")
            .status(),
        500
    );
}
