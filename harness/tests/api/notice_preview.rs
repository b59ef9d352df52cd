//! Issue 47, the notices' preview (`GET /v1/notices/preview`): each kind, in each language,
//! rendered by the same code as the notices sent, about made-up data and with the account's
//! name, with nothing written or sent; and each kind's e-mail as a customer's mail program shows
//! it, opened in Chromium at a phone's width and a desktop's: nothing wider than the screen,
//! nothing axe-core (WCAG 2 AA) finds, screenshots in `test-artifacts/`.

use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(every_kind_previews_in_both_languages_and_writes_nothing,);

const KINDS: [&str; 6] = [
    "receipt",
    "payment_failed",
    "card_expiring",
    "renewal_upcoming",
    "trial_ending",
    "subscription_canceled",
];

/// The WhatsApp template's parameters per kind (docs/notices.md's table).
fn parameters_of(kind: &str) -> usize {
    match kind {
        "receipt" => 6,
        "payment_failed" | "card_expiring" => 7,
        "subscription_canceled" => 4,
        _ => 5,
    }
}

async fn preview(app: &TestApp, query: &str) -> (u16, Value) {
    read(app.get(&format!("/v1/notices/preview?{query}")).await).await
}

async fn every_kind_previews_in_both_languages_and_writes_nothing(app: TestApp) {
    app.lift_rate_limit().await;
    let mut subjects = std::collections::BTreeSet::new();
    for kind in KINDS {
        for (locale, hello, lang) in [
            ("es", "Hola", "lang=\"es\""),
            ("en", "Hello", "lang=\"en\""),
        ] {
            let (status, shown) = preview(&app, &format!("kind={kind}&locale={locale}")).await;
            assert_eq!(status, 200, "{kind} {locale}: {shown}");
            assert_eq!(shown["kind"], kind);
            assert_eq!(shown["locale"], locale);
            let subject = shown["email"]["subject"].as_str().expect("subject");
            assert!(
                subjects.insert(subject.to_owned()),
                "one subject per kind and language: {subject}"
            );
            let text = shown["email"]["text"].as_str().expect("text");
            assert!(
                text.starts_with(&format!("{hello} Ana María Pérez,")),
                "{text}"
            );
            assert!(text.contains("Test account"), "the account's name: {text}");
            let html = shown["email"]["html"].as_str().expect("html");
            assert!(html.contains(lang), "{html}");
            assert!(html.contains("Ana María Pérez"), "{html}");
            let whatsapp = &shown["whatsapp"];
            assert_eq!(whatsapp["template"], kind);
            assert_eq!(whatsapp["language"], locale);
            let parameters = whatsapp["parameters"].as_array().expect("parameters");
            assert_eq!(parameters.len(), parameters_of(kind), "{kind}: {whatsapp}");
            assert!(
                parameters.iter().all(|p| p
                    .as_str()
                    .is_some_and(|p| !p.is_empty() && !p.contains('\n'))),
                "one line each, never empty: {whatsapp}"
            );
        }
    }
    // A failed payment's preview says what a real one says: amount, reason, next try, end, link.
    let (_, failed) = preview(&app, "kind=payment_failed&locale=es").await;
    let text = failed["email"]["text"].as_str().expect("text");
    for fact in [
        "Monto: $ 49.900,00",
        "Motivo: Fondos insuficientes",
        "Próximo intento:",
        "Se cancela el:",
        "/pay/pay_preview",
    ] {
        assert!(text.contains(fact), "{fact}: {text}");
    }
    // Without `locale`, the account's language.
    let (status, _) = read(
        app.request(Method::PATCH, "/v1/account/notices")
            .json(&json!({"locale": "en"}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200);
    let (_, english) = preview(&app, "kind=receipt").await;
    assert_eq!(english["locale"], "en");
    assert!(
        english["email"]["subject"]
            .as_str()
            .expect("subject")
            .starts_with("Receipt from")
    );
    // What is not a kind or a language is refused, naming the parameter.
    for (query, param) in [
        ("kind=invoice", "kind"),
        ("kind=receipt&locale=fr", "locale"),
    ] {
        let (status, refused) = preview(&app, query).await;
        assert_eq!(status, 400, "{query}: {refused}");
        if !query.is_empty() {
            assert_eq!(refused["error"]["param"], param, "{refused}");
        }
    }
    // Nothing was written: no notice, no pay link that opens.
    let (_, listed) = read(app.get("/v1/notices").await).await;
    assert_eq!(listed["data"], json!([]), "{listed}");
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let opened = no_redirects
        .get(app.url("/pay/pay_preview"))
        .send()
        .await
        .expect("send");
    assert_ne!(opened.status(), 303, "the preview's link opens nothing");
}

/// Each kind's e-mail as its customer sees it, in Chromium at a phone's and a desktop's width.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kinds_email_reads_well_on_a_phone_and_a_desktop() {
    let Some(browser) = crate::common::browser::Browser::start().await else {
        return;
    };
    let app = crate::common::spawn_app(crate::common::Backend::Sqlite)
        .await
        .expect("sqlite");
    app.lift_rate_limit().await;
    let dir = tempfile::tempdir().expect("dir");
    for kind in KINDS {
        let (status, shown) = preview(&app, &format!("kind={kind}&locale=es")).await;
        assert_eq!(status, 200, "{shown}");
        let file = dir.path().join(format!("{kind}.html"));
        std::fs::write(&file, shown["email"]["html"].as_str().expect("html")).expect("write");
        let url = format!("file://{}", file.display());
        let subject = shown["email"]["subject"].as_str().expect("subject");
        for (width, height, name) in [(412, 915, "phone"), (1280, 900, "desktop")] {
            browser
                .client
                .set_window_size(width, height)
                .await
                .expect("resize");
            browser.client.goto(&url).await.expect("open the e-mail");
            let title = if kind == "receipt" {
                "Gracias por tu pago"
            } else {
                subject
            };
            browser.wait_for_text("h1", title).await;
            let wider: Value = browser
                .client
                .execute(
                    "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                    vec![],
                )
                .await
                .expect("widths");
            assert_eq!(
                wider,
                json!(0),
                "{kind}: nothing wider than the {name}'s screen"
            );
            if let Some(violations) = browser.accessibility_violations().await {
                assert!(
                    violations.is_empty(),
                    "axe-core, {kind} on a {name}: {violations:#?}"
                );
            }
            browser.screenshot(&format!("notice-{kind}-{name}")).await;
        }
    }
    browser.close().await;
}
