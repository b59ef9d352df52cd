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
//!   browser holds no key, and whoever has the URL may pay the session (that is its purpose; the
//!   id is a UUIDv7, whose random bits make it unguessable).

use crate::common::receiver::{Receiver, Reply};
use crate::common::{TestApp, eventually, read};
use crate::subscriptions::{shop, subscribe};
use billing::ids;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

crate::db_tests!(every_route_given_another_accounts_ids_answers_as_for_none);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Account,
    Plan,
    Addon,
    Customer,
    PaymentMethod,
    Subscription,
    CheckoutSession,
    WebhookEndpoint,
    Event,
}

impl Kind {
    /// The kind an id parameter names: by its own name (`addon_id`), else by the collection
    /// it follows in the path (`/plans/{id}`).
    fn of(name: &str, collection: Option<&str>) -> Kind {
        let by_name = match name.strip_suffix("_id") {
            Some("addon") => Some(Kind::Addon),
            Some("customer") => Some(Kind::Customer),
            Some("plan") => Some(Kind::Plan),
            Some("payment_method" | "default_payment_method") => Some(Kind::PaymentMethod),
            Some("subscription") => Some(Kind::Subscription),
            Some("developer") => Some(Kind::Account),
            _ => None,
        };
        let by_collection = || match collection? {
            "accounts" | "processor" => Some(Kind::Account),
            "plans" => Some(Kind::Plan),
            "addons" => Some(Kind::Addon),
            "customers" => Some(Kind::Customer),
            "subscriptions" => Some(Kind::Subscription),
            "checkout-sessions" | "checkout" => Some(Kind::CheckoutSession),
            "webhook-endpoints" => Some(Kind::WebhookEndpoint),
            "events" => Some(Kind::Event),
            _ => None,
        };
        by_name.or_else(by_collection).unwrap_or_else(|| {
            panic!(
                "no kind known for the id `{name}` (after {collection:?}): make one of B's in \
                 `populate` and teach `Kind::of` its name"
            )
        })
    }

    /// A well-formed id of this kind that names nothing.
    fn made_up(self) -> String {
        match self {
            Kind::Account => ids::AccountId::generate().into_string(),
            Kind::Plan => ids::PlanId::generate().into_string(),
            Kind::Addon => ids::AddonId::generate().into_string(),
            Kind::Customer => ids::CustomerId::generate().into_string(),
            Kind::PaymentMethod => ids::PaymentMethodId::generate().into_string(),
            Kind::Subscription => ids::SubscriptionId::generate().into_string(),
            Kind::CheckoutSession => ids::CheckoutSessionId::generate().into_string(),
            Kind::WebhookEndpoint => ids::WebhookEndpointId::generate().into_string(),
            Kind::Event => ids::EventId::generate().into_string(),
        }
    }
}

type Objects = BTreeMap<Kind, String>;

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
    let session = json!({"plan_id": shop.plan, "cycle": "monthly", "customer_id": shop.customer});
    let (status, session) = read(app.post("/v1/checkout-sessions", session).await).await;
    assert_eq!(status, 201, "{session}");
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
    Objects::from([
        (Kind::Account, app.account_id.clone()),
        (Kind::Plan, shop.plan),
        (Kind::Addon, id(&addon)),
        (Kind::Customer, shop.customer),
        (Kind::PaymentMethod, method),
        (Kind::Subscription, id(&sub)),
        (Kind::CheckoutSession, id(&session)),
        (Kind::WebhookEndpoint, id(&endpoint)),
        (Kind::Event, event),
    ])
}

/// A plausible, valid body for each operation that takes one; `"@kind"` stands for an id of
/// that kind (the caller's own, except in the variant that tries B's).
fn body_of(method: &str, path: &str) -> Option<Value> {
    let body = match (method, path) {
        ("patch", "/v1/plans/{id}" | "/v1/addons/{id}") => json!({"name": "Renamed"}),
        ("post", "/v1/customers/{id}/payment-methods") => {
            json!({"processor_payment_source_id": 1})
        }
        ("post", "/v1/events/{id}/redeliver") => json!({}),
        ("patch", "/v1/subscriptions/{id}") => {
            json!({"default_payment_method_id": "@PaymentMethod"})
        }
        ("post", "/v1/subscriptions/{id}/addons") => {
            json!({"addon_id": "@Addon", "prorate": false})
        }
        ("post", "/v1/subscriptions/{id}/cancel") => json!({"at_period_end": false}),
        ("post", "/v1/subscriptions/{id}/change-plan") => {
            json!({"plan_id": "@Plan", "cycle": "annual", "prorate": false})
        }
        ("post", "/v1/subscriptions/{id}/change-plan/preview") => json!({"plan_id": "@Plan"}),
        (
            "post",
            "/v1/subscriptions/{id}/charge-now"
            | "/v1/subscriptions/{id}/pause"
            | "/v1/subscriptions/{id}/resume",
        ) => json!({}),
        ("patch", "/v1/webhook-endpoints/{id}") => json!({"events": ["*"], "active": false}),
        ("post", "/v1/subscriptions") => json!({"customer_id": "@Customer", "plan_id": "@Plan",
            "cycle": "monthly", "payment_method_id": "@PaymentMethod"}),
        ("post", "/v1/checkout-sessions") => {
            json!({"plan_id": "@Plan", "cycle": "monthly", "customer_id": "@Customer"})
        }
        ("patch", "/admin/accounts/{id}") => json!({"rate_limit_per_minute": 1}),
        ("post", "/admin/accounts/{id}/balance/top-ups") => json!({"amount_cents": 1}),
        _ => return None,
    };
    Some(body)
}

/// `"@Kind"` strings of `template` replaced by `id_of(kind)`.
fn fill(template: &Value, id_of: &dyn Fn(Kind) -> String) -> Value {
    match template {
        Value::String(text) => match text.strip_prefix('@') {
            Some(kind) => json!(id_of(kind_named(kind))),
            None => template.clone(),
        },
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (k.clone(), fill(v, id_of)))
            .collect(),
        Value::Array(items) => items.iter().map(|v| fill(v, id_of)).collect(),
        _ => template.clone(),
    }
}

fn kind_named(name: &str) -> Kind {
    *KINDS
        .iter()
        .find(|k| format!("{k:?}") == name)
        .expect("a kind")
}

const KINDS: [Kind; 9] = [
    Kind::Account,
    Kind::Plan,
    Kind::Addon,
    Kind::Customer,
    Kind::PaymentMethod,
    Kind::Subscription,
    Kind::CheckoutSession,
    Kind::WebhookEndpoint,
    Kind::Event,
];

/// Where an id goes in one request, and whose it is.
#[derive(Clone, Debug)]
enum Slot {
    Path(String, Kind),
    Body(Kind),
    Query(String, Kind),
}

/// The request for `path`/`body`, each slot filled by `pick(slot index, kind)`.
fn build(
    path: &str,
    body: Option<&Value>,
    slots: &[Slot],
    pick: &dyn Fn(usize, Kind) -> String,
) -> (String, Option<Value>) {
    let mut url = path.to_owned();
    let mut query = Vec::new();
    let mut body_ids: BTreeMap<Kind, String> = BTreeMap::new();
    for (i, slot) in slots.iter().enumerate() {
        match slot {
            Slot::Path(name, kind) => url = url.replace(&format!("{{{name}}}"), &pick(i, *kind)),
            Slot::Query(name, kind) => {
                // A filter not under test is left out, so that it cannot hide a leak.
                let id = pick(i, *kind);
                if !id.is_empty() {
                    query.push(format!("{name}={id}"));
                }
            }
            Slot::Body(kind) => {
                body_ids.insert(*kind, pick(i, *kind));
            }
        }
    }
    if !query.is_empty() {
        url = format!("{url}?{}", query.join("&"));
    }
    let body = body.map(|b| fill(b, &|kind| body_ids.get(&kind).cloned().unwrap_or_default()));
    (url, body)
}

/// Body fields named `*_id` that are not our ids: `processor_payment_source_id` is the
/// processor's, looked up with the caller's own processor keys (the processor scopes it to
/// that merchant).
const NOT_OURS: [&str; 1] = ["processor_payment_source_id"];

/// How a group of routes is guarded (see the file's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Guard {
    ApiKey,
    AdminToken,
    EventChecksum,
    Capability,
}

fn guard_of(path: &str) -> Guard {
    if path.starts_with("/v1/") {
        Guard::ApiKey
    } else if path.starts_with("/admin/") {
        Guard::AdminToken
    } else if path.starts_with("/webhooks/processor/") {
        Guard::EventChecksum
    } else if path.starts_with("/checkout/") {
        Guard::Capability
    } else {
        panic!("{path} takes an id and belongs to no known group: say here how it is guarded")
    }
}

struct Operation {
    method: String,
    path: String,
    slots: Vec<Slot>,
    body: Option<Value>,
}

/// Every operation of the document that takes an id, with where its ids go.
fn operations(doc: &Value) -> Vec<Operation> {
    let mut found = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let mut slots = Vec::new();
            let segments: Vec<&str> = path.split('/').collect();
            for (i, segment) in segments.iter().enumerate() {
                if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    let kind = Kind::of(name, i.checked_sub(1).map(|j| segments[j]));
                    slots.push(Slot::Path(name.to_owned(), kind));
                }
            }
            for param in op["parameters"].as_array().into_iter().flatten() {
                let name = param["name"].as_str().expect("name");
                if param["in"] == "query" && name.ends_with("_id") {
                    slots.push(Slot::Query(name.to_owned(), Kind::of(name, None)));
                }
            }
            let body = body_of(method, path);
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            for field in id_fields(doc, schema)
                .into_iter()
                .filter(|f| !NOT_OURS.contains(&f.as_str()))
            {
                let Some(Value::String(stands)) = body.as_ref().map(|b| &b[&field]) else {
                    panic!("{method} {path}: its body's `{field}` is an id this test does not try")
                };
                let kind = stands.strip_prefix('@').map(kind_named).expect("an @Kind");
                assert_eq!(kind, Kind::of(&field, None), "{method} {path} `{field}`");
                slots.push(Slot::Body(kind));
            }
            if slots.is_empty() {
                continue;
            }
            if ["post", "put", "patch"].contains(&method.as_str())
                && body.is_none()
                && guard_of(path) != Guard::EventChecksum
                && guard_of(path) != Guard::Capability
            {
                panic!("{method} {path}: give it a plausible valid body in `body_of`");
            }
            found.push(Operation {
                method: method.clone(),
                path: path.clone(),
                slots,
                body,
            });
        }
    }
    found
}

/// The properties named `*_id` of a request body's schema (following `$ref`).
fn id_fields(doc: &Value, schema: &Value) -> Vec<String> {
    let schema = match schema["$ref"].as_str() {
        Some(reference) => {
            let name = reference.rsplit('/').next().expect("name");
            &doc["components"]["schemas"][name]
        }
        None => schema,
    };
    schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, _)| name.clone())
        .filter(|name| name.ends_with("_id"))
        .collect()
}

/// Which slots hold B's ids in each request tried: all path ids together, then each id
/// alone (the others the caller's own), so that a handler that checks only its first id or
/// forgets a body's reference is caught.
fn variants(slots: &[Slot]) -> Vec<Vec<usize>> {
    let paths: Vec<usize> = (0..slots.len())
        .filter(|i| matches!(slots[*i], Slot::Path(..)))
        .collect();
    let mut out = Vec::new();
    if !paths.is_empty() {
        out.push(paths.clone());
    }
    for i in 0..slots.len() {
        if paths.len() > 1 || !matches!(slots[i], Slot::Path(..)) {
            out.push(vec![i]);
        }
    }
    out
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
        assert_eq!(status, 200, "B reads its own {url}: {text}");
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
                _ if op.method == "delete" && op.path == "/v1/plans/{id}" => 405,
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

fn slot_kind(slot: &Slot) -> Kind {
    match slot {
        Slot::Path(_, kind) | Slot::Body(kind) | Slot::Query(_, kind) => *kind,
    }
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
        .account(&ids::AccountId::from_stored(a[&Kind::Account].clone()))
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
