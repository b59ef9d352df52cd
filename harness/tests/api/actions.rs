//! Issue 13 through HTTP: actions are all or nothing, prorations price the period at the cycle
//! it was billed at, a cancellation at period end survives a pause, and a top-up's resumption
//! of paused subscriptions does not depend on the request that made it.

use crate::common::{TestApp, assert_invariants, card_token, read};
use crate::subscriptions::{Shop, advance, events, get, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    an_upgrade_short_of_balance_changes_nothing_and_can_be_retried,
    a_declined_upgrade_changes_nothing_and_an_approved_one_changes_the_plan,
    a_prorated_addon_short_of_balance_is_not_attached,
    proration_after_a_cycle_change_prices_the_period_at_its_own_cycle,
    cancel_at_period_end_happens_at_that_end_while_paused,
    a_top_up_resumes_every_paused_subscription_even_if_its_client_hangs_up,
);

const DAY: i64 = 86_400;

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

fn event_types(all: &[Value]) -> Vec<&str> {
    all.iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect()
}

/// A plan whose proration's fee no balance of these tests covers.
async fn huge_plan(app: &TestApp) -> String {
    id(&app
        .create_plan("Enterprise", 900_000_000_000, 1_000_000_000_000)
        .await)
}

async fn an_upgrade_short_of_balance_changes_nothing_and_can_be_retried(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = id(&sub);
    advance(&app, 10 * DAY).await;
    let before = get(&app, &sub_id).await;
    let huge = huge_plan(&app).await;
    for attempt in 0..2 {
        let (status, body) = read(
            app.post(
                &format!("/v1/subscriptions/{sub_id}/change-plan"),
                json!({"plan_id": huge}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 422, "attempt {attempt}: {body}");
        assert_eq!(body["error"]["type"], "insufficient_balance");
    }
    let after = get(&app, &sub_id).await;
    assert_eq!(after["plan_id"], before["plan_id"]);
    assert_eq!(after, before, "nothing of the subscription changed");
    assert!(
        !event_types(&events(&app, &sub_id).await).contains(&"subscription.plan_changed"),
        "a refused change emits nothing"
    );
    assert_invariants(&app).await;
}

async fn a_declined_upgrade_changes_nothing_and_an_approved_one_changes_the_plan(app: TestApp) {
    let (shop, good_card) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &good_card, json!({})).await;
    let sub_id = id(&sub);
    // A second card of the same customer, one the processor declines.
    let token = card_token(&app, "4111111111111111").await;
    let (status, bad_card) = read(
        app.post(
            &format!("/v1/customers/{}/payment-methods", shop.customer),
            token.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{bad_card}");
    set_card(&app, &sub_id, &id(&bad_card)).await;
    advance(&app, 10 * DAY).await;
    let premium = id(&app.create_plan("Premium", 6_000_000, 60_000_000).await);
    let before = get(&app, &sub_id).await;
    let change = json!({"plan_id": premium});
    let path = format!("/v1/subscriptions/{sub_id}/change-plan");
    let (status, body) = read(app.post(&path, change.clone()).await).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["type"], "processor_error");
    let after = get(&app, &sub_id).await;
    assert_eq!(
        after["plan_id"], shop.plan,
        "a declined upgrade keeps the plan"
    );
    assert_eq!(after["status"], before["status"]);
    assert!(!event_types(&events(&app, &sub_id).await).contains(&"subscription.plan_changed"));

    // The same request with a good card: charged once, then the plan changes.
    set_card(&app, &sub_id, &good_card).await;
    let (status, body) = read(app.post(&path, change).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["plan_id"], premium.as_str());
    let all = events(&app, &sub_id).await;
    let types = event_types(&all);
    assert_eq!(
        types
            .iter()
            .filter(|t| **t == "subscription.plan_changed")
            .count(),
        1
    );
    let proration = all
        .iter()
        .rfind(|e| e["type"] == "charge.approved")
        .expect("the proration's charge.approved");
    let amount = proration["data"]["amount_in_cents"]
        .as_i64()
        .expect("amount");
    // About 20 days of 31 left of a 3,000,000 difference.
    assert!(
        (1_800_000..=2_100_000).contains(&amount),
        "prorated amount {amount}"
    );
    assert_invariants(&app).await;
}

async fn a_prorated_addon_short_of_balance_is_not_attached(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = id(&sub);
    let addon = read(
        app.post(
            "/v1/addons",
            json!({"name": "Racks", "monthly_amount_cents": 900_000_000_000i64, "annual_amount_cents": 1_000_000_000_000i64}),
        )
        .await,
    )
    .await
    .1;
    let path = format!("/v1/subscriptions/{sub_id}/addons");
    for _ in 0..2 {
        let (status, body) = read(app.post(&path, json!({"addon_id": id(&addon)})).await).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["type"], "insufficient_balance");
    }
    let (_, attached) = read(app.get(&path).await).await;
    assert_eq!(attached["data"], json!([]), "nothing was attached");
    assert_invariants(&app).await;
}

async fn proration_after_a_cycle_change_prices_the_period_at_its_own_cycle(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = id(&sub);
    advance(&app, 10 * DAY).await;
    // Monthly on Pro (3,000,000 a month), ten days in: change to annual on the same plan.
    let (status, changed) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan"),
            json!({"plan_id": shop.plan, "cycle": "annual"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["cycle"], "annual");
    let period_end = changed["current_period_end"].clone();
    // An upgrade to Premium now costs (6,000,000 − 3,000,000) × the part of the *monthly*
    // period left, not the annual prices' difference.
    let premium = id(&app.create_plan("Premium", 6_000_000, 60_000_000).await);
    let (status, preview) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan/preview"),
            json!({"plan_id": premium}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{preview}");
    let amount = preview["prorated_amount_cents"].as_i64().expect("amount");
    let expected = expected_proration(&app, &changed, 3_000_000).await;
    assert!(
        (amount - expected).abs() <= 5,
        "preview {amount}, expected {expected}"
    );
    let (status, upgraded) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan"),
            json!({"plan_id": premium}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{upgraded}");
    assert_eq!(
        upgraded["current_period_end"], period_end,
        "the period keeps its end"
    );
    // At the period's end the next period is annual, at Premium's annual price.
    advance(&app, 25 * DAY).await;
    let renewed = get(&app, &sub_id).await;
    assert_eq!(renewed["status"], "active", "{renewed}");
    let all = events(&app, &sub_id).await;
    let last = all
        .iter()
        .rfind(|e| e["type"] == "charge.approved")
        .expect("renewal");
    assert_eq!(last["data"]["amount_in_cents"], 60_000_000);
    let start = chrono::DateTime::parse_from_rfc3339(
        renewed["current_period_start"].as_str().expect("start"),
    )
    .expect("rfc3339");
    let end =
        chrono::DateTime::parse_from_rfc3339(renewed["current_period_end"].as_str().expect("end"))
            .expect("rfc3339");
    assert!(
        (end - start).num_days() >= 365,
        "an annual period: {renewed}"
    );
    assert_invariants(&app).await;
}

/// round((difference) × seconds left / period seconds) at the account's clock now.
async fn expected_proration(app: &TestApp, sub: &Value, difference: i64) -> i64 {
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let at = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().expect("instant"))
            .expect("rfc3339")
            .timestamp()
    };
    let (start, end, now) = (
        at(&sub["current_period_start"]),
        at(&sub["current_period_end"]),
        at(&clock["now"]),
    );
    let left = (end - now) as f64 / (end - start) as f64;
    (difference as f64 * left).round() as i64
}

async fn cancel_at_period_end_happens_at_that_end_while_paused(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = id(&sub);
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{sub_id}/cancel"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{sub_id}/pause"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    advance(&app, 35 * DAY).await;
    let after = get(&app, &sub_id).await;
    assert_eq!(after["status"], "canceled", "{after}");
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{sub_id}/resume"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let approved = events(&app, &sub_id)
        .await
        .iter()
        .filter(|e| e["type"] == "charge.approved")
        .count();
    assert_eq!(approved, 1, "only the first period was ever charged");
    assert_invariants(&app).await;
}

async fn set_card(app: &TestApp, sub_id: &str, method: &str) {
    let response = app
        .request(Method::PATCH, &format!("/v1/subscriptions/{sub_id}"))
        .json(&json!({"default_payment_method_id": method}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
}

async fn a_top_up_resumes_every_paused_subscription_even_if_its_client_hangs_up(app: TestApp) {
    const COUNT: usize = 40;
    app.lift_rate_limit().await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    // Spend the balance shop() gave, so that the trials end into an empty balance.
    drain_balance(&app).await;
    let mut ids = Vec::new();
    for _ in 0..COUNT {
        ids.push(id(&subscribe(
            &app,
            &shop,
            &method,
            json!({"trial_days": 1}),
        )
        .await));
    }
    advance(&app, 2 * DAY).await;
    for sub in &ids {
        assert_eq!(
            get(&app, sub).await["status"],
            "paused_insufficient_balance"
        );
    }
    // The operator's client gives up almost at once; whatever it got, the top-up either
    // happened with all its consequences or not at all.
    let hasty = reqwest::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .expect("client");
    let _ = hasty
        .post(app.url(&format!(
            "/admin/accounts/{}/balance/top-ups",
            app.account_id
        )))
        .bearer_auth(crate::common::ADMIN_TOKEN)
        .json(&json!({"amount_cents": 50_000_000}))
        .send()
        .await;
    let (_, balance) = read(app.get("/v1/balance").await).await;
    let topped_up = balance["available_cents"].as_i64().unwrap_or(0)
        + balance["reserved_cents"].as_i64().unwrap_or(0)
        > 0
        || ledger_has_top_up(&app).await;
    if !topped_up {
        app.top_up(50_000_000).await;
    }
    crate::common::eventually(Duration::from_secs(60), || async {
        let mut all_active = true;
        for sub in &ids {
            all_active &= get(&app, sub).await["status"] == "active";
        }
        all_active
    })
    .await;
    assert_invariants(&app).await;
}

/// Whether the ledger has a top-up after the drain (fees may have used all of it already).
async fn ledger_has_top_up(app: &TestApp) -> bool {
    let (_, page) = read(app.get("/v1/balance/transactions?limit=100").await).await;
    page["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter(|row| row["type"] == "top_up")
        .count()
        > 1
}

/// Leaves the account's available balance at zero by buying it back as fees: a subscription
/// to a plan whose fee is exactly the balance.
pub(crate) async fn drain_balance(app: &TestApp) {
    let (_, balance) = read(app.get("/v1/balance").await).await;
    let available = balance["available_cents"].as_i64().expect("available");
    if available == 0 {
        return;
    }
    // The default fee is 1.5 % rounded half away from zero: this amount's fee is `available`.
    let amount = (available * 10_000 + 149) / 150;
    let (shop2, method2) = shop_on(app, amount).await;
    subscribe(app, &shop2, &method2, json!({})).await;
    crate::common::eventually(Duration::from_secs(20), || async {
        let (_, balance) = read(app.get("/v1/balance").await).await;
        balance["available_cents"] == 0 && balance["reserved_cents"] == 0
    })
    .await;
}

async fn shop_on(app: &TestApp, monthly: i64) -> (Shop, String) {
    let token = card_token(app, "4242424242424242").await;
    let (_, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": "leo@example.co", "name": "Leo"}),
        )
        .await,
    )
    .await;
    let customer = id(&customer);
    let (_, method) = read(
        app.post(
            &format!("/v1/customers/{customer}/payment-methods"),
            token.payment_method(),
        )
        .await,
    )
    .await;
    let plan = id(&app.create_plan("Drain", monthly, monthly * 10).await);
    (Shop { customer, plan }, id(&method))
}
