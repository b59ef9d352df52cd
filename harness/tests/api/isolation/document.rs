//! The OpenAPI document read as the isolation walk needs it: which operations take an id,
//! where (path, JSON body, query), of which kind, how each group of routes is guarded, and a
//! plausible valid body for each operation that has one. Anything it cannot classify panics,
//! so a new route or id field fails the walk instead of escaping it.

use billing::ids;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Account,
    Plan,
    Addon,
    Customer,
    PaymentMethod,
    Subscription,
    CheckoutSession,
    WebhookEndpoint,
    Event,
    Charge,
    Refund,
    Invoice,
    CreditNote,
    PortalSession,
    Coupon,
    PromotionCode,
    Notice,
    ConsoleUser,
}

impl Kind {
    /// The kind an id parameter names: by its own name (`addon_id`), else by the collection
    /// it follows in the path (`/plans/{id}`).
    pub(super) fn of(name: &str, collection: Option<&str>) -> Kind {
        let by_name = match name.strip_suffix("_id") {
            Some("addon") => Some(Kind::Addon),
            Some("customer") => Some(Kind::Customer),
            Some("plan") => Some(Kind::Plan),
            Some("payment_method" | "default_payment_method") => Some(Kind::PaymentMethod),
            Some("subscription") => Some(Kind::Subscription),
            Some("charge") => Some(Kind::Charge),
            Some("invoice") => Some(Kind::Invoice),
            Some("coupon") => Some(Kind::Coupon),
            Some("developer") => Some(Kind::Account),
            _ => None,
        };
        let by_collection = || match collection? {
            "accounts" | "processor" | "whatsapp" => Some(Kind::Account),
            "plans" => Some(Kind::Plan),
            "addons" => Some(Kind::Addon),
            "customers" => Some(Kind::Customer),
            "subscriptions" => Some(Kind::Subscription),
            "checkout-sessions" | "checkout" => Some(Kind::CheckoutSession),
            "webhook-endpoints" => Some(Kind::WebhookEndpoint),
            "events" => Some(Kind::Event),
            "charges" => Some(Kind::Charge),
            "refunds" => Some(Kind::Refund),
            "invoices" => Some(Kind::Invoice),
            "credit-notes" => Some(Kind::CreditNote),
            "portal-sessions" => Some(Kind::PortalSession),
            "coupons" => Some(Kind::Coupon),
            "promotion-codes" => Some(Kind::PromotionCode),
            "notices" => Some(Kind::Notice),
            "console-users" => Some(Kind::ConsoleUser),
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
    pub(super) fn made_up(self) -> String {
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
            Kind::Charge => ids::ChargeAttemptId::generate().into_string(),
            Kind::Refund => ids::RefundId::generate().into_string(),
            Kind::Invoice => ids::InvoiceId::generate().into_string(),
            Kind::CreditNote => ids::CreditNoteId::generate().into_string(),
            Kind::PortalSession => ids::PortalSessionId::generate().into_string(),
            Kind::Coupon => ids::CouponId::generate().into_string(),
            Kind::PromotionCode => ids::PromotionCodeId::generate().into_string(),
            Kind::Notice => ids::NoticeId::generate().into_string(),
            Kind::ConsoleUser => ids::ConsoleUserId::generate().into_string(),
        }
    }
}

pub(super) type Objects = BTreeMap<Kind, String>;

/// A plausible, valid body for each operation that takes one; `"@kind"` stands for an id of
/// that kind (the caller's own, except in the variant that tries B's).
pub(super) fn body_of(method: &str, path: &str) -> Option<Value> {
    let body = match (method, path) {
        ("patch", "/v1/plans/{id}" | "/v1/addons/{id}" | "/v1/customers/{id}") => {
            json!({"name": "Renamed"})
        }
        ("post", "/v1/customers/{id}/payment-methods") => {
            json!({"processor_payment_source_id": 1})
        }
        ("post", "/v1/events/{id}/redeliver") => json!({}),
        ("post", "/v1/charges/{id}/refunds") => json!({"amount_cents": 1_000}),
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
        ("patch", "/v1/coupons/{id}") => json!({"name": "Renamed"}),
        ("patch", "/v1/promotion-codes/{id}") => json!({"active": false}),
        ("post", "/v1/promotion-codes") => {
            json!({"coupon_id": "@Coupon", "code": "ISOLATED", "customer_id": "@Customer"})
        }
        ("post", "/v1/subscriptions/{id}/discount") => json!({"coupon_id": "@Coupon"}),
        ("post", "/v1/subscriptions") => json!({"customer_id": "@Customer", "plan_id": "@Plan",
            "cycle": "monthly", "payment_method_id": "@PaymentMethod", "coupon_id": "@Coupon"}),
        ("post", "/v1/portal-sessions") => json!({"customer_id": "@Customer"}),
        ("post", "/v1/console-users/{id}/invitation") => json!({}),
        ("post", "/admin/accounts/{id}/console-users") => {
            json!({"email": "operator-invited@example.co", "role": "admin"})
        }
        ("post", "/v1/console-users") => json!({"email": "isolated@example.co", "role": "support"}),
        ("post", "/v1/checkout-sessions") => {
            json!({"plan_id": "@Plan", "cycle": "monthly", "customer_id": "@Customer"})
        }
        ("patch", "/admin/accounts/{id}") => json!({"rate_limit_per_minute": 1}),
        ("post", "/admin/accounts/{id}/balance/top-ups") => json!({"amount_cents": 1}),
        ("post", "/admin/refunds/{id}/close") => json!({"reason": "Not at the processor."}),
        _ => return None,
    };
    Some(body)
}

/// `"@Kind"` strings of `template` replaced by `id_of(kind)`.
pub(super) fn fill(template: &Value, id_of: &dyn Fn(Kind) -> String) -> Value {
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

pub(super) fn kind_named(name: &str) -> Kind {
    *KINDS
        .iter()
        .find(|k| format!("{k:?}") == name)
        .expect("a kind")
}

pub(super) const KINDS: [Kind; 10] = [
    Kind::Account,
    Kind::Plan,
    Kind::Addon,
    Kind::Customer,
    Kind::PaymentMethod,
    Kind::Subscription,
    Kind::CheckoutSession,
    Kind::WebhookEndpoint,
    Kind::Event,
    Kind::Coupon,
];

/// Where an id goes in one request, and whose it is.
#[derive(Clone, Debug)]
pub(super) enum Slot {
    Path(String, Kind),
    Body(Kind),
    Query(String, Kind),
}

/// The request for `path`/`body`, each slot filled by `pick(slot index, kind)`.
pub(super) fn build(
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
/// that merchant); `tax_id` is a customer's identity document.
pub(super) const NOT_OURS: [&str; 2] = ["processor_payment_source_id", "tax_id"];

/// How a group of routes is guarded (see the file's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Guard {
    ApiKey,
    AdminToken,
    EventChecksum,
    /// Meta's webhooks: `X-Hub-Signature-256` under the account's app secret.
    HubSignature,
    Capability,
}

pub(super) fn guard_of(path: &str) -> Guard {
    if path.starts_with("/v1/") {
        Guard::ApiKey
    } else if path.starts_with("/admin/") {
        Guard::AdminToken
    } else if path.starts_with("/webhooks/processor/") {
        Guard::EventChecksum
    } else if path.starts_with("/webhooks/whatsapp/") {
        Guard::HubSignature
    } else if path.starts_with("/checkout/") {
        Guard::Capability
    } else {
        panic!("{path} takes an id and belongs to no known group: say here how it is guarded")
    }
}

pub(super) struct Operation {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) slots: Vec<Slot>,
    pub(super) body: Option<Value>,
}

/// Every operation of the document that takes an id, with where its ids go.
pub(super) fn operations(doc: &Value) -> Vec<Operation> {
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
                && guard_of(path) != Guard::HubSignature
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
pub(super) fn id_fields(doc: &Value, schema: &Value) -> Vec<String> {
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
pub(super) fn variants(slots: &[Slot]) -> Vec<Vec<usize>> {
    let paths: Vec<usize> = (0..slots.len())
        .filter(|i| matches!(slots[*i], Slot::Path(..)))
        .collect();
    let mut out = Vec::new();
    if !paths.is_empty() {
        out.push(paths.clone());
    }
    for (i, slot) in slots.iter().enumerate() {
        if paths.len() > 1 || !matches!(slot, Slot::Path(..)) {
            out.push(vec![i]);
        }
    }
    out
}

pub(super) fn slot_kind(slot: &Slot) -> Kind {
    match slot {
        Slot::Path(_, kind) | Slot::Body(kind) | Slot::Query(_, kind) => *kind,
    }
}
