//! Helpers the console's pages share: reading the API's JSON answers, formatting their
//! amounts and instants in the person's language and Colombia's time, and the checks on ids
//! that go into the API paths the console builds.

use crate::checkout::i18n::Locale;
use crate::documents::sheet;
use serde_json::Value;

/// Whether `raw` can be an id of ours (`prefix_` and letters or digits): only such strings go
/// into a path the console sends to the API, so nothing a person types can reach another
/// route.
pub fn is_id(raw: &str) -> bool {
    raw.len() <= 64
        && raw.contains('_')
        && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// An Idempotency-Key the console's pages made (`con_…`, a suffix naming the action).
pub fn is_key(raw: &str) -> bool {
    raw.starts_with("con_")
        && raw.len() <= 120
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The message of an API error body, or nothing.
pub fn message_of(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A string field, or empty.
pub fn text(value: &Value, field: &str) -> String {
    match &value[field] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// An integer field, or 0.
pub fn int(value: &Value, field: &str) -> i64 {
    value[field].as_i64().unwrap_or_default()
}

/// The items of a list answer.
pub fn items(list: &Value) -> Vec<Value> {
    list["data"].as_array().cloned().unwrap_or_default()
}

pub fn money(cents: i64, locale: Locale) -> String {
    sheet::money(cents, locale)
}

/// The milliseconds of an RFC 3339 instant (0 for none).
pub fn ms(raw: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(raw)
        .map(|d| d.timestamp_millis())
        .unwrap_or_default()
}

/// An instant's day in Colombia, or empty for none.
pub fn day(raw: &str, locale: Locale) -> String {
    if raw.is_empty() {
        return String::new();
    }
    sheet::date(ms(raw), locale)
}

/// An instant in Colombia to the minute: `3 de diciembre de 2026, 10:42`.
pub fn moment(raw: &str, locale: Locale) -> String {
    if raw.is_empty() {
        return String::new();
    }
    let at = ms(raw);
    let local = crate::domain::time::from_millis(at).with_timezone(&crate::domain::dian::COLOMBIA);
    format!("{}, {}", sheet::date(at, locale), local.format("%H:%M"))
}

/// A query string of the pairs whose value is not empty.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        out.append_pair(name, value);
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_ids_go_into_a_path() {
        assert!(is_id("sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a"));
        assert!(!is_id("../admin"));
        assert!(!is_id("sub_1/refunds"));
        assert!(!is_id("sub_1?x=1"));
        assert!(!is_id("sub%2F1"));
        assert!(!is_id("nounderscore"));
        assert!(!is_id(&format!("sub_{}", "a".repeat(64))));
    }

    #[test]
    fn instants_read_in_colombia() {
        assert_eq!(
            moment("2026-12-03T15:42:00Z", Locale::Es),
            "3 de diciembre de 2026, 10:42"
        );
        assert_eq!(day("2026-12-01T04:59:00Z", Locale::En), "30 November 2026");
        assert_eq!(query(&[("q", "ana&b"), ("x", "")]), "q=ana%26b");
    }
}
