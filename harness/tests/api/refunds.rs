//! Charges as integrators list them, and refunds through the sandbox processor: a refund
//! round trip in full and in part settles once with `charge.refunded`; the processor's
//! declines and refusals give nothing back and leave no trace; a charge can never be refunded
//! beyond what it took; our fee stays charged.

use crate::common::{TestApp, assert_invariants, card_token, read};
use crate::subscriptions::{events, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    charges_are_listed_by_subscription_customer_and_status_in_pages,
    a_full_refund_settles_once_with_its_event_and_keeps_the_fee,
    partial_refunds_add_up_to_at_most_the_charge,
    a_refund_the_processor_declines_gives_nothing_back,
    only_an_approved_charge_is_refunded,
);

/// The plan's monthly amount (`subscriptions::shop`).
const AMOUNT: i64 = 3_000_000;

pub(crate) async fn charges(app: &TestApp, query: &str) -> (Vec<Value>, bool) {
    let (status, page) = read(app.get(&format!("/v1/charges?{query}")).await).await;
    assert_eq!(status, 200, "{page}");
    (
        page["data"].as_array().expect("data").clone(),
        page["has_more"].as_bool().expect("has_more"),
    )
}

/// The id of the only charge of `subscription`.
async fn only_charge_id(app: &TestApp, subscription: &str) -> String {
    only_charge(app, subscription).await["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

/// The only charge of `subscription`.
async fn only_charge(app: &TestApp, subscription: &str) -> Value {
    let (list, _) = charges(app, &format!("subscription_id={subscription}")).await;
    assert_eq!(list.len(), 1, "{list:?}");
    list[0].clone()
}

pub(crate) async fn refund(app: &TestApp, charge: &str, body: Value) -> (u16, Value) {
    read(
        app.post(&format!("/v1/charges/{charge}/refunds"), body)
            .await,
    )
    .await
}

/// The refund once it is no longer pending.
pub(crate) async fn settled(app: &TestApp, id: &str) -> Value {
    settled_as(app, &app.api_key, id).await
}

/// The refund, read with the API key `key`, once it is no longer pending.
pub(crate) async fn settled_as(app: &TestApp, key: &str, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = app
            .client
            .get(app.url(&format!("/v1/refunds/{id}")))
            .bearer_auth(key)
            .send()
            .await
            .expect("send");
        let (status, refund) = read(response).await;
        assert_eq!(status, 200, "{refund}");
        if refund["status"] != "pending" {
            return refund;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refund is still pending: {refund}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn charge(app: &TestApp, id: &str) -> Value {
    let (status, charge) = read(app.get(&format!("/v1/charges/{id}")).await).await;
    assert_eq!(status, 200, "{charge}");
    charge
}

async fn available(app: &TestApp) -> i64 {
    let (_, balance) = read(app.get("/v1/balance").await).await;
    balance["available_cents"].as_i64().expect("available")
}

fn types(all: &[Value]) -> Vec<&str> {
    all.iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect()
}

async fn charges_are_listed_by_subscription_customer_and_status_in_pages(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let first = subscribe(&app, &shop, &method, json!({})).await;
    let second = subscribe(&app, &shop, &method, json!({})).await;
    let listed = only_charge(&app, first["id"].as_str().expect("id")).await;
    assert_eq!(listed["subscription_id"], first["id"]);
    assert_eq!(listed["customer_id"], shop.customer);
    assert_eq!(listed["amount_cents"], AMOUNT);
    assert_eq!(listed["currency"], "COP");
    assert_eq!(listed["status"], "approved");
    assert_eq!(listed["processor_status"], "APPROVED");
    assert_eq!(
        listed["purpose"], "renewal",
        "the first period's charge of a direct create"
    );
    assert_eq!(listed["fee_cents"], 45_000, "150 bps of 3,000,000");
    assert_eq!(listed["refunded_amount_cents"], 0);
    assert_eq!(listed["period_start"], first["current_period_start"]);
    assert_eq!(
        charge(&app, listed["id"].as_str().expect("id")).await,
        listed,
        "GET /v1/charges/{{id}} shows the listed charge"
    );

    let (all, more) = charges(&app, &format!("customer_id={}", shop.customer)).await;
    assert_eq!(all.len(), 2);
    assert!(!more);
    assert_eq!(all[0]["subscription_id"], second["id"], "newest first");
    let (page, more) = charges(&app, &format!("customer_id={}&limit=1", shop.customer)).await;
    assert!(more);
    let cursor = page[0]["id"].as_str().expect("id");
    let (rest, more) = charges(&app, &format!("limit=1&cursor={cursor}")).await;
    assert!(!more);
    assert_eq!(rest[0]["subscription_id"], first["id"]);
    assert!(charges(&app, "status=declined").await.0.is_empty());
    assert_eq!(charges(&app, "status=approved").await.0.len(), 2);
    let (status, body) = read(app.get("/v1/charges?status=refunded").await).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "status");
    let (status, _) = read(app.get("/v1/charges/ch_missing").await).await;
    assert_eq!(status, 404);
}

async fn a_full_refund_settles_once_with_its_event_and_keeps_the_fee(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = sub["id"].as_str().expect("id");
    let charge_id = only_charge_id(&app, sub_id).await;
    let balance = available(&app).await;

    let (status, created) =
        refund(&app, &charge_id, json!({"reason": "requested_by_customer"})).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["charge_id"], charge_id);
    assert_eq!(
        created["amount_cents"], AMOUNT,
        "the whole charge by default"
    );
    assert_eq!(created["reason"], "requested_by_customer");
    let done = settled(&app, created["id"].as_str().expect("id")).await;
    assert_eq!(done["status"], "approved", "{done}");

    let after = charge(&app, &charge_id).await;
    assert_eq!(after["refunded_amount_cents"], AMOUNT);
    assert_eq!(
        after["status"], "approved",
        "the charge itself stays approved"
    );
    assert_eq!(available(&app).await, balance, "our fee is not returned");
    let all = events(&app, sub_id).await;
    let refunded: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "charge.refunded")
        .collect();
    assert_eq!(refunded.len(), 1, "{:?}", types(&all));
    let data = &refunded[0]["data"];
    assert_eq!(data["refund_id"], done["id"]);
    assert_eq!(data["amount_in_cents"], AMOUNT);
    assert_eq!(data["charge_attempt_id"], charge_id);
    assert_eq!(data["subscription_id"], sub_id);
    assert_eq!(data["status"], "APPROVED");
    assert_eq!(data["metadata"], json!({"order": "A-1"}));

    let (status, again) = refund(&app, &charge_id, json!({})).await;
    assert_eq!(status, 400, "nothing is left to refund: {again}");
    let (status, listed) = read(app.get(&format!("/v1/charges/{charge_id}/refunds")).await).await;
    assert_eq!(status, 200);
    assert_eq!(listed["data"].as_array().expect("data").len(), 1);
    assert_invariants(&app).await;
}

async fn partial_refunds_add_up_to_at_most_the_charge(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let charge_id = only_charge_id(&app, sub["id"].as_str().expect("id")).await;
    let (status, first) = refund(&app, &charge_id, json!({"amount_cents": 1_000_000})).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(
        settled(&app, first["id"].as_str().expect("id")).await["status"],
        "approved"
    );

    let (status, over) = refund(&app, &charge_id, json!({"amount_cents": 2_000_001})).await;
    assert_eq!(status, 400, "{over}");
    assert_eq!(over["error"]["type"], "invalid_request");
    assert_eq!(over["error"]["param"], "amount_cents");
    for bad in [
        json!({"amount_cents": 0}),
        json!({"amount_cents": -5}),
        json!({"amount": 5}),
    ] {
        let (status, body) = refund(&app, &charge_id, bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    assert_eq!(
        charge(&app, &charge_id).await["refunded_amount_cents"],
        1_000_000,
        "refused requests change nothing"
    );

    let (status, rest) = refund(&app, &charge_id, json!({})).await;
    assert_eq!(status, 201, "{rest}");
    assert_eq!(rest["amount_cents"], 2_000_000, "by default what is left");
    assert_eq!(
        settled(&app, rest["id"].as_str().expect("id")).await["status"],
        "approved"
    );
    assert_eq!(
        charge(&app, &charge_id).await["refunded_amount_cents"],
        AMOUNT
    );
    let refunded = events(&app, sub["id"].as_str().expect("id"))
        .await
        .into_iter()
        .filter(|e| e["type"] == "charge.refunded")
        .map(|e| e["data"]["amount_in_cents"].as_i64().expect("amount"))
        .collect::<Vec<_>>();
    assert_eq!(refunded, vec![1_000_000, 2_000_000]);
    assert_invariants(&app).await;
}

/// Card 4000 0000 0000 5126 is approved, but the sandbox declines its refunds.
async fn a_refund_the_processor_declines_gives_nothing_back(app: TestApp) {
    let (shop, method) = shop(&app, "4000000000005126").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = sub["id"].as_str().expect("id");
    let charge_id = only_charge_id(&app, sub_id).await;
    let (status, created) = refund(&app, &charge_id, json!({"amount_cents": 500_000})).await;
    assert_eq!(status, 201, "{created}");
    let done = settled(&app, created["id"].as_str().expect("id")).await;
    assert_eq!(done["status"], "declined", "{done}");
    assert!(done["failure_message"].is_string(), "{done}");
    assert_eq!(charge(&app, &charge_id).await["refunded_amount_cents"], 0);
    assert!(
        !types(&events(&app, sub_id).await).contains(&"charge.refunded"),
        "no event for a refund that gave nothing back"
    );
    // Nothing is held: another refund may be asked for at once.
    let (status, again) = refund(&app, &charge_id, json!({})).await;
    assert_eq!(status, 201, "{again}");
    assert_eq!(again["amount_cents"], AMOUNT);
    assert_invariants(&app).await;
}

async fn only_an_approved_charge_is_refunded(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = sub["id"].as_str().expect("id");
    let declining = card_token(&app, "4111111111111111").await;
    let (status, other) = read(
        app.post(
            &format!("/v1/customers/{}/payment-methods", shop.customer),
            declining.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{other}");
    let (status, body) = read(
        app.request(Method::PATCH, &format!("/v1/subscriptions/{sub_id}"))
            .json(&json!({"default_payment_method_id": other["id"]}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{sub_id}/charge-now"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let (declined, _) = charges(&app, &format!("subscription_id={sub_id}&status=declined")).await;
    assert_eq!(declined.len(), 1);
    assert_eq!(declined[0]["purpose"], "manual");
    let (status, body) = refund(&app, declined[0]["id"].as_str().expect("id"), json!({})).await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = refund(&app, "ch_missing", json!({})).await;
    assert_eq!(status, 404);
}
