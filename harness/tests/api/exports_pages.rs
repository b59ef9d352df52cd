//! The month's ZIP read over several pages (`exports::bundle::PAGE` documents each, keyed by
//! `(issued_at, id)`): every invoice of the month once, none lost or repeated at a page's edge.

use crate::common::TestApp;
use crate::exports::{download, unzip};
use crate::subscriptions::{shop, subscribe};
use chrono::FixedOffset;
use serde_json::json;

crate::db_tests!(a_months_zip_over_several_pages_holds_each_invoice_once);

async fn a_months_zip_over_several_pages_holds_each_invoice_once(app: TestApp) {
    let count = billing::exports::bundle::PAGE * 2 + 3;
    let (shop, card) = shop(&app, "4242424242424242").await;
    let mut numbers = Vec::new();
    for _ in 0..count {
        let sub = subscribe(&app, &shop, &card, json!({})).await;
        let id = sub["id"].as_str().expect("id");
        let (status, page) =
            crate::common::read(app.get(&format!("/v1/invoices?subscription_id={id}")).await).await;
        assert_eq!(status, 200, "{page}");
        let number = page["data"][0]["number"].as_str().expect("a number");
        numbers.push(format!("invoices/{number}.pdf"));
    }
    let month = chrono::Utc::now()
        .with_timezone(&FixedOffset::west_opt(5 * 3_600).expect("UTC-5"))
        .format("%Y-%m")
        .to_string();
    let (status, _, _, bytes) =
        download(&app, &format!("/v1/exports/documents.zip?month={month}")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let names: Vec<String> = unzip(&bytes).into_keys().collect();
    numbers.sort();
    assert_eq!(names, numbers, "each invoice of the month once");
}
