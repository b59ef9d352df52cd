//! Refunds against a processor behind a fault proxy: a refund whose answer was lost is found
//! among the transaction's refunds and settles once; one the processor does not show stays
//! pending with its amount held, however long (it may still arrive); one recorded but never
//! sent ends declined with nothing moved; a refund is never posted twice by us.

use crate::common::proxied_shop::{APPROVED_CARD, PLAN_MONTHLY, Shop};
use crate::common::{TestApp, assert_invariants, eventually, read};
use crate::refunds::settled_as;
use billing::domain::charge_status::RefundStatus;
use harness::chaos::proxy::Fault;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    config = crate::refund_faults::quick_rechecks;
    a_refund_whose_answer_was_lost_is_found_at_the_processor_and_settles_once,
    a_refund_the_processor_never_shows_stays_pending_with_its_amount_held,
    a_refund_held_up_on_its_way_is_found_when_it_arrives,
    a_refund_recorded_but_never_posted_is_settled_by_the_reconciler,
    an_operator_closes_a_refund_the_processor_never_shows_once_nothing_can_arrive,
);

/// The fault proxy's reconciler timing, three times faster: a refund is asked about 0.1, 0.4,
/// 1.0, 2.2, 4.6, 10.6 s after its post's outcome turned out unknown. Before issue 32 one that
/// the processor did not show was declared never received 2.4 s (24 bases) after it was made.
pub(crate) fn quick_rechecks(config: &mut billing::config::Config) {
    crate::common::proxied_shop::fast_reconciler(config);
    config.reconcile_interval_ms = 50;
    config.processor_recheck_base_ms = 100;
}

/// Waits until `id` was asked about five times after its post (its sixth wait is scheduled:
/// 4.6 s after the post at this file's base), or it is no longer pending; the refund then.
async fn asked_five_times(shop: &Shop, id: &str) -> billing::store::refunds::Refund {
    let account = billing::ids::AccountId::parse(&shop.account_id).expect("an account's id");
    let read = || async {
        shop.store
            .refund(
                &account,
                &billing::ids::RefundId::parse(id).expect("a refund's id"),
            )
            .await
            .expect("db")
            .expect("refund")
    };
    eventually(Duration::from_secs(30), || async {
        let refund = read().await;
        refund.attempts >= 6 || refund.status != RefundStatus::Pending
    })
    .await;
    read().await
}

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

/// Issue 32, item 1: a refund whose post never reached the processor cannot be told from one
/// still on its way, so it is never declared unseen by the clock: it stays pending, its amount
/// held, and is asked about with backoff (never posted again) for as long as the processor
/// shows nothing; meanwhile no second refund of the charge can begin.
async fn a_refund_the_processor_never_shows_stays_pending_with_its_amount_held(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let sub = shop.subscribe(&app).await;
    let charge = charge_of(&shop, &app, &sub).await;
    let charge_id = charge["id"].as_str().expect("id");
    // The request never reaches the processor, and we cannot know it.
    shop.proxy.fail("POST", "/refunds", Fault::Reset, 1);
    let (status, created) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "pending", "{created}");
    let id = created["id"].as_str().expect("id");
    // Asked about five times, the last 4.6 s after the post: past the 2.4 s after which the
    // clock used to declare it never received.
    let refund = asked_five_times(&shop, id).await;
    assert_eq!(
        refund.status,
        RefundStatus::Pending,
        "unknown is resolved by asking, not by time: {refund:?}"
    );
    let stored = shop.charge(charge_id).await;
    assert_eq!(
        stored.refunding_cents, PLAN_MONTHLY,
        "the amount stays reserved"
    );
    assert_eq!(stored.refunded_cents, 0);
    let (status, again) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(
        status, 409,
        "no second refund while the first may still arrive: {again}"
    );
    assert_eq!(
        shop.proxy.seen("POST", "/refunds").len(),
        1,
        "never posted again"
    );
    assert_invariants(&app).await;
}

/// Issue 46: a refund the processor never shows stays pending, but an operator who checked the
/// merchant's processor account can close it: refused (409) while a post of ours may still reach
/// the processor (the in-flight bound, 6 s here), then `declined` with the operator's reason and
/// its amount freed, so the charge can be refunded again. Without the admin token: 401.
async fn an_operator_closes_a_refund_the_processor_never_shows_once_nothing_can_arrive(
    app: TestApp,
) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let sub = shop.subscribe(&app).await;
    let charge = charge_of(&shop, &app, &sub).await;
    let charge_id = charge["id"].as_str().expect("id");
    shop.proxy.fail("POST", "/refunds", Fault::Reset, 1);
    let started = std::time::Instant::now();
    let (status, created) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let close = |token: Option<&'static str>| {
        let id = id.clone();
        let app = &app;
        async move {
            let mut request = app
                .client
                .post(app.url(&format!("/admin/refunds/{id}/close")))
                .json(&json!({"reason": "No está en el panel de Wompi del comercio."}));
            request = match token {
                Some(token) => request.bearer_auth(token),
                None => request.bearer_auth(crate::common::ADMIN_TOKEN),
            };
            read(request.send().await.expect("send")).await
        }
    };
    let (status, refused) = close(Some("adm_not_the_token_at_all_000000000")).await;
    assert_eq!(status, 401, "{refused}");
    let (status, early) = close(None).await;
    if started.elapsed() < Duration::from_secs(6) {
        assert_eq!(status, 409, "a post may still arrive: {early}");
    }
    eventually(Duration::from_secs(30), || async {
        started.elapsed() >= Duration::from_secs(7)
    })
    .await;
    let (status, closed) = close(None).await;
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["status"], "declined");
    let stored = shop.charge(charge_id).await;
    assert_eq!(stored.refunding_cents, 0, "the amount is freed");
    assert_eq!(stored.refunded_cents, 0);
    let (status, again) = close(None).await;
    assert_eq!(status, 409, "closed once: {again}");
    let (status, second) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 201, "a new refund may begin: {second}");
    assert_invariants(&app).await;
}

/// The same refund, held up on its way: the processor makes it only after the clock would
/// have declared it never received (and freed its amount). It is found then, and settles
/// approved once, with the amount refunded once.
async fn a_refund_held_up_on_its_way_is_found_when_it_arrives(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let sub = shop.subscribe(&app).await;
    let charge = charge_of(&shop, &app, &sub).await;
    let charge_id = charge["id"].as_str().expect("id");
    // It reaches the processor 6 s after it was sent: after the fifth question (4.6 s).
    shop.proxy.fail(
        "POST",
        "/refunds",
        Fault::DelayThenForward(Duration::from_secs(6)),
        1,
    );
    let (status, created) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "pending", "{created}");
    let id = created["id"].as_str().expect("id");
    // Five questions that found nothing, the last past 2.4 s: still pending, amount held.
    let refund = asked_five_times(&shop, id).await;
    assert_eq!(refund.status, RefundStatus::Pending, "{refund:?}");
    assert_eq!(shop.charge(charge_id).await.refunding_cents, PLAN_MONTHLY);
    let (status, again) = ask_refund(&shop, &app, charge_id).await;
    assert_eq!(status, 409, "{again}");
    let done = settled_as_within(&app, &shop.key, id, Duration::from_secs(40)).await;
    assert_eq!(done["status"], "approved", "{done}");
    assert_eq!(shop.proxy.seen("POST", "/refunds").len(), 1, "posted once");
    let after = charge_of(&shop, &app, &sub).await;
    assert_eq!(after["refunded_amount_cents"], PLAN_MONTHLY);
    let stored = shop.charge(charge_id).await;
    assert_eq!(
        (stored.refunded_cents, stored.refunding_cents),
        (PLAN_MONTHLY, 0)
    );
    assert_invariants(&app).await;
}

/// `settled_as`, with a longer bound.
async fn settled_as_within(app: &TestApp, key: &str, id: &str, bound: Duration) -> Value {
    eventually(bound, || async {
        let (_, refund) = read(
            app.client
                .get(app.url(&format!("/v1/refunds/{id}")))
                .bearer_auth(key)
                .send()
                .await
                .expect("send"),
        )
        .await;
        refund["status"] != "pending"
    })
    .await;
    settled_as(app, key, id).await
}

/// A crash (or a request cut off) between recording a refund and posting it: the reconciler
/// finds it was never sent (no `posted_at`), and ends it declined with its reservation freed.
async fn a_refund_recorded_but_never_posted_is_settled_by_the_reconciler(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let sub = shop.subscribe(&app).await;
    let charge = charge_of(&shop, &app, &sub).await;
    let charge_id = charge["id"].as_str().expect("id");
    let now = chrono::Utc::now().timestamp_millis();
    let (recorded, _) = shop
        .store
        .begin_refund(billing::store::refunds::NewRefund {
            account: billing::ids::AccountId::parse(&shop.account_id).expect("an account's id"),
            charge_id: billing::ids::ChargeAttemptId::parse(charge_id).expect("a charge's id"),
            amount_cents: None,
            reason: None,
            now_ms: now,
            recheck_at_ms: now,
        })
        .await
        .expect("recorded");
    let done = settled_as(&app, &shop.key, recorded.id.as_str()).await;
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
