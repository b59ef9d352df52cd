//! Issue 14, tenant isolation, generated from the OpenAPI document: every operation that takes
//! an id (in its path, its JSON body or its query) is called by account A with account B's ids,
//! and must answer exactly as it answers for an id that does not exist (404 on the tenant API),
//! and change nothing of B's.
//!
//! The walk cannot skip a new route silently: a path parameter, body field or query parameter
//! naming an id of a kind this file cannot make, a route outside the known groups, or a
//! POST/PATCH without a plausible body here fails the test. How each group is guarded:
//! - `/v1/…` (integrator key): 404, byte for byte the answer for a made-up id. The one fixed
//!   exception is `DELETE /v1/plans/{id}`, 405 for every id (CONTRACT §4).
//! - `/admin/…` (admin token): A's key is refused, 401, as for a made-up id.
//! - `/webhooks/processor/{developer_id}`: an event signed with A's events secret posted under
//!   B's id is refused, 401, as for a made-up account.
//! - `/checkout/{id}/…`: not called. A checkout session's URL is a capability: the customer's
//!   browser holds no key, and whoever has the URL may pay the session (that is its purpose).
//!   Its id is a UUIDv7: 74 random bits, but only 32 between two ids made in the same
//!   millisecond (the `uuid` crate counts there), which is what guessing a neighbour costs.

use crate::common::receiver::{Receiver, Reply};
use crate::common::{TestApp, eventually, read};
use crate::subscriptions::{shop, subscribe};
use billing::ids;
use document::{
    Guard, Kind, Objects, Operation, Slot, build, guard_of, operations, slot_kind, variants,
};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

mod document;

crate::db_tests!(every_route_given_another_accounts_ids_answers_as_for_none);

/// One of every kind in the account of `app`: a plan, an add-on attached to a subscription
/// (paid through the sandbox), its customer and card, a checkout session, a webhook endpoint
/// and the events it received.
async fn populate(app: &TestApp, receiver: &Receiver) -> Objects {
    app.lift_rate_limit().await;
    let endpoint = app
        .post(
            "/v1/webhook-endpoints",
            json!({"url": receiver.url, "events": ["*"]}),
        )
        .await;
    let (status, endpoint) = read(endpoint).await;
    assert_eq!(status, 201, "{endpoint}");
    // A notice of B's: e-mail on while its first invoice is issued (to a port where nothing
    // listens), then off, so that its receipt ends suppressed and nothing moves later.
    let notices_on = |on: bool| {
        json!({"email": {"enabled": on, "from_address": "b@example.co",
            "smtp": {"host": "127.0.0.1", "port": 9, "security": "none"}}})
    };
    let patch = |body: Value| {
        app.request(reqwest::Method::PATCH, "/v1/account/notices")
            .json(&body)
            .send()
    };
    assert_eq!(patch(notices_on(true)).await.expect("send").status(), 200);
    let (shop, method) = shop(app, "4242424242424242").await;
    let addon =
        json!({"name": "Extra", "monthly_amount_cents": 100_000, "annual_amount_cents": 1_000_000});
    let (status, addon) = read(app.post("/v1/addons", addon).await).await;
    assert_eq!(status, 201, "{addon}");
    let sub = subscribe(app, &shop, &method, json!({})).await;
    let id = |v: &Value| v["id"].as_str().expect("id").to_owned();
    let attach = json!({"addon_id": id(&addon), "prorate": false});
    let path = format!("/v1/subscriptions/{}/addons", id(&sub));
    let (status, body) = read(app.post(&path, attach).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(patch(notices_on(false)).await.expect("send").status(), 200);
    eventually(Duration::from_secs(30), || async {
        let (_, page) = read(app.get("/v1/notices").await).await;
        page["data"]
            .as_array()
            .is_some_and(|data| !data.is_empty() && data.iter().all(|n| n["status"] != "scheduled"))
    })
    .await;
    let (_, notices) = read(app.get("/v1/notices").await).await;
    let notice = notices["data"][0]["id"]
        .as_str()
        .expect("a notice")
        .to_owned();
    let session = json!({"plan_id": shop.plan, "cycle": "monthly", "customer_id": shop.customer});
    let (status, session) = read(app.post("/v1/checkout-sessions", session).await).await;
    assert_eq!(status, 201, "{session}");
    let portal = crate::portal::open(app, &shop.customer, json!({})).await;
    let (status, coupon) = read(
        app.post(
            "/v1/coupons",
            json!({"name": "B's", "percent_off_bps": 1_000, "duration": "forever"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{coupon}");
    let (status, code) = read(
        app.post(
            "/v1/promotion-codes",
            json!({"coupon_id": id(&coupon), "code": "B-ONLY"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{code}");
    let (_, charges) = read(
        app.get(&format!("/v1/charges?subscription_id={}", id(&sub)))
            .await,
    )
    .await;
    let charge = id(&charges["data"][0]);
    let (status, refund) = read(
        app.post(
            &format!("/v1/charges/{charge}/refunds"),
            json!({"amount_cents": 1_000}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{refund}");
    let refunded = crate::refunds::settled(app, &id(&refund)).await;
    assert_eq!(refunded["status"], "approved", "{refunded}");
    let (_, invoices) = read(app.get(&format!("/v1/invoices?charge_id={charge}")).await).await;
    let invoice = id(&invoices["data"][0]);
    let (_, notes) = read(
        app.get(&format!("/v1/credit-notes?charge_id={charge}"))
            .await,
    )
    .await;
    let credit_note = id(&notes["data"][0]);
    let (_, events) = read(app.get("/v1/events").await).await;
    let event = id(&events["data"][0]);
    // Every delivery done, so that nothing of B's moves while the walk runs.
    let deliveries = format!(
        "/v1/webhook-endpoints/{}/deliveries?limit=100",
        id(&endpoint)
    );
    eventually(Duration::from_secs(30), || async {
        let (_, page) = read(app.get(&deliveries).await).await;
        let data = page["data"].as_array().cloned().unwrap_or_default();
        !data.is_empty() && data.iter().all(|d| d["status"] == "delivered")
    })
    .await;
    // A person invited, who has not set their password (so the walk may re-invite them).
    let (status, person) = read(
        app.post(
            "/v1/console-users",
            json!({"email": format!("{}@example.co", app.account_id), "role": "accountant"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{person}");
    Objects::from([
        (Kind::Account, app.account_id.clone()),
        (Kind::ConsoleUser, id(&person)),
        (Kind::Plan, shop.plan),
        (Kind::Addon, id(&addon)),
        (Kind::Customer, shop.customer),
        (Kind::PaymentMethod, method),
        (Kind::Subscription, id(&sub)),
        (Kind::CheckoutSession, id(&session)),
        (Kind::WebhookEndpoint, id(&endpoint)),
        (Kind::Event, event),
        (Kind::Charge, charge),
        (Kind::Refund, id(&refund)),
        (Kind::Invoice, invoice),
        (Kind::CreditNote, credit_note),
        (Kind::PortalSession, id(&portal)),
        (Kind::Coupon, id(&coupon)),
        (Kind::PromotionCode, id(&code)),
        (Kind::Notice, notice),
    ])
}

async fn call(
    app: &TestApp,
    key: &str,
    method: &str,
    url: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
    let mut request = app.client.request(method, app.url(url)).bearer_auth(key);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("send");
    (
        response.status().as_u16(),
        response.text().await.expect("text"),
    )
}

/// What B sees of its own objects: every GET of the tenant API on B's ids.
async fn view(
    app: &TestApp,
    ops: &[Operation],
    b_key: &str,
    b: &Objects,
) -> BTreeMap<String, String> {
    let mut seen = BTreeMap::new();
    let lists = [
        "/v1/plans",
        "/v1/addons",
        "/v1/customers",
        "/v1/subscriptions",
        "/v1/checkout-sessions",
        "/v1/webhook-endpoints",
        "/v1/events",
        "/v1/balance",
        "/v1/balance/transactions",
        "/v1/account",
    ];
    let mut urls: Vec<String> = lists.iter().map(|l| l.to_string()).collect();
    for op in ops
        .iter()
        .filter(|op| op.method == "get" && guard_of(&op.path) == Guard::ApiKey)
    {
        if op.slots.iter().all(|s| matches!(s, Slot::Path(..))) {
            urls.push(build(&op.path, None, &op.slots, &|_, kind| b[&kind].clone()).0);
        }
    }
    for url in urls {
        let (status, text) = call(app, b_key, "get", &url, None).await;
        // DIAN is off for the walk's accounts: their documents have no signed XML and no
        // AttachedDocument (409).
        let dian_only = url.ends_with("/xml") || url.ends_with("/attached-document");
        let expected = if dian_only { 409 } else { 200 };
        assert_eq!(status, expected, "B reads its own {url}: {text}");
        seen.insert(url, text);
    }
    seen
}

async fn every_route_given_another_accounts_ids_answers_as_for_none(app: TestApp) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let b_app = app.as_account(&app.create_account("Tenant B").await);
    let a = populate(&app, &receiver).await;
    let b = populate(&b_app, &receiver).await;
    let (status, doc) = read(app.get("/openapi.json").await).await;
    assert_eq!(status, 200);
    let ops = operations(&doc);
    exports_hold_only_the_callers_documents(&app, &b_app, &a, &b).await;
    exports_hold_only_the_callers_documents(&b_app, &app, &b, &a).await;
    let before = view(&app, &ops, &b_app.api_key, &b).await;
    let mut walked = Vec::new();
    for op in &ops {
        let guard = guard_of(&op.path);
        if guard == Guard::Capability {
            walked.push(format!(
                "{} {} not called: a capability URL",
                op.method, op.path
            ));
            continue;
        }
        if guard == Guard::EventChecksum {
            walked.push(ingress_refuses_a_foreign_signature(&app, op, &a, &b).await);
            continue;
        }
        if guard == Guard::HubSignature {
            // Unsigned (or unverifiable) to B's id: the same refusal as to an id of nobody's.
            let url = build(&op.path, None, &op.slots, &|_, kind| b[&kind].clone()).0;
            let control = build(&op.path, None, &op.slots, &|_, kind| kind.made_up()).0;
            let body = (op.method == "post")
                .then(|| json!({"object": "whatsapp_business_account", "entry": []}));
            let (status, text) = call(&app, "", &op.method, &url, body.as_ref()).await;
            let (control_status, control_text) =
                call(&app, "", &op.method, &control, body.as_ref()).await;
            assert_eq!((status, &text), (control_status, &control_text), "{url}");
            assert!([401, 403].contains(&status), "{url}: {status} {text}");
            walked.push(format!("{} {url} (unsigned) -> {status}", op.method));
            continue;
        }
        for foreign in variants(&op.slots) {
            let made_up: Vec<String> = op.slots.iter().map(|s| slot_kind(s).made_up()).collect();
            let own = |i: usize, kind: Kind| match op.slots[i] {
                Slot::Query(..) => String::new(),
                _ => a[&kind].clone(),
            };
            let pick_b = |i: usize, kind: Kind| {
                if foreign.contains(&i) {
                    b[&kind].clone()
                } else {
                    own(i, kind)
                }
            };
            let pick_none = |i: usize, kind: Kind| {
                if foreign.contains(&i) {
                    made_up[i].clone()
                } else {
                    own(i, kind)
                }
            };
            let (url, body) = build(&op.path, op.body.as_ref(), &op.slots, &pick_b);
            let (control_url, control_body) =
                build(&op.path, op.body.as_ref(), &op.slots, &pick_none);
            let (status, text) = call(&app, &app.api_key, &op.method, &url, body.as_ref()).await;
            let (_, control) = call(
                &app,
                &app.api_key,
                &op.method,
                &control_url,
                control_body.as_ref(),
            )
            .await;
            let expected = match (guard, &op.slots[foreign[0]]) {
                (Guard::AdminToken, _) => 401,
                (_, Slot::Query(..)) => 200,
                // A coupon that cannot be redeemed, unknown included, is a 400 naming the
                // field (CONTRACT §14); as for one that does not exist.
                (_, Slot::Body(Kind::Coupon)) if op.path != "/v1/promotion-codes" => 400,
                _ => 404,
            };
            assert_eq!(status, expected, "{} {url} with A's key: {text}", op.method);
            let mut unmasked = text.clone();
            for i in &foreign {
                unmasked = unmasked.replace(&b[&slot_kind(&op.slots[*i])], &made_up[*i]);
            }
            assert_eq!(
                unmasked, control,
                "{} {url} answers otherwise than for ids that do not exist",
                op.method
            );
            if expected == 200 {
                let page: Value = serde_json::from_str(&text).expect("json");
                assert_eq!(page["data"], json!([]), "{url}: {text}");
            }
            walked.push(format!("{} {url} -> {status}", op.method));
        }
    }
    let after = view(&app, &ops, &b_app.api_key, &b).await;
    for (url, text) in &before {
        assert_eq!(
            Some(text),
            after.get(url),
            "B's {url} changed during the walk"
        );
    }
    eprintln!("walked:\n{}", walked.join("\n"));
    // Every group of the document was met (a walk over nothing proves nothing).
    for group in ["/v1/", "/admin/", "/webhooks/processor/"] {
        assert!(
            ops.iter().any(|op| op.path.starts_with(group)),
            "no {group} route walked"
        );
    }
}

/// The exports take no id, so the walk cannot try them: `own`'s CSV and ZIP (of the days and
/// the month of its invoice) hold exactly its own invoice and credit note, never one of
/// `other`'s, whose documents have the same numbers (each account's series starts at 1).
async fn exports_hold_only_the_callers_documents(
    own_app: &TestApp,
    other_app: &TestApp,
    own: &Objects,
    other: &Objects,
) {
    use crate::exports::{download, parse_csv, unzip};
    let (_, invoice) = read(
        own_app
            .get(&format!("/v1/invoices/{}", own[&Kind::Invoice]))
            .await,
    )
    .await;
    let (_, note) = read(
        own_app
            .get(&format!("/v1/credit-notes/{}", own[&Kind::CreditNote]))
            .await,
    )
    .await;
    let issued = chrono::DateTime::parse_from_rfc3339(invoice["issued_at"].as_str().expect("at"))
        .expect("RFC 3339")
        .with_timezone(&chrono::FixedOffset::west_opt(5 * 3_600).expect("UTC-5"));
    let day = issued.date_naive();
    let (from, to) = (day.pred_opt().expect("day"), day.succ_opt().expect("day"));
    let (status, _, _, csv) = download(
        own_app,
        &format!("/v1/exports/invoices.csv?from={from}&to={to}"),
    )
    .await;
    assert_eq!(status, 200);
    let text = String::from_utf8(csv.clone()).expect("utf-8");
    assert!(
        !text.contains(&other[&Kind::Charge]),
        "another account's charge in {text}"
    );
    let (_, rows) = parse_csv(&csv);
    let listed: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["type"].as_str(), r["charge_id"].as_str()))
        .collect();
    let charge = own[&Kind::Charge].as_str();
    assert_eq!(
        listed,
        [("invoice", charge), ("credit_note", charge)],
        "{text}"
    );
    let month = issued.format("%Y-%m");
    let (status, _, _, zip) =
        download(own_app, &format!("/v1/exports/documents.zip?month={month}")).await;
    assert_eq!(status, 200);
    let files = unzip(&zip);
    let pdf_of = format!("invoices/{}.pdf", invoice["number"].as_str().expect("n"));
    let names: Vec<&String> = files.keys().collect();
    let note_pdf = format!("credit-notes/{}.pdf", note["number"].as_str().expect("n"));
    assert_eq!(names, [&note_pdf, &pdf_of]);
    let (_, _, _, mine) = download(
        own_app,
        &format!("/v1/invoices/{}/pdf", own[&Kind::Invoice]),
    )
    .await;
    let (_, _, _, theirs) = download(
        other_app,
        &format!("/v1/invoices/{}/pdf", other[&Kind::Invoice]),
    )
    .await;
    assert_eq!(files[&pdf_of], mine, "the caller's own invoice");
    assert_ne!(
        files[&pdf_of], theirs,
        "never the other account's, of the same number"
    );
}

/// An event signed with A's events secret, posted under B's developer id, is refused as one
/// under an account that does not exist.
async fn ingress_refuses_a_foreign_signature(
    app: &TestApp,
    op: &Operation,
    a: &Objects,
    b: &Objects,
) -> String {
    let store = billing::store::Store::connect(&app.database_url)
        .await
        .expect("store");
    let account = store
        .account(&ids::AccountId::parse(&a[&Kind::Account]).expect("an account's id"))
        .await
        .expect("db")
        .expect("A");
    let mut event = json!({
        "event": "transaction.updated",
        "data": {"transaction": {"id": "1-1-1", "status": "APPROVED", "amount_in_cents": 3_000_000,
            "reference": b[&Kind::Subscription], "currency": "COP"}},
        "signature": {"properties": ["transaction.id", "transaction.status", "transaction.amount_in_cents"]},
        "timestamp": chrono::Utc::now().timestamp(),
    });
    let checksum =
        billing::processor::signature::event_checksum(&event, &account.processor_events_secret)
            .expect("checksum");
    event["signature"]["checksum"] = json!(checksum);
    let url = build(&op.path, None, &op.slots, &|_, kind| b[&kind].clone()).0;
    let control = build(&op.path, None, &op.slots, &|_, kind| kind.made_up()).0;
    // The same event under A's own id is accepted: the refusal below is B's id, not the event.
    let own = build(&op.path, None, &op.slots, &|_, kind| a[&kind].clone()).0;
    let (own_status, own_text) = call(app, "", "post", &own, Some(&event)).await;
    assert_eq!(own_status, 200, "{own}: {own_text}");
    let (status, text) = call(app, "", "post", &url, Some(&event)).await;
    let (control_status, control_text) = call(app, "", "post", &control, Some(&event)).await;
    assert_eq!((status, &text), (401, &control_text), "{url}");
    assert_eq!(control_status, 401);
    format!("post {url} (signed with A's secret) -> {status}")
}
