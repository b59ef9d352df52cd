//! The ingress body (`POST /webhooks/processor/{developer_id}`): JSON parsing and the Wompi
//! event checksum, through the same functions the handler calls (`parse_event`,
//! `authenticate_event`).
//!
//! Properties:
//! - any body and any `X-Event-Checksum` header are judged without panicking;
//! - an event signed with our own `event_checksum` authenticates, and reads back the
//!   transaction it was built from;
//! - changing the value of exactly one signed property (the list left as it was) makes it fail;
//! - whatever else is changed (the properties list included), an event that still
//!   authenticates has its transaction's id, status and amount among its signed properties,
//!   so no value the ingress acts on can be altered without the events secret.
#![no_main]

use arbitrary::Arbitrary;
use billing::processor::signature::{authenticate_event, event_checksum, parse_event};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const SECRET: &str = "test_events_fuzz_secret";

/// Where a mutation reads or writes, under `data`.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Field {
    Id,
    Status,
    Amount,
    Reference,
    Currency,
    Extra,
    Nested,
}

impl Field {
    fn path(self) -> &'static str {
        match self {
            Field::Id => "transaction.id",
            Field::Status => "transaction.status",
            Field::Amount => "transaction.amount_in_cents",
            Field::Reference => "transaction.reference",
            Field::Currency => "transaction.currency",
            Field::Extra => "transaction.extra",
            Field::Nested => "transaction.meta.note",
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Val {
    Text(String),
    Status(Status),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
    Object,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Status {
    Approved,
    Declined,
    Pending,
    Voided,
    Error,
}

impl Status {
    fn text(self) -> &'static str {
        match self {
            Status::Approved => "APPROVED",
            Status::Declined => "DECLINED",
            Status::Pending => "PENDING",
            Status::Voided => "VOIDED",
            Status::Error => "ERROR",
        }
    }
}

impl Val {
    fn json(&self) -> Value {
        match self {
            Val::Text(text) => json!(text),
            Val::Status(status) => json!(status.text()),
            Val::Int(n) => json!(n),
            Val::Float(x) => json!(x),
            Val::Bool(b) => json!(b),
            Val::Null => Value::Null,
            Val::Object => json!({}),
        }
    }
}

/// A change an attacker holding one signed event could make to it.
#[derive(Arbitrary, Debug, Clone)]
enum Mutation {
    Set(Field, Val),
    Copy {
        from: Field,
        to: Field,
    },
    Remove(Field),
    /// Names another field at position `index` of `signature.properties`.
    SetProperty {
        index: u8,
        field: Field,
    },
    AddProperty(Field),
    RemoveProperty(u8),
    SetTimestamp(Val),
    SetEventType(String),
    UppercaseChecksum,
}

#[derive(Arbitrary, Debug)]
enum Input {
    Raw {
        body: Vec<u8>,
        header: Option<String>,
    },
    Signed {
        id: String,
        status: Status,
        amount: i64,
        reference: String,
        currency: Option<String>,
        timestamp: i64,
        /// Sign `reference` too, as an extra property.
        sign_reference: bool,
        /// Send the checksum in `X-Event-Checksum` as well.
        header: bool,
        mutations: Vec<Mutation>,
    },
}

fn pointer(field: Field) -> String {
    format!("/data/{}", field.path().replace('.', "/"))
}

fn set(event: &mut Value, field: Field, value: Value) {
    let mut target = &mut event["data"];
    let parts: Vec<&str> = field.path().split('.').collect();
    for part in &parts[..parts.len() - 1] {
        if !target.get(*part).is_some_and(Value::is_object) {
            target[*part] = json!({});
        }
        target = &mut target[*part];
    }
    target[parts[parts.len() - 1]] = value;
}

fn properties(event: &Value) -> Vec<String> {
    event["signature"]["properties"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn apply(event: &mut Value, mutation: &Mutation) {
    match mutation {
        Mutation::Set(field, value) => set(event, *field, value.json()),
        Mutation::Copy { from, to } => {
            let value = event
                .pointer(&pointer(*from))
                .cloned()
                .unwrap_or(Value::Null);
            set(event, *to, value);
        }
        Mutation::Remove(field) => {
            let path = pointer(*field);
            let (parent, last) = path.rsplit_once('/').unwrap_or(("", ""));
            if let Some(object) = event.pointer_mut(parent).and_then(Value::as_object_mut) {
                object.remove(last);
            }
        }
        Mutation::SetProperty { index, field } => {
            if let Some(list) = event["signature"]["properties"].as_array_mut()
                && !list.is_empty()
            {
                let at = usize::from(*index) % list.len();
                list[at] = json!(field.path());
            }
        }
        Mutation::AddProperty(field) => {
            if let Some(list) = event["signature"]["properties"].as_array_mut() {
                list.push(json!(field.path()));
            }
        }
        Mutation::RemoveProperty(index) => {
            if let Some(list) = event["signature"]["properties"].as_array_mut()
                && !list.is_empty()
            {
                let at = usize::from(*index) % list.len();
                list.remove(at);
            }
        }
        Mutation::SetTimestamp(value) => event["timestamp"] = value.json(),
        Mutation::SetEventType(text) => event["event"] = json!(text),
        Mutation::UppercaseChecksum => {
            let upper = event["signature"]["checksum"]
                .as_str()
                .map(str::to_ascii_uppercase);
            if let Some(upper) = upper {
                event["signature"]["checksum"] = json!(upper);
            }
        }
    }
}

/// A value as the checksum reads it: the same text as a string or as a number signs the
/// same (a typed read of the transaction then refuses the wrong type).
fn signed_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fuzz_target!(|input: Input| match input {
    Input::Raw { body, header } => {
        if let Some(event) = parse_event(&body) {
            let _ = authenticate_event(&event, header.as_deref(), SECRET);
            let _ = event_checksum(&event, SECRET);
        }
    }
    Input::Signed {
        id,
        status,
        amount,
        reference,
        currency,
        timestamp,
        sign_reference,
        header,
        mutations,
    } => {
        let mut signed = vec![
            "transaction.id",
            "transaction.status",
            "transaction.amount_in_cents",
        ];
        if sign_reference {
            signed.push("transaction.reference");
        }
        let mut event = json!({
            "event": "transaction.updated",
            "data": {"transaction": {
                "id": id, "status": status.text(), "amount_in_cents": amount,
                "reference": reference, "currency": currency,
            }},
            "signature": {"properties": signed, "checksum": ""},
            "timestamp": timestamp,
        });
        let checksum = event_checksum(&event, SECRET).expect("a well-formed event has a checksum");
        event["signature"]["checksum"] = json!(checksum);
        let header_value = header.then(|| checksum.clone());
        let body = serde_json::to_vec(&event).expect("serialise");
        let parsed = parse_event(&body).expect("our own JSON parses");
        let ours = authenticate_event(&parsed, header_value.as_deref(), SECRET)
            .expect("an event signed with our checksum authenticates");
        let tx = ours.transaction.expect("the transaction reads back");
        assert_eq!(
            (tx.id.as_str(), tx.status.as_str(), tx.amount_in_cents),
            (id.as_str(), status.text(), amount)
        );
        assert!(authenticate_event(&parsed, header_value.as_deref(), "another_secret").is_none());

        let original = parsed.clone();
        let mut mutated = parsed;
        for mutation in &mutations {
            apply(&mut mutated, mutation);
        }
        let body = serde_json::to_vec(&mutated).expect("serialise");
        let Some(reparsed) = parse_event(&body) else {
            return;
        };
        let Some(accepted) = authenticate_event(&reparsed, header_value.as_deref(), SECRET) else {
            return;
        };
        let list = properties(&reparsed);
        if list == properties(&original) {
            let changed = list
                .iter()
                .filter(|p| {
                    let at = format!("/data/{}", p.replace('.', "/"));
                    signed_text(reparsed.pointer(&at)) != signed_text(original.pointer(&at))
                })
                .count();
            assert_ne!(
                changed, 1,
                "one signed value changed and the event still authenticates"
            );
        }
        if let Some(tx) = accepted.transaction
            && accepted.event_type == "transaction.updated"
        {
            for acted_on in [
                "transaction.id",
                "transaction.status",
                "transaction.amount_in_cents",
            ] {
                assert!(
                    list.iter().any(|p| p == acted_on),
                    "{acted_on} is unsigned in an accepted event: {tx:?} from {mutations:?}"
                );
            }
        }
    }
});
