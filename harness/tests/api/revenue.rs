//! Issue 48's MRR ledger and monthly summary (CONTRACT §16) through HTTP: a subscription's
//! life as its movements (new, expansion by a plan change, a quantity fall and a discount's
//! removal applied at the renewal, a pause's contraction and its resumption, a voluntary
//! cancellation, dunning's cancellation), the summary adding up exactly and reconciling with
//! the invoices, and the Colombian month's boundaries.

use crate::common::{TestApp, card_token, eventually, read};
use crate::subscriptions::{Shop, advance, events, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    a_subscriptions_life_is_its_movements,
    a_discount_removed_and_a_quantity_fall_move_mrr_at_the_renewal,
    dunning_churns_for_failed_payment_and_a_new_card_recovers,
    the_summary_follows_the_colombian_month,
);

const DAY: i64 = 86_400;
/// A month and a day: exactly one renewal of a monthly subscription.
pub(crate) const MONTH: i64 = 31 * DAY;
/// 1 190 000 with IVA at 19 %: a base of exactly 1 000 000.
const PRICE: i64 = 1_190_000;
const BASE: i64 = 1_000_000;
const NO_FUNDS: &str = "4000000000009995";

/// The subscription's movements, oldest first, as (type, reason, delta, after).
async fn movements(app: &TestApp, id: &str) -> Vec<(String, String, i64, i64)> {
    let (status, page) = read(
        app.get(&format!(
            "/v1/revenue/movements?subscription_id={id}&limit=100"
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let mut rows: Vec<(String, String, i64, i64)> = page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|m| {
            (
                m["type"].as_str().expect("type").to_owned(),
                m["reason"].as_str().expect("reason").to_owned(),
                m["mrr_delta_cents"].as_i64().expect("delta"),
                m["mrr_after_cents"].as_i64().expect("after"),
            )
        })
        .collect();
    rows.reverse();
    rows
}

fn moved(kind: &str, reason: &str, delta: i64, after: i64) -> (String, String, i64, i64) {
    (kind.into(), reason.into(), delta, after)
}

/// A shop whose plan costs `PRICE` a month (and 12 × `PRICE` a year).
pub(crate) async fn priced_shop(app: &TestApp, card: &str) -> (Shop, String) {
    let (mut shop, method) = shop(app, card).await;
    shop.plan = app.create_plan("Base", PRICE, 12 * PRICE).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    (shop, method)
}

pub(crate) async fn approved_once(app: &TestApp, id: &str) {
    eventually(Duration::from_secs(20), || async {
        events(app, id)
            .await
            .iter()
            .any(|e| e["type"] == "charge.approved")
    })
    .await;
}

pub(crate) async fn act(app: &TestApp, id: &str, action: &str, body: Value) -> Value {
    let (status, answer) = read(
        app.post(&format!("/v1/subscriptions/{id}/{action}"), body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{action}: {answer}");
    answer
}

pub(crate) async fn summary(app: &TestApp, month: &str) -> Value {
    let (status, summary) =
        read(app.get(&format!("/v1/revenue/summary?month={month}")).await).await;
    assert_eq!(status, 200, "{summary}");
    let figure = |name: &str| summary[name].as_i64().expect(name);
    assert_eq!(
        figure("mrr_end_cents"),
        figure("mrr_start_cents")
            + figure("new_cents")
            + figure("expansion_cents")
            + figure("reactivation_cents")
            - figure("contraction_cents")
            - figure("churn_voluntary_cents")
            - figure("churn_failed_payment_cents"),
        "the month adds up: {summary}"
    );
    summary
}

/// The Colombian month (`YYYY-MM`) of an RFC 3339 instant.
fn colombian_month(at: &str) -> String {
    let at = chrono::DateTime::parse_from_rfc3339(at).expect("rfc3339");
    let colombia = chrono::FixedOffset::west_opt(5 * 3_600).expect("offset");
    at.with_timezone(&colombia).format("%Y-%m").to_string()
}

/// Every month in which the account has an invoice or a movement: the summary's invoiced and
/// IVA figures are the sums of `GET /v1/invoices` of that month, and its MRR figures those of
/// the movements.
async fn reconcile(app: &TestApp) {
    let (_, invoices) = read(app.get("/v1/invoices?limit=100").await).await;
    let (_, moves) = read(app.get("/v1/revenue/movements?limit=100").await).await;
    let invoices = invoices["data"].as_array().expect("data").clone();
    let moves = moves["data"].as_array().expect("data").clone();
    let mut months: Vec<String> = invoices
        .iter()
        .map(|i| colombian_month(i["issued_at"].as_str().expect("issued_at")))
        .chain(
            moves
                .iter()
                .map(|m| colombian_month(m["occurred_at"].as_str().expect("occurred_at"))),
        )
        .collect();
    months.sort();
    months.dedup();
    for month in months {
        let figures = summary(app, &month).await;
        let of_month = |at: &Value| colombian_month(at.as_str().expect("instant")) == month;
        let sum = |rows: &[Value], at: &str, field: &str| -> i64 {
            rows.iter()
                .filter(|row| of_month(&row[at]))
                .map(|row| row[field].as_i64().expect(field))
                .sum()
        };
        assert_eq!(
            figures["invoiced_cents"],
            sum(&invoices, "issued_at", "total_cents"),
            "{month}: {figures}"
        );
        assert_eq!(
            figures["iva_cents"],
            sum(&invoices, "issued_at", "tax_cents"),
            "{month}: {figures}"
        );
        let before_end: i64 = moves
            .iter()
            .filter(|m| colombian_month(m["occurred_at"].as_str().expect("at")) <= month)
            .map(|m| m["mrr_delta_cents"].as_i64().expect("delta"))
            .sum();
        assert_eq!(figures["mrr_end_cents"], before_end, "{month}: {figures}");
    }
}

async fn a_subscriptions_life_is_its_movements(app: TestApp) {
    let (shop, method) = priced_shop(&app, "4242424242424242").await;
    let bigger = app.create_plan("Bigger", 2 * PRICE, 24 * PRICE).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    approved_once(&app, &id).await;
    assert_eq!(
        movements(&app, &id).await,
        [moved("new", "started", BASE, BASE)]
    );
    // An upgrade with proration: it takes effect, and moves MRR, when its charge is approved.
    act(&app, &id, "change-plan", json!({"plan_id": bigger})).await;
    advance(&app, 1).await;
    eventually(Duration::from_secs(20), || async {
        movements(&app, &id).await.len() == 2
    })
    .await;
    act(&app, &id, "pause", json!({})).await;
    act(&app, &id, "resume", json!({})).await;
    act(&app, &id, "cancel", json!({"at_period_end": false})).await;
    assert_eq!(
        movements(&app, &id).await,
        [
            moved("new", "started", BASE, BASE),
            moved("expansion", "plan_change", BASE, 2 * BASE),
            moved("contraction", "paused", -2 * BASE, 0),
            moved("reactivation", "resumed", 2 * BASE, 2 * BASE),
            moved("churn", "voluntary", -2 * BASE, 0),
        ]
    );
    // Filters: by type, and by instants.
    let (status, churned) = read(app.get("/v1/revenue/movements?type=churn").await).await;
    assert_eq!(status, 200);
    assert_eq!(churned["data"].as_array().expect("data").len(), 1);
    let (status, none) = read(
        app.get("/v1/revenue/movements?from=2999-01-01T00:00:00Z")
            .await,
    )
    .await;
    assert_eq!((status, none["data"].clone()), (200, json!([])));
    let (status, refused) = read(app.get("/v1/revenue/movements?type=upgrade").await).await;
    assert_eq!(
        (status, refused["error"]["param"].clone()),
        (400, json!("type"))
    );
    reconcile(&app).await;
    crate::common::assert_invariants(&app).await;
}

async fn a_discount_removed_and_a_quantity_fall_move_mrr_at_the_renewal(app: TestApp) {
    let (shop, method) = priced_shop(&app, "4242424242424242").await;
    let (status, coupon) = read(
        app.post(
            "/v1/coupons",
            json!({"name": "Veinte", "percent_off_bps": 2_000, "duration": "forever"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{coupon}");
    let sub = subscribe(
        &app,
        &shop,
        &method,
        json!({"quantity": 3, "coupon_id": coupon["id"]}),
    )
    .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    approved_once(&app, &id).await;
    // 3 seats at 80 %: 2 856 000 with IVA, a base of 2 400 000.
    let opened = 3 * BASE * 8 / 10;
    assert_eq!(
        movements(&app, &id).await,
        [moved("new", "started", opened, opened)]
    );
    // A fall of seats and the discount's removal are requested now, for the next period:
    // the MRR does not move until that period is billed.
    act(
        &app,
        &id,
        "change-plan",
        json!({"plan_id": shop.plan, "quantity": 1}),
    )
    .await;
    let (status, _) = read(
        app.request(Method::DELETE, &format!("/v1/subscriptions/{id}/discount"))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(movements(&app, &id).await.len(), 1, "nothing moved yet");
    advance(&app, MONTH).await;
    // The renewal bills 1 seat at full price: one movement, named by the first change in the
    // contract's order (the quantity, before the discount).
    assert_eq!(
        movements(&app, &id).await,
        [
            moved("new", "started", opened, opened),
            moved("contraction", "quantity", BASE - opened, BASE),
        ]
    );
    reconcile(&app).await;
    crate::common::assert_invariants(&app).await;
}

async fn dunning_churns_for_failed_payment_and_a_new_card_recovers(app: TestApp) {
    let (shop, declining) = priced_shop(&app, NO_FUNDS).await;
    let unpaid = subscribe(&app, &shop, &declining, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let rescued = subscribe(&app, &shop, &declining, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 60).await;
    // Past due counts in full, from its creation.
    assert_eq!(
        movements(&app, &unpaid).await,
        [moved("new", "started", BASE, BASE)]
    );
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
    let (status, patched) = read(
        app.request(Method::PATCH, &format!("/v1/subscriptions/{rescued}"))
            .json(&json!({"default_payment_method_id": good["id"]}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    for days in [1, 2, 2, 2] {
        advance(&app, days * DAY).await;
    }
    assert_eq!(
        movements(&app, &unpaid).await,
        [
            moved("new", "started", BASE, BASE),
            moved("churn", "failed_payment", -BASE, 0),
        ]
    );
    assert_eq!(
        movements(&app, &rescued).await,
        [moved("new", "started", BASE, BASE)]
    );
    // Over the months these days touched: two first charges declined, four retries of the
    // unpaid one declined, one retry of the rescued one approved after its decline.
    let (_, charges) = read(app.get("/v1/charges?limit=100").await).await;
    let mut months: Vec<String> = charges["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|c| c["created_at"].as_str().map(colombian_month))
        .collect();
    months.sort();
    months.dedup();
    let (mut failed, mut recovered, mut churned) = (0, 0, 0);
    for month in &months {
        let figures = summary(&app, month).await;
        failed += figures["failed_charges"].as_i64().expect("failed");
        recovered += figures["recovered_charges"].as_i64().expect("recovered");
        churned += figures["churn_failed_payment_cents"]
            .as_i64()
            .expect("churn");
        assert_eq!(figures["churn_voluntary_cents"], 0);
    }
    assert_eq!((failed, recovered, churned), (6, 1, BASE));
    reconcile(&app).await;
    crate::common::assert_invariants(&app).await;
}

async fn the_summary_follows_the_colombian_month(app: TestApp) {
    use chrono::{Datelike, TimeZone};
    for bad in ["2026-13", "2026-1", "26-01", "2026-00", "enero"] {
        let (status, refused) =
            read(app.get(&format!("/v1/revenue/summary?month={bad}")).await).await;
        assert_eq!(
            (status, refused["error"]["param"].clone()),
            (400, json!("month")),
            "{bad}: {refused}"
        );
    }
    let (status, _) = read(app.get("/v1/revenue/summary").await).await;
    assert_eq!(status, 400, "month is required");
    let (shop, method) = priced_shop(&app, "4242424242424242").await;
    // To two minutes before the next Colombian month begins (05:00 UTC on its first day).
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let now =
        chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now")).expect("rfc3339");
    let colombia = chrono::FixedOffset::west_opt(5 * 3_600).expect("offset");
    let local = now.with_timezone(&colombia);
    let (year, month) = if local.month() == 12 {
        (local.year() + 1, 1)
    } else {
        (local.year(), local.month() + 1)
    };
    let next = colombia
        .with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .expect("midnight");
    let before = (next - now).num_seconds() - 120;
    advance(&app, before).await;
    let late = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    approved_once(&app, &late).await;
    advance(&app, 240).await;
    let early = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    approved_once(&app, &early).await;
    let this = local.format("%Y-%m").to_string();
    let following = format!("{year:04}-{month:02}");
    let ending = summary(&app, &this).await;
    assert_eq!(
        (
            ending["new_cents"].as_i64(),
            ending["mrr_end_cents"].as_i64(),
            ending["active_subscriptions"].as_i64(),
            ending["invoiced_cents"].as_i64(),
        ),
        (Some(BASE), Some(BASE), Some(1), Some(PRICE)),
        "{ending}"
    );
    let starting = summary(&app, &following).await;
    assert_eq!(
        (
            starting["mrr_start_cents"].as_i64(),
            starting["new_cents"].as_i64(),
            starting["mrr_end_cents"].as_i64(),
            starting["active_subscriptions"].as_i64(),
            starting["invoiced_cents"].as_i64(),
            starting["iva_cents"].as_i64(),
        ),
        (
            Some(BASE),
            Some(BASE),
            Some(2 * BASE),
            Some(2),
            Some(PRICE),
            Some(PRICE - BASE)
        ),
        "{starting}"
    );
    assert_eq!(starting["month"], following);
    reconcile(&app).await;
}
