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

/// The value of the cookie `name` among the request's cookies.
pub fn cookie(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value.to_owned())
}

/// Whether a form post came from this server: one that carries an `Origin` must name our
/// host (SameSite=Strict already withholds a session's cookie from another site; this also
/// covers a login form, which has no session yet). Pages that post forms send a
/// `same-origin` referrer policy, which keeps browsers sending the real `Origin`.
pub fn same_origin(headers: &axum::http::HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    origin
        .split_once("://")
        .is_some_and(|(_, rest)| rest.trim_end_matches('/') == host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    #[test]
    fn a_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; billing_dashboard=ds_abc; b=2"),
        );
        assert_eq!(
            cookie(&headers, "billing_dashboard").as_deref(),
            Some("ds_abc")
        );
        assert_eq!(cookie(&headers, "billing"), None);
    }

    #[test]
    fn a_cross_origin_post_is_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin(&headers));
    }
}
