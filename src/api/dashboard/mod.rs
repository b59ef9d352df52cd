//! `/dashboard`: the operator's page, server-rendered with askama (`view`, `templates/`), with
//! no asset from outside our server.
//!
//! A browser cannot send the admin token as a Bearer header, so the page has a login form: the
//! token posted once is checked like the admin API's, and the answer is an HttpOnly,
//! SameSite=Strict cookie holding a random session id. The session (the id's hash, its CSRF
//! token and expiry) is kept in the database, so that a login on one node holds on every node
//! behind the same load balancer, and a restart keeps operators logged in until the expiry.
//! Every state-changing form carries the session's CSRF token, compared in constant time, and
//! posts that carry an `Origin` must come from this server. Plan deletion calls the same code
//! as `DELETE /admin/plans/{id}`.

pub(crate) mod revenue;
mod view;

use super::admin::plan_deletion;
use crate::http::auth_failures::ClientAddr;
use crate::http::error::ApiError;
use crate::http::layers::is_admin_token;
use crate::http::state::AppState;
use crate::ids::PlanId;
use crate::secrets::{constant_time_eq, random_token, sha256_hex};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use std::time::Duration;
use view::{login_page, page};

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
    crate::http::pages::cookie(headers, COOKIE)
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
    /// The account whose revenue the page shows.
    account: Option<String>,
}

async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(notice): Query<Notice>,
) -> Response {
    match session(&state, &headers).await {
        Err(err) => err.into_response(),
        Ok(None) => html(StatusCode::OK, login_page(None)),
        Ok(Some((_, csrf))) => match page(
            &state,
            &csrf,
            notice.notice.as_deref(),
            notice.account.as_deref(),
        )
        .await
        {
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
    if !crate::http::pages::same_origin(&headers) {
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
    Ok(
        (crate::http::pages::same_origin(headers) && constant_time_eq(&csrf, &form.csrf))
            .then_some(id_hash),
    )
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
    let notice = match plan_deletion(&state, &PlanId::given(plan_id.as_str())).await {
        Ok(()) => format!("Plan {plan_id} deleted."),
        Err(ApiError::InvalidRequest { message, .. }) => message,
        Err(err) => return err.into_response(),
    };
    let query = serde_urlencoded::to_string([("notice", notice)]).unwrap_or_default();
    Redirect::to(&format!("/dashboard?{query}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; billing_dashboard=ds_abc; b=2"),
        );
        assert_eq!(session_id(&headers).as_deref(), Some("ds_abc"));
    }
}
