//! DIAN electronic invoicing end to end (CONTRACT §12), on both databases, against the
//! in-process sandbox DIAN: DIAN turned on with a certificate made by `openssl` for the run
//! (never committed), a numbering range added, a subscription's invoice numbered from it,
//! signed, sent and accepted, its XML verified by `xmlsec1` and validated by `xmllint` against
//! DIAN's schemas (the tools are optional unless `BILLING_REQUIRE_DIAN_TOOLS=1`); invoices
//! waiting for a range; DIAN unavailable or late (pending, never rejected, accepted after);
//! a refund's credit note with its CUDE.

use crate::common::{TestApp, assert_invariants, eventually, read};
use crate::subscriptions::{shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

crate::db_tests!(
    config = crate::dian::fast_dian;
    an_invoice_is_numbered_from_the_range_signed_and_accepted,
    invoices_await_a_range_and_a_new_range_numbers_them,
    an_unknown_answer_stays_pending_and_is_accepted_once_dian_recovers,
    a_refunds_credit_note_gets_its_cude_and_is_accepted,
);

pub(crate) const PASSWORD: &str = "clave-de-prueba";
pub(crate) const PIN: &str = "pin-e2e-12345";
pub(crate) const TECHNICAL_KEY: &str = "fc8eac422eba16e22ffd8c6f94b3f40a6e38162c";
const BOUND: Duration = Duration::from_secs(30);

/// Calls to DIAN give up after 1 s, a late answer comes after 2 s, and retries start at 200 ms.
pub fn fast_dian(config: &mut billing::config::Config) {
    config.dian_timeout_ms = 1_000;
    config.dian_interval_ms = 100;
    config.dian_retry_base_ms = 200;
    config.dian_sandbox.late_by = Duration::from_secs(2);
}

/// Whether the DIAN tools are required (CI) rather than optional.
fn required() -> bool {
    std::env::var("BILLING_REQUIRE_DIAN_TOOLS").as_deref() == Ok("1")
}

fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        assert!(
            !required(),
            "`{name}` is not installed, and BILLING_REQUIRE_DIAN_TOOLS=1"
        );
        eprintln!("skipped: `{name}` is not installed");
    }
    found
}

/// A self-signed certificate made by `openssl` for the test (`harness::chaos::dian`).
pub(crate) type Made = harness::chaos::dian::Certificate;

pub(crate) fn make_certificate() -> Option<Made> {
    tool("openssl")?;
    Some(Made::make(&std::env::temp_dir(), PASSWORD).expect("a certificate"))
}

/// The seller's settings and DIAN on, in one PATCH; the answer.
pub(crate) async fn turn_dian_on(app: &TestApp, made: &Made) -> Value {
    let (status, body) = read(
        app.request(Method::PATCH, "/v1/account/invoicing")
            .json(&json!({
                "legal_name": "Tienda Ejemplo S.A.S.",
                "nit": "900123456-8",
                "address": {"line": "Carrera 7 # 71-21", "city_code": "11001", "country": "CO"},
                "tax_regime": "responsable_iva",
                "dian": {
                    "environment": "test",
                    "software_id": "soft-e2e-1",
                    "software_pin": PIN,
                    "certificate": {"p12_base64": made.p12_base64, "password": PASSWORD}
                }
            }))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

pub(crate) async fn add_range(app: &TestApp, from: i64, to: i64) -> Value {
    let (status, body) = read(
        app.post(
            "/v1/account/invoicing/numbering-ranges",
            json!({"resolution_number": "18760000001", "prefix": "SETP", "from": from, "to": to,
                "valid_from": "2020-01-01", "valid_to": "2099-12-31",
                "technical_key": TECHNICAL_KEY}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body
}

pub(crate) async fn invoice_of(app: &TestApp, subscription: &str) -> Value {
    let (status, page) = read(
        app.get(&format!("/v1/invoices?subscription_id={subscription}"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["data"][0].clone()
}

/// Waits for the document at `path` to leave `pending`; what it became.
pub(crate) async fn settled_dian(app: &TestApp, path: &str) -> Value {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let (_, body) = read(app.get(path).await).await;
        if matches!(
            body["dian"]["status"].as_str(),
            Some("accepted" | "rejected")
        ) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still pending: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The XML endpoint's document: `application/xml`, verified and schema-valid when the tools
/// are there.
async fn check_xml(app: &TestApp, made: &Made, path: &str, credit_note: bool) -> String {
    let response = app.get(path).await;
    assert_eq!(response.status().as_u16(), 200);
    let kind = response.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .expect("type")
        .to_owned();
    assert_eq!(kind, "application/xml");
    let xml = response.text().await.expect("body");
    let file = made.dir.join(format!("doc-{credit_note}.xml"));
    std::fs::write(&file, &xml).expect("written");
    if tool("xmlsec1").is_some() {
        let out = Command::new("xmlsec1")
            .arg("--verify")
            .arg("--trusted-pem")
            .arg(made.dir.join("cert.pem"))
            .args(["--id-attr:Id", "http://www.w3.org/2000/09/xmldsig#:KeyInfo"])
            .args([
                "--id-attr:Id",
                "http://uri.etsi.org/01903/v1.3.2#:SignedProperties",
            ])
            .arg(&file)
            .output()
            .expect("xmlsec1 runs");
        assert!(
            out.status.success(),
            "xmlsec1: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if let Some(xsd) = xsd_dir() {
        assert!(tool("xmllint").is_some());
        xmllint(&xsd, &made.dir, &file, credit_note);
    }
    xml
}

fn xsd_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("BILLING_DIAN_XSD_DIR").map(PathBuf::from);
    match dir {
        Some(dir) if dir.join("maindoc/UBL-Invoice-2.1.xsd").is_file() => Some(dir),
        _ => {
            assert!(
                !required(),
                "BILLING_DIAN_XSD_DIR does not name DIAN's XSD folder, and BILLING_REQUIRE_DIAN_TOOLS=1"
            );
            eprintln!("skipped: BILLING_DIAN_XSD_DIR does not name DIAN's XSD folder");
            None
        }
    }
}

/// `xmllint --schema` with the document's UBL schema and XAdES (UBL's extensions are `lax`).
fn xmllint(xsd: &Path, dir: &Path, document: &Path, credit_note: bool) {
    let (namespace, file) = if credit_note {
        (
            "urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2",
            "maindoc/UBL-CreditNote-2.1.xsd",
        )
    } else {
        (
            "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2",
            "maindoc/UBL-Invoice-2.1.xsd",
        )
    };
    let wrapper = format!(
        r#"<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema" targetNamespace="urn:billing:test">
  <xsd:import namespace="{namespace}" schemaLocation="{}"/>
  <xsd:import namespace="http://uri.etsi.org/01903/v1.3.2#" schemaLocation="{}"/>
</xsd:schema>"#,
        xsd.join(file).display(),
        xsd.join("common/UBL-XAdESv132-2.1.xsd").display()
    );
    let schema = dir.join(format!("wrapper-{credit_note}.xsd"));
    std::fs::write(&schema, wrapper).expect("written");
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&schema)
        .arg(document)
        .output()
        .expect("xmllint runs");
    assert!(
        out.status.success(),
        "xmllint: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn event_types(app: &TestApp, subscription: &str) -> Vec<String> {
    crate::subscriptions::events(app, subscription)
        .await
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect()
}

/// With DIAN on and a range, a new subscription's invoice takes the range's first number, its
/// CUFE, and is accepted; its XML verifies and validates; `invoice.dian_accepted` carries
/// `invoice.created`'s data; the settings answer without secrets.
async fn an_invoice_is_numbered_from_the_range_signed_and_accepted(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    let settings = turn_dian_on(&app, &made).await;
    assert_eq!(settings["dian"]["environment"], "test", "{settings}");
    assert_eq!(settings["dian"]["enabled"], true);
    assert!(!settings.to_string().contains(PIN));
    assert!(!settings.to_string().contains(&made.p12_base64[..40]));
    let range = add_range(&app, 990_000_000, 995_000_000).await;
    assert_eq!(range["next_number"], 990_000_000);
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = sub["id"].as_str().expect("id");
    let invoice = invoice_of(&app, sub_id).await;
    assert_eq!(invoice["number"], "SETP990000000", "{invoice}");
    let cufe = invoice["dian"]["cufe"].as_str().expect("cufe").to_owned();
    assert_eq!(cufe.len(), 96);
    let id = invoice["id"].as_str().expect("id");
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    assert_eq!(
        done["dian"]["cufe"],
        cufe.as_str(),
        "the CUFE is fixed at numbering"
    );
    assert!(
        done["dian"]["qr_url"]
            .as_str()
            .expect("qr")
            .ends_with(&cufe)
    );
    let xml = check_xml(&app, &made, &format!("/v1/invoices/{id}/xml"), false).await;
    assert!(xml.contains(&format!("schemeName=\"CUFE-SHA384\">{cufe}<")) || xml.contains(&cufe));
    assert!(xml.contains("<cbc:ID>SETP990000000</cbc:ID>"));
    eventually(BOUND, || async {
        event_types(&app, sub_id)
            .await
            .contains(&"invoice.dian_accepted".to_owned())
    })
    .await;
    let events = crate::subscriptions::events(&app, sub_id).await;
    let created = events
        .iter()
        .find(|e| e["type"] == "invoice.created")
        .expect("created");
    let accepted = events
        .iter()
        .find(|e| e["type"] == "invoice.dian_accepted")
        .expect("accepted");
    assert_eq!(created["data"], accepted["data"]);
    let (_, ranges) = read(app.get("/v1/account/invoicing/numbering-ranges").await).await;
    assert_eq!(ranges["data"][0]["next_number"], 990_000_001, "{ranges}");
    assert_eq!(ranges["data"][0]["remaining"], 5_000_000 - 1 + 1);
    assert!(ranges["data"][0].get("technical_key").is_none());
    assert_invariants(&app).await;
}

/// Without a range an invoice awaits one (number null, no XML yet: 409); the range added
/// numbers it and it is accepted.
async fn invoices_await_a_range_and_a_new_range_numbers_them(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
    assert_eq!(invoice["dian"]["status"], "awaiting_range", "{invoice}");
    assert!(invoice["number"].is_null(), "{invoice}");
    assert!(invoice["dian"]["cufe"].is_null());
    let id = invoice["id"].as_str().expect("id");
    let (status, body) = read(app.get(&format!("/v1/invoices/{id}/xml")).await).await;
    assert_eq!(status, 409, "{body}");
    add_range(&app, 1, 10).await;
    let (_, numbered) = read(app.get(&format!("/v1/invoices/{id}")).await).await;
    assert_eq!(numbered["number"], "SETP1", "{numbered}");
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    check_xml(&app, &made, &format!("/v1/invoices/{id}/xml"), false).await;
    assert_invariants(&app).await;
}

async fn fault(app: &TestApp, mode: &str, times: u32) {
    let response = app
        .admin(Method::POST, "/sandbox/dian/_sandbox/faults")
        .json(&json!({"mode": mode, "times": times}))
        .send()
        .await
        .expect("send");
    assert!(response.status().is_success(), "{}", response.status());
}

/// DIAN answering 503, then late (past the timeout): the invoice stays pending, never
/// rejected, and is accepted once DIAN answers again; the number is accepted once.
async fn an_unknown_answer_stays_pending_and_is_accepted_once_dian_recovers(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    add_range(&app, 100, 200).await;
    for mode in ["unavailable", "late"] {
        fault(&app, mode, 2).await;
        let (shop, method) = shop(&app, "4242424242424242").await;
        let sub = subscribe(&app, &shop, &method, json!({})).await;
        let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
        let id = invoice["id"].as_str().expect("id");
        assert_eq!(invoice["dian"]["status"], "pending", "{mode}: {invoice}");
        let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
        assert_eq!(done["dian"]["status"], "accepted", "{mode}: {done}");
        let types = event_types(&app, sub["id"].as_str().expect("id")).await;
        assert!(
            !types.contains(&"invoice.dian_rejected".to_owned()),
            "{mode}: {types:?}"
        );
    }
    assert_invariants(&app).await;
}

/// A refund's credit note is numbered in its own series with its CUDE, names the invoice's
/// number and CUFE, and is accepted after its invoice.
async fn a_refunds_credit_note_gets_its_cude_and_is_accepted(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    add_range(&app, 990_000_000, 995_000_000).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
    let charge = invoice["charge_id"].as_str().expect("charge");
    let (status, refund) =
        crate::refunds::refund(&app, charge, json!({"amount_cents": 1_000_000})).await;
    assert_eq!(status, 201, "{refund}");
    let refund = crate::refunds::settled(&app, refund["id"].as_str().expect("id")).await;
    assert_eq!(refund["status"], "approved", "{refund}");
    let (_, page) = read(
        app.get(&format!(
            "/v1/credit-notes?invoice_id={}",
            invoice["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    let note = page["data"][0].clone();
    assert_eq!(note["number"], "NC1", "{note}");
    let cude = note["dian"]["cude"].as_str().expect("cude").to_owned();
    let id = note["id"].as_str().expect("id");
    let done = settled_dian(&app, &format!("/v1/credit-notes/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    assert_eq!(done["dian"]["cude"], cude.as_str());
    let xml = check_xml(&app, &made, &format!("/v1/credit-notes/{id}/xml"), true).await;
    let invoice_cufe = invoice["dian"]["cufe"].as_str().expect("cufe");
    assert!(
        xml.contains(invoice_cufe),
        "the credit note names the invoice's CUFE"
    );
    assert!(xml.contains("SETP990000000"));
    assert_invariants(&app).await;
}
