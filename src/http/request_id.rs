//! Every request's id: the client's `x-request-id` when it is sane, else one made here
//! (`req_` + a UUIDv7). It is echoed in the response (errors, 404s and 429s included) and
//! recorded as `request_id` on the request's span (`span_for`), so that every log line of the
//! request, on this node, in its actor and on the node it is forwarded to, carries it.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Span;

/// The header a request's id travels in, both ways and between nodes.
pub static HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest client-given id kept; a longer one is replaced.
const MAX_LEN: usize = 128;

/// Gives the request its id (in the request's own `x-request-id`, replacing one that is not
/// sane) and echoes it in the response.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(&HEADER)
        .filter(|value| is_sane(value))
        .cloned()
        .unwrap_or_else(generate);
    request.headers_mut().insert(HEADER.clone(), id.clone());
    let mut response = next.run(request).await;
    response.headers_mut().insert(HEADER.clone(), id);
    response
}

/// The request's span (for `TraceLayer::make_span_with`, inside `assign`): its id, method and
/// path, never its query or headers. INFO, so that it is recorded at the default level.
pub fn span_for<B>(request: &axum::http::Request<B>) -> Span {
    let id = request
        .headers()
        .get(&HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        request_id = id,
        method = %request.method(),
        path = request.uri().path(),
    )
}

/// Printable ASCII without spaces, 1 to 128 characters: safe to write in a log line.
fn is_sane(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty() && bytes.len() <= MAX_LEN && bytes.iter().all(u8::is_ascii_graphic)
}

fn generate() -> HeaderValue {
    let id = format!("req_{}", uuid::Uuid::now_v7().simple());
    HeaderValue::from_str(&id).expect("an ASCII id is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_printable_ids_are_kept() {
        let long = "a".repeat(MAX_LEN);
        let too_long = "a".repeat(MAX_LEN + 1);
        let table: [(&[u8], bool); 6] = [
            (b"abc-123", true),
            (long.as_bytes(), true),
            (too_long.as_bytes(), false),
            (b"", false),
            (b"two words", false),
            (b"tab\there", false),
        ];
        for (value, sane) in table {
            let value = HeaderValue::from_bytes(value).expect("header value");
            assert_eq!(is_sane(&value), sane, "{value:?}");
        }
    }

    #[test]
    fn generated_ids_are_prefixed_and_sane() {
        let id = generate();
        assert!(id.to_str().expect("ascii").starts_with("req_"));
        assert!(is_sane(&id));
    }
}
