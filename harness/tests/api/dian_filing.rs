//! Filing with DIAN over time and across nodes (issue 37).
//!
//! - Two nodes on one PostgreSQL schema, each running its filing loop, file one account's
//!   documents with one standalone sandbox DIAN, served here over real HTTP and named by the
//!   `dian_sandbox_url` setting, as an operator would run `billing sandbox-dian`. The invoices
//!   of a month's renewals are numbered in the batches' transactions at both nodes (each renews
//!   its own shards) and claimed by whichever node gets them first: every number is issued
//!   once, every document is accepted, and DIAN receives each exactly once.
//! - DIAN accepts a document only on the day it was issued (FAD09e, which the sandbox applies
//!   as DIAN does): an invoice numbered on an earlier day and not yet signed is re-dated when
//!   it is signed, and accepted.

use crate::common::{Backend, TestApp, assert_invariants, database_url, spawn_on_with};
use crate::dian::{
    PIN, TECHNICAL_KEY, add_range, fast_dian, invoice_of, make_certificate, settled_dian,
    turn_dian_on,
};
use crate::invoices::invoices;
use crate::subscriptions::{Shop, advance, shop, subscribe};
use billing::dian::document::NumberingRange;
use billing::dian::sandbox::{AdminAuth, SERVICE_PATH, SandboxDian, SandboxDianConfig};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::time::Duration;

crate::db_tests!(
    config = crate::dian::fast_dian;
    an_invoice_numbered_on_an_earlier_day_is_redated_when_signed,
);

/// The shared sandbox DIAN's service URL, for the nodes' configuration (a `fn` pointer).
static SHARED: OnceLock<String> = OnceLock::new();
const SUBSCRIPTIONS: usize = 12;
const BOUND: Duration = Duration::from_secs(60);

fn shared_dian(config: &mut billing::config::Config) {
    fast_dian(config);
    config.dian_sandbox_url = SHARED.get().cloned();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_number_and_file_a_bursts_invoices_once_each() {
    let Some(made) = make_certificate() else {
        return;
    };
    let sandbox = SandboxDian::new(
        SandboxDianConfig::default(),
        AdminAuth::from_token("dian-nodes-admin-token"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}{SERVICE_PATH}",
        listener.local_addr().expect("addr")
    );
    SHARED.set(url).expect("set once");
    tokio::spawn(std::sync::Arc::clone(&sandbox).serve(listener, std::future::pending()));
    // What DIAN's habilitación tells it: the software and the range (the in-process sandbox
    // is told by the filing loop; a standalone one by its operator).
    sandbox.register_software("soft-e2e-1", PIN);
    sandbox.register_range(
        "900123456",
        NumberingRange {
            resolution_number: "18760000001".into(),
            prefix: "SETP".into(),
            from: 990_000_000,
            to: 995_000_000,
            valid_from: "2020-01-01".parse().expect("date"),
            valid_to: "2099-12-31".parse().expect("date"),
            technical_key: TECHNICAL_KEY.into(),
        },
    );
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let a = spawn_on_with(url.clone(), shared_dian).await;
    let b = spawn_on_with(url, shared_dian).await;
    // One sandbox processor for both nodes, so the audit finds every charge's transaction.
    let (first, plan, customer, method) = crate::cluster_nodes::shop(&a, &a).await;
    let second = crate::cluster_nodes::through(&first, &b);
    turn_dian_on(&first, &made).await;
    add_range(&first, 990_000_000, 995_000_000).await;
    let shop = Shop { customer, plan };
    for i in 0..SUBSCRIPTIONS {
        let node = if i % 2 == 0 { &first } else { &second };
        subscribe(node, &shop, &method, json!({})).await;
    }
    // A month: every subscription renews at the node that owns its shard.
    advance(&first, 31 * 86_400).await;
    let expected = 2 * SUBSCRIPTIONS;
    // DIAN's side first (no API call: the account's rate limit counts every request), then
    // ours, once: a node records the answer right after DIAN gives it.
    let deadline = tokio::time::Instant::now() + BOUND;
    while sandbox.accepted().len() < expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        let all = invoices(&first, "limit=100").await;
        if all.len() == expected && all.iter().all(|i| i["dian"]["status"] == "accepted") {
            break;
        }
        let seen: Vec<(&Value, &Value, &Value)> = all
            .iter()
            .filter(|i| i["dian"]["status"] != "accepted")
            .map(|i| (&i["number"], &i["issued_at"], &i["dian"]))
            .collect();
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {expected} accepted at DIAN; ours: {seen:?}",
            sandbox.accepted().len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let ours = invoices(&second, "limit=100").await;
    let numbers: HashSet<&str> = ours
        .iter()
        .map(|i| i["number"].as_str().expect("numbered"))
        .collect();
    assert_eq!(numbers.len(), expected, "each number once: {numbers:?}");
    let at_dian = sandbox.accepted();
    assert_eq!(at_dian.len(), expected, "{at_dian:?}");
    let by_number: HashMap<&str, &str> = at_dian
        .iter()
        .map(|d| (d.number.as_str(), d.key.as_str()))
        .collect();
    for invoice in &ours {
        let number = invoice["number"].as_str().expect("number");
        assert_eq!(
            by_number.get(number).copied(),
            invoice["dian"]["cufe"].as_str(),
            "DIAN holds {number} under our CUFE"
        );
    }
    assert!(
        at_dian.iter().all(|d| d.sends == 1),
        "no document reached DIAN twice: {at_dian:?}"
    );
    assert_invariants(&first).await;
}

/// An invoice waits for a range (numbered on day D when one comes two days later, its issue
/// date still D's) and is signed on D + 2: it goes to DIAN dated D + 2 with the code of that
/// date, and is accepted. Without the re-dating, DIAN refuses it (FAD09e).
async fn an_invoice_numbered_on_an_earlier_day_is_redated_when_signed(app: TestApp) {
    let Some(made) = make_certificate() else {
        return;
    };
    turn_dian_on(&app, &made).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let invoice = invoice_of(&app, sub["id"].as_str().expect("id")).await;
    assert_eq!(invoice["dian"]["status"], "awaiting_range", "{invoice}");
    advance(&app, 2 * 86_400).await;
    add_range(&app, 990_000_000, 995_000_000).await;
    let id = invoice["id"].as_str().expect("id");
    let done = settled_dian(&app, &format!("/v1/invoices/{id}")).await;
    assert_eq!(done["dian"]["status"], "accepted", "{done}");
    let issued = chrono::DateTime::parse_from_rfc3339(invoice["issued_at"].as_str().expect("at"))
        .expect("RFC 3339");
    let bogota = chrono::FixedOffset::west_opt(5 * 3600).expect("offset");
    let signed_day = (issued + chrono::Duration::days(2))
        .with_timezone(&bogota)
        .date_naive();
    let xml = app
        .get(&format!("/v1/invoices/{id}/xml"))
        .await
        .text()
        .await
        .expect("xml");
    let cufe = done["dian"]["cufe"].as_str().expect("cufe");
    assert!(
        xml.contains(&format!("<cbc:IssueDate>{signed_day}</cbc:IssueDate>")),
        "dated {signed_day}: {xml}"
    );
    assert!(xml.contains(cufe), "the API's CUFE is the document's");
    assert_eq!(
        done["number"], "SETP990000000",
        "the number is kept: {done}"
    );
    // Its printed representation carries the electronic document's date, not the invoice's.
    let (status, _, pdf) = crate::invoice_documents::bytes_of(
        app.get(&format!("/v1/invoices/{id}/pdf?lang=es")).await,
    )
    .await;
    assert_eq!(status, 200);
    let name = format!(
        "dian-redated-{}",
        crate::invoice_documents::backend_of(&app)
    );
    if let Some(text) = crate::invoice_documents::pdf_text(&pdf, &name) {
        let months = [
            "enero",
            "febrero",
            "marzo",
            "abril",
            "mayo",
            "junio",
            "julio",
            "agosto",
            "septiembre",
            "octubre",
            "noviembre",
            "diciembre",
        ];
        use chrono::Datelike;
        let printed = format!(
            "{} de {} de {}",
            signed_day.day(),
            months[signed_day.month0() as usize],
            signed_day.year()
        );
        assert!(text.contains(&printed), "{printed} in: {text}");
    }
    assert_invariants(&app).await;
}
