//! What every page a customer opens without an API key answers with (the hosted checkout, the
//! hosted invoice and its PDFs): the page's own Content-Security-Policy, never cached by anyone
//! between, no `Referer` sent on (the URL is the customer's credential), no type sniffing, and
//! a `Vary` on the language the page chose by.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// `response` with those headers, `policy` as its Content-Security-Policy.
pub fn harden(mut response: Response, policy: &str) -> Response {
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Language"));
    response
}

/// `response` marked never to be stored by a browser or anyone between: what the portal's JSON
/// answers (CONTRACT §13), whose bodies are a customer's data and whose URL is their credential.
pub async fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A page's stylesheet or script, compiled in: cached five minutes, never sniffed.
pub fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// `https://host:port` of a URL (empty for none), for a Content-Security-Policy.
pub fn origin(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default()
}
