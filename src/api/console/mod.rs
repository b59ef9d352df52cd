//! The merchant's console (CONTRACT §17): pages for the people of one account, in Spanish
//! first, at `/console`. Its parts:
//!
//! - `users`: `/v1/console-users`, the API that invites people (an invitation link to set a
//!   password) and removes them;
//! - `password`: argon2id hashes, computed on the blocking pool, a few at a time;
//! - `session`: the cookie, the session row behind it, its CSRF token, and `ConsoleCaller`;
//! - `sign_in`: the login, invitation and sign-out pages, with their limits;
//! - `frame`: what every page shares; `pages`, `subscription`, `documents`: what people read
//!   (home, customers, a customer, a subscription; invoices, exports); `settings`: the
//!   account's settings, which an admin switches;
//! - `mail`: e-mail a person sends (a portal link, a test message) through the account's SMTP;
//! - `actions`: what people do, each checked against their role on the server, confirmed on a
//!   page of its own, recorded with who took it, and sent to the API itself through
//!   [`InnerApi`]: the same handlers, rules, events and Idempotency-Keys as an integrator's.

mod actions;
mod documents;
mod frame;
mod i18n;
mod mail;
mod pages;
mod password;
mod refund;
mod session;
mod settings;
mod settings_fields;
mod sign_in;
mod subscription;
mod users;
mod view;

use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::idempotency::IdempotencyScope;
use crate::http::state::AppState;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use axum::{Extension, Router};
use serde_json::Value;
use tower::ServiceExt;

pub use crate::domain::console::Role;
pub use users::{admin_router, router};

/// The `/v1` routes behind the API's Idempotency layer, with no credential of their own: the
/// console calls them in the name of its signed-in person, whose account it sets as the
/// request's `Caller`. Only the console's own handlers reach it, with paths they built from
/// ids they checked (`view::is_id`).
#[derive(Clone)]
pub struct InnerApi(Router);

/// The most of an API answer the console reads (an export's ZIP is streamed past this).
const MAX_ANSWER: usize = 8 * 1024 * 1024;

impl InnerApi {
    pub fn new(router: Router) -> Self {
        InnerApi(router)
    }

    /// The API's whole answer to `method path` with `body`, sent as `caller`'s account, with
    /// the console's person's own Idempotency scope.
    async fn send(
        &self,
        caller: &session::ConsoleCaller,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<Response, ApiError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(key) = idempotency_key {
            builder = builder.header(crate::http::idempotency::HEADER, key);
        }
        let body = match body {
            Some(json) => Body::from(json.to_string()),
            None => Body::empty(),
        };
        let mut request = builder
            .body(body)
            .map_err(|err| ApiError::Internal(format!("console request: {err}").into()))?;
        request
            .extensions_mut()
            .insert(Caller(std::sync::Arc::clone(&caller.account)));
        request
            .extensions_mut()
            .insert(IdempotencyScope(format!("console:{}", caller.user.id)));
        match self.0.clone().oneshot(request).await {
            Ok(response) => Ok(response),
            Err(never) => match never {},
        }
    }

    /// The API's answer to `method path` read as JSON (`Null` for an empty one).
    async fn call(
        &self,
        caller: &session::ConsoleCaller,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<(StatusCode, Value), ApiError> {
        let response = self
            .send(caller, method, path, body, idempotency_key)
            .await?;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), MAX_ANSWER)
            .await
            .map_err(|err| ApiError::Internal(format!("console answer: {err}").into()))?;
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// A read that must succeed: the JSON of a 200, else the API's error as the page's.
    async fn get(&self, caller: &session::ConsoleCaller, path: &str) -> Result<Value, ApiError> {
        let (status, value) = self.call(caller, Method::GET, path, None, None).await?;
        if status.is_success() {
            return Ok(value);
        }
        Err(match status {
            StatusCode::NOT_FOUND => ApiError::not_found(view::message_of(&value)),
            StatusCode::TOO_MANY_REQUESTS => ApiError::RateLimited {
                retry_after_secs: 60,
            },
            _ => {
                ApiError::Internal(format!("{path}: {status} {}", view::message_of(&value)).into())
            }
        })
    }
}

/// The console's pages, assets and forms.
pub fn pages(state: &AppState, inner: InnerApi) -> Router<AppState> {
    sign_in::router()
        .merge(pages::router())
        .merge(documents::router())
        .merge(settings::router())
        .merge(subscription::router())
        .merge(actions::router())
        .merge(refund::router())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            session::limit_pages,
        ))
        .layer(Extension(inner))
}
