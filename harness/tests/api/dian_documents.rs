//! What a customer is handed with DIAN on (CONTRACT §12, the "representación gráfica"), on
//! both databases: the invoice's and the credit note's PDF read back by poppler's `pdftotext`
//! (the title, the DIAN number, the CUFE or CUDE whole, the range's authorisation), their QR
//! code rendered by `pdftoppm` and decoded by zbar's `zbarimg` (readers we did not write) into
//! exactly the API's `qr_url`; the hosted page with the same, its QR code inline SVG under the
//! page's Content-Security-Policy, and in Chromium a screenshot whose QR code zbar decodes; the
//! portal listing DIAN numbers. An account without DIAN keeps its documents as they were.
//! DIAN is turned on as `dian.rs` does (a certificate made by `openssl` for the run); without
//! the tools, the checks that need them say so and pass unless `.ci/run`'s variables are set.

use crate::common::browser::Browser;
use crate::common::{TestApp, assert_invariants, read};
use crate::dian::{add_range, invoice_of, make_certificate, settled_dian, turn_dian_on};
use crate::invoice_documents::{
    artifacts, backend_of, bytes_of, invoiced, pdf_text, qr_codes_in_pdf, qr_codes_in_png,
};
use crate::subscriptions::{shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    config = crate::dian::fast_dian;
    an_electronic_invoice_prints_its_number_cufe_authorisation_and_a_qr_of_its_url,
    an_electronic_credit_note_prints_its_cude_and_a_qr_of_its_url,
    the_portal_lists_dian_numbers_and_links_each_hosted_invoice,
    without_dian_the_documents_carry_no_dian_block,
);

/// The authorisation `dian::add_range`'s range prints, in Spanish.
const AUTHORISATION: &str = "Autorización de numeración de facturación DIAN No. 18760000001 del \
     2020-01-01, prefijo SETP del 990000000 al 995000000, vigencia hasta 2099-12-31";

/// `text` with every run of white space made one space: a sentence wrapped over lines reads
/// whole again.
fn collapsed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` without white space: a CUFE wrapped over lines reads whole again.
fn squeezed(text: &str) -> String {
    text.split_whitespace().collect()
}

/// DIAN on (no range yet), and a subscription: its invoice, awaiting a range.
async fn electronic_invoice(app: &TestApp) -> Option<(crate::dian::Made, Value)> {
    let made = make_certificate()?;
    turn_dian_on(app, &made).await;
    let (shop, method) = shop(app, "4242424242424242").await;
    let sub = subscribe(app, &shop, &method, json!({})).await;
    let invoice = invoice_of(app, sub["id"].as_str().expect("id")).await;
    Some((made, invoice))
}

async fn pdf_at(app: &TestApp, path: &str) -> Vec<u8> {
    let (status, kind, pdf) = bytes_of(app.get(path).await).await;
    assert_eq!((status, kind.as_str()), (200, "application/pdf"), "{path}");
    pdf
}

async fn an_electronic_invoice_prints_its_number_cufe_authorisation_and_a_qr_of_its_url(
    app: TestApp,
) {
    let Some((_made, invoice)) = electronic_invoice(&app).await else {
        return;
    };
    let id = invoice["id"].as_str().expect("id").to_owned();
    let backend = backend_of(&app);

    // Awaiting a range: the electronic title, no number, no code, no QR code.
    assert_eq!(invoice["dian"]["status"], "awaiting_range", "{invoice}");
    let pdf = pdf_at(&app, &format!("/v1/invoices/{id}/pdf")).await;
    let name = format!("dian-invoice-awaiting-{backend}");
    if let Some(text) = pdf_text(&pdf, &name) {
        let text = collapsed(&text);
        assert!(text.contains("Factura electrónica de venta"), "{text}");
        assert!(text.contains("En espera de numeración DIAN"), "{text}");
        assert!(!text.contains("Autorización de numeración"), "{text}");
        assert!(!text.contains("FV-1"), "no internal number: {text}");
    }
    if let Some(codes) = qr_codes_in_pdf(&pdf, &name) {
        assert!(codes.is_empty(), "no QR code before a CUFE: {codes:?}");
    }

    // Numbered and accepted: everything, in the PDF of the API and of the hosted page.
    add_range(&app, 990_000_000, 995_000_000).await;
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    assert_eq!(done["number"], "SETP990000000");
    let cufe = done["dian"]["cufe"].as_str().expect("cufe").to_owned();
    let qr_url = done["dian"]["qr_url"].as_str().expect("qr_url").to_owned();
    let pdf = pdf_at(&app, &format!("/v1/invoices/{id}/pdf")).await;
    let name = format!("dian-invoice-{backend}");
    if let Some(text) = pdf_text(&pdf, &name) {
        let lines = collapsed(&text);
        for expected in [
            "Factura electrónica de venta",
            "No. SETP990000000",
            "CUFE",
            AUTHORISATION,
            "Tienda Ejemplo S.A.S.",
        ] {
            assert!(lines.contains(expected), "{expected:?} not in:\n{text}");
        }
        assert!(squeezed(&text).contains(&cufe), "the CUFE whole:\n{text}");
        assert!(!lines.contains("FV-1"), "{text}");
    }
    if let Some(codes) = qr_codes_in_pdf(&pdf, &name) {
        assert_eq!(
            codes,
            std::slice::from_ref(&qr_url),
            "the QR code is the API's qr_url"
        );
    }
    let hosted = done["hosted_url"].as_str().expect("hosted").to_owned();
    let anonymous = reqwest::Client::new();
    let (status, _, hosted_pdf) = bytes_of(
        anonymous
            .get(format!("{hosted}/pdf?lang=es"))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(hosted_pdf, pdf, "the hosted page's PDF is the API's");

    // In English.
    let english = pdf_at(&app, &format!("/v1/invoices/{id}/pdf?lang=en")).await;
    if let Some(text) = pdf_text(&english, &format!("{name}-en")) {
        let text = collapsed(&text);
        assert!(text.contains("Electronic sales invoice"), "{text}");
        assert!(
            text.contains(
                "DIAN invoice numbering authorisation No. 18760000001 of 2020-01-01, prefix SETP \
                 from 990000000 to 995000000, valid until 2099-12-31"
            ),
            "{text}"
        );
    }

    // The hosted page: the same, the QR code inline and nothing the policy refuses.
    let page = anonymous
        .get(format!("{hosted}?lang=es"))
        .send()
        .await
        .expect("send");
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .expect("csp")
        .to_owned();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    let html = page.text().await.expect("html");
    for expected in [
        "<h1 id=\"title\">Factura electrónica de venta SETP990000000</h1>",
        "<dd id=\"dian-number\">SETP990000000</dd>",
        &format!("<dd class=\"cufe\" id=\"cufe\">{cufe}</dd>"),
        "<svg id=\"qr\"",
        AUTHORISATION,
        &format!("href=\"{qr_url}\""),
    ] {
        assert!(html.contains(expected), "{expected:?} not in:\n{html}");
    }
    for refused in ["<script", "<style", " style=", "<img"] {
        assert!(!html.contains(refused), "{refused:?} in:\n{html}");
    }
    assert_invariants(&app).await;
}

async fn an_electronic_credit_note_prints_its_cude_and_a_qr_of_its_url(app: TestApp) {
    let Some((_made, invoice)) = electronic_invoice(&app).await else {
        return;
    };
    add_range(&app, 990_000_000, 995_000_000).await;
    let invoice_id = invoice["id"].as_str().expect("id");
    let charge = invoice["charge_id"].as_str().expect("charge");
    let (status, refund) =
        crate::refunds::refund(&app, charge, json!({"amount_cents": 1_000_000})).await;
    assert_eq!(status, 201, "{refund}");
    let refund = crate::refunds::settled(&app, refund["id"].as_str().expect("id")).await;
    assert_eq!(refund["status"], "approved", "{refund}");
    let (_, notes) = read(
        app.get(&format!("/v1/credit-notes?invoice_id={invoice_id}"))
            .await,
    )
    .await;
    let note_id = notes["data"][0]["id"].as_str().expect("id").to_owned();
    let note = settled_dian(&app, &format!("/v1/credit-notes/{note_id}")).await;
    assert_eq!(note["dian"]["status"], "accepted", "{note}");
    assert_eq!(note["number"], "NC1");
    let cude = note["dian"]["cude"].as_str().expect("cude").to_owned();
    let qr_url = note["dian"]["qr_url"].as_str().expect("qr_url").to_owned();
    let (_, invoice) = read(app.get(&format!("/v1/invoices/{invoice_id}")).await).await;

    let pdf = pdf_at(&app, &format!("/v1/credit-notes/{note_id}/pdf")).await;
    let name = format!("dian-credit-note-{}", backend_of(&app));
    if let Some(text) = pdf_text(&pdf, &name) {
        let lines = collapsed(&text);
        for expected in [
            "Nota crédito electrónica",
            "No. NC1",
            "Sobre la factura SETP990000000",
            "CUDE",
            "$ 10.000,00",
        ] {
            assert!(lines.contains(expected), "{expected:?} not in:\n{text}");
        }
        assert!(squeezed(&text).contains(&cude), "the CUDE whole:\n{text}");
        assert!(!lines.contains("Autorización de numeración"), "{text}");
    }
    if let Some(codes) = qr_codes_in_pdf(&pdf, &name) {
        assert_eq!(codes, [qr_url], "the QR code is the API's qr_url");
    }
    // The hosted invoice lists it by its DIAN number.
    let html = reqwest::get(format!(
        "{}?lang=es",
        invoice["hosted_url"].as_str().expect("hosted")
    ))
    .await
    .expect("send")
    .text()
    .await
    .expect("html");
    assert!(html.contains("Nota crédito electrónica NC1"), "{html}");
    assert_invariants(&app).await;
}

async fn the_portal_lists_dian_numbers_and_links_each_hosted_invoice(app: TestApp) {
    let Some((_made, invoice)) = electronic_invoice(&app).await else {
        return;
    };
    let customer = invoice["customer_id"].as_str().expect("customer");
    let session = crate::portal::open(&app, customer, json!({})).await;
    let base = crate::portal::path_of(&app, &session);
    let (status, data) = read(
        app.client
            .get(app.url(&format!("{base}/api/customer")))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{data}");
    assert!(data["invoices"][0]["number"].is_null(), "{data}");
    assert_eq!(data["invoices"][0]["dian"]["status"], "awaiting_range");
    let (status, html) = read_text(&app, &app.url(&base)).await;
    assert_eq!(status, 200);
    assert!(html.contains("En espera de numeración DIAN"), "{html}");

    add_range(&app, 990_000_000, 995_000_000).await;
    let (_, data) = read(
        app.client
            .get(app.url(&format!("{base}/api/customer")))
            .send()
            .await
            .expect("send"),
    )
    .await;
    let listed = &data["invoices"][0];
    assert_eq!(listed["number"], "SETP990000000", "{data}");
    assert_eq!(
        listed["dian"]["cufe"].as_str().map(str::len),
        Some(96),
        "{data}"
    );
    let hosted = listed["hosted_url"].as_str().expect("hosted");
    let (_, html) = read_text(&app, &app.url(&base)).await;
    assert!(
        html.contains(&format!(
            "<a class=\"hosted\" href=\"{hosted}?lang=es\">SETP990000000</a>"
        )),
        "{html}"
    );
    assert_invariants(&app).await;
}

async fn without_dian_the_documents_carry_no_dian_block(app: TestApp) {
    let invoice = invoiced(&app).await;
    assert!(invoice["dian"].is_null(), "{invoice}");
    let id = invoice["id"].as_str().expect("id");
    let pdf = pdf_at(&app, &format!("/v1/invoices/{id}/pdf")).await;
    let name = format!("invoice-without-dian-{}", backend_of(&app));
    if let Some(text) = pdf_text(&pdf, &name) {
        assert!(text.contains("Factura de venta"), "{text}");
        assert!(text.contains("No. FV-1"), "{text}");
        for absent in ["electrónica", "CUFE", "DIAN", "Autorización"] {
            assert!(!text.contains(absent), "{absent:?} in:\n{text}");
        }
    }
    if let Some(codes) = qr_codes_in_pdf(&pdf, &name) {
        assert!(codes.is_empty(), "{codes:?}");
    }
    let (status, html) = read_text(&app, invoice["hosted_url"].as_str().expect("hosted")).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("<h1 id=\"title\">Factura de venta FV-1</h1>"),
        "{html}"
    );
    for absent in ["id=\"dian\"", "<svg", "CUFE"] {
        assert!(!html.contains(absent), "{absent:?} in:\n{html}");
    }
}

/// The page at `url` in Spanish, with no API key: its status and HTML.
async fn read_text(app: &TestApp, url: &str) -> (u16, String) {
    let response = app
        .client
        .request(Method::GET, format!("{url}?lang=es"))
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    (status, response.text().await.expect("text"))
}

/// The hosted electronic invoice in Chromium, on a phone, in Spanish: the title, number and
/// CUFE as a person sees them, and the QR code in a screenshot (`test-artifacts/`) that zbar
/// decodes into the API's `qr_url`; then on a desktop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosted_electronic_invoice_in_chromium_shows_its_cufe_and_a_qr_that_scans() {
    let app = crate::common::spawn_app_with(crate::common::Backend::Sqlite, crate::dian::fast_dian)
        .await
        .expect("sqlite");
    let Some((_made, invoice)) = electronic_invoice(&app).await else {
        return;
    };
    add_range(&app, 990_000_000, 995_000_000).await;
    let id = invoice["id"].as_str().expect("id");
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    let cufe = done["dian"]["cufe"].as_str().expect("cufe");
    let qr_url = done["dian"]["qr_url"].as_str().expect("qr_url");
    let hosted = done["hosted_url"].as_str().expect("hosted");
    let Some(browser) = Browser::start().await else {
        return;
    };
    browser
        .client
        .goto(&format!("{hosted}?lang=es"))
        .await
        .expect("open");
    browser
        .wait_for_text("#title", "Factura electrónica de venta SETP990000000")
        .await;
    assert_eq!(browser.text("#dian-number").await, "SETP990000000");
    assert_eq!(squeezed(&browser.text("#cufe").await), cufe);
    assert!(browser.text("#authorization").await.contains(AUTHORISATION));
    let sizes: Value = browser
        .client
        .execute(
            "const qr = document.querySelector('#qr').getBoundingClientRect();
             return [qr.width, qr.height,
                     document.documentElement.scrollWidth - document.documentElement.clientWidth];",
            vec![],
        )
        .await
        .expect("sizes");
    // The stylesheet applied (220 px, about 5.8 cm), nothing wider than the phone.
    let sizes: Vec<f64> = sizes
        .as_array()
        .expect("three numbers")
        .iter()
        .map(|v| v.as_f64().expect("a number"))
        .collect();
    assert_eq!(sizes, [220.0, 220.0, 0.0]);
    browser.scroll_to("#qr").await;
    browser.screenshot("invoice-dian-hosted-phone").await;
    let shot = artifacts().join("invoice-dian-hosted-phone.png");
    if let Some(codes) = qr_codes_in_png(&shot) {
        assert_eq!(codes, [qr_url.to_owned()], "the screenshot's QR code");
    }
    browser
        .client
        .set_window_size(1280, 900)
        .await
        .expect("resize");
    browser.scroll_to("#dian").await;
    browser.screenshot("invoice-dian-hosted-desktop").await;
    browser.close().await;
}
