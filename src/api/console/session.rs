//! The console's credential: the cookie `billing_console`, whose random token is stored only as
//! its SHA-256 in `console_sessions` beside the session's CSRF token and expiry. The cookie is
//! `HttpOnly`, `SameSite=Strict`, scoped to `/console`, and `Secure` when the public URL is
//! https. A session holds twelve hours by its account's clock, or until its person signs out
//! (everywhere, or is removed). Every form carries the session's CSRF token, compared in
//! constant time, and a post carrying an `Origin` must come from this server.

use super::Role;
use crate::http::auth_failures::ClientAddr;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::ids::ConsoleActionId;
use crate::secrets::{constant_time_eq, random_token, sha256_hex};
use crate::store::accounts::Account;
use crate::store::console::{ConsoleAction, ConsoleSession, ConsoleUser};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use std::sync::Arc;

pub const COOKIE: &str = "billing_console";
/// The login form's own cookie: the token its form must also carry (a login from another
/// site cannot sign a browser in to someone else's account).
pub const LOGIN_COOKIE: &str = "billing_console_login";
pub const SESSION_TTL_MS: i64 = 12 * 3600 * 1000;
const TOKEN_PREFIX: &str = "bcs_";
const TOKEN_LEN: usize = 43;

/// Requests a signed-in person may send a minute; one not signed in, from one address.
const PER_PERSON: u64 = 600;
const PER_ADDRESS: u64 = 120;

/// The person a console request came from, their account and their session.
#[derive(Clone)]
pub struct ConsoleCaller {
    pub user: Arc<ConsoleUser>,
    pub account: Arc<Account>,
    pub role: Role,
    pub session: Arc<ConsoleSession>,
    /// The account's clock when the request arrived.
    pub now_ms: i64,
}

impl ConsoleCaller {
    pub fn csrf(&self) -> &str {
        &self.session.csrf
    }

    /// Records that this person is taking `action` on `object_id` under `key`, before it is
    /// taken: the record's id, for `finish` to add the answer to.
    pub async fn record(
        &self,
        state: &AppState,
        action: &str,
        object_id: &str,
        key: &str,
    ) -> Result<ConsoleActionId, ApiError> {
        let id = ConsoleActionId::generate();
        state
            .store
            .record_console_action(ConsoleAction {
                id: id.clone(),
                account_id: self.account.id.clone(),
                user_id: self.user.id.clone(),
                action: action.to_owned(),
                object_id: object_id.to_owned(),
                idempotency_key: key.to_owned(),
                status: None,
                created_at: self.now_ms,
            })
            .await?;
        Ok(id)
    }

    /// Adds the API's `status` to the action `record` this person took, which writes its
    /// `console.action` event.
    pub async fn finish(
        &self,
        state: &AppState,
        record: &ConsoleActionId,
        status: u16,
    ) -> Result<(), ApiError> {
        state
            .store
            .finish_console_action(&self.account.id, record, status, self.now_ms)
            .await?;
        Ok(())
    }

    /// This caller with its account read again: what a page shows after a change of the
    /// account's settings, which the account read when the request arrived does not hold.
    pub async fn refreshed(&self, state: &AppState) -> Result<ConsoleCaller, ApiError> {
        let account = state
            .store
            .account(&self.account.id)
            .await?
            .ok_or_else(|| ApiError::not_found("account"))?;
        Ok(ConsoleCaller {
            account: Arc::new(account),
            ..self.clone()
        })
    }

    /// Whether the form's token is the session's.
    pub fn csrf_ok(&self, presented: &str) -> bool {
        constant_time_eq(&self.session.csrf, presented)
    }
}

/// The live session the request's cookie names, its person and account; `None` for none, an
/// unknown one, an expired one or a removed person's.
pub async fn resolve(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<ConsoleCaller>, ApiError> {
    let Some(token) = crate::http::pages::cookie(headers, COOKIE) else {
        return Ok(None);
    };
    if !well_formed(&token) {
        return Ok(None);
    }
    let Some(session) = state.store.console_session(&sha256_hex(&token)).await? else {
        return Ok(None);
    };
    let now_ms = state.runtime.clock().now_ms(&session.account_id).await?;
    if session.expires_at <= now_ms {
        return Ok(None);
    }
    let Some(user) = state.store.console_user_of(&session.user_id).await? else {
        return Ok(None);
    };
    let Some(role) = Role::parse(&user.role).filter(|_| user.removed_at.is_none()) else {
        return Ok(None);
    };
    let Some(account) = state.store.account(&session.account_id).await? else {
        return Ok(None);
    };
    Ok(Some(ConsoleCaller {
        user: Arc::new(user),
        account: Arc::new(account),
        role,
        session: Arc::new(session),
        now_ms,
    }))
}

fn well_formed(token: &str) -> bool {
    token.strip_prefix(TOKEN_PREFIX).is_some_and(|rest| {
        rest.len() == TOKEN_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

impl FromRequestParts<AppState> for ConsoleCaller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        if let Some(caller) = parts.extensions.get::<ConsoleCaller>() {
            return Ok(caller.clone());
        }
        match resolve(state, &parts.headers).await {
            Ok(Some(caller)) => {
                parts.extensions.insert(caller.clone());
                Ok(caller)
            }
            Ok(None) => Err(Redirect::to("/console/login").into_response()),
            Err(err) => Err(err.into_response()),
        }
    }
}

/// Starts a session for `user`: the cookie to set.
pub async fn start(state: &AppState, user: &ConsoleUser) -> Result<HeaderValue, ApiError> {
    let token = random_token(TOKEN_PREFIX, TOKEN_LEN);
    let now = state.runtime.clock().now_ms(&user.account_id).await?;
    state
        .store
        .insert_console_session(ConsoleSession {
            token_hash: sha256_hex(&token),
            account_id: user.account_id.clone(),
            user_id: user.id.clone(),
            csrf: random_token("csrf_", 32),
            expires_at: now + SESSION_TTL_MS,
            created_at: now,
        })
        .await?;
    cookie_header(state, COOKIE, &token, SESSION_TTL_MS / 1000)
}

/// A `Set-Cookie` of the console's: `HttpOnly`, `SameSite=Strict`, `/console` only, `Secure`
/// under https; a `max_age_s` of 0 removes it.
pub fn cookie_header(
    state: &AppState,
    name: &str,
    value: &str,
    max_age_s: i64,
) -> Result<HeaderValue, ApiError> {
    let secure = if state.config.public_url().starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{name}={value}; HttpOnly; SameSite=Strict; Path=/console; Max-Age={max_age_s}{secure}"
    ))
    .map_err(|err| ApiError::Internal(format!("cookie: {err}").into()))
}

/// The console's limits: a signed-in person's requests by their session, anyone else's by
/// their address (the login form's own limits are in `sign_in`).
pub async fn limit_pages(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let key = match crate::http::pages::cookie(request.headers(), COOKIE) {
        Some(token) if well_formed(&token) => {
            (format!("console:{}", sha256_hex(&token)), PER_PERSON)
        }
        _ => {
            let client = ClientAddr::of(
                request.extensions(),
                request.headers(),
                &state.config.trusted_proxies,
            );
            (format!("console-anon:{}", client.key()), PER_ADDRESS)
        }
    };
    state.limiter.take(&key.0, key.1).await?;
    Ok(next.run(request).await)
}

/// What every console page answers with: its own Content-Security-Policy (nothing from
/// elsewhere, no script but ours, forms only to us), never stored, not framed.
pub fn harden(response: Response) -> Response {
    let mut response = crate::http::pages::harden(
        response,
        "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; \
         form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    );
    // The forms post to us: the real `Origin` goes with them (`pages::same_origin`).
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_token_of_ours_is_looked_up() {
        let token = random_token(TOKEN_PREFIX, TOKEN_LEN);
        assert!(well_formed(&token));
        assert!(!well_formed(&token[1..]));
        assert!(!well_formed(&format!("{token}x")));
        assert!(!well_formed("bcs_' OR 1=1 --"));
    }
}
