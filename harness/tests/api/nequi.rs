//! Nequi end to end through the API and the in-process sandbox: a payment method from an
//! approved Nequi token, a subscription that renews on it, card-on-file flags as the processor
//! records them (`recurrent` true for the schedule's charges, false for charge-now), and a
//! Nequi refund, which is total only. Also: both acceptances are required for any payment
//! method.

use crate::common::{TestApp, card_token, eventually, read};
use crate::refunds::{charges, refund, settled};
use crate::subscriptions::advance;
use billing::ids::AccountId;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    config = crate::nequi::quick_nequi;
    a_nequi_subscription_renews_on_its_source_and_refunds_in_full_only,
    a_declined_nequi_token_makes_no_payment_method,
    a_payment_method_needs_both_acceptances_and_one_token_of_its_type,
);

/// The customer "accepts in the Nequi app" after 300 ms instead of 5 s.
pub(crate) fn quick_nequi(config: &mut billing::config::Config) {
    config.sandbox.nequi_approval_delay = Duration::from_millis(300);
}

const APPROVES: &str = "3991111111";
const DECLINES: &str = "3992222222";
const DAY: i64 = 86_400;

/// The account's keys at the in-process sandbox: (public key, private key).
async fn keys(app: &TestApp) -> (String, String) {
    let store = billing::store::Store::connect(&app.database_url)
        .await
        .expect("store");
    let account = store
        .account(&AccountId::parse(&app.account_id).expect("an account's id"))
        .await
        .expect("db")
        .expect("account");
    (
        account.processor_public_key,
        account.processor_private_key.expose().to_owned(),
    )
}

/// A Nequi token for `phone`, asked for and polled as a browser does, until it is final;
/// with both acceptance tokens: the body of a payment method, and the token's status.
async fn nequi(app: &TestApp, phone: &str) -> (Value, String) {
    let sandbox = app.url("/sandbox/processor/v1");
    let (public, _) = keys(app).await;
    let info: Value = app
        .client
        .get(format!("{sandbox}/merchants/info"))
        .header("x-merchant-public-key", &public)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let (status, token) = read(
        app.client
            .post(format!("{sandbox}/tokens/nequi"))
            .bearer_auth(&public)
            .json(&json!({"phone_number": phone}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{token}");
    assert_eq!(token["data"]["status"], "PENDING");
    let id = token["data"]["id"].as_str().expect("id").to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let (_, token) = read(
            app.client
                .get(format!("{sandbox}/tokens/nequi/{id}"))
                .bearer_auth(&public)
                .send()
                .await
                .expect("send"),
        )
        .await;
        let status = token["data"]["status"].as_str().unwrap_or("").to_owned();
        if status != "PENDING" {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still pending: {token}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let data = &info["data"];
    let body = json!({"type": "nequi", "nequi_token": id,
        "acceptance_token": data["presigned_acceptance"]["acceptance_token"],
        "accept_personal_auth": data["presigned_personal_data_auth"]["acceptance_token"]});
    (body, status)
}

async fn customer(app: &TestApp) -> String {
    let (status, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": "nequi@example.co", "name": "Nequi User"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{customer}");
    customer["id"].as_str().expect("id").to_owned()
}

/// Whether the processor recorded the charge's transaction as `recurrent`.
async fn recurrent_at_processor(app: &TestApp, charge_id: &str) -> bool {
    let store = billing::store::Store::connect(&app.database_url)
        .await
        .expect("store");
    let transaction = store
        .charge_by_id(&billing::ids::ChargeAttemptId::parse(charge_id).expect("a charge\'s id"))
        .await
        .expect("db")
        .expect("charge")
        .processor_transaction_id
        .expect("a transaction");
    let (_, private) = keys(app).await;
    let (status, body) = read(
        app.client
            .get(app.url(&format!("/sandbox/processor/v1/transactions/{transaction}")))
            .bearer_auth(private)
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["payment_method_type"], "NEQUI");
    body["data"]["recurrent"]
        .as_bool()
        .expect("recurrent recorded")
}

async fn a_nequi_subscription_renews_on_its_source_and_refunds_in_full_only(app: TestApp) {
    let customer = customer(&app).await;
    let (body, status) = nequi(&app, APPROVES).await;
    assert_eq!(status, "APPROVED");
    let (status, method) = read(
        app.post(&format!("/v1/customers/{customer}/payment-methods"), body)
            .await,
    )
    .await;
    assert_eq!(status, 201, "{method}");
    assert_eq!(method["type"], "nequi");
    assert_eq!(method["last4"], "1111");
    assert!(method["brand"].is_null());
    let plan = app.create_plan("Nequi plan", 2_000_000, 20_000_000).await;
    app.top_up(10_000_000).await;
    let (status, sub) = read(
        app.post(
            "/v1/subscriptions",
            json!({"customer_id": customer, "plan_id": plan["id"], "cycle": "monthly",
                "payment_method_id": method["id"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{sub}");
    assert_eq!(sub["status"], "active");
    let sub_id = sub["id"].as_str().expect("id").to_owned();
    let query = format!("subscription_id={sub_id}&status=approved");
    let first = charges(&app, &query).await.0;
    assert_eq!(first.len(), 1);
    assert!(recurrent_at_processor(&app, first[0]["id"].as_str().expect("id")).await);

    // A month later the renewal charges the Nequi source, as credential-on-file.
    advance(&app, 31 * DAY).await;
    eventually(Duration::from_secs(20), || async {
        charges(&app, &query).await.0.len() == 2
    })
    .await;
    let renewal = charges(&app, &query).await.0[0].clone();
    assert_eq!(renewal["purpose"], "renewal");
    let renewal_id = renewal["id"].as_str().expect("id").to_owned();
    assert!(recurrent_at_processor(&app, &renewal_id).await);
    // charge-now is a one-off: not recurrent.
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{sub_id}/charge-now"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let manual = charges(&app, &query).await.0[0].clone();
    assert_eq!(manual["purpose"], "manual");
    assert!(!recurrent_at_processor(&app, manual["id"].as_str().expect("id")).await);

    // Nequi refunds are total: a partial one is refused and leaves no trace.
    let (status, refused) = refund(&app, &renewal_id, json!({"amount_cents": 1_000})).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["type"], "processor_error");
    let (_, listed) = read(app.get(&format!("/v1/charges/{renewal_id}/refunds")).await).await;
    assert_eq!(
        listed["data"],
        json!([]),
        "a refused refund leaves no trace"
    );
    let (status, whole) = refund(&app, &renewal_id, json!({})).await;
    assert_eq!(status, 201, "{whole}");
    let done = settled(&app, whole["id"].as_str().expect("id")).await;
    assert_eq!(done["status"], "approved", "{done}");
    assert_eq!(done["amount_cents"], 2_000_000);
}

async fn a_declined_nequi_token_makes_no_payment_method(app: TestApp) {
    let customer = customer(&app).await;
    let (body, status) = nequi(&app, DECLINES).await;
    assert_eq!(status, "DECLINED", "the customer refused in the Nequi app");
    let path = format!("/v1/customers/{customer}/payment-methods");
    let (status, refused) = read(app.post(&path, body).await).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["type"], "processor_error");
    let (_, listed) = read(app.get(&path).await).await;
    assert_eq!(listed["data"], json!([]));
}

async fn a_payment_method_needs_both_acceptances_and_one_token_of_its_type(app: TestApp) {
    let customer = customer(&app).await;
    let path = format!("/v1/customers/{customer}/payment-methods");
    let card = card_token(&app, "4242424242424242").await.payment_method();
    for (missing, param) in [
        ("accept_personal_auth", "accept_personal_auth"),
        ("acceptance_token", "acceptance_token"),
        ("card_token", "card_token"),
    ] {
        let mut body = card.clone();
        body.as_object_mut().expect("object").remove(missing);
        let (status, error) = read(app.post(&path, body).await).await;
        assert_eq!(status, 400, "without {missing}: {error}");
        assert_eq!(error["error"]["param"], param);
    }
    let mut mixed = card.clone();
    mixed["type"] = json!("nequi");
    let (status, error) = read(app.post(&path, mixed).await).await;
    assert_eq!(status, 400, "a card token with type nequi: {error}");
    assert_eq!(error["error"]["param"], "card_token");
    let (status, method) = read(app.post(&path, card).await).await;
    assert_eq!(status, 201, "{method}");
    assert_eq!(method["type"], "card");
    assert_eq!(method["brand"], "VISA");
    assert_eq!(method["last4"], "4242");
}
