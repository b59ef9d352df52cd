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
    a_first_time_code_goes_to_one_first_purchase_of_an_address,
    a_free_first_period_code_answers_as_a_wrong_one_and_tries_are_limited_per_address_and_account,
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

/// `POST /checkout/{session}/promotion-code` with `code`, from `from` (an address a proxy on
/// this host names in `X-Forwarded-For`; loopback is a trusted proxy by default).
async fn check_code(app: &TestApp, session: &str, code: &str, from: &str) -> (u16, Value) {
    read(
        app.client
            .post(app.url(&format!("/checkout/{session}/promotion-code")))
            .header("x-forwarded-for", from)
            .json(&json!({"code": code}))
            .send()
            .await
            .expect("send"),
    )
    .await
}

/// Pays `session` with the card `number` and the code `code` typed on the page.
async fn pay_with_code(app: &TestApp, session: &str, number: &str, code: &str) -> (u16, Value) {
    let token = card_token(app, number).await;
    let mut body = token.payment_method();
    body["promotion_code"] = json!(code);
    read(
        app.client
            .post(app.url(&format!("/checkout/{session}/complete")))
            .json(&body)
            .send()
            .await
            .expect("send"),
    )
    .await
}

/// Issue 46, R7 (CONTRACT §14): a `first_time_only` code is for a customer with no approved or
/// pending charge and no other subscription, and a checkout's payer is known by the address
/// (a customer made by an earlier checkout is the same person, whatever the case); of one
/// address's concurrent first purchases exactly one gets the code; a declined payment gives
/// the first purchase back.
async fn a_first_time_code_goes_to_one_first_purchase_of_an_address(app: TestApp) {
    let plan = plan(&app, true).await;
    let coupon = coupon(
        &app,
        json!({"name": "10 %", "percent_off_bps": 1_000, "duration": "once"}),
    )
    .await;
    let body = json!({"coupon_id": coupon, "code": "PRIMERA", "first_time_only": true});
    let (status, made) = read(app.post("/v1/promotion-codes", body).await).await;
    assert_eq!(status, 201, "{made}");
    let with_field = json!({"allow_promotion_codes": true});

    // Ana bought before, without a code; her address in other letters is still Ana.
    let first = new_session(&app, &plan, json!({})).await;
    let (status, paid) = pay(&app, first["id"].as_str().expect("id"), "4242424242424242").await;
    assert_eq!(status, 200, "{paid}");
    let mut again = with_field.clone();
    again["customer"] = json!({"email": "ANA@Example.co", "name": "Ana Gómez"});
    let again = new_session(&app, &plan, again).await;
    let again_id = again["id"].as_str().expect("id");
    let (status, refused) = check_code(&app, again_id, "primera", "198.51.100.1").await;
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = pay_with_code(&app, again_id, "4242424242424242", "PRIMERA").await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "promotion_code");

    // Bea's first purchase is declined: it gives the code back, and her next one takes it.
    let mut bea = with_field.clone();
    bea["customer"] = json!({"email": "bea@example.co", "name": "Bea Ruiz"});
    let declined = new_session(&app, &plan, bea.clone()).await;
    let declined_id = declined["id"].as_str().expect("id");
    let (status, answer) = pay_with_code(&app, declined_id, "4111111111111111", "PRIMERA").await;
    assert_eq!(status, 422, "{answer}");
    let (status, answer) = pay_with_code(&app, declined_id, "4242424242424242", "PRIMERA").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["summary"]["amount_in_cents"], 4_491_000);

    // Cami opens four checkouts and pays them at once with the code: one gets it.
    let mut cami = with_field;
    cami["customer"] = json!({"email": "cami@example.co", "name": "Cami Díaz"});
    let mut sessions = Vec::new();
    for _ in 0..4 {
        let session = new_session(&app, &plan, cami.clone()).await;
        sessions.push(session["id"].as_str().expect("id").to_owned());
    }
    let answers = futures::future::join_all(
        sessions
            .iter()
            .map(|id| pay_with_code(&app, id, "4242424242424242", "PRIMERA")),
    )
    .await;
    let discounted = answers
        .iter()
        .filter(|(status, answer)| {
            *status == 200 && answer["summary"]["amount_in_cents"] == 4_491_000
        })
        .count();
    assert_eq!(discounted, 1, "{answers:?}");
    for (status, answer) in &answers {
        assert!(
            *status == 400 || answer["summary"]["amount_in_cents"] == 4_491_000,
            "{answers:?}"
        );
    }
    assert_eq!(
        coupon_redeemed(&app, &coupon).await,
        2,
        "Bea's and one of Cami's"
    );
}

/// Issue 46, R8: a code that would make the first period free is answered as one that does
/// not exist, on the field and on the payment; codes are tried at most 20 times a minute from
/// one client address and 300 times a minute on one account's sessions, however many sessions
/// are made for it.
async fn a_free_first_period_code_answers_as_a_wrong_one_and_tries_are_limited_per_address_and_account(
    app: TestApp,
) {
    let plan = plan(&app, true).await;
    let free = coupon(
        &app,
        json!({"name": "Gratis", "percent_off_bps": 10_000, "duration": "once"}),
    )
    .await;
    code(&app, &free, "GRATIS").await;
    let with_field = json!({"allow_promotion_codes": true});
    let session = new_session(&app, &plan, with_field.clone()).await;
    let id = session["id"].as_str().expect("id");
    let (status, wrong) = check_code(&app, id, "NADA", "198.51.100.1").await;
    assert_eq!(status, 400, "{wrong}");
    let (status, gratis) = check_code(&app, id, "gratis", "198.51.100.1").await;
    assert_eq!((status, &gratis), (400, &wrong), "the same answer");
    let (status, wrong) = pay_with_code(&app, id, "4242424242424242", "NADA").await;
    assert_eq!(status, 400, "{wrong}");
    let (status, gratis) = pay_with_code(&app, id, "4242424242424242", "GRATIS").await;
    assert_eq!((status, &gratis), (400, &wrong), "the same answer");

    // One address, a new session for every try: the 21st try of the minute is refused.
    app.lift_rate_limit().await;
    let mut sessions = Vec::new();
    for _ in 0..51 {
        let session = new_session(&app, &plan, with_field.clone()).await;
        sessions.push(session["id"].as_str().expect("id").to_owned());
    }
    for (i, session) in sessions.iter().enumerate().take(20) {
        let (status, answer) = check_code(&app, session, &format!("X{i}"), "203.0.113.7").await;
        assert_eq!(status, 400, "try {i}: {answer}");
    }
    let (status, answer) = check_code(&app, &sessions[20], "X20", "203.0.113.7").await;
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["error"]["type"], "rate_limit");
    let (status, answer) = check_code(&app, &sessions[21], "X21", "203.0.113.8").await;
    assert_eq!(status, 400, "another address has its own: {answer}");

    // Many addresses, ten tries on each fresh session: the account's tries of the minute so
    // far are the first session's four, the twenty and the one above; the 301st is refused.
    let mut tries = 4 + 20 + 1;
    'sessions: for session in &sessions[22..50] {
        for _ in 0..10 {
            if tries == 300 {
                break 'sessions;
            }
            let from = format!("192.0.2.{}", tries % 250 + 1);
            let (status, answer) = check_code(&app, session, "X", &from).await;
            assert_eq!(status, 400, "try {}: {answer}", tries + 1);
            tries += 1;
        }
    }
    assert_eq!(tries, 300);
    let (status, answer) = check_code(&app, &sessions[50], "X", "192.0.2.252").await;
    assert_eq!(status, 429, "the account's 301st try: {answer}");
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
