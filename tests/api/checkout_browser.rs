//! The hosted page in a real browser (headless Chromium): a customer types a card, the page
//! tokenizes it with the sandbox processor and completes the session. SQLite only: the page
//! and the browser do not depend on the database, and `checkout.rs` runs every API path of the
//! same flow on both databases.

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
    // The pay button is enabled once the processor's terms (and acceptance token) are loaded.
    browser.wait_enabled("#pay-button").await;
    assert!(browser.text("#amount").await.contains("49"));
    browser.screenshot("checkout-open-phone").await;
    // Wider than 760 px the order and the form sit side by side.
    browser
        .client
        .set_window_size(1280, 900)
        .await
        .expect("resize");
    browser.screenshot("checkout-open-desktop").await;
    type_card(&browser, "4242 4242 4242 4242").await;
    browser.click("#accept-terms").await;
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
    browser.wait_enabled("#pay-button").await;
    browser.screenshot("checkout-open-es").await;

    // Invalid input is caught on the page, before anything is sent.
    browser.fill("#card-number", "4242 4242 4242 4241").await;
    browser.click("#pay-button").await;
    browser
        .wait_for_text("#card-number-error", "no es válido")
        .await;
    browser
        .wait_for_text("#accept-terms-error", "aceptar")
        .await;
    browser.screenshot("checkout-inline-errors").await;

    type_card(&browser, "4111 1111 1111 1111").await;
    browser.click("#accept-terms").await;
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
    assert!(browser.text("#summary-card").await.contains("4242"));
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
