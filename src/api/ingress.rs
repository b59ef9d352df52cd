//! `POST /webhooks/processor/{developerId}`: the processor's events come in here.
//!
//! Order of work: size (413 past 64 KB, without reading the rest) → parse (400) → checksum
//! against the account's events secret (401, constant time) → persist, deduplicated by checksum
//! (a repeat answers 200 and changes nothing) → route `transaction.updated` to its
//! ChargeAttempt's owner (`actors::outcomes`). An event whose amount, currency or transaction
//! id are not its charge's, or whose final status contradicts the recorded one, is kept and
//! flagged (`charge_conflicts`), answered 200, and moves no money. Any storage failure answers
//! 500 so that the processor retries; a charge whose subscription is moving between nodes, 503
//! with `Retry-After`.

use crate::actors::ActionError;
use crate::charges::mismatch;
use crate::http::error::{ApiError, ApiResult};
use crate::http::state::AppState;
use crate::ids::AccountId;
use crate::processor::client::Transaction;
use crate::processor::outcome::ProcessorOutcome;
use crate::processor::signature::{SignedEvent, authenticate_event, parse_event};
use crate::store::StoreError;
use crate::store::charges::conflicts::{Report, contradicts};
use crate::store::charges::{ChargeAttempt, ProcessorEvent};
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
        .account(&AccountId::from_stored(developer_id.clone()))
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
    let now_ms = chrono::Utc::now().timestamp_millis();
    metrics::counter!("ingress_events_total", "type" => event_type.clone()).increment(1);
    // The event's row is written in the transaction that applies it (see `store::charges`):
    // a stored checksum means its outcome is already applied.
    let account_id = AccountId::from_stored(account.id.clone());
    let out = transaction
        .as_ref()
        .filter(|tx| tx.is_final() && event_type == "transaction.updated")
        .and_then(|tx| state.runtime.in_flight().charge_out(&tx.reference))
        .filter(|charge| charge.account_id == account.id);
    let (seen, charge) = match (&transaction, event_type.as_str()) {
        // A final outcome of a period charge this node has out at the processor: its outcome
        // is not applied yet, so neither is this event (a repeat racing the first is applied
        // once by the settlement's condition). One read fewer for every renewal.
        (Some(_), "transaction.updated") if out.is_some() => (false, out),
        (Some(tx), "transaction.updated") => {
            state
                .store
                .event_seen_and_charge(&checksum, &account_id, &tx.reference)
                .await?
        }
        _ => (state.store.processor_event_seen(&checksum).await?, None),
    };
    if seen {
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
        let Some(charge) = charge else {
            tracing::info!(transaction = %tx.id, "processor event for no known charge; kept for audit");
            let first_delivery = state.store.record_processor_event(row).await?;
            return Ok(Json(IngressOut {
                received: true,
                first_delivery,
            }));
        };
        // An event that is not about this charge's money (CONTRACT §7), or that contradicts
        // its recorded final outcome, moves nothing: it is kept, flagged for operators, and
        // answered 200 so that the processor does not send it again and again.
        if let Some(report) = conflict(&charge, tx, &row.checksum) {
            let first_delivery = state
                .store
                .flag_processor_event(row, &charge, report)
                .await?;
            return Ok(Json(IngressOut {
                received: true,
                first_delivery,
            }));
        }
        let outcome = ProcessorOutcome::of_transaction(tx.clone());
        let first_delivery = state
            .runtime
            .apply_processor_outcome(&charge, &outcome, Some(row))
            .await
            .map_err(|err| match err {
                // The charge's subscription is moving to another node: nothing was applied
                // and the processor sends the event again after `Retry-After`.
                ActionError::Moving | ActionError::Store(StoreError::Fenced(_)) => {
                    ApiError::Unavailable {
                        retry_after_secs: 1,
                    }
                }
                err => ApiError::Internal(Box::new(err)),
            })?;
        return Ok(Json(IngressOut {
            received: true,
            first_delivery,
        }));
    }
    let first_delivery = state.store.record_processor_event(row).await?;
    Ok(Json(IngressOut {
        received: true,
        first_delivery,
    }))
}

/// Why an event must move no money: its amount, currency or transaction are not the charge's,
/// or its final status contradicts the one recorded (a race that slips past this check is
/// caught by `settle_charge`, which keeps the conflict too).
fn conflict(charge: &ChargeAttempt, tx: &Transaction, checksum: &str) -> Option<Report> {
    let (kind, detail) = match mismatch(charge, tx) {
        Some(why) => ("mismatch", why),
        None if tx.is_final() && contradicts(&charge.status, &tx.status) => (
            "outcome",
            format!(
                "the processor reported {} for a charge recorded {}",
                tx.status, charge.status
            ),
        ),
        None => return None,
    };
    Some(Report {
        kind,
        reported_status: Some(tx.status.clone()),
        transaction_id: Some(tx.id.clone()),
        amount_cents: Some(tx.amount_in_cents),
        currency: tx.currency.clone(),
        event_checksum: Some(checksum.to_owned()),
        detail,
    })
}
