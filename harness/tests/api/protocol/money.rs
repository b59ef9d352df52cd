//! Money going back, in-process and standalone: refunds (total, partial, never more than is
//! left, Nequi whole only, declined for the 5126 test card, found by id and by transaction)
//! and voids (a card transaction of the same day, before any refund; never Nequi).

use super::sandbox::{BOUND, Key, Merchant, Sandbox, assert_invalid, both_sandboxes};
use crate::common::eventually;
use crate::common::receiver::{Receiver, Reply};
use serde_json::{Value, json};

both_sandboxes!(
    refunds_take_at_most_what_is_left_and_settle,
    a_refund_of_the_5126_card_is_declined_and_gives_the_amount_back,
    a_nequi_transaction_is_refunded_whole_only,
    a_refund_needs_an_approved_transaction_of_ones_own,
    a_card_transaction_is_voided_the_same_day_and_then_not_refunded,
    a_nequi_or_refunded_transaction_is_not_voided,
);

/// `POST refunds` of `amount_in_cents` from `transaction`.
async fn refund(merchant: &Merchant, transaction: &Value, amount_in_cents: i64) -> (u16, Value) {
    merchant
        .post(
            "/refunds",
            Key::Private,
            json!({"transaction_id": transaction["id"], "amount_in_cents": amount_in_cents,
                "reason": "Cliente insatisfecho"}),
        )
        .await
}

/// A refund made (201): its `data`.
async fn refunded(merchant: &Merchant, transaction: &Value, amount_in_cents: i64) -> Value {
    let (status, body) = refund(merchant, transaction, amount_in_cents).await;
    assert_eq!(status, 201, "{body}");
    body["data"].clone()
}

fn id(object: &Value) -> &str {
    object["id"].as_str().expect("id")
}

async fn refunds_take_at_most_what_is_left_and_settle(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let source = merchant.card_source("4242424242424242").await;
    let tx = merchant
        .settled_transaction(source, "to-refund", 10_000)
        .await;
    assert_eq!(tx["status"], "APPROVED");

    let partial = refunded(&merchant, &tx, 3_000).await;
    assert_eq!(partial["status"], "PENDING");
    assert_eq!(partial["transaction_id"], tx["id"]);
    assert_eq!(partial["amount_in_cents"], 3_000);
    assert_eq!(partial["reason"], "Cliente insatisfecho");
    assert!(partial["created_at"].is_string(), "{partial}");
    // A pending refund already counts against what is left.
    for too_much in [7_001, 0] {
        assert_invalid(refund(&merchant, &tx, too_much).await, "amount_in_cents");
    }
    let rest = refunded(&merchant, &tx, 7_000).await;
    assert_invalid(refund(&merchant, &tx, 1).await, "amount_in_cents");

    for made in [&partial, &rest] {
        let settled = merchant
            .when_final(&format!("/refunds/{}", id(made)), "PENDING")
            .await;
        assert_eq!(settled["status"], "APPROVED", "{settled}");
        assert_eq!(settled["amount_in_cents"], made["amount_in_cents"]);
    }
    let (status, listed) = merchant
        .get(
            &format!("/refunds?transaction_id={}", id(&tx)),
            Key::Private,
        )
        .await;
    assert_eq!(status, 200, "{listed}");
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .expect("list")
        .iter()
        .map(id)
        .collect();
    assert_eq!(ids, [id(&partial), id(&rest)]);
}

async fn a_refund_of_the_5126_card_is_declined_and_gives_the_amount_back(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let source = merchant.card_source("4000000000005126").await;
    let tx = merchant
        .settled_transaction(source, "refund-fails", 10_000)
        .await;
    assert_eq!(tx["status"], "APPROVED", "the card's charges are approved");
    let whole = refunded(&merchant, &tx, 10_000).await;
    let settled = merchant
        .when_final(&format!("/refunds/{}", id(&whole)), "PENDING")
        .await;
    assert_eq!(settled["status"], "DECLINED");
    // A declined refund took nothing: the whole amount may be asked for again.
    let again = refunded(&merchant, &tx, 10_000).await;
    assert_eq!(again["status"], "PENDING");
}

async fn a_nequi_transaction_is_refunded_whole_only(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let source = merchant.nequi_source("3991111111").await;
    let tx = merchant
        .settled_transaction(source, "nequi-refund", 10_000)
        .await;
    assert_eq!(tx["status"], "APPROVED");
    assert_invalid(refund(&merchant, &tx, 4_000).await, "amount_in_cents");
    let whole = refunded(&merchant, &tx, 10_000).await;
    let settled = merchant
        .when_final(&format!("/refunds/{}", id(&whole)), "PENDING")
        .await;
    assert_eq!(settled["status"], "APPROVED");
}

async fn a_refund_needs_an_approved_transaction_of_ones_own(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let declined = merchant.card_source("4111111111111111").await;
    let tx = merchant
        .settled_transaction(declined, "declined", 10_000)
        .await;
    assert_eq!(tx["status"], "DECLINED");
    assert_invalid(refund(&merchant, &tx, 10_000).await, "transaction_id");
    let approved = merchant.card_source("4242424242424242").await;
    let (_, pending) = merchant
        .transaction(approved, "still-pending", 10_000, json!({}))
        .await;
    assert_invalid(
        refund(&merchant, &pending["data"], 10_000).await,
        "transaction_id",
    );

    let tx = merchant.settled_transaction(approved, "mine", 10_000).await;
    let no_amount = json!({"transaction_id": tx["id"]});
    assert_invalid(
        merchant.post("/refunds", Key::Private, no_amount).await,
        "body",
    );
    let mine = refunded(&merchant, &tx, 1_000).await;
    let other = sandbox.merchant(None).await;
    let (status, body) = refund(&other, &tx, 1_000).await;
    assert_eq!(status, 404, "another merchant's transaction: {body}");
    let (status, body) = other
        .get(&format!("/refunds/{}", id(&mine)), Key::Private)
        .await;
    assert_eq!(status, 404, "another merchant's refund: {body}");
    let (status, listed) = other
        .get(
            &format!("/refunds?transaction_id={}", id(&tx)),
            Key::Private,
        )
        .await;
    assert_eq!((status, &listed["data"]), (200, &json!([])), "{listed}");
    let (status, _) = merchant
        .get(&format!("/refunds/{}", id(&mine)), Key::Public)
        .await;
    assert_eq!(status, 401, "refunds take the private key");
}

async fn a_card_transaction_is_voided_the_same_day_and_then_not_refunded(sandbox: Sandbox) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let merchant = sandbox.merchant(Some(&receiver.url)).await;
    let source = merchant.card_source("4242424242424242").await;
    let tx = merchant
        .settled_transaction(source, "to-void", 10_000)
        .await;
    assert_eq!(tx["status"], "APPROVED");
    eventually(BOUND, || async { receiver.count() == 1 }).await;

    let path = format!("/transactions/{}/void", id(&tx));
    let other = sandbox.merchant(None).await;
    let (status, _) = other.post(&path, Key::Private, json!({})).await;
    assert_eq!(status, 404, "another merchant's transaction");
    let (status, voided) = merchant.post(&path, Key::Private, json!({})).await;
    assert_eq!(status, 200, "{voided}");
    assert_eq!(voided["data"]["transaction"]["id"], tx["id"]);
    assert_eq!(voided["data"]["transaction"]["status"], "VOIDED");
    let (_, read) = merchant
        .get(&format!("/transactions/{}", id(&tx)), Key::Private)
        .await;
    assert_eq!(read["data"]["status"], "VOIDED");

    eventually(BOUND, || async { receiver.count() == 2 }).await;
    let event: Value = serde_json::from_slice(&receiver.received()[1].body).expect("json");
    assert_eq!(event["event"], "transaction.updated");
    assert_eq!(event["data"]["transaction"]["status"], "VOIDED");
    let checksum = event["signature"]["checksum"].as_str().expect("checksum");
    assert!(billing::processor::signature::checksum_matches(
        &event,
        checksum,
        &merchant.events_secret
    ));

    assert_invalid(refund(&merchant, &tx, 10_000).await, "transaction_id");
    let (status, _) = merchant.post(&path, Key::Private, json!({})).await;
    assert_eq!(status, 422, "voided once");
}

async fn a_nequi_or_refunded_transaction_is_not_voided(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let nequi = merchant.nequi_source("3991111111").await;
    let tx = merchant
        .settled_transaction(nequi, "nequi-void", 10_000)
        .await;
    assert_eq!(tx["status"], "APPROVED");
    let (status, body) = merchant
        .post(
            &format!("/transactions/{}/void", id(&tx)),
            Key::Private,
            json!({}),
        )
        .await;
    assert_eq!(status, 422, "Nequi has no void: {body}");

    let card = merchant.card_source("4242424242424242").await;
    let tx = merchant
        .settled_transaction(card, "refunded-void", 10_000)
        .await;
    refunded(&merchant, &tx, 1_000).await;
    let (status, body) = merchant
        .post(
            &format!("/transactions/{}/void", id(&tx)),
            Key::Private,
            json!({}),
        )
        .await;
    assert_eq!(status, 422, "refunded already: {body}");
}
