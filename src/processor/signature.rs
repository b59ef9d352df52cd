//! Wompi's two hashes: the integrity signature we send with a transaction, and the checksum
//! the processor puts on each event it sends us (CONTRACT §7).

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
}
