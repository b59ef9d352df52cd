//! Coupons, promotion codes and quantities (CONTRACT §14) through the API on both databases:
//! what a discount takes off each line and for how many billed periods, a period of nothing
//! advancing with an invoice of 0 and no charge, the last redemption won by one of two racing
//! customers, codes matched in any case with their own limits, and seats whose rise is prorated
//! and whose fall waits for the next period.

use crate::common::{TestApp, assert_invariants, read};
use crate::subscriptions::{Shop, advance, events, get, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    coupons_and_codes_are_checked_and_their_terms_never_change,
    a_repeating_percent_coupon_discounts_its_periods_then_stops,
    a_period_whose_total_is_zero_advances_with_an_invoice_of_nothing,
    the_last_redemption_goes_to_one_of_two_racing_customers,
    promotion_codes_match_in_any_case_and_keep_their_own_limits,
    a_rise_in_seats_is_prorated_and_a_fall_waits_for_the_next_period,
    a_discount_set_later_discounts_prorations_by_percent_and_can_be_removed,
);

/// A month and a day: exactly one renewal of a monthly subscription.
const MONTH: i64 = 31 * 86_400;

async fn coupon(app: &TestApp, body: Value) -> Value {
    let (status, coupon) = read(app.post("/v1/coupons", body).await).await;
    assert_eq!(status, 201, "{coupon}");
    coupon
}

async fn code(app: &TestApp, body: Value) -> Value {
    let (status, code) = read(app.post("/v1/promotion-codes", body).await).await;
    assert_eq!(status, 201, "{code}");
    code
}

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

async fn charges_of(app: &TestApp, subscription: &str) -> Vec<Value> {
    let (status, page) = read(
        app.get(&format!(
            "/v1/charges?subscription_id={subscription}&limit=100"
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let mut charges = page["data"].as_array().expect("data").clone();
    charges.reverse();
    charges
}

async fn invoices_of(app: &TestApp, subscription: &str) -> Vec<Value> {
    let (status, page) = read(
        app.get(&format!(
            "/v1/invoices?subscription_id={subscription}&limit=100"
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let mut invoices = page["data"].as_array().expect("data").clone();
    invoices.reverse();
    invoices
}

fn amounts(charges: &[Value]) -> Vec<(i64, String)> {
    charges
        .iter()
        .map(|c| {
            (
                c["amount_cents"].as_i64().expect("amount"),
                c["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect()
}

async fn refused(app: &TestApp, path: &str, body: Value, param: &str) {
    let (status, error) = read(app.post(path, body).await).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], param, "{error}");
}

async fn coupons_and_codes_are_checked_and_their_terms_never_change(app: TestApp) {
    let plan = id(&app.create_plan("Pro", 3_000_000, 30_000_000).await);
    for (body, param) in [
        (json!({"name": "x", "duration": "once"}), "percent_off_bps"),
        (
            json!({"name": "x", "percent_off_bps": 10, "amount_off_cents": 10, "duration": "once"}),
            "percent_off_bps",
        ),
        (
            json!({"name": "x", "percent_off_bps": 10_001, "duration": "once"}),
            "percent_off_bps",
        ),
        (
            json!({"name": "x", "percent_off_bps": 10, "duration": "repeating"}),
            "duration_in_periods",
        ),
        (
            json!({"name": "x", "percent_off_bps": 10, "duration": "once", "duration_in_periods": 2}),
            "duration_in_periods",
        ),
        (
            json!({"name": "x", "percent_off_bps": 10, "duration": "weekly"}),
            "duration",
        ),
        (
            json!({"name": "x", "percent_off_bps": 10, "duration": "once",
                   "applies_to": {"plan_ids": ["plan_0000"]}}),
            "applies_to",
        ),
        (
            json!({"name": "x", "percent_off_bps": 10, "duration": "once",
                   "redeem_by": "2001-01-01T00:00:00Z"}),
            "redeem_by",
        ),
    ] {
        refused(&app, "/v1/coupons", body, param).await;
    }
    let (_, page) = read(app.get("/v1/coupons").await).await;
    assert_eq!(page["data"], json!([]), "nothing was created");

    let made = coupon(
        &app,
        json!({"name": "Lanzamiento", "percent_off_bps": 2_000, "duration": "repeating",
               "duration_in_periods": 3, "applies_to": {"plan_ids": [plan]}, "max_redemptions": 5}),
    )
    .await;
    let coupon_id = id(&made);
    assert!(coupon_id.starts_with("co_"));
    assert_eq!(made["valid"], true);
    assert_eq!(made["times_redeemed"], 0);
    assert_eq!(made["applies_to"]["plan_ids"], json!([plan]));

    // Its money terms cannot be patched; its name and validity can.
    let (status, error) = read(
        app.request(Method::PATCH, &format!("/v1/coupons/{coupon_id}"))
            .json(&json!({"percent_off_bps": 9_000}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    let (status, patched) = read(
        app.request(Method::PATCH, &format!("/v1/coupons/{coupon_id}"))
            .json(&json!({"name": "Lanzamiento 2027", "valid": false}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["name"], "Lanzamiento 2027");
    assert_eq!(patched["valid"], false);
    assert_eq!(patched["percent_off_bps"], 2_000);

    let first = code(&app, json!({"coupon_id": coupon_id, "code": "VERANO-26"})).await;
    assert!(id(&first).starts_with("promo_"));
    // Unique among active codes, in any case.
    refused(
        &app,
        "/v1/promotion-codes",
        json!({"coupon_id": coupon_id, "code": "verano-26"}),
        "code",
    )
    .await;
    refused(
        &app,
        "/v1/promotion-codes",
        json!({"coupon_id": coupon_id, "code": "no spaces"}),
        "code",
    )
    .await;
    let (status, off) = read(
        app.request(
            Method::PATCH,
            &format!("/v1/promotion-codes/{}", id(&first)),
        )
        .json(&json!({"active": false}))
        .send()
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{off}");
    assert_eq!(off["active"], false);
    // An inactive code frees its letters.
    code(&app, json!({"coupon_id": coupon_id, "code": "Verano-26"})).await;
    let (_, listed) = read(
        app.get(&format!("/v1/promotion-codes?coupon_id={coupon_id}"))
            .await,
    )
    .await;
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(2));
}

async fn a_repeating_percent_coupon_discounts_its_periods_then_stops(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let (_, addon) = read(
        app.post(
            "/v1/addons",
            json!({"name": "Soporte", "monthly_amount_cents": 1_000_001,
                   "annual_amount_cents": 10_000_000, "tax_code": "iva_excluded"}),
        )
        .await,
    )
    .await;
    // 15 % off the plan only, for two billed periods.
    let coupon_id = id(&coupon(
        &app,
        json!({"name": "15 %", "percent_off_bps": 1_500, "duration": "repeating",
               "duration_in_periods": 2, "applies_to": {"plan_ids": [shop.plan]}}),
    )
    .await);
    let sub = subscribe(&app, &shop, &method, json!({"coupon_id": coupon_id})).await;
    let sub_id = id(&sub);
    assert_eq!(sub["discount"]["coupon_id"], coupon_id.as_str());
    assert_eq!(
        sub["discount"]["periods_left"], 1,
        "the first period took part"
    );
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/addons"),
            json!({"addon_id": id(&addon), "prorate": false}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    advance(&app, MONTH).await;
    advance(&app, MONTH).await;
    assert_eq!(
        amounts(&charges_of(&app, &sub_id).await),
        vec![
            (2_550_000, "approved".to_owned()),
            // 15 % of the plan's line only; the add-on is not in `applies_to`.
            (2_550_000 + 1_000_001, "approved".to_owned()),
            (3_000_000 + 1_000_001, "approved".to_owned()),
        ]
    );
    assert_eq!(get(&app, &sub_id).await["discount"], Value::Null);
    let invoices = invoices_of(&app, &sub_id).await;
    let second = &invoices[1];
    assert_eq!(second["discount_cents"], 450_000);
    assert_eq!(second["total_cents"], 3_550_001);
    let plan_line = &second["lines"][0];
    assert_eq!(plan_line["amount_cents"], 2_550_000);
    assert_eq!(plan_line["discount_cents"], 450_000);
    // IVA on the discounted base: round(2 550 000 × 10 000 / 11 900) = 2 142 857.
    assert_eq!(plan_line["taxable_base_cents"], 2_142_857);
    assert_eq!(second["lines"][1]["discount_cents"], 0);
    assert_eq!(invoices[2]["discount_cents"], 0);
    let (_, made) = read(app.get(&format!("/v1/coupons/{coupon_id}")).await).await;
    assert_eq!(made["times_redeemed"], 1);
    assert_invariants(&app).await;
}

async fn a_period_whose_total_is_zero_advances_with_an_invoice_of_nothing(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let coupon_id = id(&coupon(
        &app,
        json!({"name": "Primer mes gratis", "amount_off_cents": 5_000_000, "duration": "once"}),
    )
    .await);
    let sub = subscribe(&app, &shop, &method, json!({"coupon_id": coupon_id})).await;
    let sub_id = id(&sub);
    assert_eq!(sub["status"], "active");
    assert_eq!(sub["next_charge_date"], sub["current_period_end"]);
    assert_eq!(
        sub["discount"],
        Value::Null,
        "a once coupon is spent by its period"
    );
    assert!(
        charges_of(&app, &sub_id).await.is_empty(),
        "no charge attempt"
    );
    let invoices = invoices_of(&app, &sub_id).await;
    assert_eq!(invoices.len(), 1);
    assert_eq!(invoices[0]["total_cents"], 0);
    assert_eq!(invoices[0]["charge_id"], Value::Null);
    assert_eq!(invoices[0]["discount_cents"], 3_000_000);
    assert_eq!(invoices[0]["lines"][0]["amount_cents"], 0);
    let kinds: Vec<String> = events(&app, &sub_id)
        .await
        .iter()
        .map(|e| e["type"].as_str().expect("type").to_owned())
        .collect();
    assert!(kinds.contains(&"invoice.created".to_owned()), "{kinds:?}");
    assert!(
        !kinds.iter().any(|k| k.starts_with("charge.")),
        "no charge event: {kinds:?}"
    );
    // The next period is charged in full, once.
    advance(&app, MONTH).await;
    assert_eq!(
        amounts(&charges_of(&app, &sub_id).await),
        vec![(3_000_000, "approved".to_owned())]
    );
    let invoices = invoices_of(&app, &sub_id).await;
    assert_eq!(invoices.len(), 2);
    assert_eq!(invoices[1]["total_cents"], 3_000_000);
    assert_invariants(&app).await;
}

async fn the_last_redemption_goes_to_one_of_two_racing_customers(app: TestApp) {
    let (first, first_method) = shop(&app, "4242424242424242").await;
    let (second, second_method) = shop(&app, "4242424242424242").await;
    let coupon_id = id(&coupon(
        &app,
        json!({"name": "Uno solo", "percent_off_bps": 5_000, "duration": "forever",
               "max_redemptions": 1}),
    )
    .await);
    let body = |shop: &Shop, method: &str| {
        json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
               "payment_method_id": method, "coupon_id": coupon_id, "trial_days": 7})
    };
    let (a, b) = tokio::join!(
        app.post("/v1/subscriptions", body(&first, &first_method)),
        app.post("/v1/subscriptions", body(&second, &second_method)),
    );
    let (a, b) = (read(a).await, read(b).await);
    let mut statuses = vec![a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, vec![201, 400], "{a:?} {b:?}");
    let loser = if a.0 == 400 { &a.1 } else { &b.1 };
    assert_eq!(loser["error"]["param"], "coupon_id", "{loser}");
    let (_, made) = read(app.get(&format!("/v1/coupons/{coupon_id}")).await).await;
    assert_eq!(made["times_redeemed"], 1);
    assert_eq!(made["valid"], false, "fully redeemed");
    let (_, subs) = read(app.get("/v1/subscriptions").await).await;
    assert_eq!(
        subs["data"].as_array().map(Vec::len),
        Some(1),
        "the loser created nothing"
    );
}

async fn promotion_codes_match_in_any_case_and_keep_their_own_limits(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let coupon_id = id(&coupon(
        &app,
        json!({"name": "10 %", "percent_off_bps": 1_000, "duration": "forever"}),
    )
    .await);
    let welcome = code(
        &app,
        json!({"coupon_id": coupon_id, "code": "BIENVENIDA", "first_time_only": true,
               "max_redemptions": 2}),
    )
    .await;
    let (_, other) = read(
        app.post(
            "/v1/customers",
            json!({"email": "otra@example.co", "name": "Otra"}),
        )
        .await,
    )
    .await;
    code(
        &app,
        json!({"coupon_id": coupon_id, "code": "SOLO-OTRA", "customer_id": id(&other)}),
    )
    .await;
    let (_, soon) = read(app.get("/v1/test-helpers/clock").await).await;
    let now =
        chrono::DateTime::parse_from_rfc3339(soon["now"].as_str().expect("now")).expect("rfc3339");
    let expires = (now + chrono::Duration::days(2)).to_rfc3339();
    code(
        &app,
        json!({"coupon_id": coupon_id, "code": "FLASH", "expires_at": expires}),
    )
    .await;

    let base = |extra: Value| {
        let mut body = json!({"customer_id": shop.customer, "plan_id": shop.plan,
            "cycle": "monthly", "payment_method_id": method});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };
    refused(
        &app,
        "/v1/subscriptions",
        base(json!({"promotion_code": "SOLO-OTRA"})),
        "promotion_code",
    )
    .await;
    refused(
        &app,
        "/v1/subscriptions",
        base(json!({"promotion_code": "NO-EXISTE"})),
        "promotion_code",
    )
    .await;
    refused(
        &app,
        "/v1/subscriptions",
        base(json!({"promotion_code": "X", "coupon_id": coupon_id})),
        "promotion_code",
    )
    .await;
    // Typed in lowercase, it is the merchant's BIENVENIDA.
    let sub = subscribe(
        &app,
        &shop,
        &method,
        json!({"promotion_code": "bienvenida"}),
    )
    .await;
    assert_eq!(sub["discount"]["promotion_code_id"], welcome["id"]);
    assert_eq!(
        amounts(&charges_of(&app, &id(&sub)).await),
        vec![(2_700_000, "approved".to_owned())]
    );
    // Now the customer has paid: not a first purchase any more.
    refused(
        &app,
        "/v1/subscriptions",
        base(json!({"promotion_code": "BIENVENIDA"})),
        "promotion_code",
    )
    .await;
    // After its expiry, FLASH is refused.
    advance(&app, 3 * 86_400).await;
    refused(
        &app,
        "/v1/subscriptions",
        base(json!({"promotion_code": "flash"})),
        "promotion_code",
    )
    .await;
    let (_, welcome) = read(
        app.get(&format!("/v1/promotion-codes/{}", id(&welcome)))
            .await,
    )
    .await;
    assert_eq!(welcome["times_redeemed"], 1, "refusals count nothing");
    assert_invariants(&app).await;
}

async fn a_rise_in_seats_is_prorated_and_a_fall_waits_for_the_next_period(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({"quantity": 2})).await;
    let sub_id = id(&sub);
    assert_eq!(sub["quantity"], 2);
    let first = invoices_of(&app, &sub_id).await;
    assert_eq!(first[0]["lines"][0]["quantity"], 2);
    assert_eq!(first[0]["total_cents"], 6_000_000);
    // The same plan, cycle and quantity is no change.
    let (status, same) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan"),
            json!({"plan_id": shop.plan, "quantity": 2}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{same}");
    refused(
        &app,
        &format!("/v1/subscriptions/{sub_id}/change-plan"),
        json!({"plan_id": shop.plan, "quantity": 0}),
        "quantity",
    )
    .await;

    advance(&app, 10 * 86_400).await;
    let (status, preview) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan/preview"),
            json!({"plan_id": shop.plan, "quantity": 3}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{preview}");
    let previewed = preview["prorated_amount_cents"].as_i64().expect("amount");
    assert!(previewed > 0 && previewed < 3_000_000, "{preview}");
    let (status, rose) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan"),
            json!({"plan_id": shop.plan, "quantity": 3,
                   "proration_date": preview["proration_date"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{rose}");
    assert_eq!(rose["quantity"], 3);
    assert_eq!(rose["current_period_quantity"], 3);
    let charges = charges_of(&app, &sub_id).await;
    assert_eq!(
        charges.last().map(|c| c["amount_cents"].as_i64()),
        Some(Some(previewed)),
        "charged what the preview said"
    );

    // A fall charges nothing and waits for the next period.
    let (status, fell) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan"),
            json!({"plan_id": shop.plan, "quantity": 1}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{fell}");
    assert_eq!(fell["quantity"], 1);
    assert_eq!(fell["current_period_quantity"], 3);
    assert_eq!(charges_of(&app, &sub_id).await.len(), 2);
    // A charge-now starts a new period: at the new quantity (the model test found it billing
    // the old one).
    let (status, charged) = read(
        app.post(&format!("/v1/subscriptions/{sub_id}/charge-now"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{charged}");
    assert_eq!(charged["amount_in_cents"], 3_000_000);
    assert_eq!(get(&app, &sub_id).await["current_period_quantity"], 1);
    advance(&app, MONTH).await;
    let charges = charges_of(&app, &sub_id).await;
    assert_eq!(
        charges.last().map(|c| c["amount_cents"].as_i64()),
        Some(Some(3_000_000))
    );
    assert_eq!(get(&app, &sub_id).await["current_period_quantity"], 1);
    assert_invariants(&app).await;
}

async fn a_discount_set_later_discounts_prorations_by_percent_and_can_be_removed(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub_id = id(&subscribe(&app, &shop, &method, json!({})).await);
    let coupon_id = id(&coupon(
        &app,
        json!({"name": "Mitad", "percent_off_bps": 5_000, "duration": "forever"}),
    )
    .await);
    code(&app, json!({"coupon_id": coupon_id, "code": "MITAD"})).await;
    refused(
        &app,
        &format!("/v1/subscriptions/{sub_id}/discount"),
        json!({"promotion_code": "NADA"}),
        "promotion_code",
    )
    .await;
    let (status, with) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/discount"),
            json!({"promotion_code": "mitad"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{with}");
    assert_eq!(with["discount"]["coupon_id"], coupon_id.as_str());
    assert_eq!(with["discount"]["periods_left"], Value::Null, "forever");

    // A seat more, half of it off: the preview and the charge agree.
    advance(&app, 5 * 86_400).await;
    let (_, preview) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan/preview"),
            json!({"plan_id": shop.plan, "quantity": 2}),
        )
        .await,
    )
    .await;
    let previewed = preview["prorated_amount_cents"].as_i64().expect("amount");
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/change-plan"),
            json!({"plan_id": shop.plan, "quantity": 2,
                   "proration_date": preview["proration_date"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let invoices = invoices_of(&app, &sub_id).await;
    let proration = invoices.last().expect("the proration's invoice");
    assert_eq!(proration["total_cents"].as_i64(), Some(previewed));
    let discount = proration["discount_cents"].as_i64().expect("discount");
    // Half off, rounded half away from zero: the whole was 2 × the charged half, within a cent.
    assert!((discount - previewed).abs() <= 1, "{proration}");

    let (status, without) = read(
        app.request(
            Method::DELETE,
            &format!("/v1/subscriptions/{sub_id}/discount"),
        )
        .send()
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{without}");
    assert_eq!(without["discount"], Value::Null);
    advance(&app, MONTH).await;
    let charges = charges_of(&app, &sub_id).await;
    assert_eq!(
        charges.last().map(|c| c["amount_cents"].as_i64()),
        Some(Some(6_000_000)),
        "two seats, no discount"
    );
    assert_invariants(&app).await;
}
