//! The routes nodes of one cluster call on each other (`cluster::forward`): an actor's message
//! for a shard this node holds, and changes every node must learn. Not part of the public API
//! nor of its OpenAPI document.
//!
//! Every request under `/internal/` must carry the cluster's secret (compared in constant
//! time). [`only_the_cluster`] checks it first, around the whole application (`api::app`), so
//! that no extractor, method check or metric sees a stranger's request: without the secret
//! (and always on SQLite, where there is no cluster) the answer is the one an unknown path
//! gets, byte for byte, whatever the method and body (CONTRACT §3).

use crate::actors::forward::{Broadcast, EPOCH_HEADER, Message, SECRET_HEADER};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/internal/v1/actors/{id}/messages", post(message))
        .route("/internal/v1/broadcast", post(broadcast))
}

/// Lets a request under `/internal/` through only with the cluster's secret; otherwise
/// answers what `api::unknown_path` answers, before anything reads the request.
pub async fn only_the_cluster(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if !request.uri().path().starts_with("/internal/")
        || from_the_cluster(&state, request.headers())
    {
        return next.run(request).await;
    }
    super::unknown_path(request).await.into_response()
}

/// Whether the request carries the cluster's secret (never, without a cluster).
fn from_the_cluster(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(forwarder) = state.runtime.forwarder() else {
        return false;
    };
    let given = headers
        .get(SECRET_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    crate::secrets::constant_time_eq(given, forwarder.secret())
}

/// An actor's message: handled if this node holds the id's shard under the epoch the sender
/// saw, else 421 (the sender looks the owner up again).
async fn message(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(message): Json<Message>,
) -> Result<Response, ApiError> {
    let epoch = headers
        .get(EPOCH_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .ok_or_else(|| ApiError::bad_request("The epoch header is missing."))?;
    Ok(
        match state.runtime.handle_forwarded(&id, epoch, message).await {
            Some(reply) => Json(reply).into_response(),
            None => StatusCode::MISDIRECTED_REQUEST.into_response(),
        },
    )
}

async fn broadcast(State(state): State<AppState>, Json(change): Json<Broadcast>) -> StatusCode {
    if let Broadcast::Account { account_id } = &change {
        state.keys.forget_account(account_id);
    }
    state.runtime.apply_broadcast(&change);
    StatusCode::NO_CONTENT
}
