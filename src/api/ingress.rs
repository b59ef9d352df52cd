//! `POST /webhooks/processor/{developerId}`: the processor's events come in here.
//!
//! Order of work: size (413 past 64 KB, without reading the rest) → parse (400) → checksum
//! against the account's events secret (401, constant time) → persist, deduplicated by checksum
//! (a repeat answers 200 and changes nothing) → route `transaction.updated` to its
//! ChargeAttempt. Any storage failure answers 500 so that the processor retries.

use super::error::{ApiError, ApiResult};
use super::state::AppState;
use crate::ids::AccountId;
use crate::processor::client::Transaction;
use crate::processor::signature::{body_checksum, checksum_matches};
use crate::store::charges::ProcessorEvent;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::HeaderMap;
use serde::Serialize;
use serde_json::Value;
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
pub struct IngressOut {
    pub received: bool,
    /// False when this event (by checksum) had already been received and applied.
    pub first_delivery: bool,
}

/// Receives a processor event. No Bearer: the event's checksum authenticates it.
#[utoipa::path(post, path = "/webhooks/processor/{developer_id}", tag = "processor",
    security(()), request_body(content = Object, description = "A Wompi event, e.g. transaction.updated"),
    responses((status = 200, body = IngressOut), (status = 400, body = super::error::ErrorBody),
        (status = 401, body = super::error::ErrorBody), (status = 413, body = super::error::ErrorBody),
        (status = 500, body = super::error::ErrorBody)))]
async fn receive_processor_event(
    State(state): State<AppState>,
    Path(developer_id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<IngressOut>> {
    let body = body.map_err(|rejection| {
        ApiError::invalid(rejection.status(), "Event body too large or unreadable.")
    })?;
    let event: Value = serde_json::from_slice(&body)
        .map_err(|_| ApiError::bad_request("The event is not valid JSON."))?;
    // The events secret is fixed when the account is created: the actors' short-lived copy
    // serves (one read fewer for every event of a burst).
    let account = state
        .runtime
        .account(&AccountId::from_stored(developer_id.clone()))
        .await?
        .ok_or(ApiError::Authentication)?;
    let secret = &account.processor_events_secret;
    let Some(checksum) = body_checksum(&event).map(str::to_ascii_lowercase) else {
        return Err(ApiError::Authentication);
    };
    let header_ok = match headers
        .get("x-event-checksum")
        .and_then(|v| v.to_str().ok())
    {
        Some(header) => checksum_matches(&event, header, secret),
        None => true,
    };
    if !checksum_matches(&event, &checksum, secret) || !header_ok {
        return Err(ApiError::Authentication);
    }

    let event_type = event["event"].as_str().unwrap_or_default().to_owned();
    let transaction: Option<Transaction> =
        serde_json::from_value(event["data"]["transaction"].clone()).ok();
    let now_ms = chrono::Utc::now().timestamp_millis();
    metrics::counter!("ingress_events_total", "type" => event_type.clone()).increment(1);
    // The event's row is written in the transaction that applies it (see `store::charges`):
    // a stored checksum means its outcome is already applied.
    if state.store.processor_event_seen(&checksum).await? {
        return Ok(Json(IngressOut {
            received: true,
            first_delivery: false,
        }));
    }
    let row = ProcessorEvent {
        checksum,
        account_id: account.id.clone(),
        event_type: event_type.clone(),
        transaction_id: transaction.as_ref().map(|t| t.id.clone()),
        reference: transaction.as_ref().map(|t| t.reference.clone()),
        status: transaction.as_ref().map(|t| t.status.clone()),
        body: String::from_utf8_lossy(&body).into_owned(),
        received_at: now_ms,
        processed_at: Some(now_ms),
    };
    if let (Some(tx), "transaction.updated") = (&transaction, event_type.as_str()) {
        let account_id = AccountId::from_stored(account.id.clone());
        let charge = state
            .store
            .charge_for_transaction(&account_id, Some(&tx.id), Some(&tx.reference))
            .await?;
        match charge {
            Some(charge) => match (charge.subscription_id.as_deref(), tx.is_final()) {
                // A subscription's charge changes the subscription: its actor applies it and
                // records the event in the same transaction.
                (Some(sub), true) => {
                    state
                        .runtime
                        .outcome(
                            sub,
                            &charge.id,
                            &tx.status,
                            tx.status_message.as_deref(),
                            Some(&tx.id),
                            Some(row),
                        )
                        .await
                        .map_err(|err| ApiError::Internal(Box::new(err)))?;
                    return Ok(Json(IngressOut {
                        received: true,
                        first_delivery: true,
                    }));
                }
                // Any other charge: settled (or noted) with the event recorded alongside.
                _ => {
                    let settled = state.charger.apply_event(&charge, tx, Some(row)).await?;
                    let first_delivery = settled.is_none_or(|s| s.newly);
                    return Ok(Json(IngressOut {
                        received: true,
                        first_delivery,
                    }));
                }
            },
            None => {
                tracing::info!(transaction = %tx.id, "processor event for no known charge; kept for audit")
            }
        }
    }
    let first_delivery = state.store.record_processor_event(row).await?;
    Ok(Json(IngressOut {
        received: true,
        first_delivery,
    }))
}
