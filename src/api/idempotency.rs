//! `Idempotency-Key` on every POST, as one layer: the first response under a key is stored and
//! replayed for 24 hours; another body under the same key is refused; a duplicate that arrives
//! while the first still runs waits for it (bounded) instead of running twice.

use super::auth::Caller;
use super::error::ApiError;
use super::state::AppState;
use crate::secrets::sha256_hex;
use crate::store::idempotency::Claim;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Duration;

pub const HEADER: &str = "idempotency-key";
const MAX_BODY: usize = 1024 * 1024;
const WAIT_FOR_FIRST: Duration = Duration::from_secs(15);

pub async fn idempotent_posts(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if request.method() != Method::POST {
        return Ok(next.run(request).await);
    }
    let Some(key) = request
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return Ok(next.run(request).await);
    };
    if key.is_empty() || key.len() > 255 {
        return Err(
            ApiError::bad_request("Idempotency-Key must be 1 to 255 characters.")
                .param("Idempotency-Key"),
        );
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return Ok(next.run(request).await);
    };
    let account = caller.account_id();
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::invalid(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large."))?;
    let fingerprint = {
        let mut material = format!("{} {}\n", parts.method, parts.uri.path()).into_bytes();
        material.extend_from_slice(&bytes);
        sha256_hex(material)
    };

    let deadline = tokio::time::Instant::now() + WAIT_FOR_FIRST;
    loop {
        let now_ms = chrono::Utc::now().timestamp_millis();
        match state
            .store
            .claim_idempotency_key(&account, &key, &fingerprint, now_ms)
            .await?
        {
            Claim::Fresh => break,
            Claim::Replay { status, body } => return Ok(replay(status, body)),
            Claim::Mismatch => {
                return Err(ApiError::Idempotency {
                    status: StatusCode::BAD_REQUEST,
                    message: "This Idempotency-Key was already used with a different request."
                        .to_owned(),
                });
            }
            Claim::InFlight if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Claim::InFlight => {
                return Err(ApiError::Idempotency {
                    status: StatusCode::CONFLICT,
                    message: "A request with this Idempotency-Key is still being processed."
                        .to_owned(),
                });
            }
        }
    }

    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
    if parts.status.is_server_error() {
        // Our failure, not the request's: a retry with the same key should run again.
        state.store.release_idempotency_key(&account, &key).await?;
    } else {
        let text = String::from_utf8_lossy(&body).into_owned();
        state
            .store
            .finish_idempotency_key(&account, &key, parts.status.as_u16(), text)
            .await?;
    }
    Ok(Response::from_parts(parts, Body::from(body)))
}

fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}
