//! The hosted checkout with coupons, promotion codes and seats (CONTRACT §14): a session made
//! with a coupon charges its discounted first period and the subscription keeps the rest of
//! the discount; a declined payment gives its redemption back; a code typed on the page (where
//! the merchant offers the field) is checked, shown and charged, in Spanish and in English, in
//! a real browser.

use crate::checkout::{new_session, plan};
use crate::checkout_payment::pay;
use crate::common::browser::Browser;
use crate::common::{Backend, TestApp, card_token, read, spawn_app};
use serde_json::{Value, json};

crate::db_tests!(
    a_checkout_with_a_coupon_charges_its_discounted_seats_and_the_subscription_keeps_it,
    a_declined_checkout_payment_gives_its_redemption_back,
    a_code_field_is_offered_only_where_the_merchant_allows_it,
);

async fn coupon(app: &TestApp, body: Value) -> String {
    let (status, coupon) = read(app.post("/v1/coupons", body).await).await;
    assert_eq!(status, 201, "{coupon}");
    coupon["id"].as_str().expect("id").to_owned()
}

async fn code(app: &TestApp, coupon: &str, code: &str) {
    let body = json!({"coupon_id": coupon, "code": code});
    let (status, made) = read(app.post("/v1/promotion-codes", body).await).await;
    assert_eq!(status, 201, "{made}");
}

async fn coupon_redeemed(app: &TestApp, id: &str) -> i64 {
    let (_, coupon) = read(app.get(&format!("/v1/coupons/{id}")).await).await;
    coupon["times_redeemed"].as_i64().expect("times_redeemed")
}

async fn a_checkout_with_a_coupon_charges_its_discounted_seats_and_the_subscription_keeps_it(
    app: TestApp,
) {
    let plan = plan(&app, true).await;
    let coupon = coupon(
        &app,
        json!({"name": "20 %", "percent_off_bps": 2_000, "duration": "repeating",
               "duration_in_periods": 3}),
    )
    .await;
    let session = new_session(&app, &plan, json!({"coupon_id": coupon, "quantity": 2})).await;
    assert_eq!(session["amount_subtotal_cents"], 9_980_000);
    assert_eq!(session["amount_in_cents"], 7_984_000);
    assert_eq!(session["quantity"], 2);
    assert_eq!(
        coupon_redeemed(&app, &coupon).await,
        0,
        "not before a payment"
    );
    let id = session["id"].as_str().expect("id");
    let (status, paid) = pay(&app, id, "4242424242424242").await;
    assert_eq!(status, 200, "{paid}");
    assert_eq!(paid["summary"]["amount_in_cents"], 7_984_000);
    let sub = paid["subscription_id"].as_str().expect("subscription");
    let (_, sub) = read(app.get(&format!("/v1/subscriptions/{sub}")).await).await;
    assert_eq!(sub["quantity"], 2);
    assert_eq!(sub["discount"]["coupon_id"], coupon.as_str());
    assert_eq!(
        sub["discount"]["periods_left"], 2,
        "the first period took part"
    );
    assert_eq!(coupon_redeemed(&app, &coupon).await, 1);
    let (_, invoices) = read(
        app.get(&format!(
            "/v1/invoices?subscription_id={}",
            sub["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    let invoice = &invoices["data"][0];
    assert_eq!(invoice["total_cents"], 7_984_000);
    assert_eq!(invoice["discount_cents"], 1_996_000);
    assert_eq!(invoice["lines"][0]["quantity"], 2);
}

async fn a_declined_checkout_payment_gives_its_redemption_back(app: TestApp) {
    let plan = plan(&app, true).await;
    let coupon = coupon(
        &app,
        json!({"name": "Uno", "amount_off_cents": 990_000, "duration": "once",
               "max_redemptions": 1}),
    )
    .await;
    code(&app, &coupon, "UNO").await;
    let session = new_session(&app, &plan, json!({"promotion_code": "uno"})).await;
    assert_eq!(session["amount_in_cents"], 4_000_000);
    let id = session["id"].as_str().expect("id");
    let (status, declined) = pay(&app, id, "4111111111111111").await;
    assert_eq!(status, 422, "{declined}");
    assert_eq!(
        coupon_redeemed(&app, &coupon).await,
        0,
        "the declined payment's redemption is given back"
    );
    let (status, paid) = pay(&app, id, "4242424242424242").await;
    assert_eq!(status, 200, "{paid}");
    assert_eq!(paid["summary"]["amount_in_cents"], 4_000_000);
    assert_eq!(coupon_redeemed(&app, &coupon).await, 1);
}

async fn a_code_field_is_offered_only_where_the_merchant_allows_it(app: TestApp) {
    let plan = plan(&app, true).await;
    let coupon = coupon(
        &app,
        json!({"name": "10 %", "percent_off_bps": 1_000, "duration": "once"}),
    )
    .await;
    code(&app, &coupon, "DIEZ").await;
    let closed = new_session(&app, &plan, json!({})).await;
    let closed_id = closed["id"].as_str().expect("id");
    let check = |session: String, code: &'static str| {
        app.client
            .post(app.url(&format!("/checkout/{session}/promotion-code")))
            .json(&json!({"code": code}))
            .send()
    };
    let (status, refused) = read(check(closed_id.to_owned(), "DIEZ").await.expect("send")).await;
    assert_eq!(status, 400, "{refused}");
    let token = card_token(&app, "4242424242424242").await;
    let mut body = token.payment_method();
    body["promotion_code"] = json!("DIEZ");
    let (status, refused) = read(
        app.client
            .post(app.url(&format!("/checkout/{closed_id}/complete")))
            .json(&body)
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "promotion_code");

    let open = new_session(&app, &plan, json!({"allow_promotion_codes": true})).await;
    let open_id = open["id"].as_str().expect("id").to_owned();
    let (status, wrong) = read(check(open_id.clone(), "NADA").await.expect("send")).await;
    assert_eq!(status, 400, "{wrong}");
    assert_eq!(wrong["error"]["param"], "code");
    // Another customer's code answers exactly as one that does not exist: the field tells a
    // guesser nothing.
    let (_, other) = read(
        app.post(
            "/v1/customers",
            json!({"email": "otra@example.co", "name": "Otra"}),
        )
        .await,
    )
    .await;
    let (status, _) = read(
        app.post(
            "/v1/promotion-codes",
            json!({"coupon_id": coupon, "code": "AJENO", "customer_id": other["id"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    let (status, theirs) = read(check(open_id.clone(), "AJENO").await.expect("send")).await;
    assert_eq!(status, 400, "{theirs}");
    assert_eq!(theirs, wrong, "the same answer");
    let (status, right) = read(check(open_id.clone(), "diez").await.expect("send")).await;
    assert_eq!(status, 200, "{right}");
    assert_eq!(right["amount_in_cents"], 4_491_000);
    assert_eq!(right["discount_cents"], 499_000);
    assert_eq!(
        coupon_redeemed(&app, &coupon).await,
        0,
        "checking counts nothing"
    );
}

/// Types `code` in the page's field, applies it, and waits for the discount to show.
async fn apply_code(browser: &Browser, code: &str) {
    browser.fill("#promotion-code", code).await;
    browser.click("#apply-code").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_applies_a_code_on_the_page_and_pays_the_discounted_amount() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let plan = plan(&app, true).await;
    let coupon = coupon(
        &app,
        json!({"name": "10 %", "percent_off_bps": 1_000, "duration": "once"}),
    )
    .await;
    code(&app, &coupon, "DIEZ").await;

    // In English: the field and the lines say so.
    let english = new_session(&app, &plan, json!({"allow_promotion_codes": true})).await;
    let url = format!("{}?lang=en", english["url"].as_str().expect("url"));
    browser.client.goto(&url).await.expect("open the page");
    browser
        .wait_for_text("label[for=promotion-code]", "Promotion code")
        .await;
    apply_code(&browser, "nada").await;
    browser
        .wait_for_text("#promotion-code-error", "not valid")
        .await;
    apply_code(&browser, "diez").await;
    browser.wait_for_text("#discount", "4,990.00").await;
    assert!(browser.text("#due").await.contains("44,910.00"));
    assert!(browser.text("#discount-line").await.contains("Discount"));
    browser.screenshot("checkout-code-applied-en").await;

    // In Spanish, then paid.
    let spanish = new_session(&app, &plan, json!({"allow_promotion_codes": true})).await;
    let id = spanish["id"].as_str().expect("id").to_owned();
    let url = format!("{}?lang=es", spanish["url"].as_str().expect("url"));
    browser.client.goto(&url).await.expect("open the page");
    browser
        .wait_for_text("label[for=promotion-code]", "Código promocional")
        .await;
    apply_code(&browser, "DIEZ").await;
    browser.wait_for_text("#discount", "4.990,00").await;
    browser.screenshot("checkout-code-applied-es").await;
    assert!(browser.text("#discount-line").await.contains("Descuento"));
    assert!(browser.text("#pay-label").await.contains("44.910,00"));
    browser
        .wait_for_attribute("#terms-link", "href", "https://")
        .await;
    browser
        .wait_for_attribute("#personal-data-link", "href", "https://")
        .await;
    browser.click("#accept-terms").await;
    browser.click("#accept-personal-data").await;
    browser.wait_enabled("#pay-button").await;
    browser.fill("#card-number", "4242 4242 4242 4242").await;
    browser.fill("#card-expiry", "1234").await;
    browser.fill("#card-cvc", "123").await;
    browser.fill("#card-holder", "Ana Gómez").await;
    browser.click("#pay-button").await;
    browser.wait_for_text("#confirmation h1", "").await;
    browser.wait_for_text("#summary-amount", "44.910,00").await;
    let (_, session) = read(app.get(&format!("/v1/checkout-sessions/{id}")).await).await;
    assert_eq!(session["status"], "complete");
    let sub = session["subscription_id"].as_str().expect("subscription");
    let (_, charges) = read(app.get(&format!("/v1/charges?subscription_id={sub}")).await).await;
    assert_eq!(charges["data"][0]["amount_cents"], 4_491_000);
    assert_eq!(coupon_redeemed(&app, &coupon).await, 1);
    browser.close().await;
}
