//! The customer portal in a real browser (headless Chromium): a customer whose card was
//! declined opens the link the merchant sent, replaces the card (tokenized in the page with the
//! sandbox processor, both acceptances) and sees the subscription recover; downloads the
//! invoice that recovery issued; switches plan after reading what it will cost now; cancels,
//! giving a reason, and is told until when access lasts. Screenshots at phone and desktop
//! widths go to `test-artifacts/`. SQLite only: `portal.rs` runs every JSON path on both.

use crate::common::browser::Browser;
use crate::common::{Backend, TestApp, read, spawn_app};
use crate::portal::{open, path_of};
use crate::subscriptions::{advance, get, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

async fn overflow(browser: &Browser) -> Value {
    browser
        .client
        .execute(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
            vec![],
        )
        .await
        .expect("widths")
}

/// A past-due subscription (its card declines) of a shop that offers a switch to a bigger plan.
async fn declined_customer(app: &TestApp) -> (String, String, String) {
    let (shop, declining) = shop(app, "4111111111111111").await;
    let sub = id(&subscribe(app, &shop, &declining, json!({})).await);
    let bigger = id(&app.create_plan("Pro Max", 6_000_000, 60_000_000).await);
    let (status, body) = read(
        app.request(Method::PATCH, "/v1/account/portal")
            .json(&json!({"plan_switch": {"enabled": true, "plan_ids": [bigger]}}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    advance(app, 60).await;
    assert_eq!(get(app, &sub).await["status"], "past_due");
    (shop.customer, sub, bigger)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_fixes_their_card_switches_plan_and_cancels_in_the_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let (customer, sub, bigger) = declined_customer(&app).await;
    let session = open(
        &app,
        &customer,
        json!({"return_url": "https://shop.example.co/cuenta",
            "flow": {"type": "payment_method_update", "subscription_id": sub}}),
    )
    .await;
    let url = format!("{}?lang=es", session["url"].as_str().expect("url"));
    browser.client.goto(&url).await.expect("open the portal");
    // The flow opened the card panel; the subscription says what is wrong and names its plan.
    browser
        .wait_for_text(".subscription .plan-name", "Pro")
        .await;
    browser
        .wait_for_text(".subscription .warning", "no se pudo cobrar")
        .await;
    browser
        .wait_for_text("#method-title", "Cambiar tarjeta")
        .await;
    assert_eq!(
        overflow(&browser).await,
        json!(0),
        "nothing wider than a phone"
    );
    if let Some(violations) = browser.accessibility_violations().await {
        assert!(violations.is_empty(), "axe-core: {violations:#?}");
    }
    browser.screenshot("portal-past-due-phone").await;
    browser
        .wait_for_attribute("#terms-link", "href", "https://")
        .await;
    assert!(
        !browser.is_enabled("#method-save").await,
        "both acceptances first"
    );
    browser.fill("#card-number", "4242 4242 4242 4242").await;
    browser.fill("#card-expiry", "1234").await;
    browser.fill("#card-cvc", "123").await;
    browser.fill("#card-holder", "Ana Gómez").await;
    browser.click("#accept-terms").await;
    browser.click("#accept-personal-data").await;
    browser.wait_enabled("#method-save").await;
    browser.screenshot("portal-new-card-phone").await;
    browser.click("#method-save").await;
    browser.wait_for_text("#notice", "pago pendiente").await;
    browser
        .wait_for_text(".subscription .badge", "Activa")
        .await;
    assert_eq!(
        browser
            .attribute("#panel-method", "hidden")
            .await
            .as_deref(),
        Some("true"),
        "back from the action, the flow's panel stays closed"
    );
    assert!(
        browser
            .text(".subscription .pay-with")
            .await
            .contains("4242")
    );
    browser.screenshot("portal-recovered-phone").await;
    let now = get(&app, &sub).await;
    assert_eq!(now["status"], "active", "{now}");

    // The recovery's invoice is listed; its link downloads the PDF, no API key needed.
    browser.wait_for_text(".documents", "FV-1").await;
    let href = browser
        .attribute("a.pdf", "href")
        .await
        .expect("a PDF link");
    let pdf = app.client.get(&href).send().await.expect("download");
    assert_eq!(pdf.status(), 200);
    assert_eq!(
        pdf.headers()["content-type"].to_str().expect("type"),
        "application/pdf"
    );
    assert!(pdf.bytes().await.expect("bytes").starts_with(b"%PDF-"));

    // Switch plan: the panel says what is charged now before anything happens.
    browser
        .client
        .set_window_size(1280, 900)
        .await
        .expect("resize");
    browser
        .click(&format!(
            "button.open[data-panel='switch'][data-sub='{sub}']"
        ))
        .await;
    browser
        .wait_for_text("#switch-preview", "Se cobrará ahora")
        .await;
    let preview = browser.text("#switch-preview").await;
    browser.screenshot("portal-switch-preview-desktop").await;
    assert_eq!(
        get(&app, &sub).await["plan_id"],
        now["plan_id"],
        "a preview changes nothing"
    );
    browser.click("#switch-confirm").await;
    browser.wait_for_text("#notice", "cambiaste de plan").await;
    assert_eq!(get(&app, &sub).await["plan_id"], bigger.as_str());
    let (_, charges) = read(app.get(&format!("/v1/charges?subscription_id={sub}")).await).await;
    let cents = charges["data"][0]["amount_cents"].as_i64().expect("cents");
    let pesos = format!("{},{:02}", group(cents / 100), cents % 100);
    assert!(preview.contains(&pesos), "{preview} says {pesos}");

    // Cancel: when access ends is said, the reason is asked for.
    browser
        .click(&format!(
            "button.open[data-panel='cancel'][data-sub='{sub}']"
        ))
        .await;
    browser
        .wait_for_text("#cancel-when", "acceso hasta el")
        .await;
    if let Some(violations) = browser.accessibility_violations().await {
        assert!(violations.is_empty(), "axe-core, desktop: {violations:#?}");
    }
    browser.fill("#cancel-reason", "Ya no lo uso").await;
    browser.screenshot("portal-cancel-desktop").await;
    browser.click("#cancel-confirm").await;
    browser.wait_for_text("#notice", "quedó cancelada").await;
    browser.wait_for_text(".subscription", "Termina el").await;
    browser.screenshot("portal-canceled-desktop").await;
    assert_eq!(get(&app, &sub).await["cancel_at_period_end"], true);
    let (_, read_back) = read(
        app.get(&format!("/v1/portal-sessions/{}", id(&session)))
            .await,
    )
    .await;
    let actions: Vec<&str> = read_back["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| a["action"].as_str().expect("action"))
        .collect();
    assert_eq!(
        actions,
        [
            "payment_method_update",
            "plan_switch",
            "subscription_cancel"
        ]
    );
    assert_eq!(read_back["actions"][2]["detail"]["reason"], "Ya no lo uso");
    browser.close().await;
}

/// 1234567 → "1.234.567".
fn group(whole: i64) -> String {
    let digits = whole.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('.');
        }
        out.push(c);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_speaks_english_and_an_expired_link_says_so() {
    let Some(browser) = Browser::start_sized(1280, 900).await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let (customer, _, _) = declined_customer(&app).await;
    let session = open(&app, &customer, json!({"locale": "en"})).await;
    let url = session["url"].as_str().expect("url").to_owned();
    browser.client.goto(&url).await.expect("open the portal");
    browser.wait_for_text("h1", "Your account").await;
    browser
        .wait_for_text(".subscription .badge", "Payment due")
        .await;
    browser.screenshot("portal-english-desktop").await;
    // The invoicing data: a NIT with a wrong check digit is refused beside its field.
    browser.fill("#tax-id-number", "900123456-1").await;
    browser
        .client
        .execute(
            "document.getElementById('tax-id-type').value = 'NIT';",
            vec![],
        )
        .await
        .expect("select");
    browser.click("#invoicing-save").await;
    browser
        .wait_for_text("#tax-id-number-error", "check digit")
        .await;
    browser.fill("#tax-id-number", "900123456-8").await;
    browser.click("#invoicing-save").await;
    browser.wait_for_text("#notice", "Saved").await;
    let (_, stored) = read(app.get(&format!("/v1/customers/{customer}")).await).await;
    assert_eq!(stored["tax_id"]["number"], "900123456");
    let path = path_of(&app, &session);
    advance(&app, 3601).await;
    browser.client.goto(&url).await.expect("open again");
    browser.wait_for_text("#expired", "no longer valid").await;
    browser.screenshot("portal-expired").await;
    let status = app
        .client
        .get(app.url(&path))
        .send()
        .await
        .expect("send")
        .status();
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_token_is_stored_only_as_its_hash() {
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let (_, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": "ana@example.co", "name": "Ana"}),
        )
        .await,
    )
    .await;
    let session = open(&app, &id(&customer), json!({})).await;
    let token = path_of(&app, &session)
        .trim_start_matches("/portal/")
        .to_owned();
    // A write after the session's, so that it is on disk.
    app.create_plan("Pro", 100, 1_000).await;
    let holds = |needle: &str| crate::common::sqlite_files_hold(&app, needle);
    assert!(
        holds(&billing::secrets::sha256_hex(&token)),
        "its hash is stored"
    );
    assert!(!holds(&token), "the token is stored in the clear");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_replaces_a_declined_card_with_nequi_in_the_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    let (customer, sub, _) = declined_customer(&app).await;
    let session = open(
        &app,
        &customer,
        json!({"flow": {"type": "payment_method_update", "subscription_id": sub}}),
    )
    .await;
    let url = format!("{}?lang=es", session["url"].as_str().expect("url"));
    browser.client.goto(&url).await.expect("open the portal");
    browser
        .wait_for_attribute("#terms-link", "href", "https://")
        .await;
    browser.click("#kind-nequi").await;
    browser.click("#accept-terms").await;
    browser.click("#accept-personal-data").await;
    browser.wait_enabled("#method-save").await;
    // A number that is not a Colombian mobile is caught on the page.
    browser.fill("#nequi-phone", "2991111111").await;
    browser.click("#method-save").await;
    browser
        .wait_for_text("#nequi-phone-error", "empiece por 3")
        .await;
    // 3991111111 approves in the (sandbox) app after a few seconds; the page waits for it.
    browser.fill("#nequi-phone", "3991111111").await;
    browser.click("#method-save").await;
    browser.wait_for_text("#method-status", "Nequi").await;
    assert_eq!(
        browser.text("#method-error").await,
        "",
        "waiting is no error"
    );
    browser.screenshot("portal-nequi-waiting-phone").await;
    browser.wait_for_text("#notice", "pago pendiente").await;
    browser
        .wait_for_text(".subscription .pay-with", "1111")
        .await;
    let now = get(&app, &sub).await;
    assert_eq!(now["status"], "active", "{now}");
    let (_, methods) = read(
        app.get(&format!("/v1/customers/{customer}/payment-methods"))
            .await,
    )
    .await;
    assert_eq!(methods["data"][0]["type"], "nequi", "{methods}");
    assert_eq!(now["default_payment_method_id"], methods["data"][0]["id"]);
    browser.close().await;
}
