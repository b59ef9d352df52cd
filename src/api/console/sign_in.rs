//! Signing in and out of the console, and accepting an invitation.
//!
//! The login form carries a nonce that must equal its own cookie's (a page on another site
//! cannot post a login that signs a browser in as someone else). Attempts are limited before
//! any password is verified: ten a minute per e-mail address and thirty a minute per client
//! address (`console-login:` keys of the shared limiter), so that guessing is slow whatever
//! the guesser's answers. An unknown address costs the same argon2 verification as a known
//! one, and the answer never says which of the two was wrong.

use super::i18n::Tr;
use super::password;
use super::session::{self, COOKIE, ConsoleCaller, LOGIN_COOKIE, cookie_header};
use super::users::{INVITATION_LEN, INVITATION_PREFIX};
use crate::checkout::i18n::Locale;
use crate::http::auth_failures::ClientAddr;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::secrets::{constant_time_eq, random_token, sha256_hex};
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

const PER_EMAIL: u64 = 10;
const PER_ADDRESS: u64 = 30;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/login", get(login_form).post(login))
        .route("/console/logout", post(logout))
        .route("/console/logout-everywhere", post(logout_everywhere))
        .route(
            "/console/invitation/{token}",
            get(invitation_form).post(accept_invitation),
        )
}

#[derive(Template)]
#[template(path = "api/console/templates/login.html")]
struct LoginPage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    error: Option<&'static str>,
    info: Option<&'static str>,
    nonce: String,
    email: String,
    lang_query: &'static str,
    other_lang: &'static str,
}

#[derive(Deserialize)]
struct LangQuery {
    lang: Option<String>,
}

fn chosen(query: &LangQuery, headers: &HeaderMap) -> Locale {
    Locale::choose(
        query.lang.as_deref(),
        headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok()),
    )
}

/// The login page with a fresh nonce in its form and its cookie.
fn login_page(
    state: &AppState,
    locale: Locale,
    status: StatusCode,
    error: Option<&'static str>,
    info: Option<&'static str>,
    email: String,
) -> Response {
    let t = Tr(locale);
    let nonce = random_token("cln_", 32);
    let body = LoginPage {
        lang: t.code(),
        t,
        title: t.get("login_title"),
        error: error.map(|key| t.get(key)),
        info: info.map(|key| t.get(key)),
        nonce: nonce.clone(),
        email,
        lang_query: if locale == Locale::En { "?lang=en" } else { "" },
        other_lang: if locale == Locale::En { "es" } else { "en" },
    };
    let mut response = super::frame::page(status, body.render());
    if let Ok(cookie) = cookie_header(state, LOGIN_COOKIE, &nonce, 3600) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

async fn login_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<LangQuery>,
) -> Response {
    if let Ok(Some(_)) = session::resolve(&state, &headers).await {
        return Redirect::to("/console").into_response();
    }
    login_page(
        &state,
        chosen(&query, &headers),
        StatusCode::OK,
        None,
        None,
        String::new(),
    )
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
}

async fn login(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Query(query): Query<LangQuery>,
    Form(form): Form<LoginForm>,
) -> Response {
    let locale = chosen(&query, &headers);
    let again = |status, error| {
        login_page(
            &state,
            locale,
            status,
            Some(error),
            None,
            form.email.chars().take(254).collect(),
        )
    };
    let nonce_ok = crate::http::pages::cookie(&headers, LOGIN_COOKIE)
        .is_some_and(|cookie| !form.nonce.is_empty() && constant_time_eq(&cookie, &form.nonce));
    if !crate::http::pages::same_origin(&headers) || !nonce_ok {
        return again(StatusCode::FORBIDDEN, "stale_login");
    }
    let email = form.email.trim().to_lowercase();
    if email.is_empty() || email.len() > 254 || form.password.is_empty() {
        return again(StatusCode::UNAUTHORIZED, "wrong_login");
    }
    let limits = [
        (format!("console-login:{}", sha256_hex(&email)), PER_EMAIL),
        (format!("console-login-from:{}", client.key()), PER_ADDRESS),
    ];
    for (key, limit) in &limits {
        if let Err(err) = state.limiter.take(key, *limit).await {
            return match err {
                ApiError::RateLimited { .. } => {
                    again(StatusCode::TOO_MANY_REQUESTS, "too_many_logins")
                }
                other => other.into_response(),
            };
        }
    }
    let user = match state.store.console_user_by_email(&email).await {
        Ok(user) => user.filter(|u| u.removed_at.is_none()),
        Err(err) => return ApiError::from(err).into_response(),
    };
    let phc = user.as_ref().and_then(|u| u.password_hash.clone());
    if !password::verify(phc, form.password.clone()).await {
        return again(StatusCode::UNAUTHORIZED, "wrong_login");
    }
    let Some(user) = user else {
        return again(StatusCode::UNAUTHORIZED, "wrong_login");
    };
    signed_in(&state, &user).await
}

/// A new session for `user`, and their home page.
async fn signed_in(state: &AppState, user: &crate::store::console::ConsoleUser) -> Response {
    let cookie = match session::start(state, user).await {
        Ok(cookie) => cookie,
        Err(err) => return err.into_response(),
    };
    let mut response = Redirect::to("/console").into_response();
    response.headers_mut().append(header::SET_COOKIE, cookie);
    if let Ok(gone) = cookie_header(state, LOGIN_COOKIE, "", 0) {
        response.headers_mut().append(header::SET_COOKIE, gone);
    }
    response
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// Ends this session (or, everywhere: every session of the person).
async fn sign_out(
    state: &AppState,
    caller: &ConsoleCaller,
    headers: &HeaderMap,
    form: &CsrfForm,
    everywhere: bool,
) -> Response {
    if !crate::http::pages::same_origin(headers) || !caller.csrf_ok(&form.csrf) {
        let t = Tr(super::frame::locale_of(caller));
        return super::frame::problem(
            caller,
            StatusCode::FORBIDDEN,
            t.get("stale_form"),
            "/console",
        );
    }
    let ended = if everywhere {
        state
            .store
            .end_console_sessions_of(&caller.user.id)
            .await
            .map(|_| ())
    } else {
        state
            .store
            .end_console_session(&caller.session.token_hash)
            .await
    };
    if let Err(err) = ended {
        return ApiError::from(err).into_response();
    }
    let locale = super::frame::locale_of(caller);
    let mut response = login_page(
        state,
        locale,
        StatusCode::OK,
        None,
        Some("signed_out"),
        String::new(),
    );
    if let Ok(gone) = cookie_header(state, COOKIE, "", 0) {
        response.headers_mut().append(header::SET_COOKIE, gone);
    }
    response
}

async fn logout(
    State(state): State<AppState>,
    caller: ConsoleCaller,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    sign_out(&state, &caller, &headers, &form, false).await
}

async fn logout_everywhere(
    State(state): State<AppState>,
    caller: ConsoleCaller,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    sign_out(&state, &caller, &headers, &form, true).await
}

#[derive(Template)]
#[template(path = "api/console/templates/invitation.html")]
struct InvitationPage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    open: bool,
    email: String,
    merchant: String,
    token: String,
    error: Option<&'static str>,
}

fn well_formed(token: &str) -> bool {
    token.strip_prefix(INVITATION_PREFIX).is_some_and(|rest| {
        rest.len() == INVITATION_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// The invitation's page: open while the invitation is unused, unexpired and its person not
/// removed.
async fn invitation_page(
    state: &AppState,
    token: &str,
    error: Option<&'static str>,
) -> Result<Response, ApiError> {
    let mut body = InvitationPage {
        lang: "es",
        t: Tr(Locale::Es),
        title: Tr(Locale::Es).get("invitation_title"),
        open: false,
        email: String::new(),
        merchant: String::new(),
        token: String::new(),
        error: None,
    };
    let invitation = if well_formed(token) {
        state.store.console_invitation(&sha256_hex(token)).await?
    } else {
        None
    };
    if let Some(invitation) = invitation {
        let now = state.runtime.clock().now_ms(&invitation.account_id).await?;
        let user = state.store.console_user_of(&invitation.user_id).await?;
        let account = state.store.account(&invitation.account_id).await?;
        if let (Some(user), Some(account)) = (user, account) {
            let locale = if user.locale == "en" {
                Locale::En
            } else {
                Locale::Es
            };
            body.lang = Tr(locale).code();
            body.t = Tr(locale);
            body.title = Tr(locale).get("invitation_title");
            body.error = error.map(|key| Tr(locale).get(key));
            body.open = invitation.used_at.is_none()
                && invitation.expires_at > now
                && user.removed_at.is_none();
            body.email = user.email;
            body.merchant = account.name;
            body.token = token.to_owned();
        }
    }
    let status = match (body.open, error) {
        (false, _) => StatusCode::NOT_FOUND,
        (true, Some(_)) => StatusCode::BAD_REQUEST,
        (true, None) => StatusCode::OK,
    };
    Ok(super::frame::page(status, body.render()))
}

async fn invitation_form(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    invitation_page(&state, &token, None)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize)]
struct PasswordForm {
    #[serde(default)]
    password: String,
    #[serde(default)]
    again: String,
}

/// Sets the password (argon2id), uses the invitation and signs the person in.
async fn accept_invitation(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Path(token): Path<String>,
    Form(form): Form<PasswordForm>,
) -> Response {
    let result = async {
        if !crate::http::pages::same_origin(&headers) || !well_formed(&token) {
            return invitation_page(&state, "", None).await;
        }
        state
            .limiter
            .take(&format!("console-login-from:{}", client.key()), PER_ADDRESS)
            .await?;
        if let Some(why) = password::refusal(&form.password) {
            return invitation_page(&state, &token, Some(why)).await;
        }
        if !constant_time_eq(&form.password, &form.again) {
            return invitation_page(&state, &token, Some("passwords_differ")).await;
        }
        let Some(invitation) = state.store.console_invitation(&sha256_hex(&token)).await? else {
            return invitation_page(&state, "", None).await;
        };
        let now = state.runtime.clock().now_ms(&invitation.account_id).await?;
        let Some(phc) = password::hash(form.password.clone()).await else {
            return Err(ApiError::Internal("password hashing".into()));
        };
        let Some(user_id) = state
            .store
            .accept_console_invitation(&sha256_hex(&token), &phc, now)
            .await?
        else {
            return invitation_page(&state, &token, None).await;
        };
        // A new password ends whatever sessions an earlier one had.
        state.store.end_console_sessions_of(&user_id).await?;
        let Some(user) = state.store.console_user_of(&user_id).await? else {
            return invitation_page(&state, "", None).await;
        };
        Ok(signed_in(&state, &user).await)
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_invitations_token_is_looked_up() {
        let token = random_token(INVITATION_PREFIX, INVITATION_LEN);
        assert!(well_formed(&token));
        assert!(!well_formed(&token[1..]));
        assert!(!well_formed("bci_../../x"));
    }
}
