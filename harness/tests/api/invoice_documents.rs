//! What a customer is handed (CONTRACT §11): an invoice's and a credit note's PDF, read back by
//! poppler (`pdftotext`, a tool we did not write) and rendered to PNG (`pdftoppm`) into
//! `test-artifacts/` to be looked at; the hosted page at `hosted_url`, with no API key, only
//! for its own invoice and credit notes; and the page in headless Chromium at phone and
//! desktop widths (screenshots in `test-artifacts/`).

use crate::common::browser::Browser;
use crate::common::{TestApp, read};
use crate::subscriptions::{shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

crate::db_tests!(
    the_pdf_says_what_the_invoice_says_in_pesos_and_needs_the_key,
    the_hosted_page_opens_its_own_invoice_and_credit_notes_only,
);

/// A seller with its identity, a customer with a NIT and an address, a plan at 49.900,00 with
/// IVA 19 % and a subscription to it: its first invoice.
pub(crate) async fn invoiced(app: &TestApp) -> Value {
    let (status, seller) = read(
        app.request(Method::PATCH, "/v1/account/invoicing")
            .json(&json!({"legal_name": "Café Montaña S.A.S.", "nit": "900123456",
                          "address": {"line": "Calle 10 # 43-12", "city_code": "05001", "country": "CO"},
                          "tax_regime": "responsable_iva"}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{seller}");
    let (shop, method) = shop(app, "4242424242424242").await;
    let (status, customer) = read(
        app.request(Method::PATCH, &format!("/v1/customers/{}", shop.customer))
            .json(&json!({"name": "José Núñez", "tax_id": {"type": "NIT", "number": "800197268"},
                          "legal_name": "Núñez & Cía S.A.S.",
                          "address": {"line": "Carrera 7 # 71-21", "city_code": "11001", "country": "CO"}}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{customer}");
    let plan = app
        .create_plan("Plan Pro mensual", 4_990_000, 49_900_000)
        .await;
    let plan_id = plan["id"].as_str().expect("plan").to_owned();
    let sub = subscribe(app, &shop, &method, json!({"plan_id": plan_id})).await;
    let (status, page) = read(
        app.get(&format!(
            "/v1/invoices?subscription_id={}",
            sub["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["data"][0].clone()
}

/// Whether the tools that read documents back (poppler, zbar) are required (`.ci/run`).
fn pdf_tools_required() -> bool {
    std::env::var("BILLING_REQUIRE_PDF_TOOLS").is_ok_and(|v| v == "1")
}

/// `pdftotext -layout` of `pdf`, or `None` without poppler (required by `.ci/run`).
pub(crate) fn pdf_text(pdf: &[u8], name: &str) -> Option<String> {
    let tool = Path::new("/usr/bin/pdftotext");
    if !tool.exists() {
        assert!(
            !pdf_tools_required(),
            "poppler-utils required but missing: apt-get install poppler-utils"
        );
        eprintln!("pdftotext is not installed; the PDF's text is not checked");
        return None;
    }
    let dir = artifacts();
    let path = dir.join(format!("{name}.pdf"));
    std::fs::write(&path, pdf).expect("write pdf");
    // Rendered for a person to look at; the text is what the test reads.
    let rendered = std::process::Command::new("pdftoppm")
        .args(["-png", "-r", "80", "-singlefile"])
        .arg(&path)
        .arg(dir.join(name))
        .status()
        .expect("pdftoppm");
    assert!(rendered.success(), "pdftoppm could not render {name}");
    let out = std::process::Command::new(tool)
        .args(["-layout", "-enc", "UTF-8"])
        .arg(&path)
        .arg("-")
        .output()
        .expect("pdftotext");
    assert!(out.status.success(), "pdftotext could not read {name}");
    Some(String::from_utf8(out.stdout).expect("utf-8"))
}

/// The QR codes zbar (`zbarimg`, a reader we did not write) finds on the first page of `pdf`
/// rendered at 200 dpi into `test-artifacts/<name>-qr.png`; `None` without poppler or zbar.
pub(crate) fn qr_codes_in_pdf(pdf: &[u8], name: &str) -> Option<Vec<String>> {
    if !Path::new("/usr/bin/pdftoppm").exists() {
        assert!(!pdf_tools_required(), "poppler-utils required but missing");
        return None;
    }
    let dir = artifacts();
    let path = dir.join(format!("{name}.pdf"));
    std::fs::write(&path, pdf).expect("write pdf");
    let rendered = std::process::Command::new("pdftoppm")
        .args(["-png", "-r", "200", "-singlefile"])
        .arg(&path)
        .arg(dir.join(format!("{name}-qr")))
        .status()
        .expect("pdftoppm");
    assert!(rendered.success(), "pdftoppm could not render {name}");
    qr_codes_in_png(&dir.join(format!("{name}-qr.png")))
}

/// What every QR code in the image at `png` says, as `zbarimg --raw` reads them (none: an
/// empty list); `None` without zbar (`apt-get install zbar-tools`, required by `.ci/run`).
pub(crate) fn qr_codes_in_png(png: &Path) -> Option<Vec<String>> {
    let tool = Path::new("/usr/bin/zbarimg");
    if !tool.exists() {
        assert!(
            !pdf_tools_required(),
            "zbar-tools required but missing: apt-get install zbar-tools"
        );
        eprintln!("zbarimg is not installed; the QR code is not read back");
        return None;
    }
    let out = std::process::Command::new(tool)
        .args(["--raw", "-q", "-Sdisable", "-Sqrcode.enable"])
        .arg(png)
        .output()
        .expect("zbarimg");
    // 0: found some; 4: found none. Anything else is zbar failing to read the file.
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 4)),
        "zbarimg failed on {}: {}",
        png.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .lines()
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

pub(crate) fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-artifacts");
    std::fs::create_dir_all(&dir).expect("artifacts dir");
    dir
}

pub(crate) fn backend_of(app: &TestApp) -> &'static str {
    if app.database_url.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    }
}

pub(crate) async fn bytes_of(response: reqwest::Response) -> (u16, String, Vec<u8>) {
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response.bytes().await.expect("body").to_vec();
    (status, kind, body)
}

async fn the_pdf_says_what_the_invoice_says_in_pesos_and_needs_the_key(app: TestApp) {
    let invoice = invoiced(&app).await;
    let id = invoice["id"].as_str().expect("id");
    let pdf_url = invoice["pdf_url"].as_str().expect("pdf_url");
    assert_eq!(pdf_url, format!("{}/v1/invoices/{id}/pdf", app.base));

    let (status, kind, pdf) = bytes_of(
        app.client
            .get(pdf_url)
            .bearer_auth(&app.api_key)
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(kind, "application/pdf");
    assert!(pdf.starts_with(b"%PDF-"), "a PDF");
    let (status, _, _) = bytes_of(app.client.get(pdf_url).send().await.expect("send")).await;
    assert_eq!(status, 401, "the API's PDF needs the key");
    let (status, _) = read(app.get("/v1/invoices/in_missing/pdf").await).await;
    assert_eq!(status, 404);
    let (status, error) = read(app.get(&format!("/v1/invoices/{id}/pdf?lang=fr")).await).await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["param"], "lang");

    let name = format!("invoice-{}", backend_of(&app));
    let Some(text) = pdf_text(&pdf, &name) else {
        return;
    };
    // 49.900,00 with IVA 19 %: base 41.932,77 and IVA 7.967,23, written as Colombians do.
    for expected in [
        "Factura de venta",
        "No. FV-1",
        "Café Montaña S.A.S.",
        "NIT 900.123.456-8",
        "Núñez & Cía S.A.S.",
        "NIT 800.197.268-4",
        "Plan Pro mensual",
        "$ 49.900,00",
        "$ 41.932,77",
        "$ 7.967,23",
        "IVA 19 %",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} not in the PDF:\n{text}"
        );
    }
    assert_eq!(invoice["total_cents"], 4_990_000);
    assert_eq!(invoice["subtotal_cents"], 4_193_277);

    // In English, on request.
    let (_, _, english) = bytes_of(app.get(&format!("/v1/invoices/{id}/pdf?lang=en")).await).await;
    let text = pdf_text(&english, &format!("{name}-en")).expect("poppler");
    assert!(text.contains("Sales invoice"), "{text}");
    assert!(text.contains("No. FV-1"), "{text}");
    assert!(text.contains("COP 49,900.00"), "{text}");
}

async fn the_hosted_page_opens_its_own_invoice_and_credit_notes_only(app: TestApp) {
    let invoice = invoiced(&app).await;
    let hosted = invoice["hosted_url"]
        .as_str()
        .expect("hosted_url")
        .to_owned();
    assert!(
        hosted.starts_with(&format!("{}/invoices/inv_", app.base)),
        "{hosted}"
    );
    let charge = invoice["charge_id"].as_str().expect("charge");
    let (status, refund) =
        crate::refunds::refund(&app, charge, json!({"amount_cents": 1_000_000})).await;
    assert_eq!(status, 201, "{refund}");
    let refund = crate::refunds::settled(&app, refund["id"].as_str().expect("id")).await;
    assert_eq!(refund["status"], "approved", "{refund}");
    let (_, notes) = read(
        app.get(&format!(
            "/v1/credit-notes?invoice_id={}",
            invoice["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    let note = notes["data"][0].clone();
    let note_id = note["id"].as_str().expect("id");
    assert_eq!(
        note["pdf_url"],
        format!("{}/v1/credit-notes/{note_id}/pdf", app.base)
    );

    // No key: the page, its PDF and its credit note's.
    let anonymous = reqwest::Client::new();
    let page = anonymous.get(&hosted).send().await.expect("send");
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .expect("csp")
        .to_owned();
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert_eq!(page.headers()["referrer-policy"], "no-referrer");
    let html = page.text().await.expect("html");
    assert!(html.contains("Factura de venta FV-1"));
    assert!(html.contains("$ 49.900,00"));
    assert!(html.contains("NC-1"));
    let (status, kind, pdf) = bytes_of(
        anonymous
            .get(format!("{hosted}/pdf"))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!((status, kind.as_str()), (200, "application/pdf"));
    assert!(pdf.starts_with(b"%PDF-"));
    let note_pdf_url = format!("{hosted}/credit-notes/{note_id}/pdf");
    let (status, _, note_pdf) =
        bytes_of(anonymous.get(&note_pdf_url).send().await.expect("send")).await;
    assert_eq!(status, 200);
    if let Some(text) = pdf_text(&note_pdf, &format!("credit-note-{}", backend_of(&app))) {
        for expected in [
            "Nota crédito",
            "No. NC-1",
            "Sobre la factura FV-1",
            "$ 10.000,00",
        ] {
            assert!(text.contains(expected), "{expected:?} not in:\n{text}");
        }
    }

    // A wrong token, a token of the right shape that is nobody's, and another invoice's
    // credit note through this token: nothing.
    let stranger = format!("{}/invoices/inv_{}", app.base, "A".repeat(32));
    // The token begins with the invoice's id, which is no secret: its random end is checked.
    let mut guessed = hosted.clone();
    let last = guessed.pop().expect("a token");
    guessed.push(if last == 'A' { 'B' } else { 'A' });
    for url in [
        format!("{}/invoices/nope", app.base),
        stranger.clone(),
        format!("{stranger}/pdf"),
        format!("{}/invoices/inv_{}", app.base, "A".repeat(64)),
        guessed.clone(),
        format!("{guessed}/pdf"),
    ] {
        let status = anonymous.get(&url).send().await.expect("send").status();
        assert_eq!(status, 404, "{url}");
    }
    let other = invoiced(&app.as_account(&app.create_account("Otra tienda").await)).await;
    let status = anonymous
        .get(format!(
            "{}/credit-notes/{note_id}/pdf",
            other["hosted_url"].as_str().expect("hosted")
        ))
        .send()
        .await
        .expect("send")
        .status();
    assert_eq!(status, 404, "a credit note through another invoice's token");
}

/// The hosted page in Chromium: what a customer sees on a phone and on a desktop, in Spanish
/// and in English, with nothing wider than the phone's screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosted_invoice_in_chromium_at_phone_and_desktop_widths() {
    let app = crate::common::spawn_app(crate::common::Backend::Sqlite)
        .await
        .expect("sqlite");
    let invoice = invoiced(&app).await;
    let hosted = invoice["hosted_url"]
        .as_str()
        .expect("hosted_url")
        .to_owned();
    let Some(browser) = Browser::start().await else {
        return;
    };
    // Chromium asks for English (`Accept-Language: en-US`): Spanish by the link's choice.
    browser
        .client
        .goto(&format!("{hosted}?lang=es"))
        .await
        .expect("open");
    browser
        .wait_for_text("#title", "Factura de venta FV-1")
        .await;
    assert_eq!(browser.text("#total").await, "$ 49.900,00");
    assert!(
        browser
            .text("#customer-id")
            .await
            .contains("NIT 800.197.268-4")
    );
    assert!(browser.text("#lines").await.contains("Plan Pro mensual"));
    assert!(browser.text("#breakdown").await.contains("IVA 19 %"));
    let overflow: Value = browser
        .client
        .execute(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
            vec![],
        )
        .await
        .expect("widths");
    assert_eq!(overflow, json!(0), "nothing wider than a phone");
    let href = browser
        .attribute("#download-pdf", "href")
        .await
        .expect("download");
    assert!(href.ends_with("/pdf?lang=es"), "{href}");
    browser.screenshot("invoice-hosted-phone").await;

    browser
        .client
        .set_window_size(1280, 900)
        .await
        .expect("resize");
    browser.screenshot("invoice-hosted-desktop").await;
    browser.client.goto(&hosted).await.expect("open");
    browser.wait_for_text("#title", "Sales invoice FV-1").await;
    assert_eq!(browser.text("#total").await, "COP 49,900.00");
    browser.screenshot("invoice-hosted-desktop-en").await;
    browser.close().await;
}
