//! The sandbox's administration, everything under `_sandbox`, behind the admin token (the
//! server's own in-process, the one given to `billing sandbox-whatsapp --admin-token`
//! standalone): `POST _sandbox/phone-numbers` registers a number (its access token, app secret
//! and webhook URL: the operator's to set, so it may be private), `GET _sandbox/messages`
//! (`?phone_number_id=`) lists what was sent, oldest first.

use super::messages::{bearer, meta_error};
use super::{Full, PhoneNumber, SandboxWhatsapp};
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

pub(super) fn router(sandbox: Arc<SandboxWhatsapp>) -> Router {
    Router::new()
        .route("/phone-numbers", post(register_number))
        .route("/messages", get(list_messages))
        .layer(DefaultBodyLimit::max(16 * 1024))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&sandbox),
            require_admin,
        ))
        .with_state(sandbox)
}

async fn require_admin(
    State(sandbox): State<Arc<SandboxWhatsapp>>,
    request: Request,
    next: Next,
) -> Response {
    if !sandbox.admin.admits(bearer(request.headers())) {
        return meta_error(
            StatusCode::UNAUTHORIZED,
            "OAuthException",
            190,
            "The sandbox's administration takes its admin token",
        );
    }
    next.run(request).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NumberIn {
    phone_number_id: String,
    access_token: String,
    app_secret: Option<String>,
    webhook_url: Option<String>,
}

async fn register_number(
    State(sandbox): State<Arc<SandboxWhatsapp>>,
    body: Result<Json<NumberIn>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(number)) = body else {
        return meta_error(
            StatusCode::BAD_REQUEST,
            "OAuthException",
            100,
            "(#100) Invalid body",
        );
    };
    let id_ok = !number.phone_number_id.is_empty()
        && number.phone_number_id.len() <= 32
        && number.phone_number_id.bytes().all(|b| b.is_ascii_digit());
    let url_ok = number.webhook_url.as_deref().is_none_or(|url| {
        url.len() <= 2048
            && url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
    });
    if !id_ok || !url_ok || number.access_token.is_empty() {
        return meta_error(
            StatusCode::BAD_REQUEST,
            "OAuthException",
            100,
            "(#100) phone_number_id must be digits, access_token given, webhook_url http(s)",
        );
    }
    let id = number.phone_number_id.clone();
    match sandbox.register(PhoneNumber {
        phone_number_id: number.phone_number_id,
        access_token: number.access_token,
        app_secret: number.app_secret,
        webhook_url: number.webhook_url,
    }) {
        Ok(()) => (StatusCode::CREATED, Json(json!({"phone_number_id": id}))).into_response(),
        Err(Full) => meta_error(
            StatusCode::CONFLICT,
            "OAuthException",
            4,
            "(#4) The sandbox serves as many numbers as it may",
        ),
    }
}

#[derive(Deserialize)]
struct MessagesQuery {
    phone_number_id: Option<String>,
}

async fn list_messages(
    State(sandbox): State<Arc<SandboxWhatsapp>>,
    Query(query): Query<MessagesQuery>,
) -> Response {
    Json(json!({"data": sandbox.received(query.phone_number_id.as_deref())})).into_response()
}
