//! The accountant's exports (CONTRACT §16) through the API on both databases, read back by
//! tools we did not write: the CSV by Python's `csv` module, the ZIP by Python's `zipfile`
//! (its XMLs by `xml.etree`), its PDFs by poppler's `pdftotext`. Documents are placed around
//! Colombian midnight with the test clock: an invoice at 23:30 on a month's last day is in that
//! day and month, one at 00:10 the next day is not. The CSV's amounts reconcile with the
//! invoices and credit notes the API answers, IVA split by rate; the lists filter by the same
//! dates; malformed or unbounded queries are 400s naming the parameter.

use crate::common::{TestApp, read};
use crate::subscriptions::{advance, shop, subscribe};
use chrono::{DateTime, Datelike, Duration as Days, FixedOffset, NaiveDate, TimeZone, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

crate::db_tests!(
    the_csv_reconciles_with_the_invoices_around_colombian_midnight,
    the_zip_holds_each_document_of_the_month_as_pdf,
    bad_dates_and_long_ranges_are_refused_naming_the_parameter,
);

fn colombia() -> FixedOffset {
    FixedOffset::west_opt(5 * 3_600).expect("UTC-5")
}

/// The account's clock now.
async fn clock_now(app: &TestApp) -> DateTime<Utc> {
    let (status, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    assert_eq!(status, 200, "{clock}");
    DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now"))
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

/// Moves the account's clock to `at` (a little after it: the advance is in whole seconds).
async fn advance_to(app: &TestApp, at: DateTime<Utc>) {
    let now = clock_now(app).await;
    let seconds = (at - now).num_seconds() + 1;
    assert!(seconds > 0, "{at} is behind the clock ({now})");
    advance(app, seconds).await;
}

/// The last day of the Colombian month of `now` whose 23:30 is still ahead (by a minute).
fn last_day_ahead(now: DateTime<Utc>) -> NaiveDate {
    let mut first = now
        .with_timezone(&colombia())
        .date_naive()
        .with_day(1)
        .expect("1st");
    loop {
        let next = first
            .checked_add_months(chrono::Months::new(1))
            .expect("month");
        let last = next.pred_opt().expect("day");
        if at_colombian(last, 23, 30) > now + Days::minutes(1) {
            return last;
        }
        first = next;
    }
}

fn at_colombian(day: NaiveDate, hour: u32, minute: u32) -> DateTime<Utc> {
    colombia()
        .from_local_datetime(&day.and_hms_opt(hour, minute, 0).expect("time"))
        .single()
        .expect("instant")
        .with_timezone(&Utc)
}

/// `script` run by `python3` with `args`: what it printed.
fn python(script: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// A file of this test's under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("billing-exports-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    dir.join(name)
}

/// The header and the rows of a CSV, as Python's `csv` module reads them.
pub(crate) fn parse_csv(bytes: &[u8]) -> (Vec<String>, Vec<BTreeMap<String, String>>) {
    let path = scratch("export.csv");
    std::fs::write(&path, bytes).expect("write");
    let printed = python(
        "import csv, json, sys\n\
         with open(sys.argv[1], newline='', encoding='utf-8') as f:\n\
         \x20   rows = list(csv.reader(f))\n\
         print(json.dumps(rows))",
        &[path.to_str().expect("path")],
    );
    let rows: Vec<Vec<String>> = serde_json::from_str(&printed).expect("json");
    let header = rows.first().cloned().expect("a header row");
    let records = rows[1..]
        .iter()
        .map(|row| {
            assert_eq!(row.len(), header.len(), "{row:?}");
            header.iter().cloned().zip(row.iter().cloned()).collect()
        })
        .collect();
    (header, records)
}

/// The files of a ZIP as Python's `zipfile` reads them (testing each one's CRC), extracted:
/// name → content. A name in it twice fails the test.
pub(crate) fn unzip(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let path = scratch("export.zip");
    std::fs::write(&path, bytes).expect("write");
    let out = path.with_extension("d");
    let printed = python(
        "import json, sys, zipfile\n\
         with zipfile.ZipFile(sys.argv[1]) as z:\n\
         \x20   assert z.testzip() is None\n\
         \x20   names = z.namelist()\n\
         \x20   assert len(names) == len(set(names)), 'a name twice: %s' % names\n\
         \x20   z.extractall(sys.argv[2])\n\
         \x20   print(json.dumps(z.namelist()))",
        &[path.to_str().expect("path"), out.to_str().expect("path")],
    );
    let names: Vec<String> = serde_json::from_str(&printed).expect("json");
    names
        .into_iter()
        .map(|name| {
            let content = std::fs::read(out.join(&name)).expect("extracted");
            (name, content)
        })
        .collect()
}

/// Every XML of `files` parsed by `xml.etree`: name → its root element's local name.
pub(crate) fn xml_roots(files: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, String> {
    let mut roots = BTreeMap::new();
    for (name, content) in files.iter().filter(|(n, _)| n.ends_with(".xml")) {
        let path = scratch("doc.xml");
        std::fs::write(&path, content).expect("write");
        let root = python(
            "import sys, xml.etree.ElementTree as ET\n\
             print(ET.parse(sys.argv[1]).getroot().tag.split('}')[-1])",
            &[path.to_str().expect("path")],
        );
        roots.insert(name.clone(), root.trim().to_owned());
    }
    roots
}

/// A download: its status, content type, disposition and bytes.
pub(crate) async fn download(app: &TestApp, path: &str) -> (u16, String, String, Vec<u8>) {
    let response = app.get(path).await;
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (kind, disposition) = (header("content-type"), header("content-disposition"));
    let bytes = response.bytes().await.expect("body").to_vec();
    (status, kind, disposition, bytes)
}

async fn set_tax_code(app: &TestApp, plan: &str, code: &str) {
    let (status, body) = read(
        app.request(Method::PATCH, &format!("/v1/plans/{plan}"))
            .json(&json!({"tax_code": code}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

async fn listed(app: &TestApp, path: &str) -> Vec<Value> {
    let (status, page) = read(app.get(path).await).await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().expect("data").clone()
}

fn pesos(cents: &Value) -> String {
    let cents = cents.as_i64().expect("cents");
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// The IVA of `code` in an invoice's `tax_breakdown` (0 without it).
fn breakdown(invoice: &Value, code: &str, key: &str) -> Value {
    let entries = invoice["tax_breakdown"].as_array().expect("breakdown");
    json!(
        entries
            .iter()
            .filter(|e| e["tax_code"] == code)
            .map(|e| e[key].as_i64().expect("cents"))
            .sum::<i64>()
    )
}

/// Three subscriptions around Colombian midnight at a month's end: one at 19 % at 23:30 on the
/// last day (a customer with a NIT and a legal name with a comma), then at 00:10 one at 5 % and
/// one exempt, and a partial refund of the first (its credit note, the next day). The days and
/// what each list and export holds of them.
struct Midnight {
    last_day: NaiveDate,
    next_day: NaiveDate,
    late: Value,
    early: Vec<Value>,
    note: Value,
}

async fn around_midnight(app: &TestApp) -> Midnight {
    app.lift_rate_limit().await;
    let (shop_19, card_19) = shop(app, "4242424242424242").await;
    let (shop_5, card_5) = shop(app, "4242424242424242").await;
    let (shop_0, card_0) = shop(app, "4242424242424242").await;
    set_tax_code(app, &shop_5.plan, "iva_5").await;
    set_tax_code(app, &shop_0.plan, "iva_exempt").await;
    let (status, customer) = read(
        app.request(
            Method::PATCH,
            &format!("/v1/customers/{}", shop_19.customer),
        )
        .json(&json!({"tax_id": {"type": "NIT", "number": "800197268"},
                          "legal_name": "Núñez & Cía, S.A.S."}))
        .send()
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{customer}");
    let last_day = last_day_ahead(clock_now(app).await);
    let next_day = last_day.succ_opt().expect("day");
    advance_to(app, at_colombian(last_day, 23, 30)).await;
    let late = subscribe(app, &shop_19, &card_19, json!({})).await;
    advance_to(app, at_colombian(next_day, 0, 10)).await;
    let five = subscribe(app, &shop_5, &card_5, json!({})).await;
    let exempt = subscribe(app, &shop_0, &card_0, json!({})).await;
    let invoice_of = |sub: &Value| {
        format!(
            "/v1/invoices?subscription_id={}",
            sub["id"].as_str().expect("id")
        )
    };
    let late = listed(app, &invoice_of(&late)).await[0].clone();
    let early = vec![
        listed(app, &invoice_of(&five)).await[0].clone(),
        listed(app, &invoice_of(&exempt)).await[0].clone(),
    ];
    let charge = late["charge_id"].as_str().expect("charge");
    let (status, refund) =
        crate::refunds::refund(app, charge, json!({"amount_cents": 1_000_000})).await;
    assert_eq!(status, 201, "{refund}");
    let refund = crate::refunds::settled(app, refund["id"].as_str().expect("id")).await;
    assert_eq!(refund["status"], "approved", "{refund}");
    let note = listed(app, &format!("/v1/credit-notes?charge_id={charge}")).await[0].clone();
    Midnight {
        last_day,
        next_day,
        late,
        early,
        note,
    }
}

async fn the_csv_reconciles_with_the_invoices_around_colombian_midnight(app: TestApp) {
    let m = around_midnight(&app).await;
    let (last, next) = (m.last_day, m.next_day);

    // The lists filter by the same Colombian days.
    let ids = |docs: &[Value]| -> Vec<String> {
        docs.iter()
            .map(|d| d["id"].as_str().expect("id").to_owned())
            .collect()
    };
    let on_last = listed(
        &app,
        &format!("/v1/invoices?issued_from={last}&issued_to={last}"),
    )
    .await;
    assert_eq!(ids(&on_last), ids(std::slice::from_ref(&m.late)));
    let on_next = listed(
        &app,
        &format!("/v1/invoices?issued_from={next}&issued_to={next}"),
    )
    .await;
    let mut early_ids = ids(&m.early);
    early_ids.reverse();
    assert_eq!(ids(&on_next), early_ids, "newest first");
    assert!(
        listed(
            &app,
            &format!("/v1/invoices?issued_to={}", last.pred_opt().expect("d"))
        )
        .await
        .is_empty()
    );
    let notes_next = listed(&app, &format!("/v1/credit-notes?issued_from={next}")).await;
    assert_eq!(ids(&notes_next), ids(std::slice::from_ref(&m.note)));
    assert!(
        listed(&app, &format!("/v1/credit-notes?issued_to={last}"))
            .await
            .is_empty()
    );

    // The last day alone: the 23:30 invoice, nothing of 00:10.
    let (status, kind, disposition, bytes) = download(
        &app,
        &format!("/v1/exports/invoices.csv?from={last}&to={last}"),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(kind, "text/csv; charset=utf-8");
    assert_eq!(
        disposition,
        format!("attachment; filename=\"invoices_{last}_{last}.csv\"")
    );
    let (header, rows) = parse_csv(&bytes);
    assert_eq!(
        header.join(","),
        "type,number,issued_at,customer_name,tax_id_type,tax_id_number,check_digit,subtotal,\
         iva_19,iva_5,exempt,excluded,total,currency,dian_status,cufe_or_cude,invoice_number,charge_id"
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["type"], "invoice");
    assert_eq!(row["number"], m.late["number"].as_str().expect("n"));
    assert!(
        row["issued_at"].starts_with(&format!("{last}T23:3")),
        "{row:?}"
    );
    assert!(row["issued_at"].ends_with("-05:00"), "{row:?}");
    assert_eq!(row["customer_name"], "Núñez & Cía, S.A.S.");
    assert_eq!(
        (row["tax_id_type"].as_str(), row["tax_id_number"].as_str()),
        ("NIT", "800197268")
    );
    assert_eq!(row["check_digit"], "4");
    // 30.000,00 with IVA 19 %: base 25.210,08 and IVA 4.789,92.
    assert_eq!(
        (row["subtotal"].as_str(), row["iva_19"].as_str()),
        ("25210.08", "4789.92")
    );
    assert_eq!(
        (row["iva_5"].as_str(), row["exempt"].as_str()),
        ("0.00", "0.00")
    );
    assert_eq!(
        (row["total"].as_str(), row["currency"].as_str()),
        ("30000.00", "COP")
    );
    assert_eq!(
        (row["dian_status"].as_str(), row["cufe_or_cude"].as_str()),
        ("", "")
    );
    assert_eq!(row["charge_id"], m.late["charge_id"].as_str().expect("c"));

    // Both days: every document in issue order, each as the API answers it.
    let (status, _, _, bytes) = download(
        &app,
        &format!("/v1/exports/invoices.csv?from={last}&to={next}"),
    )
    .await;
    assert_eq!(status, 200);
    let (_, rows) = parse_csv(&bytes);
    let types: Vec<&str> = rows.iter().map(|r| r["type"].as_str()).collect();
    assert_eq!(
        types,
        ["invoice", "invoice", "invoice", "credit_note"],
        "{rows:?}"
    );
    let mut invoices = vec![m.late.clone()];
    invoices.extend(m.early.iter().cloned());
    for (row, invoice) in rows.iter().zip(&invoices) {
        assert_eq!(row["charge_id"], invoice["charge_id"].as_str().expect("c"));
        assert_eq!(row["number"], invoice["number"].as_str().expect("n"));
        assert_eq!(row["subtotal"], pesos(&invoice["subtotal_cents"]));
        assert_eq!(
            row["iva_19"],
            pesos(&breakdown(invoice, "iva_19", "tax_cents"))
        );
        assert_eq!(
            row["iva_5"],
            pesos(&breakdown(invoice, "iva_5", "tax_cents"))
        );
        assert_eq!(
            row["exempt"],
            pesos(&breakdown(invoice, "iva_exempt", "taxable_base_cents"))
        );
        assert_eq!(row["total"], pesos(&invoice["total_cents"]));
    }
    // 5 %: base 28.571,43 and IVA 1.428,57; exempt: all base, no IVA.
    assert_eq!(
        (rows[1]["subtotal"].as_str(), rows[1]["iva_5"].as_str()),
        ("28571.43", "1428.57")
    );
    assert_eq!(
        (rows[2]["exempt"].as_str(), rows[2]["iva_19"].as_str()),
        ("30000.00", "0.00")
    );
    let note = &rows[3];
    assert_eq!(note["number"], m.note["number"].as_str().expect("n"));
    assert_eq!(
        note["invoice_number"],
        m.late["number"].as_str().expect("n")
    );
    assert_eq!(note["customer_name"], "Núñez & Cía, S.A.S.");
    assert_eq!(note["total"], pesos(&m.note["total_cents"]));
    assert_eq!(note["subtotal"], pesos(&m.note["subtotal_cents"]));
    assert_eq!(note["iva_19"], pesos(&m.note["tax_cents"]));
    assert!(note["issued_at"].starts_with(&next.to_string()), "{note:?}");
    // Every row's parts make its total, and the invoices' totals are the API's.
    let cents = |text: &str| -> i64 {
        let (units, decimals) = text.split_once('.').expect("a dot");
        assert_eq!(decimals.len(), 2, "{text}");
        units.parse::<i64>().expect("units") * 100 + decimals.parse::<i64>().expect("cents")
    };
    for row in &rows {
        assert_eq!(
            cents(&row["subtotal"]) + cents(&row["iva_19"]) + cents(&row["iva_5"]),
            cents(&row["total"]),
            "{row:?}"
        );
    }
    let csv_invoiced: i64 = rows
        .iter()
        .filter(|r| r["type"] == "invoice")
        .map(|r| cents(&r["total"]))
        .sum();
    let api_invoiced: i64 = listed(
        &app,
        &format!("/v1/invoices?issued_from={last}&issued_to={next}&limit=100"),
    )
    .await
    .iter()
    .map(|i| i["total_cents"].as_i64().expect("total"))
    .sum();
    assert_eq!(csv_invoiced, api_invoiced);
    assert_eq!(csv_invoiced, 9_000_000);
}

async fn the_zip_holds_each_document_of_the_month_as_pdf(app: TestApp) {
    let m = around_midnight(&app).await;
    let month = |day: NaiveDate| day.format("%Y-%m").to_string();
    let (status, kind, disposition, bytes) = download(
        &app,
        &format!("/v1/exports/documents.zip?month={}", month(m.last_day)),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(kind, "application/zip");
    assert_eq!(
        disposition,
        format!(
            "attachment; filename=\"documents_{}.zip\"",
            month(m.last_day)
        )
    );
    let files = unzip(&bytes);
    let late = m.late["number"].as_str().expect("n");
    let names: Vec<&String> = files.keys().collect();
    assert_eq!(
        names,
        [&format!("invoices/{late}.pdf")],
        "only the 23:30 invoice"
    );
    // The same PDF the API answers, and poppler reads its number in it.
    let pdf = &files[&format!("invoices/{late}.pdf")];
    let (_, _, _, own) = download(
        &app,
        &format!("/v1/invoices/{}/pdf", m.late["id"].as_str().expect("id")),
    )
    .await;
    assert_eq!(pdf, &own);
    if let Some(text) = crate::invoice_documents::pdf_text(
        pdf,
        &format!(
            "export-{}-{late}",
            crate::invoice_documents::backend_of(&app)
        ),
    ) {
        assert!(text.contains(late), "{text}");
    }

    // The next month: the two invoices of 00:10 and the credit note.
    let (status, _, _, bytes) = download(
        &app,
        &format!("/v1/exports/documents.zip?month={}", month(m.next_day)),
    )
    .await;
    assert_eq!(status, 200);
    let files = unzip(&bytes);
    let mut expected: Vec<String> = m
        .early
        .iter()
        .map(|i| format!("invoices/{}.pdf", i["number"].as_str().expect("n")))
        .collect();
    expected.push(format!(
        "credit-notes/{}.pdf",
        m.note["number"].as_str().expect("n")
    ));
    let mut names: Vec<String> = files.keys().cloned().collect();
    names.sort();
    expected.sort();
    assert_eq!(names, expected);
    for (name, content) in &files {
        assert!(content.starts_with(b"%PDF"), "{name}");
        let number = name
            .rsplit('/')
            .next()
            .and_then(|n| n.strip_suffix(".pdf"))
            .expect("n");
        if let Some(text) = crate::invoice_documents::pdf_text(
            content,
            &format!(
                "export-{}-{number}",
                crate::invoice_documents::backend_of(&app)
            ),
        ) {
            assert!(text.contains(number), "{name}: {text}");
        }
    }
    assert!(xml_roots(&files).is_empty(), "DIAN is off: no XML");
    // A month with nothing is an empty archive, not an error.
    let (status, _, _, bytes) = download(&app, "/v1/exports/documents.zip?month=2001-01").await;
    assert_eq!(status, 200);
    assert!(unzip(&bytes).is_empty());
}

async fn bad_dates_and_long_ranges_are_refused_naming_the_parameter(app: TestApp) {
    for (path, param) in [
        (
            "/v1/exports/invoices.csv?from=2026-1-05&to=2026-01-31",
            "from",
        ),
        (
            "/v1/exports/invoices.csv?from=2026-01-01&to=2026-02-30",
            "to",
        ),
        ("/v1/exports/invoices.csv?from=2026-01-01", "to"),
        (
            "/v1/exports/invoices.csv?from=2026-02-01&to=2026-01-31",
            "to",
        ),
        (
            "/v1/exports/invoices.csv?from=2026-01-01&to=2027-01-02",
            "to",
        ),
        (
            "/v1/exports/invoices.csv?from=2026-01-01&to=2026-01-31&extra=1",
            "extra",
        ),
        ("/v1/exports/documents.zip?month=2026-13", "month"),
        ("/v1/exports/documents.zip?month=2026-1", "month"),
        ("/v1/exports/documents.zip", "month"),
        ("/v1/invoices?issued_from=01-01-2026", "issued_from"),
        ("/v1/invoices?issued_to=2026-02-29", "issued_to"),
        (
            "/v1/credit-notes?issued_from=2026-01-01T00:00:00Z",
            "issued_from",
        ),
    ] {
        let (status, body) = read(app.get(path).await).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request", "{path}: {body}");
        assert_eq!(body["error"]["param"], param, "{path}: {body}");
    }
    // 366 days is the longest range; an empty one is a header alone.
    let (status, _, _, bytes) = download(
        &app,
        "/v1/exports/invoices.csv?from=2028-01-01&to=2028-12-31",
    )
    .await;
    assert_eq!(status, 200);
    let (header, rows) = parse_csv(&bytes);
    assert_eq!(header.len(), 18);
    assert!(rows.is_empty());
}
