//! `/dashboard`: the operator's page, server-rendered, with no asset from outside our server.
//!
//! A browser cannot send the admin token as a Bearer header, so the page has a login form: the
//! token posted once is checked like the admin API's, and the answer is an HttpOnly,
//! SameSite=Strict cookie holding a random session id. The session (the id's hash, its CSRF
//! token and expiry) is kept in the database, so that a login on one node holds on every node
//! behind the same load balancer, and a restart keeps operators logged in until the expiry.
//! Every state-changing form carries the session's CSRF token, compared in constant time, and
//! posts that carry an `Origin` must come from this server. Plan deletion calls the same code
//! as `DELETE /admin/plans/{id}`.

use super::admin::plan_deletion;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth_failures::ClientAddr;
use crate::http::error::ApiError;
use crate::http::layers::is_admin_token;
use crate::http::state::AppState;
use crate::secrets::{constant_time_eq, random_token, sha256_hex};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use std::fmt::Write;
use std::time::Duration;

const COOKIE: &str = "billing_dashboard";
const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Starts a session; its id (for the cookie), which is stored only as its hash.
async fn create_session(state: &AppState) -> Result<String, ApiError> {
    let id = random_token("ds_", 32);
    let now = now_ms();
    let ttl_ms = i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
    state
        .store
        .create_dashboard_session(
            &sha256_hex(&id),
            &random_token("csrf_", 32),
            now + ttl_ms,
            now,
        )
        .await?;
    Ok(id)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/dashboard", get(show))
        .route("/dashboard/login", post(login))
        .route("/dashboard/logout", post(logout))
        .route("/dashboard/plans/{id}/delete", post(delete_plan))
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The session (its id's hash) and its CSRF token when the request carries a live session.
async fn session(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(String, String)>, ApiError> {
    let Some(id) = session_id(headers) else {
        return Ok(None);
    };
    let id_hash = sha256_hex(&id);
    let csrf = state
        .store
        .dashboard_session_csrf(&id_hash, now_ms())
        .await?;
    Ok(csrf.map(|csrf| (id_hash, csrf)))
}

/// A form post from another origin is refused (SameSite=Strict already withholds the cookie;
/// this also covers the login form, which has no session yet). The page's `same-origin`
/// referrer policy keeps browsers sending the real `Origin` (with `no-referrer` it is `null`).
fn same_origin(headers: &HeaderMap) -> bool {
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

fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

#[derive(Deserialize)]
struct Notice {
    notice: Option<String>,
}

async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(notice): Query<Notice>,
) -> Response {
    match session(&state, &headers).await {
        Err(err) => err.into_response(),
        Ok(None) => html(StatusCode::OK, login_page(None)),
        Ok(Some((_, csrf))) => match page(&state, &csrf, notice.notice.as_deref()).await {
            Ok(body) => html(StatusCode::OK, body),
            Err(err) => err.into_response(),
        },
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// The admin token posted once. The right token logs in whatever its address's failures; a
/// wrong one counts against the client's address like the admin API's, and past the limit is
/// answered 429. An empty form presents nothing and is not counted.
async fn login(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !same_origin(&headers) {
        return html(
            StatusCode::FORBIDDEN,
            login_page(Some("Cross-origin login refused.")),
        );
    }
    let presented = form.token.trim();
    if presented.is_empty() {
        return html(
            StatusCode::UNAUTHORIZED,
            login_page(Some("Enter the admin token.")),
        );
    }
    if !is_admin_token(&state, presented) {
        return match state.auth_failures.refused(client).await {
            ApiError::Authentication => html(
                StatusCode::UNAUTHORIZED,
                login_page(Some("That is not the admin token.")),
            ),
            other => other.into_response(),
        };
    }
    let id = match create_session(&state).await {
        Ok(id) => id,
        Err(err) => return err.into_response(),
    };
    let secure = if state.config.public_url().starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age={}{secure}",
        SESSION_TTL.as_secs()
    );
    let mut response = Redirect::to("/dashboard").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

/// The session (its id's hash) when the form's CSRF token is the session's.
async fn checked(
    state: &AppState,
    headers: &HeaderMap,
    form: &CsrfForm,
) -> Result<Option<String>, ApiError> {
    let Some((id_hash, csrf)) = session(state, headers).await? else {
        return Ok(None);
    };
    Ok((same_origin(headers) && constant_time_eq(&csrf, &form.csrf)).then_some(id_hash))
}

async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let id_hash = match checked(&state, &headers, &form).await {
        Ok(Some(id_hash)) => id_hash,
        Ok(None) => return html(StatusCode::FORBIDDEN, login_page(Some("Session expired."))),
        Err(err) => return err.into_response(),
    };
    if let Err(err) = state.store.delete_dashboard_session(&id_hash).await {
        return ApiError::from(err).into_response();
    }
    let mut response = Redirect::to("/dashboard").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "billing_dashboard=; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=0",
        ),
    );
    response
}

async fn delete_plan(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(plan_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    match checked(&state, &headers, &form).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return html(
                StatusCode::FORBIDDEN,
                login_page(Some("Session expired or the form is stale; log in again.")),
            );
        }
        Err(err) => return err.into_response(),
    }
    let notice = match plan_deletion(&state, &plan_id).await {
        Ok(()) => format!("Plan {plan_id} deleted."),
        Err(ApiError::InvalidRequest { message, .. }) => message,
        Err(err) => return err.into_response(),
    };
    let query = serde_urlencoded::to_string([("notice", notice)]).unwrap_or_default();
    Redirect::to(&format!("/dashboard?{query}")).into_response()
}

/// Escapes text for HTML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn when(ms: i64) -> String {
    rfc3339(from_millis(ms))
}

fn cop(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, (cents % 100).abs())
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;background:#f5f6f8;color:#1d2330}\
header{background:#1d2330;color:#fff;padding:12px 24px;display:flex;justify-content:space-between;align-items:center}\
main{padding:16px 24px;display:grid;gap:16px}section{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 2px #0002}\
h1{font-size:20px;margin:0}h2{font-size:16px;margin:4px 0 8px}table{border-collapse:collapse;width:100%;font-size:13px}\
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #e4e6eb}code{font-size:12px}\
.notice{background:#fff7d6;border:1px solid #e8d48a;padding:8px 12px;border-radius:6px}\
.empty{color:#777}button{cursor:pointer}.login{max-width:360px;margin:80px auto}";

fn login_page(error: Option<&str>) -> String {
    let error = error
        .map(|e| format!("<p class=\"notice\">{}</p>", esc(e)))
        .unwrap_or_default();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<title>billing · dashboard login</title><style>{STYLE}</style></head><body><section class=\"login\"><h1>billing dashboard</h1>{error}\
<form method=\"post\" action=\"/dashboard/login\"><p><label>Admin token<br><input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"current-password\" required size=\"36\"></label></p>\
<p><button type=\"submit\" id=\"login\">Log in</button></p></form></section></body></html>"
    )
}

fn table(out: &mut String, headings: &[&str], rows: Vec<Vec<String>>, empty: &str) {
    if rows.is_empty() {
        let _ = write!(out, "<p class=\"empty\">{}</p>", esc(empty));
        return;
    }
    out.push_str("<table><tr>");
    for h in headings {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            // Cells are escaped by the caller, which lets a cell hold a form.
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

async fn page(state: &AppState, csrf: &str, notice: Option<&str>) -> Result<String, ApiError> {
    let store = &state.store;
    let accounts = store.all_accounts().await?;
    let by_status = store.subscriptions_by_status().await?;
    let plans = store.all_plans_with_usage(100).await?;
    let deliveries = store.recent_deliveries(20).await?;
    let failures = store.recent_failed_charges(20).await?;
    let conflicts = store.count_charge_conflicts().await?;
    let tree = state.runtime.tree();
    let counts = tree.counts();
    let actors = tree.page(None, None, 25);
    let csrf = esc(csrf);

    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<title>billing · dashboard</title><style>{STYLE}</style></head><body><header><h1>billing dashboard</h1>\
<form method=\"post\" action=\"/dashboard/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button type=\"submit\">Log out</button></form></header><main>"
    );
    if let Some(notice) = notice {
        let _ = write!(out, "<p class=\"notice\" id=\"notice\">{}</p>", esc(notice));
    }

    out.push_str("<section id=\"actors\"><h2>Actor tree</h2>");
    let _ = write!(out, "<p>root → {} shard supervisors</p>", counts.shards);
    table(
        &mut out,
        &[
            "kind",
            "live",
            "restarts",
            "mailbox backlog",
            "live per shard",
        ],
        counts
            .kinds
            .iter()
            .map(|k| {
                vec![
                    esc(k.kind),
                    k.live.to_string(),
                    k.restarts.to_string(),
                    k.mailbox_backlog.to_string(),
                    k.per_shard
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(" · "),
                ]
            })
            .collect(),
        "No kinds registered.",
    );
    table(
        &mut out,
        &[
            "kind", "id", "shard", "state", "mailbox", "restarts", "next due",
        ],
        actors
            .into_iter()
            .map(|a| {
                vec![
                    esc(a.kind),
                    format!("<code>{}</code>", esc(&a.id)),
                    a.shard.to_string(),
                    esc(a.state),
                    a.mailbox_len.to_string(),
                    a.restarts.to_string(),
                    a.next_due_ms.map(when).unwrap_or_else(|| "-".into()),
                ]
            })
            .collect(),
        "No live actors (they are activated on demand and stop when idle).",
    );
    out.push_str("</section>");

    out.push_str("<section id=\"accounts\"><h2>Accounts</h2>");
    table(
        &mut out,
        &["id", "name", "sandbox", "available", "reserved", "created"],
        accounts
            .iter()
            .map(|a| {
                vec![
                    format!("<code>{}</code>", esc(&a.id)),
                    esc(&a.name),
                    a.sandbox.to_string(),
                    cop(a.available_cents),
                    cop(a.reserved_cents),
                    when(a.created_at),
                ]
            })
            .collect(),
        "No accounts.",
    );
    out.push_str("</section>");

    out.push_str("<section id=\"subscriptions\"><h2>Subscriptions by status</h2>");
    table(
        &mut out,
        &["status", "count"],
        by_status
            .into_iter()
            .map(|(status, n)| vec![esc(&status), n.to_string()])
            .collect(),
        "No subscriptions.",
    );
    out.push_str("</section>");

    out.push_str("<section id=\"plans\"><h2>Plans</h2>");
    table(
        &mut out,
        &["id", "account", "name", "monthly", "annual", "active", "subscriptions", ""],
        plans
            .into_iter()
            .map(|(p, used)| {
                let id = esc(&p.id);
                vec![
                    format!("<code>{id}</code>"),
                    format!("<code>{}</code>", esc(&p.account_id)),
                    esc(&p.name),
                    cop(p.monthly_amount_cents),
                    cop(p.annual_amount_cents),
                    p.active.to_string(),
                    used.to_string(),
                    format!(
                        "<form method=\"post\" action=\"/dashboard/plans/{id}/delete\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
<button type=\"submit\" id=\"delete-{id}\"{}>Delete</button></form>",
                        if used > 0 { " title=\"In use: deletion is refused\"" } else { "" }
                    ),
                ]
            })
            .collect(),
        "No plans.",
    );
    out.push_str("</section>");

    out.push_str("<section id=\"deliveries\"><h2>Recent webhook deliveries</h2>");
    table(
        &mut out,
        &[
            "id",
            "endpoint",
            "event",
            "status",
            "attempts",
            "last status",
            "last error",
            "updated",
        ],
        deliveries
            .into_iter()
            .map(|d| {
                vec![
                    format!("<code>{}</code>", esc(&d.id)),
                    format!("<code>{}</code>", esc(&d.endpoint_id)),
                    format!("<code>{}</code>", esc(&d.event_id)),
                    esc(&d.status),
                    d.attempts.to_string(),
                    d.last_status_code
                        .map(|c| c.to_string())
                        .unwrap_or_default(),
                    esc(d.last_error.as_deref().unwrap_or("")),
                    when(d.updated_at),
                ]
            })
            .collect(),
        "No deliveries yet.",
    );
    out.push_str("</section>");

    // Processor reports that moved no money because they contradict their charge.
    let _ = write!(
        out,
        "<section id=\"conflicts\"><h2>Charge conflicts</h2><p><span id=\"conflict-count\">{conflicts}</span> \
processor report(s) contradicted their charge and moved no money; see <code>GET /admin/charge-conflicts</code>.</p></section>"
    );

    out.push_str("<section id=\"failures\"><h2>Recent failed charges</h2>");
    table(
        &mut out,
        &[
            "charge",
            "account",
            "subscription",
            "amount",
            "status",
            "processor says",
            "at",
        ],
        failures
            .into_iter()
            .map(|c| {
                vec![
                    format!("<code>{}</code>", esc(&c.id)),
                    format!("<code>{}</code>", esc(&c.account_id)),
                    esc(c.subscription_id.as_deref().unwrap_or("-")),
                    cop(c.amount_cents),
                    esc(&c.status),
                    esc(c.processor_message.as_deref().unwrap_or("")),
                    when(c.updated_at),
                ]
            })
            .collect(),
        "No failed charges.",
    );
    out.push_str("</section></main></body></html>");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_neutralises_markup_and_attribute_quotes() {
        assert_eq!(
            esc("<script>\"x\" & 'y'</script>"),
            "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; billing_dashboard=ds_abc; b=2"),
        );
        assert_eq!(session_id(&headers).as_deref(), Some("ds_abc"));
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
