//! Issue 48's pictures: the operator's dashboard draws one account's MRR over the last twelve
//! months and this month's movements (CONTRACT §16), and the tables beside the charts give the
//! summary's figures, month by month. In Chromium the section is looked at on a phone and a
//! desktop, and axe-core (WCAG 2 AA) finds nothing on the page.

use crate::admin::{dashboard_login_in, dashboard_page};
use crate::common::{TestApp, read};
use crate::revenue::{MONTH, act, approved_once, priced_shop, summary};
use crate::subscriptions::{advance, subscribe};
use serde_json::json;

crate::db_tests!(the_dashboards_revenue_tables_are_the_summarys_figures);

/// Three subscriptions over three months: two started, renewed twice, one of them canceled
/// this month; a third started this month.
async fn three_months_of_revenue(app: &TestApp) {
    let (shop, method) = priced_shop(app, "4242424242424242").await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let sub = subscribe(app, &shop, &method, json!({})).await;
        let id = sub["id"].as_str().expect("id").to_owned();
        approved_once(app, &id).await;
        ids.push(id);
    }
    for _ in 0..2 {
        advance(app, MONTH).await;
    }
    act(app, &ids[1], "cancel", json!({"at_period_end": false})).await;
    let third = subscribe(app, &shop, &method, json!({})).await;
    approved_once(app, third["id"].as_str().expect("id")).await;
}

/// The (label, amount) rows of the table inside `<figure id="{figure}">`.
fn table_rows(page: &str, figure: &str) -> Vec<(String, String)> {
    let start = page
        .find(&format!("<figure id=\"{figure}\">"))
        .unwrap_or_else(|| panic!("no {figure} in the page"));
    let end = start + page[start..].find("</figure>").expect("figure's end");
    page[start..end]
        .split("<tr><td>")
        .skip(1)
        .map(|row| {
            let mut cells = row.split("</td><td>");
            let label = cells.next().expect("label").to_owned();
            let amount = cells.next().expect("amount");
            let amount = amount.split("</td>").next().expect("amount").to_owned();
            (label, amount)
        })
        .collect()
}

fn pesos(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", (cents / 100).abs(), (cents % 100).abs())
}

/// The last twelve Colombian months (`YYYY-MM`) up to the account clock's, oldest first.
async fn last_twelve_months(app: &TestApp) -> Vec<String> {
    use chrono::{Datelike, Months};
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let now = chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now"))
        .expect("rfc3339")
        .with_timezone(&chrono::FixedOffset::west_opt(5 * 3_600).expect("offset"));
    let first = now.date_naive().with_day(1).expect("first");
    (0..12)
        .rev()
        .map(|back| (first - Months::new(back)).format("%Y-%m").to_string())
        .collect()
}

async fn the_dashboards_revenue_tables_are_the_summarys_figures(app: TestApp) {
    three_months_of_revenue(&app).await;
    let page = dashboard_page(&app, &format!("/dashboard?account={}", app.account_id)).await;
    assert_eq!(
        page.matches("<svg role=\"img\" aria-label=").count(),
        2,
        "{page}"
    );
    let months = last_twelve_months(&app).await;
    let mrr = table_rows(&page, "mrr-chart");
    assert_eq!(mrr.len(), 12, "{mrr:?}");
    for ((_, shown), month) in mrr.iter().zip(&months) {
        let figures = summary(&app, month).await;
        let end = figures["mrr_end_cents"].as_i64().expect("mrr_end");
        assert_eq!(shown, &pesos(end), "{month}: {figures}");
    }
    // Two subscriptions' MRR before this month, one left and one came: the line is not flat.
    assert_ne!(mrr[11].1, mrr[0].1, "{mrr:?}");
    let this_month = summary(&app, &months[11]).await;
    let figure = |name: &str| this_month[name].as_i64().expect(name);
    let movements = table_rows(&page, "movements-chart");
    let expected = [
        ("new", figure("new_cents")),
        ("expansion", figure("expansion_cents")),
        ("reactivation", figure("reactivation_cents")),
        ("contraction", -figure("contraction_cents")),
        ("churn: left", -figure("churn_voluntary_cents")),
        ("churn: failed", -figure("churn_failed_payment_cents")),
    ]
    .map(|(label, cents)| (label.to_owned(), pesos(cents)));
    assert_eq!(movements, expected, "{this_month}");
    assert!(
        figure("new_cents") > 0 && figure("churn_voluntary_cents") > 0,
        "{this_month}"
    );

    // An unknown account falls back to the first; markup in an account's name stays text.
    let unknown = dashboard_page(&app, "/dashboard?account=%3Cscript%3E").await;
    assert!(unknown.contains("id=\"revenue\"") && !unknown.contains("<script>"));
}

/// The revenue section in Chromium, on a phone and a desktop: the charts drawn, nothing wider
/// than the screen, and nothing axe-core finds on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_revenue_charts_read_well_on_a_phone_and_a_desktop() {
    let Some(browser) = crate::common::browser::Browser::start().await else {
        return;
    };
    let app = crate::common::spawn_app(crate::common::Backend::Sqlite)
        .await
        .expect("sqlite");
    three_months_of_revenue(&app).await;
    dashboard_login_in(&browser, &app).await;
    browser.wait_for_text("#revenue", "MRR movements").await;
    // The shop's account, chosen as an operator would, with the page's own form.
    browser
        .client
        .goto(&app.url(&format!("/dashboard?account={}", app.account_id)))
        .await
        .expect("goto");
    browser.wait_for_text("#revenue", "MRR movements").await;
    for (width, height, name) in [(412, 915, "phone"), (1280, 900, "desktop")] {
        browser
            .client
            .set_window_size(width, height)
            .await
            .expect("resize");
        browser.scroll_to("#revenue").await;
        let drawn: serde_json::Value = browser
            .client
            .execute(
                "return [...document.querySelectorAll('#revenue svg')].map(s => s.getBoundingClientRect().width);",
                vec![],
            )
            .await
            .expect("widths");
        let widths = drawn.as_array().expect("array");
        assert_eq!(widths.len(), 2, "{drawn}");
        assert!(
            widths.iter().all(|w| w.as_f64().is_some_and(|w| w > 200.0)),
            "{name}: {drawn}"
        );
        if let Some(violations) = browser.accessibility_violations().await {
            assert!(
                violations.is_empty(),
                "axe-core on a {name}: {violations:#?}"
            );
        }
        browser
            .screenshot(&format!("dashboard-revenue-{name}"))
            .await;
    }
    browser.close().await;
}
