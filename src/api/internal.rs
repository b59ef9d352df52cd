//! The routes nodes of one cluster call on each other (`cluster::forward`): an actor's message
//! for a shard this node holds, and changes every node must learn. Not part of the public API
//! nor of its OpenAPI document. Every request must carry the cluster's secret (compared in
//! constant time); without a cluster (SQLite) the routes answer 404.

use super::error::ApiError;
use super::state::AppState;
use crate::cluster::forward::{Broadcast, EPOCH_HEADER, Message, SECRET_HEADER};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/internal/v1/actors/{id}/messages", post(message))
        .route("/internal/v1/broadcast", post(broadcast))
}

/// Whether the request carries the cluster's secret; 404 (as for an unknown path) otherwise,
/// so the routes reveal nothing to others.
fn authenticated(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let forwarder = state
        .runtime
        .forwarder()
        .ok_or_else(|| ApiError::not_found("No such path."))?;
    let given = headers
        .get(SECRET_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if crate::secrets::constant_time_eq(given, forwarder.secret()) {
        Ok(())
    } else {
        Err(ApiError::not_found("No such path."))
    }
}

/// An actor's message: handled if this node holds the id's shard under the epoch the sender
/// saw, else 421 (the sender looks the owner up again).
async fn message(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(message): Json<Message>,
) -> Result<Response, ApiError> {
    authenticated(&state, &headers)?;
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

async fn broadcast(
    State(state): State<AppState>,
    headers: HeaderMap,
    Json(change): Json<Broadcast>,
) -> Result<StatusCode, ApiError> {
    authenticated(&state, &headers)?;
    if let Broadcast::Account { account_id } = &change {
        state.keys.forget_account(account_id);
    }
    state.runtime.apply_broadcast(&change);
    Ok(StatusCode::NO_CONTENT)
}
