//! The exports of an account with DIAN on (CONTRACT §16 with §12 and §12a), on both databases,
//! against the in-process sandbox DIAN: the CSV carries each document's DIAN number, status and
//! CUFE or CUDE, a credit note names its invoice by its DIAN number; the month's ZIP holds
//! beside each PDF the signed XML exactly as the API answers it and, for the accepted invoice,
//! its AttachedDocument, each parsed by Python's `xml.etree`. Skipped without `openssl` (the
//! certificate is made for the run), as the DIAN tests are.

use crate::common::{TestApp, read};
use crate::exports::{download, parse_csv, unzip, xml_roots};
use crate::subscriptions::{shop, subscribe};
use chrono::{DateTime, FixedOffset};
use serde_json::{Value, json};
use std::collections::BTreeMap;

crate::db_tests!(
    config = crate::dian::fast_dian;
    with_dian_the_exports_carry_the_electronic_documents,
);

fn colombian(value: &Value) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(value.as_str().expect("an instant"))
        .expect("RFC 3339")
        .with_timezone(&FixedOffset::west_opt(5 * 3_600).expect("UTC-5"))
}

async fn with_dian_the_exports_carry_the_electronic_documents(app: TestApp) {
    let Some(made) = crate::dian::make_certificate() else {
        return;
    };
    app.lift_rate_limit().await;
    crate::dian::turn_dian_on(&app, &made).await;
    crate::dian::add_range(&app, 990_000_000, 995_000_000).await;
    let (shop, card) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &card, json!({})).await;
    let listed = crate::dian::invoice_of(&app, sub["id"].as_str().expect("id")).await;
    let id = listed["id"].as_str().expect("id").to_owned();
    let invoice = crate::dian::settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(invoice["dian"]["status"], "accepted", "{invoice}");
    let charge = invoice["charge_id"].as_str().expect("charge");
    let (status, refund) =
        crate::refunds::refund(&app, charge, json!({"amount_cents": 500_000})).await;
    assert_eq!(status, 201, "{refund}");
    let refund = crate::refunds::settled(&app, refund["id"].as_str().expect("id")).await;
    assert_eq!(refund["status"], "approved", "{refund}");
    let (_, notes) = read(
        app.get(&format!("/v1/credit-notes?charge_id={charge}"))
            .await,
    )
    .await;
    let note_id = notes["data"][0]["id"]
        .as_str()
        .expect("a credit note")
        .to_owned();
    let note = crate::dian::settled_dian(&app, &format!("/v1/credit-notes/{note_id}")).await;
    assert_eq!(note["dian"]["status"], "accepted", "{note}");
    let number = invoice["number"].as_str().expect("a DIAN number");
    let note_number = note["number"].as_str().expect("a DIAN number");
    assert!(number.starts_with("SETP"), "{number}");

    let (first, last) = (
        colombian(&invoice["issued_at"]),
        colombian(&note["issued_at"]),
    );
    let (from, to) = (first.date_naive(), last.date_naive());
    let (status, _, _, csv) = download(
        &app,
        &format!("/v1/exports/invoices.csv?from={from}&to={to}"),
    )
    .await;
    assert_eq!(status, 200);
    let (_, rows) = parse_csv(&csv);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["number"], number);
    assert_eq!(rows[0]["dian_status"], "accepted");
    assert_eq!(
        rows[0]["cufe_or_cude"],
        invoice["dian"]["cufe"].as_str().expect("cufe")
    );
    assert_eq!(rows[1]["type"], "credit_note");
    assert_eq!(rows[1]["number"], note_number);
    assert_eq!(rows[1]["dian_status"], "accepted");
    assert_eq!(
        rows[1]["cufe_or_cude"],
        note["dian"]["cude"].as_str().expect("cude")
    );
    assert_eq!(rows[1]["invoice_number"], number);

    // The ZIP of each month they were issued in (one, unless the run straddles a month's end).
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut months = vec![
        first.format("%Y-%m").to_string(),
        last.format("%Y-%m").to_string(),
    ];
    months.dedup();
    for month in months {
        let (status, kind, _, zip) =
            download(&app, &format!("/v1/exports/documents.zip?month={month}")).await;
        assert_eq!(status, 200);
        assert_eq!(kind, "application/zip");
        files.extend(unzip(&zip));
    }
    let names: Vec<String> = files.keys().cloned().collect();
    let mut expected = vec![
        format!("credit-notes/{note_number}.pdf"),
        format!("credit-notes/{note_number}.xml"),
        format!("invoices/{number}-attached.xml"),
        format!("invoices/{number}.pdf"),
        format!("invoices/{number}.xml"),
    ];
    expected.sort();
    assert_eq!(names, expected);
    let roots = xml_roots(&files);
    assert_eq!(roots[&format!("invoices/{number}.xml")], "Invoice");
    assert_eq!(
        roots[&format!("invoices/{number}-attached.xml")],
        "AttachedDocument"
    );
    assert_eq!(
        roots[&format!("credit-notes/{note_number}.xml")],
        "CreditNote"
    );
    let same = |name: String, path: String| {
        let files = &files;
        let app = &app;
        async move {
            let (status, _, _, bytes) = download(app, &path).await;
            assert_eq!(status, 200, "{path}");
            assert_eq!(files[&name], bytes, "{name} is what {path} answers");
        }
    };
    same(
        format!("invoices/{number}.xml"),
        format!("/v1/invoices/{id}/xml"),
    )
    .await;
    same(
        format!("invoices/{number}-attached.xml"),
        format!("/v1/invoices/{id}/attached-document"),
    )
    .await;
    same(
        format!("credit-notes/{note_number}.xml"),
        format!("/v1/credit-notes/{note_id}/xml"),
    )
    .await;
    same(
        format!("invoices/{number}.pdf"),
        format!("/v1/invoices/{id}/pdf"),
    )
    .await;
    let pdf = &files[&format!("invoices/{number}.pdf")];
    assert!(pdf.starts_with(b"%PDF"));
    let name = format!(
        "export-dian-{}-{number}",
        crate::invoice_documents::backend_of(&app)
    );
    if let Some(text) = crate::invoice_documents::pdf_text(pdf, &name) {
        assert!(text.contains(number), "{text}");
    }
}
