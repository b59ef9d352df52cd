//! Refunds against a processor behind a fault proxy: a refund whose answer was lost is found
//! among the transaction's refunds and settles once; one the processor never received ends
//! declined with nothing moved; a refund is never posted twice by us.

use crate::common::proxied_shop::{APPROVED_CARD, PLAN_MONTHLY, Shop};
use crate::common::{TestApp, assert_invariants, read};
use crate::refunds::settled_as;
use billing::chaos::proxy::Fault;
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    config = crate::common::proxied_shop::fast_reconciler;
    a_refund_whose_answer_was_lost_is_found_at_the_processor_and_settles_once,
    a_refund_the_processor_never_received_ends_declined_with_nothing_moved,
    a_refund_recorded_but_never_posted_is_settled_by_the_reconciler,
);

async fn charge_of(shop: &Shop, app: &TestApp, sub: &str) -> Value {
    let page = shop
        .call(
            app,
            Method::GET,
            &format!("/v1/charges?subscription_id={sub}"),
            Value::Null,
        )
        .await;
    page["data"][0].clone()
}

async fn ask_refund(shop: &Shop, app: &TestApp, charge: &str) -> (u16, Value) {
    read(
        app.client
            .post(app.url(&format!("/v1/charges/{charge}/refunds")))
            .bearer_auth(&shop.key)
            .json(&json!({}))
            .send()
            .await
            .expect("send"),
    )
    .await
}

async fn a_refund_whose_answer_was_lost_is_found_at_the_processor_and_settles_once(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let sub = shop.subscribe(&app).await;
    let charge = charge_of(&shop, &app, &sub).await;
    let charge_id = charge["id"].as_str().expect("id");
    // The processor makes the refund; its answer never comes back.
    shop.proxy
        .fail("POST", "/refunds", Fault::ForwardThenDrop, 1);
    let (status, created) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["status"], "pending",
        "unknown is not a no: {created}"
    );
    let done = settled_as(&app, &shop.key, created["id"].as_str().expect("id")).await;
    assert_eq!(done["status"], "approved", "{done}");
    assert_eq!(
        shop.proxy.seen("POST", "/refunds").len(),
        1,
        "posted once, never again"
    );
    let after = charge_of(&shop, &app, &sub).await;
    assert_eq!(after["refunded_amount_cents"], PLAN_MONTHLY);
    let refunded = shop
        .event_types(&app, &sub)
        .await
        .into_iter()
        .filter(|t| t == "charge.refunded")
        .count();
    assert_eq!(refunded, 1);
    assert_invariants(&app).await;
}

async fn a_refund_the_processor_never_received_ends_declined_with_nothing_moved(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let sub = shop.subscribe(&app).await;
    let charge = charge_of(&shop, &app, &sub).await;
    let charge_id = charge["id"].as_str().expect("id");
    // The request never reaches the processor, and we cannot know it at once.
    shop.proxy.fail("POST", "/refunds", Fault::Reset, 1);
    let (status, created) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "pending", "{created}");
    let done = settled_as(&app, &shop.key, created["id"].as_str().expect("id")).await;
    assert_eq!(done["status"], "declined", "{done}");
    assert_eq!(
        shop.proxy.seen("POST", "/refunds").len(),
        1,
        "never posted again"
    );
    assert_eq!(
        charge_of(&shop, &app, &sub).await["refunded_amount_cents"],
        0
    );
    // Nothing held: the integrator may ask again, and this time it goes through.
    let (status, again) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 201, "{again}");
    let again = settled_as(&app, &shop.key, again["id"].as_str().expect("id")).await;
    assert_eq!(again["status"], "approved");
    assert_invariants(&app).await;
}

/// A crash (or a request cut off) between recording a refund and posting it: the reconciler
/// asks about it, finds nothing at the processor, and ends it declined with its reservation
/// freed.
async fn a_refund_recorded_but_never_posted_is_settled_by_the_reconciler(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let sub = shop.subscribe(&app).await;
    let charge = charge_of(&shop, &app, &sub).await;
    let charge_id = charge["id"].as_str().expect("id");
    let now = chrono::Utc::now().timestamp_millis();
    let (recorded, _) = shop
        .store
        .begin_refund(billing::store::refunds::NewRefund {
            account: billing::ids::AccountId::from_stored(shop.account_id.clone()),
            charge_id: charge_id.to_owned(),
            amount_cents: None,
            reason: None,
            now_ms: now,
            recheck_at_ms: now,
        })
        .await
        .expect("recorded");
    let done = settled_as(&app, &shop.key, &recorded.id).await;
    assert_eq!(done["status"], "declined", "{done}");
    assert!(
        shop.proxy.seen("POST", "/refunds").is_empty(),
        "never posted"
    );
    assert_eq!(
        charge_of(&shop, &app, &sub).await["refunded_amount_cents"],
        0
    );
    let (status, again) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 201, "{again}");
    assert_invariants(&app).await;
}
