//! Extractors whose rejections come out in our error shape: JSON bodies that name the bad
//! field, query strings, and the metadata limit.

use super::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::{self, DeserializeOwned, Deserializer, Unexpected, Visitor};
use serde_json::value::RawValue;

/// A JSON body. An empty body reads as `{}` so that actions whose fields are all optional
/// accept a bare POST; a body of only whitespace is no JSON text, and is malformed.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|rejection| ApiError::invalid(rejection.status(), rejection.body_text()))?;
        let bytes: &[u8] = if bytes.is_empty() { b"{}" } else { &bytes };
        parse_json(bytes).map(ApiJson)
    }
}

/// Parses `bytes` as `T`, naming the offending field in the error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // serde would read a struct from an array of its fields' values too; every body of this
    // API is an object.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::bad_request("The body must be a JSON object."));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::bad_request(format!("Malformed JSON body: {inner}"));
        }
        let message = inner.to_string();
        let param = field_of(&message)
            .map(|field| match path.as_str() {
                "." => field.to_owned(),
                // Unknown fields are already on the path; missing ones are not.
                p if p == field || p.ends_with(&format!(".{field}")) => path.clone(),
                _ => format!("{path}.{field}"),
            })
            .or_else(|| (path != ".").then_some(path));
        let message = match &param {
            Some(param) => format!("Invalid field `{param}`: {}", strip_position(&message)),
            None => format!("Invalid request body: {}", strip_position(&message)),
        };
        let error = ApiError::bad_request(message);
        match param {
            Some(param) => error.param(param),
            None => error,
        }
    })?;
    deserializer
        .end()
        .map_err(|err| ApiError::bad_request(format!("Malformed JSON body: {err}")))?;
    Ok(value)
}

/// serde names unknown and missing fields inside its message: "unknown field `x`, …".
fn field_of(message: &str) -> Option<&str> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("missing field `"))?;
    rest.split('`').next()
}

fn strip_position(message: &str) -> &str {
    message.split(" at line ").next().unwrap_or(message)
}

/// A query string; a bad value is a 400 naming the parameter.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parse_query(parts.uri.query().unwrap_or_default()).map(ApiQuery)
    }
}

/// Parses a query string (without `?`) as `T`, naming the offending parameter in the error.
/// Fuzzed by the target `list_query`.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let deserializer =
        serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let message = err.into_inner().to_string();
        let param = field_of(&message).map(str::to_owned).unwrap_or(path);
        ApiError::bad_request(format!("Invalid query parameter `{param}`: {message}")).param(param)
    })
}

/// An integer field of a JSON body. JSON has one number type, so `3.0` is the integer 3 (JSON
/// Schema's `integer` agrees); serde would refuse it for an `i64`. Use with
/// `#[serde(deserialize_with = "whole")]`, or `optional_whole` and `#[serde(default)]`.
pub fn whole<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    deserializer.deserialize_any(WholeNumber)
}

pub fn optional_whole<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    deserializer.deserialize_option(OptionalWholeNumber)
}

struct WholeNumber;

impl Visitor<'_> for WholeNumber {
    type Value = i64;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("an integer")
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<i64, E> {
        Ok(value)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<i64, E> {
        i64::try_from(value).map_err(|_| E::invalid_value(Unexpected::Unsigned(value), &self))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<i64, E> {
        // 2^63 is exact as an f64; every whole f64 in [-2^63, 2^63) is an i64.
        const LIMIT: f64 = 9_223_372_036_854_775_808.0;
        if value.fract() == 0.0 && (-LIMIT..LIMIT).contains(&value) {
            #[allow(clippy::cast_possible_truncation)]
            return Ok(value as i64);
        }
        Err(E::invalid_value(Unexpected::Float(value), &self))
    }
}

struct OptionalWholeNumber;

impl<'de> Visitor<'de> for OptionalWholeNumber {
    type Value = Option<i64>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("an integer or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<i64>, D::Error> {
        whole(deserializer).map(Some)
    }
}

/// The contract's metadata limit: 60 KB = 61,440 bytes serialised.
pub const METADATA_MAX_BYTES: usize = 60 * 1024;

/// Checks optional metadata (a JSON object or null, at most 60 KB in its compact serialised
/// form) and returns the compact text to store. Keys keep the order they were sent in.
pub fn metadata_text(metadata: Option<serde_json::Value>) -> Result<Option<String>, ApiError> {
    let Some(value) = metadata else {
        return Ok(None);
    };
    if !value.is_object() {
        return Err(
            ApiError::bad_request("metadata must be a JSON object or null.").param("metadata"),
        );
    }
    let text = value.to_string();
    if text.len() > METADATA_MAX_BYTES {
        return Err(ApiError::bad_request(format!(
            "metadata is {} bytes serialised; the limit is {METADATA_MAX_BYTES} bytes (60 KB).",
            text.len()
        ))
        .param("metadata"));
    }
    Ok(Some(text))
}

/// Stored metadata text back to a JSON value that re-serialises byte for byte.
pub fn metadata_value(stored: Option<&str>) -> Option<Box<RawValue>> {
    stored.and_then(|text| RawValue::from_string(text.to_owned()).ok())
}
