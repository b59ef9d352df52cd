//! Issue 49, the console in a real browser (headless Chromium): an admin invited by the API
//! sets their password on the invitation's page, signs in on the login page, searches a
//! customer, opens them and their subscription, refunds a charge after reading the
//! confirmation, changes the plan after its preview, and downloads the month's export. Every
//! page is checked at a phone's width and a desktop's: nothing wider than the screen, nothing
//! axe-core (WCAG 2 AA) finds; screenshots go to `test-artifacts/console-*.png`. SQLite only:
//! `console.rs` runs every rule on both databases.

use crate::common::browser::Browser;
use crate::common::{Backend, read, spawn_app};
use crate::console::{PASSWORD, invite};
use crate::subscriptions::{get, shop, subscribe};
use serde_json::{Value, json};

/// Checks the open page at both widths, and keeps a screenshot of each.
async fn looked_at(browser: &Browser, name: &str) {
    for (width, height, size) in [(390, 844, "phone"), (1280, 900, "desktop")] {
        browser
            .client
            .set_window_size(width, height)
            .await
            .expect("resize");
        let wider: Value = browser
            .client
            .execute(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                vec![],
            )
            .await
            .expect("widths");
        if wider != json!(0) {
            // What sticks out, to say where to look.
            let out: Value = browser
                .client
                .execute(
                    "return [...document.querySelectorAll('body *')]
                       .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
                       .slice(0, 8).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));",
                    vec![],
                )
                .await
                .expect("what sticks out");
            panic!("{name}: {wider} px wider than the {size}'s screen: {out}");
        }
        if let Some(violations) = browser.accessibility_violations().await {
            assert!(
                violations.is_empty(),
                "axe-core, {name} on a {size}: {violations:#?}"
            );
        }
        browser.screenshot(&format!("console-{name}-{size}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_signs_in_finds_a_customer_refunds_changes_plan_and_exports() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app(Backend::Sqlite).await.expect("sqlite");
    app.lift_rate_limit().await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub = sub["id"].as_str().expect("id").to_owned();
    let bigger = app.create_plan("Empresarial", 9_000_000, 90_000_000).await;
    let bigger = bigger["id"].as_str().expect("id").to_owned();
    let url = invite(&app, "marta@tienda.example.co", "admin").await;

    browser
        .client
        .goto(&url)
        .await
        .expect("open the invitation");
    browser.wait_for_text("h1", "Crea tu contraseña").await;
    looked_at(&browser, "invitation").await;
    browser.fill("#password", PASSWORD).await;
    browser.fill("#again", PASSWORD).await;
    browser.click("button[type=submit]").await;
    browser.wait_for_text("h1", "Resumen").await;
    looked_at(&browser, "home").await;

    // Signed out, then in again through the login page.
    browser.click(".who form button").await;
    browser.wait_for_text("h1", "Entrar a la consola").await;
    looked_at(&browser, "login").await;
    browser.fill("#email", "marta@tienda.example.co").await;
    browser.fill("#password", PASSWORD).await;
    browser.click("button[type=submit]").await;
    browser.wait_for_text("h1", "Resumen").await;

    browser.click("nav a[href='/console/customers']").await;
    browser.wait_for_text("h1", "Clientes").await;
    browser.fill("#q", "ana@").await;
    browser.click("form.search button").await;
    browser.wait_for_text("table", "ana@example.co").await;
    looked_at(&browser, "customers").await;
    browser.click("table a").await;
    browser.wait_for_text("h1", "Ana").await;
    looked_at(&browser, "customer").await;
    browser
        .click(&format!("a[href='/console/subscriptions/{sub}']"))
        .await;
    browser.wait_for_text("h1", "Pro").await;
    looked_at(&browser, "subscription").await;

    // A refund of $10.000 after its confirmation.
    browser.fill("input[name=amount]", "10.000").await;
    browser.click("form[action$='/refund'] button").await;
    browser.wait_for_text("h1", "¿Reembolsar este cobro?").await;
    assert!(browser.text("main").await.contains("$ 10.000,00"));
    looked_at(&browser, "refund-confirm").await;
    browser.fill("#reason", "Cobro doble").await;
    browser.click("main form button[type=submit]").await;
    browser
        .wait_for_text(".flash", "Reembolso solicitado.")
        .await;
    let (_, charges) = read(app.get(&format!("/v1/charges?subscription_id={sub}")).await).await;
    assert_eq!(
        charges["data"][0]["refunded_amount_cents"], 1_000_000,
        "{charges}"
    );

    // A plan change after its preview.
    browser
        .client
        .execute(
            "document.querySelector('#plan_id').value = arguments[0];",
            vec![json!(bigger)],
        )
        .await
        .expect("choose the plan");
    browser.click("form[action$='/change-plan'] button").await;
    browser.wait_for_text("h1", "¿Cambiar de plan?").await;
    assert!(browser.text("main").await.contains("Se cobra ahora:"));
    looked_at(&browser, "change-plan-confirm").await;
    browser.click("main form button[type=submit]").await;
    browser.wait_for_text(".flash", "Hecho.").await;
    assert_eq!(get(&app, &sub).await["plan_id"], bigger.as_str());
    browser
        .wait_for_text(".timeline", "marta@tienda.example.co")
        .await;

    // The portal link e-mailed to the customer, confirmed first, read as their mail program
    // reads it and opened in Chromium.
    let sink = crate::notices::SmtpSink::start();
    crate::notices::turn_email_on(&app, &sink).await;
    browser
        .client
        .goto(&app.url(&format!("/console/subscriptions/{sub}")))
        .await
        .expect("open");
    browser.click("form[action$='/portal-link'] button").await;
    browser
        .wait_for_text("h1", "¿Enviar el enlace del portal a ana@example.co")
        .await;
    looked_at(&browser, "portal-link-confirm").await;
    browser.click("main form button[type=submit]").await;
    browser
        .wait_for_text(".flash", "Correo enviado a ana@example.co")
        .await;
    let dir = tempfile::tempdir().expect("dir");
    let mail = crate::notices::as_read(&sink.messages()[0], dir.path());
    assert!(
        mail["text"]
            .as_str()
            .expect("text")
            .contains("/portal/bpt_"),
        "{mail}"
    );
    let file = dir.path().join("portal.html");
    std::fs::write(&file, mail["html"].as_str().expect("html")).expect("write");
    browser
        .client
        .goto(&format!("file://{}", file.display()))
        .await
        .expect("open the e-mail");
    browser.wait_for_text("h1", "Tu acceso al portal de").await;
    looked_at(&browser, "portal-mail").await;

    for (path, title, name) in [
        ("/console/invoices", "Facturas", "invoices"),
        ("/console/exports", "Exportar", "exports"),
        ("/console/settings", "Ajustes", "settings"),
    ] {
        browser.client.goto(&app.url(path)).await.expect("open");
        browser.wait_for_text("h1", title).await;
        looked_at(&browser, name).await;
    }
    // A settings form as a person fills it in: the seller's legal name, saved by the API.
    browser
        .fill("#seller-legal_name", "Tienda Ejemplo S.A.S.")
        .await;
    browser
        .click("form[action$='/forms/seller'] button[type=submit]")
        .await;
    browser.wait_for_text(".flash", "Guardado.").await;
    looked_at(&browser, "settings-saved").await;
    browser
        .client
        .execute(
            "document.querySelector('form[action$=\"/forms/email\"]').scrollIntoView();",
            vec![],
        )
        .await
        .expect("scroll");
    looked_at(&browser, "settings-forms").await;
    let (_, invoicing) = crate::common::read(app.get("/v1/account/invoicing").await).await;
    assert_eq!(invoicing["legal_name"], "Tienda Ejemplo S.A.S.");
    // The export as the browser downloads it: the form's month, with the browser's cookie.
    browser
        .client
        .goto(&app.url("/console/exports"))
        .await
        .expect("open");
    let month = browser.attribute("#month", "value").await.expect("month");
    let cookie = browser
        .client
        .get_named_cookie("billing_console")
        .await
        .expect("the session's cookie");
    let response = app
        .client
        .get(app.url(&format!(
            "/console/exports/download?month={month}&format=csv"
        )))
        .header(
            reqwest::header::COOKIE,
            format!("billing_console={}", cookie.value()),
        )
        .send()
        .await
        .expect("download");
    assert_eq!(response.status(), 200);
    let downloaded = response.text().await.expect("csv");
    let csv = downloaded.as_str();
    assert!(csv.starts_with("type,number,"), "{csv}");
    assert!(
        csv.lines().any(|l| l.starts_with("credit_note,")),
        "the refund's credit note: {csv}"
    );
    browser.close().await;
}
