//! Issue 13, items 1, 2 and 7: a processor that fails after acting, rate-limits, times out or
//! refuses never makes the service charge a period twice or lose a charge (CONTRACT §7). The
//! account's processor is a fault-injection proxy (`harness::chaos::proxy`) in front of the in-process
//! sandbox, whose events still reach the ingress directly. The reconciler runs every 100 ms
//! and rechecks unknown outcomes from 300 ms on, so its passes are awaited, not slept through.

use crate::common::proxied_shop::{APPROVED_CARD, FEE, Shop, TOP_UP};
use crate::common::{TestApp, assert_invariants, eventually, read};
use billing::domain::charge_status::ChargeStatus;
use billing::ids::AccountId;
use billing::processor::client::ProcessorClient;
use harness::chaos::proxy::Fault;
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

crate::db_tests!(config = crate::common::proxied_shop::fast_reconciler;
    a_create_answered_500_after_the_processor_acted_then_a_429_lookup_stays_pending_until_approved,
    a_create_answered_429_is_asked_again_found_unseen_and_posted_again_under_its_reference,
    a_create_that_times_out_after_the_processor_acted_is_found_not_posted_again,
    a_failing_lookup_in_the_reconciler_never_posts_again,
    a_definite_refusal_of_a_repost_while_the_first_post_may_exist_is_not_an_error,
    reposts_refused_past_the_in_flight_bound_decline_the_charge,
    one_failing_charge_does_not_stop_the_reconciler,
    a_checkout_paid_while_the_processor_rate_limits_is_posted_again_and_completes,
);

const BOUND: Duration = Duration::from_secs(30);

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
    assert_eq!(charge.status, ChargeStatus::Approved);
    assert_eq!(
        charge.subscription_id.as_ref().map(|id| id.as_str()),
        Some(id.as_str())
    );
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
    assert_eq!(
        shop.charge(&references[0]).await.status,
        ChargeStatus::Approved
    );
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
    assert_eq!(charge.status, ChargeStatus::Pending);
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

/// Issue 32, item 3: the first post times out and reaches the processor only later (held up
/// on its way), so the lookup finds nothing and the charge is posted again; that second post is
/// refused for certain. The refusal says nothing about the first post, which then charges the
/// card: the charge stays pending, fee reserved, is asked about by reference again, and settles
/// approved once, never ERROR.
async fn a_definite_refusal_of_a_repost_while_the_first_post_may_exist_is_not_an_error(
    app: TestApp,
) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    // Past the client's 1-second timeout, and past the first lookup (300 ms after).
    shop.proxy.fail(
        "POST",
        "/transactions",
        Fault::DelayThenForward(Duration::from_secs(3)),
        1,
    );
    let invalid = json!({"error": {"type": "INPUT_VALIDATION_ERROR",
        "messages": {"payment_source_id": ["Fuente de pago inválida"]}}});
    shop.proxy
        .fail("POST", "/transactions", Fault::Answer(422, invalid), 1);
    let id = shop.subscribe(&app).await;
    eventually(BOUND, || async { shop.posted_references().len() >= 2 }).await;
    let references = shop.posted_references();
    assert_eq!(references[0], references[1], "the same reference");
    let charge = shop.charge(&references[0]).await;
    assert_ne!(
        charge.status,
        ChargeStatus::Error,
        "a refused re-post is not a decline while the first post may exist: {charge:?}"
    );
    assert_paid_once(&app, &shop, &id).await;
    let charge = shop.charge(&references[0]).await;
    assert_eq!(charge.status, ChargeStatus::Approved);
    assert_eq!(
        shop.at_processor(&references[0]).await.as_deref(),
        Some("APPROVED")
    );
    let types = shop.event_types(&app, &id).await;
    assert!(!types.contains(&"charge.declined".to_owned()), "{types:?}");
    assert_invariants(&app).await;
}

/// Issue 46: the first post never reaches the processor, and every re-post under its reference
/// is refused for certain. While the first post may still be on its way (the in-flight bound,
/// 6 s here, an hour by default) the charge stays pending; after it, nothing of ours can reach
/// the processor, which refuses the charge: it ends `error`, its fee freed, and the
/// subscription is `past_due`, as after a first post refused, instead of pending for ever.
async fn reposts_refused_past_the_in_flight_bound_decline_the_charge(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    let available = shop.balance(&app).await.0;
    shop.proxy.fail("POST", "/transactions", Fault::Reset, 1);
    let invalid = json!({"error": {"type": "INPUT_VALIDATION_ERROR",
        "messages": {"payment_source_id": ["Fuente de pago inválida"]}}});
    shop.proxy
        .fail("POST", "/transactions", Fault::Answer(422, invalid), 1_000);
    let started = std::time::Instant::now();
    let id = shop.subscribe(&app).await;
    eventually(BOUND, || async { shop.posted_references().len() >= 3 }).await;
    let reference = shop.posted_references()[0].clone();
    if started.elapsed() < Duration::from_secs(5) {
        let charge = shop.charge(&reference).await;
        assert_eq!(
            charge.status,
            ChargeStatus::Pending,
            "refused re-posts within the bound are not a decline: {charge:?}"
        );
    }
    eventually(BOUND, || async {
        shop.charge(&reference).await.status != ChargeStatus::Pending
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(6),
        "not before the bound"
    );
    let charge = shop.charge(&reference).await;
    assert_eq!(charge.status, ChargeStatus::Error, "{charge:?}");
    assert_eq!(shop.at_processor(&reference).await, None, "never charged");
    eventually(BOUND, || async {
        shop.subscription(&app, &id).await["status"] == "past_due"
    })
    .await;
    assert_eq!(shop.balance(&app).await, (available, 0), "the fee is freed");
    assert_invariants(&app).await;
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
            &AccountId::parse(&shop.account_id).expect("an account's id"),
            &billing::ids::PaymentMethodId::parse(&shop.method).expect("an id"),
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
                source_kind: billing::processor::client::SourceKind::Card,
                customer_email: "ana@example.co".into(),
                recurrent: true,
            },
        )
        .await;
    assert!(posted.transaction().is_some(), "{posted:?}");
    // Then one that was never posted: the reconciler must get to it.
    let orphan = shop.unposted_charge(None).await;
    eventually(Duration::from_secs(45), || async {
        shop.charge(orphan.id.as_str()).await.status == ChargeStatus::Approved
    })
    .await;
    assert_eq!(
        shop.charge(broken.id.as_str()).await.status,
        ChargeStatus::Pending
    );
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
    let token = shop.card_token(APPROVED_CARD).await;
    shop.proxy.fail("POST", "/transactions", rate_limited(), 1);
    // The page's request waits for the outcome, asking the processor itself meanwhile.
    let (status, out) = read(
        app.client
            .post(app.url(&format!("/checkout/{id}/complete")))
            .json(&token.payment_method())
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
    assert_eq!(
        shop.charge(&references[0]).await.status,
        ChargeStatus::Approved
    );
    assert_eq!(shop.balance(&app).await, (TOP_UP - FEE, 0));
}
