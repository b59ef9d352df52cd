//! Every DIAN document reaches an end, or waits where an operator sees why (issue 46,
//! CONTRACT §12a), on both databases against the in-process sandbox DIAN:
//!
//! - a number DIAN already holds under another document (two accounts of one NIT, each with
//!   its own range starting at the same number) ends `rejected` with DIAN's messages and
//!   `invoice.dian_rejected`, once; a credit note of that invoice is not sent to certain
//!   rejection but waits, visibly;
//! - a range valid from tomorrow numbers the invoice waiting for it on its first day, with no
//!   other request than the test clock's advance; what waits more than a day is on the
//!   dashboard and its gauge;
//! - an invoice whose range ended before it could be signed is numbered again, not sent to
//!   certain rejection;
//! - a credit note numbered before a software PIN change is signed with the new PIN and
//!   accepted;
//! - DIAN's events can be subscribed to by name; a refund on an advanced test clock is dated
//!   once by it;
//! - the AttachedDocument of an accepted invoice, valid against DIAN's schema.

use crate::common::receiver::{Receiver, Reply};
use crate::common::{TestApp, assert_invariants, eventually, read};
use crate::dian::{Made, add_range, invoice_of, make_certificate, settled_dian, turn_dian_on};
use crate::subscriptions::{advance, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    config = crate::dian::fast_dian;
    a_number_dian_holds_for_another_document_ends_rejected_once,
    a_range_valid_from_tomorrow_numbers_the_waiting_invoice_on_its_first_day,
    dian_events_can_be_subscribed_to_by_name,
    a_refund_on_an_advanced_clock_is_dated_once_by_it,
    a_credit_note_numbered_before_a_pin_change_is_signed_with_the_new_pin,
    an_accepted_invoice_has_its_attached_document,
);

/// Scenarios whose filing loop is idle (`idle_filing`), in a module of their own.
mod idle {
    use super::*;

    crate::db_tests!(
        config = crate::dian_ends::idle_filing;
        an_invoice_whose_range_ended_before_it_was_signed_is_numbered_again,
    );
}

const BOUND: Duration = Duration::from_secs(30);

/// Files only when the test clock moves (its flush), so that a document stays unsigned
/// across a clock advance.
pub fn idle_filing(config: &mut billing::config::Config) {
    crate::dian::fast_dian(config);
    config.dian_interval_ms = 3_600_000;
}

async fn types_of(app: &TestApp, subscription: &str) -> Vec<String> {
    crate::subscriptions::events(app, subscription)
        .await
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect()
}

fn colombian_today() -> chrono::NaiveDate {
    (chrono::Utc::now() - chrono::Duration::hours(5)).date_naive()
}

async fn range(app: &TestApp, from: i64, valid_from: &str, valid_to: &str) -> Value {
    let (status, body) = read(
        app.post(
            "/v1/account/invoicing/numbering-ranges",
            json!({"resolution_number": "18760000002", "prefix": "SETT", "from": from,
                "to": from + 1000, "valid_from": valid_from, "valid_to": valid_to,
                "technical_key": crate::dian::TECHNICAL_KEY}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body
}

async fn refund_whole(app: &TestApp, invoice: &Value) -> Value {
    let charge = invoice["charge_id"].as_str().expect("charge");
    let (status, refund) = crate::refunds::refund(app, charge, json!({})).await;
    assert_eq!(status, 201, "{refund}");
    let refund = crate::refunds::settled(app, refund["id"].as_str().expect("id")).await;
    assert_eq!(refund["status"], "approved", "{refund}");
    let (_, page) = read(
        app.get(&format!(
            "/v1/credit-notes?invoice_id={}",
            invoice["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    page["data"][0].clone()
}

/// Two accounts of one NIT, each with its own range starting at the same number: DIAN (one
/// sandbox per deployment, documents kept by seller NIT and number) accepts the first
/// account's SETP990000000; the second's is refused with rule 90, and DIAN's `GetStatus` of
/// its key knows no such document: DIAN holds the number under another document. It ends
/// `rejected` with DIAN's messages and `invoice.dian_rejected`, and is not sent again. Its
/// credit note waits for the invoice to be corrected (`invoice_rejected`), unsent.
async fn a_number_dian_holds_for_another_document_ends_rejected_once(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    add_range(&app, 990_000_000, 995_000_000).await;
    let (first_shop, first_method) = shop(&app, "4242424242424242").await;
    let first = subscribe(&app, &first_shop, &first_method, json!({})).await;
    let first_invoice = invoice_of(&app, first["id"].as_str().expect("id")).await;
    let first_id = first_invoice["id"].as_str().expect("id");
    let done = settled_dian(&app, &format!("/v1/invoices/{first_id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");

    let other = app.create_account("Misma NIT").await;
    let other = app.as_account(&other);
    turn_dian_on(&other, &made).await;
    add_range(&other, 990_000_000, 995_000_000).await;
    let (mut shop, method) = shop(&other, "4242424242424242").await;
    // Another amount, so another CUFE: the same number, another document.
    shop.plan = other.create_plan("Otro", 4_000_000, 40_000_000).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let sub = subscribe(&other, &shop, &method, json!({})).await;
    let sub_id = sub["id"].as_str().expect("id");
    let invoice = invoice_of(&other, sub_id).await;
    assert_eq!(invoice["number"], "SETP990000000", "{invoice}");
    let id = invoice["id"].as_str().expect("id");
    let done = settled_dian(&other, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "rejected", "{done}");
    let messages = done["dian"]["messages"].to_string();
    assert!(messages.contains("Regla: 90"), "DIAN's messages: {done}");
    assert!(done["dian"]["waiting"].is_null(), "{done}");
    eventually(BOUND, || async {
        types_of(&other, sub_id)
            .await
            .contains(&"invoice.dian_rejected".to_owned())
    })
    .await;

    // Its credit note is not signed and sent to certain rejection: it waits, visibly.
    let note = refund_whole(&other, &invoice).await;
    let note_id = note["id"].as_str().expect("id").to_owned();
    eventually(BOUND, || async {
        let (_, note) = read(other.get(&format!("/v1/credit-notes/{note_id}")).await).await;
        note["dian"]["waiting"] == "invoice_rejected"
    })
    .await;
    let (_, note) = read(other.get(&format!("/v1/credit-notes/{note_id}")).await).await;
    assert_eq!(note["dian"]["status"], "pending", "{note}");
    let (status, _) = read(other.get(&format!("/v1/credit-notes/{note_id}/xml")).await).await;
    assert_eq!(status, 409, "never signed");

    // DIAN was sent the rejected number once: the documents it keeps are the first account's.
    let (_, kept) = read(
        app.admin(Method::GET, "/sandbox/dian/_sandbox/documents")
            .send()
            .await
            .expect("send"),
    )
    .await;
    let kept = kept.as_array().cloned().unwrap_or_default();
    let setp: Vec<&Value> = kept
        .iter()
        .filter(|d| d["number"] == "SETP990000000")
        .collect();
    assert_eq!(setp.len(), 1, "{kept:?}");
    assert_eq!(setp[0]["key"], first_invoice["dian"]["cufe"], "{kept:?}");
    let (_, again) = read(other.get(&format!("/v1/invoices/{id}")).await).await;
    assert_eq!(again["dian"]["status"], "rejected", "an end: {again}");
    assert_invariants(&app).await;
}

/// A range valid from tomorrow (Colombia) is added; an invoice issued today waits for it
/// (`awaiting_range`, its `waiting` says so). The test clock moves past midnight in Colombia:
/// with no other request, the invoice is numbered from the range on its first day, signed and
/// accepted. Before that, once it has waited more than a day, the dashboard and the gauge
/// show it.
async fn a_range_valid_from_tomorrow_numbers_the_waiting_invoice_on_its_first_day(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    let today = colombian_today();
    // Waiting more than a day first: a range that starts in two days.
    let starts = today + chrono::Duration::days(2);
    range(&app, 1, &starts.to_string(), "2099-12-31").await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
    assert_eq!(invoice["dian"]["status"], "awaiting_range", "{invoice}");
    assert_eq!(invoice["dian"]["waiting"], "awaiting_range", "{invoice}");
    let id = invoice["id"].as_str().expect("id");

    // A day and a bit later (Colombian date today + 1: the range is not valid yet), it has
    // waited more than a day: the dashboard names it, and so does the gauge.
    advance(&app, 86_400 + 600).await;
    let (_, still) = read(app.get(&format!("/v1/invoices/{id}")).await).await;
    assert_eq!(still["dian"]["status"], "awaiting_range", "{still}");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let cookie = crate::admin::dashboard_login(&app, &client).await;
    let page = client
        .get(app.url("/dashboard"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("text");
    assert!(page.contains("id=\"dian-waiting\""), "{page}");
    let section = &page[page.find("id=\"dian-waiting\"").expect("section")..];
    assert!(section.contains(&app.account_id), "{section}");
    assert!(section.contains("awaiting_range"), "{section}");
    let metrics = app.get("/metrics").await.text().await.expect("metrics");
    eventually(BOUND, || async {
        let metrics = app.get("/metrics").await.text().await.expect("metrics");
        metrics.lines().any(|l| {
            l.starts_with("dian_documents_waiting{reason=\"awaiting_range\"}") && !l.ends_with(" 0")
        })
    })
    .await;
    drop(metrics);

    // Past the next Colombian midnight: the range's first day.
    advance(&app, 86_400).await;
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    assert_eq!(done["number"], "SETT1", "{done}");
    assert!(done["dian"]["waiting"].is_null(), "{done}");
    let xml = app
        .get(&format!("/v1/invoices/{id}/xml"))
        .await
        .text()
        .await
        .expect("xml");
    assert!(
        xml.contains(&format!("<cbc:IssueDate>{starts}</cbc:IssueDate>")),
        "issued on the range's first day: {xml}"
    );
    assert_invariants(&app).await;
}

/// An endpoint subscribes to `invoice.dian_accepted` and `invoice.dian_rejected` by name, as
/// to any other event type; the OpenAPI document lists them; the acceptance arrives.
async fn dian_events_can_be_subscribed_to_by_name(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let (status, endpoint) = read(
        app.post(
            "/v1/webhook-endpoints",
            json!({"url": receiver.url, "events": ["invoice.dian_accepted", "invoice.dian_rejected"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{endpoint}");
    let (_, openapi) = read(app.get("/openapi.json").await).await;
    let text = openapi.to_string();
    assert!(
        text.contains("invoice.dian_accepted"),
        "the document names it"
    );
    assert!(
        text.contains("invoice.dian_rejected"),
        "the document names it"
    );
    turn_dian_on(&app, &made).await;
    add_range(&app, 990_000_000, 995_000_000).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &shop, &method, json!({})).await;
    eventually(BOUND, || async {
        receiver.received().iter().any(|r| {
            serde_json::from_slice::<Value>(&r.body)
                .is_ok_and(|body| body["type"] == "invoice.dian_accepted")
        })
    })
    .await;
    assert!(receiver.received().iter().all(|r| {
        serde_json::from_slice::<Value>(&r.body).is_ok_and(|body| {
            matches!(
                body["type"].as_str(),
                Some("invoice.dian_accepted" | "invoice.dian_rejected")
            )
        })
    }));
}

/// With the test clock a month ahead, a refund's credit note is dated by that clock once: on
/// the account's today, not a month later; its `credit_note.created` too.
async fn a_refund_on_an_advanced_clock_is_dated_once_by_it(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let sub_id = sub["id"].as_str().expect("id");
    advance(&app, 31 * 86_400).await;
    let (_, page) = read(
        app.get(&format!("/v1/invoices?subscription_id={sub_id}"))
            .await,
    )
    .await;
    let renewal = page["data"][0].clone();
    let note = refund_whole(&app, &renewal).await;
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let now =
        chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now")).expect("rfc3339");
    let issued = chrono::DateTime::parse_from_rfc3339(note["issued_at"].as_str().expect("at"))
        .expect("rfc3339");
    let gap = (issued - now).num_seconds().abs();
    assert!(
        gap < 3_600,
        "issued {issued}, the account's clock says {now}: {note}"
    );
}

/// A credit note numbered (its CUDE made with the software's PIN) while its invoice is still
/// pending; then the account's software PIN changes (habilitación to production, say). DIAN
/// checks the CUDE and the SoftwareSecurityCode against the PIN it holds now: the note is
/// signed with the new PIN, its CUDE made again, and it is accepted; never pending for ever.
async fn a_credit_note_numbered_before_a_pin_change_is_signed_with_the_new_pin(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    add_range(&app, 990_000_000, 995_000_000).await;
    fault(&app, "unavailable", 1_000).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
    let note = refund_whole(&app, &invoice).await;
    let old_cude = note["dian"]["cude"].as_str().expect("cude").to_owned();
    let response = app
        .request(Method::PATCH, "/v1/account/invoicing")
        .json(&json!({"dian": {
            "environment": "test",
            "software_id": "soft-e2e-1",
            "software_pin": "pin-produccion-67890",
            "certificate": {"p12_base64": made.p12_base64, "password": crate::dian::PASSWORD}
        }}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    fault(&app, "unavailable", 0).await;
    let id = invoice["id"].as_str().expect("id");
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    let note_id = note["id"].as_str().expect("id");
    let done = settled_dian(&app, &format!("/v1/credit-notes/{note_id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    let cude = done["dian"]["cude"].as_str().expect("cude");
    assert_ne!(cude, old_cude, "made again with the new PIN");
    let xml = app
        .get(&format!("/v1/credit-notes/{note_id}/xml"))
        .await
        .text()
        .await
        .expect("xml");
    assert!(xml.contains(cude), "the API's CUDE is the document's");
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

/// An invoice numbered today from a range that ends today, not signed before midnight (the
/// filing loop idle, a node down): signed tomorrow it would be dated after its range ended and
/// refused for certain (FAB07b). It is numbered again instead, from a range valid then, its
/// old number recorded, and accepted.
async fn an_invoice_whose_range_ended_before_it_was_signed_is_numbered_again(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    let today = colombian_today();
    range(&app, 1, "2020-01-01", &today.to_string()).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
    assert_eq!(invoice["number"], "SETT1", "{invoice}");
    let id = invoice["id"].as_str().expect("id");
    let tomorrow = today + chrono::Duration::days(1);
    let (status, body) = read(
        app.post(
            "/v1/account/invoicing/numbering-ranges",
            json!({"resolution_number": "18760000003", "prefix": "SETN", "from": 1,
                "to": 1000, "valid_from": tomorrow.to_string(), "valid_to": "2099-12-31",
                "technical_key": crate::dian::TECHNICAL_KEY}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    advance(&app, 86_400).await;
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    assert_eq!(done["number"], "SETN1", "{done}");
    assert_eq!(done["dian"]["replaced_number"], "SETT1", "{done}");
    assert_invariants(&app).await;
}

/// An accepted invoice's AttachedDocument: `application/xml`, valid against DIAN's
/// `UBL-AttachedDocument-2.1.xsd`, embedding the signed invoice as served by `…/xml` and
/// DIAN's ApplicationResponse for it; 409 while the invoice is not accepted.
async fn an_accepted_invoice_has_its_attached_document(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
    let id = invoice["id"].as_str().expect("id");
    let (status, body) = read(
        app.get(&format!("/v1/invoices/{id}/attached-document"))
            .await,
    )
    .await;
    assert_eq!(status, 409, "not accepted yet: {body}");
    // The customer's copy (CONTRACT §13: PDF and XML) is offered only once DIAN accepted it.
    let hosted = invoice["hosted_url"].as_str().expect("hosted").to_owned();
    let page = app.client.get(&hosted).send().await.expect("page");
    assert!(!page.text().await.expect("html").contains("download-xml"));
    let early = app
        .client
        .get(format!("{hosted}/xml"))
        .send()
        .await
        .expect("xml");
    assert_eq!(early.status(), 404);
    add_range(&app, 990_000_000, 995_000_000).await;
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    let response = app
        .get(&format!("/v1/invoices/{id}/attached-document"))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()[reqwest::header::CONTENT_TYPE],
        "application/xml"
    );
    let attached = response.text().await.expect("body");
    let signed = app
        .get(&format!("/v1/invoices/{id}/xml"))
        .await
        .text()
        .await
        .expect("xml");
    assert!(attached.contains(&signed), "the signed invoice, as sent");
    assert!(attached.contains("<ApplicationResponse"), "{attached}");
    let cufe = done["dian"]["cufe"].as_str().expect("cufe");
    assert!(attached.contains(cufe));
    validate_attached(&made, &attached);
    // The hosted invoice and the portal give the customer the same AttachedDocument.
    let html = app.client.get(&hosted).send().await.expect("page");
    let html = html.text().await.expect("html");
    assert!(html.contains("id=\"download-xml\""), "{html}");
    let theirs = app
        .client
        .get(format!("{hosted}/xml"))
        .send()
        .await
        .expect("xml");
    assert_eq!(theirs.status(), 200);
    assert!(
        theirs.headers()[reqwest::header::CONTENT_DISPOSITION]
            .to_str()
            .expect("ascii")
            .starts_with("attachment;")
    );
    assert_eq!(theirs.text().await.expect("xml"), attached);
    let (status, portal) = read(
        app.post(
            "/v1/portal-sessions",
            json!({"customer_id": sub["customer_id"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{portal}");
    let portal_page = app
        .client
        .get(portal["url"].as_str().expect("url"))
        .send()
        .await
        .expect("portal")
        .text()
        .await
        .expect("html");
    assert!(
        portal_page.contains(&format!("{hosted}/xml")),
        "the portal offers the XML: {portal_page}"
    );
    let (_, page) = read(app.get("/openapi.json").await).await;
    assert!(
        page["paths"]["/v1/invoices/{id}/attached-document"]["get"].is_object(),
        "in the OpenAPI document"
    );
}

/// `xmllint --schema` of DIAN's AttachedDocument schema, when the tools are there.
fn validate_attached(made: &Made, attached: &str) {
    let Some(xsd) = std::env::var_os("BILLING_DIAN_XSD_DIR").map(std::path::PathBuf::from) else {
        assert!(
            std::env::var("BILLING_REQUIRE_DIAN_TOOLS").as_deref() != Ok("1"),
            "BILLING_DIAN_XSD_DIR is required"
        );
        eprintln!("skipped: BILLING_DIAN_XSD_DIR is not set");
        return;
    };
    let file = made.dir.join("attached.xml");
    std::fs::write(&file, attached).expect("written");
    let out = std::process::Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(xsd.join("maindoc/UBL-AttachedDocument-2.1.xsd"))
        .arg(&file)
        .output()
        .expect("xmllint runs");
    assert!(
        out.status.success(),
        "xmllint: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A numbering that fails in the settling transaction (here a trigger refuses every update of
/// the ranges) leaves the invoice's document waiting, visibly (`numbering_failed`), not the
/// invoice looking as if DIAN were off; the next filing pass after the fault is gone numbers
/// it, and DIAN accepts it. SQLite only: the fault is a SQLite trigger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_numbering_waits_visibly_and_is_retried() {
    use sea_orm::ConnectionTrait;
    let app = crate::common::spawn_app_with(crate::common::Backend::Sqlite, crate::dian::fast_dian)
        .await
        .expect("sqlite always runs");
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    add_range(&app, 990_000_000, 995_000_000).await;
    let store = billing::store::Store::connect(&app.database_url)
        .await
        .expect("store");
    let (writer, _) = store.raw_connections();
    writer
        .execute_unprepared(
            "CREATE TRIGGER fail_numbering BEFORE UPDATE ON dian_ranges \
             BEGIN SELECT RAISE(ABORT, 'injected'); END",
        )
        .await
        .expect("trigger");
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
    assert_eq!(invoice["dian"]["status"], "awaiting_range", "{invoice}");
    assert_eq!(invoice["dian"]["waiting"], "numbering_failed", "{invoice}");
    writer
        .execute_unprepared("DROP TRIGGER fail_numbering")
        .await
        .expect("dropped");
    let id = invoice["id"].as_str().expect("id");
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    assert_eq!(done["number"], "SETP990000000", "{done}");
    assert!(done["dian"]["waiting"].is_null(), "{done}");
}
