//! The hosted page in a real browser (headless Chromium): a customer accepts the processor's
//! two documents, then types a card (which the page tokenizes with the sandbox processor) or a
//! Nequi number (which the sandbox "approves in the app" after its delay, while the page polls),
//! and the page completes the session. SQLite only: the page and the browser do not depend on
//! the database, and `checkout_payment.rs` runs every API path of the same flows on both.

use crate::checkout::{new_session, plan};
use crate::common::browser::Browser;
use crate::common::{Backend, TestApp, read, spawn_app};
use serde_json::json;

/// A merchant's site to land on: `/thanks` answers a small page.
async fn merchant_site() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let site = axum::Router::new().route(
        "/thanks",
        axum::routing::get(|| async { axum::response::Html("<h1>Thanks for subscribing</h1>") }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, site).await;
    });
    base
}

async fn type_card(browser: &Browser, number: &str) {
    browser.fill("#card-number", number).await;
    browser.fill("#card-expiry", "1234").await;
    browser.fill("#card-cvc", "123").await;
    browser.fill("#card-holder", "Ana Gómez").await;
}

async fn count(app: &TestApp, path: &str) -> usize {
    let (_, body) = read(app.get(path).await).await;
    body["data"].as_array().expect("data").len()
}

/// Waits for the processor's two documents to be linked, then accepts both.
async fn accept_documents(browser: &Browser) {
    browser
        .wait_for_attribute("#terms-link", "href", "https://")
        .await;
    browser
        .wait_for_attribute("#personal-data-link", "href", "https://")
        .await;
    browser.click("#accept-terms").await;
    browser.click("#accept-personal-data").await;
    browser.wait_enabled("#pay-button").await;
}

/// Chooses Nequi, types `phone` and pays; the page then waits for the customer in the app.
async fn pay_by_nequi(browser: &Browser, phone: &str) {
    browser.click("#method-nequi").await;
    browser.fill("#nequi-phone", phone).await;
    browser.click("#pay-button").await;
    browser.wait_for_text("#nequi-waiting", "Nequi").await;
}

/// The one payment method of the account's one customer.
async fn the_payment_method(app: &TestApp) -> serde_json::Value {
    let (_, customers) = read(app.get("/v1/customers").await).await;
    let customer = customers["data"][0]["id"].as_str().expect("customer");
    let (_, methods) = read(
        app.get(&format!("/v1/customers/{customer}/payment-methods"))
            .await,
    )
    .await;
    methods["data"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_pays_in_the_browser_and_lands_on_the_success_url() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let shop = merchant_site().await;
    let plan = plan(&app, true).await;
    let session = new_session(
        &app,
        &plan,
        json!({"success_url": format!("{shop}/thanks?order=42"), "cancel_url": format!("{shop}/cart")}),
    )
    .await;
    let id = session["id"].as_str().expect("id");
    browser
        .client
        .goto(session["url"].as_str().expect("url"))
        .await
        .expect("open the page");
    // Both documents are linked as the processor gave them; Pay waits for both boxes.
    let terms = browser
        .wait_for_attribute("#terms-link", "href", "https://")
        .await;
    let personal = browser
        .wait_for_attribute("#personal-data-link", "href", "https://")
        .await;
    assert!(terms.contains("reglamento"), "{terms}");
    assert!(personal.contains("datos-personales"), "{personal}");
    assert!(browser.text("#amount").await.contains("49"));
    browser.screenshot("checkout-open-phone").await;
    browser.click("#accept-terms").await;
    assert!(!browser.is_enabled("#pay-button").await, "one box only");
    browser.click("#accept-personal-data").await;
    browser.wait_enabled("#pay-button").await;
    browser.click("#accept-terms").await;
    assert!(!browser.is_enabled("#pay-button").await, "one box only");
    browser.click("#accept-terms").await;
    browser.wait_enabled("#pay-button").await;
    browser.scroll_to(".documents").await;
    browser.screenshot("checkout-both-documents").await;
    // Wider than 760 px the order and the form sit side by side.
    browser
        .client
        .set_window_size(1280, 900)
        .await
        .expect("resize");
    browser.screenshot("checkout-open-desktop").await;
    type_card(&browser, "4242 4242 4242 4242").await;
    browser.screenshot("checkout-filled").await;
    browser.click("#pay-button").await;

    let landed = browser.wait_for_url(&format!("{shop}/thanks")).await;
    let query: std::collections::HashMap<_, _> = landed.query_pairs().into_owned().collect();
    let (_, session) = read(app.get(&format!("/v1/checkout-sessions/{id}")).await).await;
    assert_eq!(session["status"], "complete");
    assert_eq!(query["order"], "42");
    assert_eq!(
        query["subscription_id"],
        session["subscription_id"].as_str().expect("sub")
    );
    assert_eq!(query["status"], "APPROVED");
    assert_eq!(query["amount_in_cents"], "4990000");
    assert_eq!(query["currency"], "COP");
    assert!(!landed.as_str().contains('@'), "no e-mail in {landed}");
    browser.wait_for_text("h1", "Thanks").await;
    browser.screenshot("checkout-landed-on-success-url").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_card_then_a_good_one_in_the_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let plan = plan(&app, true).await;
    let session = new_session(&app, &plan, json!({})).await;
    let url = format!("{}?lang=es", session["url"].as_str().expect("url"));
    browser.client.goto(&url).await.expect("open the page");
    browser.wait_for_text("#accept-hint", "dos casillas").await;
    browser.screenshot("checkout-open-es").await;
    accept_documents(&browser).await;

    // Invalid input is caught on the page, before anything is sent.
    browser.fill("#card-number", "4242 4242 4242 4241").await;
    browser.click("#pay-button").await;
    browser
        .wait_for_text("#card-number-error", "no es válido")
        .await;
    browser.wait_for_text("#card-cvc-error", "CVC").await;
    browser.screenshot("checkout-inline-errors").await;

    type_card(&browser, "4111 1111 1111 1111").await;
    browser.click("#pay-button").await;
    browser.wait_for_text("#form-error", "rechazada").await;
    browser.wait_enabled("#pay-button").await;
    browser.screenshot("checkout-declined").await;
    assert_eq!(count(&app, "/v1/customers").await, 0);
    assert_eq!(count(&app, "/v1/subscriptions").await, 0);

    // The page cleared the card number and CVC: try another card.
    browser.fill("#card-number", "4242 4242 4242 4242").await;
    browser.fill("#card-cvc", "123").await;
    browser.click("#pay-button").await;
    browser
        .wait_for_text("#confirmation", "¡Pago aprobado!")
        .await;
    assert!(browser.text("#summary-method").await.contains("4242"));
    browser.screenshot("checkout-confirmation").await;
    let (_, session) = read(
        app.get(&format!(
            "/v1/checkout-sessions/{}",
            session["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    assert_eq!(session["status"], "complete");
    assert_eq!(count(&app, "/v1/subscriptions").await, 1);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_pays_with_nequi_in_the_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let plan = plan(&app, true).await;
    let session = new_session(&app, &plan, json!({})).await;
    let url = format!("{}?lang=es", session["url"].as_str().expect("url"));
    browser.client.goto(&url).await.expect("open the page");
    accept_documents(&browser).await;
    // A number Nequi cannot have is caught on the page.
    browser.click("#method-nequi").await;
    browser.fill("#nequi-phone", "2991111111").await;
    browser.click("#pay-button").await;
    browser
        .wait_for_text("#nequi-phone-error", "empiece por 3")
        .await;
    browser.screenshot("checkout-nequi-form").await;

    pay_by_nequi(&browser, "399 111 1111").await;
    assert!(
        browser
            .text("#nequi-waiting")
            .await
            .contains("399 111 1111"),
        "the waiting screen names the number"
    );
    browser.screenshot("checkout-nequi-waiting").await;
    browser
        .wait_for_text("#confirmation", "¡Pago aprobado!")
        .await;
    assert_eq!(browser.text("#summary-method").await, "Nequi ···1111");
    browser.screenshot("checkout-nequi-confirmation").await;
    let (_, session) = read(
        app.get(&format!(
            "/v1/checkout-sessions/{}",
            session["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    assert_eq!(session["status"], "complete");
    let method = the_payment_method(&app).await;
    assert_eq!(
        (&method["type"], &method["last4"]),
        (&json!("nequi"), &json!("1111"))
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nequi_payment_declined_in_the_app_then_a_card_in_the_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let plan = plan(&app, true).await;
    let session = new_session(&app, &plan, json!({})).await;
    let url = format!("{}?lang=en", session["url"].as_str().expect("url"));
    browser.client.goto(&url).await.expect("open the page");
    accept_documents(&browser).await;

    pay_by_nequi(&browser, "3992222222").await;
    browser.wait_for_text("#form-error", "declined").await;
    browser.wait_enabled("#pay-button").await;
    browser.screenshot("checkout-nequi-declined").await;
    assert_eq!(count(&app, "/v1/customers").await, 0);
    assert_eq!(count(&app, "/v1/subscriptions").await, 0);

    // The boxes stay checked: a card pays at once.
    browser.click("#method-card").await;
    type_card(&browser, "4242 4242 4242 4242").await;
    browser.click("#pay-button").await;
    browser
        .wait_for_text("#confirmation", "Payment approved!")
        .await;
    assert!(browser.text("#summary-method").await.contains("4242"));
    browser
        .screenshot("checkout-card-after-nequi-decline")
        .await;
    let method = the_payment_method(&app).await;
    assert_eq!(
        (&method["type"], &method["last4"]),
        (&json!("card"), &json!("4242"))
    );
    assert_eq!(count(&app, "/v1/subscriptions").await, 1);
    browser.close().await;
}
