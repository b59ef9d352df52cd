//! Issue 47's dunning that reads the decline (CONTRACT §15's guidance), through HTTP with the
//! sandbox processor's test cards (`docs/payments.md`): a hard decline is charged once, never
//! retried on that card, and canceled on the schedule's last day; a soft decline keeps the
//! 1, 3, 5, 7 schedule; a new card on a hard-declined past-due subscription is charged at
//! once; the card network's reattempt limit stops a retry before the processor sees it, and
//! lets the last attempt it allows through.

use crate::common::{TestApp, eventually, read, sandbox_processor};
use crate::subscriptions::{advance, card_token, get, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    a_hard_declined_card_is_charged_once_and_canceled_on_the_schedules_last_day,
    a_soft_decline_keeps_the_retry_schedule,
    a_new_card_on_a_hard_declined_subscription_is_charged_at_once,
    the_visa_limit_stops_a_retry_before_the_processor_sees_it,
    the_last_attempt_a_limit_allows_is_sent_and_no_more,
);

const DAY: i64 = 86_400;
/// Stolen: a hard decline.
const STOLEN: &str = "4000000000009979";
/// Lost: a hard decline.
const LOST: &str = "4000000000009987";
/// Insufficient funds: a soft decline.
const NO_FUNDS: &str = "4000000000009995";

/// The subscription's charges, oldest first.
async fn charges(app: &TestApp, id: &str) -> Vec<Value> {
    let (status, page) = read(
        app.get(&format!("/v1/charges?subscription_id={id}&limit=100"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let mut charges = page["data"].as_array().expect("data").clone();
    charges.sort_by_key(|c| c["created_at"].as_str().map(str::to_owned));
    charges
}

async fn a_hard_declined_card_is_charged_once_and_canceled_on_the_schedules_last_day(app: TestApp) {
    let (shop, method) = shop(&app, STOLEN).await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 60).await;
    let failed = get(&app, &id).await;
    assert_eq!(
        (failed["status"].clone(), failed["failed_attempts"].clone()),
        (json!("past_due"), json!(1)),
        "{failed}"
    );
    let first = charges(&app, &id).await;
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0]["status"].clone(), first[0]["decline_code"].clone()),
        (json!("declined"), json!("stolen_card"))
    );
    // Days 1, 3 and 5 pass without a retry, and the subscription stays past due.
    for day in [1, 3, 5] {
        advance(&app, if day == 1 { DAY } else { 2 * DAY }).await;
        let now = get(&app, &id).await;
        assert_eq!(
            (now["status"].clone(), now["failed_attempts"].clone()),
            (json!("past_due"), json!(1)),
            "day {day}: {now}"
        );
        assert_eq!(charges(&app, &id).await.len(), 1, "day {day}: no retry");
    }
    // Day 7, the normal schedule's last: canceled, unpaid, without a new attempt.
    advance(&app, 2 * DAY).await;
    let canceled = get(&app, &id).await;
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    assert_eq!(charges(&app, &id).await.len(), 1, "charged once, ever");
    let kinds: Vec<Value> = crate::subscriptions::events(&app, &id)
        .await
        .iter()
        .map(|e| e["type"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            "subscription.created",
            "charge.declined",
            "subscription.past_due",
            "subscription.canceled"
        ]
    );
    crate::common::assert_invariants(&app).await;
}

async fn a_soft_decline_keeps_the_retry_schedule(app: TestApp) {
    let (shop, method) = shop(&app, NO_FUNDS).await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 60).await;
    assert_eq!(get(&app, &id).await["failed_attempts"], 1);
    for (day, attempts) in [(1, 2), (3, 3), (5, 4)] {
        advance(&app, if day == 1 { DAY } else { 2 * DAY }).await;
        let now = get(&app, &id).await;
        assert_eq!(
            (now["status"].clone(), now["failed_attempts"].clone()),
            (json!("past_due"), json!(attempts)),
            "day {day}"
        );
    }
    advance(&app, 2 * DAY).await;
    assert_eq!(get(&app, &id).await["status"], "canceled");
    let all = charges(&app, &id).await;
    assert_eq!(all.len(), 5, "the first charge and four retries");
    for charge in &all {
        assert_eq!(
            (
                charge["processor_status"].clone(),
                charge["decline_code"].clone()
            ),
            (json!("DECLINED"), json!("insufficient_funds"))
        );
    }
    crate::common::assert_invariants(&app).await;
}

async fn a_new_card_on_a_hard_declined_subscription_is_charged_at_once(app: TestApp) {
    let (shop, lost) = shop(&app, LOST).await;
    let id = subscribe(&app, &shop, &lost, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 60).await;
    assert_eq!(get(&app, &id).await["status"], "past_due");
    assert_eq!(charges(&app, &id).await[0]["decline_code"], "lost_card");
    let token = card_token(&app, "4242424242424242").await;
    let (status, good) = read(
        app.post(
            &format!("/v1/customers/{}/payment-methods", shop.customer),
            token.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{good}");
    let patch = app
        .request(Method::PATCH, &format!("/v1/subscriptions/{id}"))
        .json(&json!({"default_payment_method_id": good["id"]}));
    assert_eq!(patch.send().await.expect("send").status(), 200);
    // No clock advance: the new card is charged at once, and the subscription is active.
    eventually(Duration::from_secs(20), || async {
        get(&app, &id).await["status"] == "active"
    })
    .await;
    let sub = get(&app, &id).await;
    assert_eq!(sub["failed_attempts"], 0);
    let all = charges(&app, &id).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1]["status"], "approved");
    assert_eq!(sub["next_charge_date"], sub["current_period_end"]);
    crate::common::assert_invariants(&app).await;
}

/// Twenty subscriptions on one Visa card, each declined once (twenty attempts of one amount
/// in 30 days); their first retries a day later would be the twenty-first: each is recorded
/// declined `network_limit`, never sent (the sandbox has no transaction of its reference), and
/// the schedule goes on.
async fn the_visa_limit_stops_a_retry_before_the_processor_sees_it(app: TestApp) {
    let ids = declined_once_then_retried(&app, 20).await;
    let (client, creds) = sandbox_processor(&app).await;
    for id in &ids {
        let sub = get(&app, id).await;
        assert_eq!(sub["status"], "past_due", "{sub}");
        let all = charges(&app, id).await;
        assert_eq!(all.len(), 2, "{all:?}");
        let retry = &all[1];
        assert_eq!(
            (
                retry["status"].clone(),
                retry["decline_code"].clone(),
                retry["processor_status"].clone(),
                retry["fee_cents"].clone()
            ),
            (
                json!("declined"),
                json!("network_limit"),
                Value::Null,
                json!(0)
            ),
            "{retry}"
        );
        let reference = retry["id"].as_str().expect("id");
        let found = client
            .find_transaction_by_reference(&creds, reference)
            .await
            .expect("the sandbox answers");
        assert!(found.is_none(), "the processor never saw {reference}");
        let first = all[0]["id"].as_str().expect("id");
        let found = client
            .find_transaction_by_reference(&creds, first)
            .await
            .expect("the sandbox answers");
        assert!(found.is_some(), "the first charge was sent");
    }
    let (_, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(balance["reserved_cents"], 0, "no money moved or waits");
    crate::common::assert_invariants(&app).await;
}

/// Nineteen subscriptions on one Visa card, each declined once; their first retries fall due
/// together and the twentieth attempt is the last the limit allows: exactly one of them is
/// sent, and the other eighteen are declined `network_limit` unsent. (Retries begun at the
/// same instant are counted one after the other: `store::batch`'s unit test
/// `retries_on_one_card_at_once_never_pass_its_limit_together`.)
async fn the_last_attempt_a_limit_allows_is_sent_and_no_more(app: TestApp) {
    let ids = declined_once_then_retried(&app, 19).await;
    let mut sent = 0;
    let mut stopped = 0;
    for id in &ids {
        let all = charges(&app, id).await;
        assert_eq!(all.len(), 2, "{all:?}");
        match all[1]["decline_code"].as_str() {
            Some("network_limit") => stopped += 1,
            _ => sent += 1,
        }
    }
    assert_eq!(
        (sent, stopped),
        (1, 18),
        "one retry reaches the limit, no more"
    );
    let (_, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(balance["reserved_cents"], 0, "no money moved or waits");
    crate::common::assert_invariants(&app).await;
}

/// `n` subscriptions on one Visa card that declines for want of funds, each declined once at
/// its first charge and then retried a day later; their ids.
async fn declined_once_then_retried(app: &TestApp, n: usize) -> Vec<String> {
    app.lift_rate_limit().await;
    let (shop, method) = shop(app, NO_FUNDS).await;
    let mut ids = Vec::new();
    for _ in 0..n {
        let sub = subscribe(app, &shop, &method, json!({})).await;
        ids.push(sub["id"].as_str().expect("id").to_owned());
    }
    advance(app, 60).await;
    for id in &ids {
        assert_eq!(get(app, id).await["failed_attempts"], 1, "{id}");
    }
    advance(app, DAY).await;
    for id in &ids {
        eventually(Duration::from_secs(20), || async {
            get(app, id).await["failed_attempts"] == 2
        })
        .await;
    }
    ids
}
