//! Wompi's two hashes: the integrity signature we send with a transaction, and the checksum
//! the processor puts on each event it sends us (CONTRACT §7).

use super::client::Transaction;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// sha256_hex(reference + amount_in_cents + currency + integrity_secret).
pub fn integrity_signature(
    reference: &str,
    amount_in_cents: i64,
    currency: &str,
    secret: &str,
) -> String {
    hex::encode(Sha256::digest(format!(
        "{reference}{amount_in_cents}{currency}{secret}"
    )))
}

/// sha256_hex(values of `signature.properties` read from `data`, in order, + `timestamp` +
/// events_secret). `None` when the event lacks the structure.
pub fn event_checksum(event: &Value, events_secret: &str) -> Option<String> {
    let properties = event.get("signature")?.get("properties")?.as_array()?;
    let data = event.get("data")?;
    let mut material = String::new();
    for property in properties {
        let mut value = data;
        for part in property.as_str()?.split('.') {
            value = value.get(part)?;
        }
        match value {
            Value::String(text) => material.push_str(text),
            Value::Number(number) => material.push_str(&number.to_string()),
            Value::Bool(flag) => material.push_str(&flag.to_string()),
            _ => return None,
        }
    }
    let timestamp = event.get("timestamp")?;
    material.push_str(&match timestamp {
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        _ => return None,
    });
    material.push_str(events_secret);
    Some(hex::encode(Sha256::digest(material)))
}

/// Whether `checksum` (from the body or the `X-Event-Checksum` header) is the event's own,
/// compared case-insensitively in constant time.
pub fn checksum_matches(event: &Value, checksum: &str, events_secret: &str) -> bool {
    let Some(expected) = event_checksum(event, events_secret) else {
        return false;
    };
    let presented = checksum.to_ascii_lowercase();
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

/// The checksum an event carries in its body.
pub fn body_checksum(event: &Value) -> Option<&str> {
    event.get("signature")?.get("checksum")?.as_str()
}

/// The ingress's first step: the body as JSON. `None` answers 400.
pub fn parse_event(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

/// An event whose checksum is its own under the account's events secret: what the ingress
/// acts on.
#[derive(Clone, Debug)]
pub struct SignedEvent {
    /// The checksum, lowercase: the event's identity (a repeat is recognised by it).
    pub checksum: String,
    /// `event`, empty when absent.
    pub event_type: String,
    /// `data.transaction`, when it reads as one.
    pub transaction: Option<Transaction>,
}

/// Checks `event` against `events_secret`: the checksum in its body, and the `X-Event-Checksum`
/// header's when one is sent, must both be the event's own (constant time), and an event that
/// carries a transaction must sign its id, status and amount. `None` answers 401. Fuzzed by
/// the target `ingress_event`.
pub fn authenticate_event(
    event: &Value,
    header_checksum: Option<&str>,
    events_secret: &str,
) -> Option<SignedEvent> {
    let checksum = body_checksum(event)?.to_ascii_lowercase();
    if !checksum_matches(event, &checksum, events_secret) {
        return None;
    }
    if let Some(header) = header_checksum
        && !checksum_matches(event, header, events_secret)
    {
        return None;
    }
    let transaction = event
        .get("data")
        .and_then(|data| data.get("transaction"))
        .and_then(|tx| Transaction::deserialize(tx).ok());
    // The checksum signs values, not their names: an event that does not name what the
    // ingress acts on could carry it unsigned (its signed value moved to another field).
    if transaction.is_some() && !signs(event, &SIGNED_TRANSACTION_FIELDS) {
        return None;
    }
    Some(SignedEvent {
        checksum,
        event_type: event
            .get("event")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        transaction,
    })
}

/// What the ingress reads from a transaction event and acts on: Wompi signs these three in
/// every `transaction.updated`, and an event that carries a transaction must sign them.
pub const SIGNED_TRANSACTION_FIELDS: [&str; 3] = [
    "transaction.id",
    "transaction.status",
    "transaction.amount_in_cents",
];

/// Whether `signature.properties` names every one of `fields`.
fn signs(event: &Value, fields: &[&str]) -> bool {
    let Some(properties) = event
        .get("signature")
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_array)
    else {
        return false;
    };
    fields
        .iter()
        .all(|field| properties.iter().any(|p| p.as_str() == Some(field)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn contract_vector_event(checksum: &str) -> Value {
        json!({
            "event": "transaction.updated",
            "data": {"transaction": {"id": "11128-1578502783-84081", "status": "APPROVED", "amount_in_cents": 5000}},
            "signature": {
                "properties": ["transaction.id", "transaction.status", "transaction.amount_in_cents"],
                "checksum": checksum
            },
            "timestamp": 1530291411
        })
    }

    const VECTOR: &str = "8fb1e2fa0c36f9bbe1088a4b28fb19dfc04ccdb7b8ced48438ac2bee39e503f6";
    const SECRET: &str = "test_events_XXXXXXXXXXXX";

    #[test]
    fn contract_test_vector() {
        assert_eq!(
            event_checksum(&contract_vector_event(VECTOR), SECRET).as_deref(),
            Some(VECTOR)
        );
        assert!(checksum_matches(
            &contract_vector_event(VECTOR),
            VECTOR,
            SECRET
        ));
    }

    #[test]
    fn uppercase_checksum_is_accepted() {
        assert!(checksum_matches(
            &contract_vector_event(VECTOR),
            &VECTOR.to_uppercase(),
            SECRET
        ));
    }

    #[test]
    fn tampered_status_or_wrong_secret_is_refused() {
        let mut event = contract_vector_event(VECTOR);
        event["data"]["transaction"]["status"] = json!("DECLINED");
        assert!(!checksum_matches(&event, VECTOR, SECRET));
        assert!(!checksum_matches(
            &contract_vector_event(VECTOR),
            VECTOR,
            "test_events_other"
        ));
    }

    #[test]
    fn missing_structure_is_refused() {
        let mut event = contract_vector_event(VECTOR);
        event.as_object_mut().map(|o| o.remove("timestamp"));
        assert!(!checksum_matches(&event, VECTOR, SECRET));
        assert!(event_checksum(&json!({"data": {}}), SECRET).is_none());
    }

    #[test]
    fn integrity_signature_concatenates_in_order() {
        assert_eq!(
            integrity_signature("ref", 100, "COP", "s"),
            hex::encode(Sha256::digest("ref100COPs"))
        );
    }

    fn signed(id: &str, status: &str, amount: i64, timestamp: i64) -> Value {
        let mut event = json!({
            "event": "transaction.updated",
            "data": {"transaction": {"id": id, "status": status, "amount_in_cents": amount,
                "reference": "ch_1", "currency": "COP"}},
            "signature": {"properties": ["transaction.id", "transaction.status", "transaction.amount_in_cents"]},
            "timestamp": timestamp
        });
        let checksum = event_checksum(&event, SECRET).expect("checksum");
        event["signature"]["checksum"] = json!(checksum);
        event
    }

    /// The checksum signs values, not names: a captured DECLINED event could name a new field
    /// holding "DECLINED" in its properties and carry any status in the real one.
    #[test]
    fn a_status_moved_out_of_the_signed_properties_is_refused() {
        let mut event = signed("1-2-3", "DECLINED", 5000, 1_530_291_411);
        event["signature"]["properties"][1] = json!("transaction.previous_status");
        event["data"]["transaction"]["previous_status"] = json!("DECLINED");
        event["data"]["transaction"]["status"] = json!("APPROVED");
        assert!(
            checksum_matches(&event, body_checksum(&event).expect("checksum"), SECRET),
            "the values signed are the same"
        );
        assert!(authenticate_event(&event, None, SECRET).is_none());
    }

    /// Found by the fuzz target `ingress_event` on the code before `SIGNED_TRANSACTION_FIELDS`
    /// (from an empty corpus, in about 30,000 inputs): a signed property whose value is empty
    /// can be dropped from the list without changing the checksum, leaving it unsigned.
    #[test]
    fn an_empty_signed_value_dropped_from_the_properties_is_refused() {
        let mut event = signed("", "ERROR", -1, 0);
        event["signature"]["properties"]
            .as_array_mut()
            .expect("list")
            .remove(0);
        assert!(checksum_matches(
            &event,
            body_checksum(&event).expect("checksum"),
            SECRET
        ));
        assert!(authenticate_event(&event, None, SECRET).is_none());
    }

    #[test]
    fn an_event_signed_with_our_checksum_authenticates_and_reads_back() {
        let event = signed("1-2-3", "APPROVED", 5000, 1_530_291_411);
        let checksum = body_checksum(&event).expect("checksum").to_owned();
        let ours = authenticate_event(&event, Some(&checksum.to_uppercase()), SECRET)
            .expect("authenticates");
        assert_eq!(ours.checksum, checksum);
        assert_eq!(ours.event_type, "transaction.updated");
        let tx = ours.transaction.expect("transaction");
        assert_eq!(
            (tx.id.as_str(), tx.status.as_str(), tx.amount_in_cents),
            ("1-2-3", "APPROVED", 5000)
        );
        assert!(
            authenticate_event(&event, Some("0"), SECRET).is_none(),
            "a wrong header"
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        const PATHS: [&str; 3] = ["id", "status", "amount_in_cents"];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// The fuzz target `ingress_event`'s properties, bounded.
            #[test]
            fn any_body_is_judged_without_panicking(body in proptest::collection::vec(any::<u8>(), 0..300)) {
                if let Some(event) = parse_event(&body) {
                    let _ = authenticate_event(&event, None, SECRET);
                }
            }

            #[test]
            fn any_json_event_is_judged_without_panicking(
                properties in proptest::collection::vec("[a-z_.]{0,20}", 0..5),
                data in "\\{(\"[a-z]{1,5}\":(\\{\\}|[0-9]{1,5}|\"[A-Z]{0,5}\"|true|null|\\[\\]),?){0,4}\\}",
                timestamp in "(-?[0-9]{1,20}(\\.[0-9]+)?|\"[^\"]{0,10}\"|null|\\{\\})",
            ) {
                let text = format!(
                    r#"{{"data":{data},"signature":{{"properties":{},"checksum":"00"}},"timestamp":{timestamp}}}"#,
                    serde_json::to_string(&properties).expect("json")
                );
                if let Some(event) = parse_event(text.as_bytes()) {
                    let _ = event_checksum(&event, SECRET);
                    prop_assert!(authenticate_event(&event, None, SECRET).is_none());
                }
            }

            #[test]
            fn changing_one_signed_value_fails(
                id in "[0-9-]{1,24}",
                status in "(APPROVED|DECLINED|PENDING|VOIDED|ERROR)",
                amount in any::<i64>(),
                timestamp in any::<i64>(),
                which in 0..3usize,
                new_text in "[A-Z0-9-]{0,12}",
                new_amount in any::<i64>(),
            ) {
                let event = signed(&id, &status, amount, timestamp);
                prop_assert!(authenticate_event(&event, None, SECRET).is_some());
                let mut changed = event.clone();
                let field = &mut changed["data"]["transaction"][PATHS[which]];
                *field = if which == 2 { json!(new_amount) } else { json!(new_text) };
                if changed != event {
                    prop_assert!(authenticate_event(&changed, None, SECRET).is_none());
                }
            }
        }
    }
}
