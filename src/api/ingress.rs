//! `POST /webhooks/processor/{developerId}`: the processor's events come in here.
//!
//! Order of work: size (413 past 64 KB, without reading the rest) → parse (400) → checksum
//! against the account's events secret (401, constant time) → persist, deduplicated by checksum
//! (a repeat answers 200 and changes nothing) → route `transaction.updated` to its
//! ChargeAttempt's owner (`actors::ingress`, then `actors::outcomes`). Any storage failure
//! answers 500 so that the processor retries; a charge whose subscription is moving between
//! nodes, 503 with `Retry-After`.

use crate::actors::ActionError;
use crate::http::error::{ApiError, ApiResult};
use crate::http::state::AppState;
use crate::ids::AccountId;
use crate::processor::signature::{SignedEvent, authenticate_event, parse_event};
use crate::store::StoreError;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::HeaderMap;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

/// The ingress body limit: 64 KB = 65,536 bytes.
pub const INGRESS_MAX_BYTES: usize = 64 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(receive_processor_event))
        .layer(DefaultBodyLimit::max(INGRESS_MAX_BYTES))
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"received": true, "first_delivery": true})))]
pub struct IngressOut {
    pub received: bool,
    /// False when this event (by checksum) had already been received and applied.
    pub first_delivery: bool,
}

/// Receives a processor event. No Bearer: the event's checksum authenticates it.
#[utoipa::path(post, path = "/webhooks/processor/{developer_id}", tag = "processor",
    security(()),
    request_body(content = Object, description = "A Wompi event, e.g. transaction.updated", example = json!({
        "event": "transaction.updated",
        "data": {
            "transaction": {
                "id": "1234-1795944600-49201",
                "amount_in_cents": 4990000,
                "reference": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
                "customer_email": "ana.gomez@example.co",
                "currency": "COP",
                "payment_method_type": "CARD",
                "redirect_url": null,
                "status": "APPROVED",
                "shipping_address": null,
                "payment_link_id": null,
                "payment_source_id": 18342
            }
        },
        "environment": "test",
        "signature": {
            "properties": ["transaction.id", "transaction.status", "transaction.amount_in_cents"],
            "checksum": "3476dda50470d3f5ac9b7a6b2b8b7e9bb1a0d4a8f2bd1f4cc1b1a2e8b5e4f0d7"
        },
        "timestamp": 1795944600,
        "sent_at": "2026-11-29T09:30:00.000Z"
    })),
    responses((status = 200, body = IngressOut), (status = 400, body = crate::http::error::ErrorBody),
        (status = 401, body = crate::http::error::ErrorBody), (status = 413, body = crate::http::error::ErrorBody),
        (status = 500, body = crate::http::error::ErrorBody),
        (status = 503, response = inline(super::openapi::error_responses::ShardMoving))))]
async fn receive_processor_event(
    State(state): State<AppState>,
    Path(developer_id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<IngressOut>> {
    let body = body.map_err(|rejection| {
        ApiError::invalid(rejection.status(), "Event body too large or unreadable.")
    })?;
    let event =
        parse_event(&body).ok_or_else(|| ApiError::bad_request("The event is not valid JSON."))?;
    // The events secret is fixed when the account is created: the actors' short-lived copy
    // serves (one read fewer for every event of a burst).
    let account = state
        .runtime
        .account(&AccountId::given(developer_id.as_str()))
        .await?
        .ok_or(ApiError::Authentication)?;
    let header = headers
        .get("x-event-checksum")
        .and_then(|v| v.to_str().ok());
    let SignedEvent {
        checksum,
        event_type,
        transaction,
    } = authenticate_event(&event, header, &account.processor_events_secret)
        .ok_or(ApiError::Authentication)?;
    metrics::counter!("ingress_events_total", "type" => event_type.clone()).increment(1);
    let first_delivery = state
        .runtime
        .receive_processor_event(&account, checksum, event_type, transaction, &body)
        .await
        .map_err(|err| match err {
            // The charge's subscription is moving to another node: nothing was applied and
            // the processor sends the event again after `Retry-After`.
            ActionError::Moving | ActionError::Store(StoreError::Fenced(_)) => {
                ApiError::Unavailable {
                    retry_after_secs: 1,
                }
            }
            ActionError::Store(err) => ApiError::from(err),
            err => ApiError::Internal(Box::new(err)),
        })?;
    Ok(Json(IngressOut {
        received: true,
        first_delivery,
    }))
}
