//! Transactions on a payment source, with the private key: `POST transactions` (201 PENDING,
//! final after `settle_delay` as the payment source's scenario says), `GET transactions/{id}`,
//! `GET transactions?reference=`, and `POST transactions/{id}/void`.
//!
//! A CARD source needs `payment_method.installments` (1 or more); a NEQUI source needs no
//! payment method. `recurrent` (false when absent) is kept as sent. A reference is used once
//! per merchant, whatever came of its transaction. A void undoes an APPROVED card transaction
//! made the same day in Colombia, before any refund; Nequi has no void.

use super::scenario::SourceId;
use super::{Body, SandboxProcessor, invalid, not_found, unauthorized};
use crate::processor::signature::integrity_signature;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, FixedOffset, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

pub(super) fn router() -> Router<Arc<SandboxProcessor>> {
    Router::new()
        .route(
            "/transactions",
            post(create_transaction).get(find_transactions),
        )
        .route("/transactions/{id}", get(get_transaction))
        .route("/transactions/{id}/void", post(void_transaction))
}

#[derive(Deserialize)]
struct TransactionIn {
    amount_in_cents: i64,
    currency: String,
    signature: String,
    customer_email: String,
    reference: String,
    payment_source_id: i64,
    payment_method: Option<Value>,
    recurrent: Option<bool>,
}

async fn create_transaction(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Body(body): Body<TransactionIn>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    if body.amount_in_cents <= 0 || body.currency != "COP" {
        return invalid("amount_in_cents", "Monto o moneda inválidos");
    }
    let expected = integrity_signature(
        &body.reference,
        body.amount_in_cents,
        &body.currency,
        &merchant.keys.integrity_secret,
    );
    if expected != body.signature {
        return invalid("signature", "La firma es inválida");
    }
    let Some(source) = SourceId::decode(body.payment_source_id) else {
        return invalid("payment_source_id", "Fuente de pago inválida");
    };
    let payment_method = match &source.phone_number {
        Some(phone_number) => json!({"type": "NEQUI", "phone_number": phone_number}),
        None => {
            let installments = body
                .payment_method
                .as_ref()
                .and_then(|method| method["installments"].as_i64())
                .filter(|n| *n >= 1);
            let Some(installments) = installments else {
                return invalid(
                    "payment_method",
                    "Una fuente de pago CARD requiere payment_method.installments (1 o más)",
                );
            };
            json!({"type": "CARD", "installments": installments})
        }
    };
    let now = Utc::now();
    let id = format!(
        "{}-{}-{:05}",
        sandbox.next(),
        now.timestamp(),
        rand::random::<u16>() % 10_000
    );
    let tx = json!({
        "id": id, "created_at": now.to_rfc3339(), "amount_in_cents": body.amount_in_cents,
        "reference": body.reference, "customer_email": body.customer_email, "currency": "COP",
        "payment_method_type": source.scenario.method_type(), "payment_method": payment_method,
        "payment_source_id": body.payment_source_id, "status": "PENDING",
        "status_message": null, "recurrent": body.recurrent.unwrap_or(false),
    });
    if !sandbox
        .ledger
        .insert(&id, &merchant.keys.public_key, &body.reference, &tx)
    {
        return invalid("reference", "La referencia ya ha sido usada");
    }
    sandbox.settle_later(id, source.scenario);
    (StatusCode::CREATED, Json(json!({"data": tx}))).into_response()
}

async fn get_transaction(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    match sandbox.ledger.get(&merchant.keys.public_key, &id) {
        Some(body) => Json(json!({"data": body})).into_response(),
        None => not_found("Transacción"),
    }
}

async fn find_transactions(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    let Some(reference) = query.get("reference") else {
        return invalid("reference", "Se requiere la referencia");
    };
    let found: Vec<Value> = sandbox
        .ledger
        .by_reference(&merchant.keys.public_key, reference)
        .into_iter()
        .collect();
    Json(json!({"data": found})).into_response()
}

/// Colombia's offset from UTC (no daylight saving time).
fn colombia() -> FixedOffset {
    FixedOffset::west_opt(5 * 3_600).expect("UTC-5 is within a day")
}

/// Whether `made` and `now` fall on the same calendar day in Colombia.
fn same_day_in_colombia(made: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    made.with_timezone(&colombia()).date_naive() == now.with_timezone(&colombia()).date_naive()
}

/// Why a transaction cannot be voided, if it cannot.
fn void_refusal(tx: &Value, has_refunds: bool, now: DateTime<Utc>) -> Option<&'static str> {
    if tx["payment_method_type"] != "CARD" {
        return Some("Solo las transacciones con tarjeta se pueden anular");
    }
    if tx["status"] != "APPROVED" {
        return Some("Solo se puede anular una transacción APPROVED");
    }
    if has_refunds {
        return Some("La transacción tiene reembolsos");
    }
    let made = tx["created_at"]
        .as_str()
        .and_then(|at| DateTime::parse_from_rfc3339(at).ok());
    if !made.is_some_and(|made| same_day_in_colombia(made.to_utc(), now)) {
        return Some("Solo se puede anular el mismo día en que se hizo la transacción");
    }
    None
}

async fn void_transaction(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    let voided = sandbox
        .ledger
        .amend(&merchant.keys.public_key, &id, |tx, refunds| {
            if let Some(refusal) = void_refusal(tx, !refunds.is_empty(), Utc::now()) {
                return Err(refusal);
            }
            tx["status"] = json!("VOIDED");
            tx["status_message"] = json!("Transacción anulada");
            Ok(tx.clone())
        });
    match voided {
        None => not_found("Transacción"),
        Some(Err(refusal)) => invalid("transaction", refusal),
        Some(Ok(tx)) => {
            sandbox.announce(merchant, tx.clone());
            Json(json!({"data": {"transaction": tx}})).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339)
            .expect("time")
            .to_utc()
    }

    #[test]
    fn the_same_day_is_colombias_day() {
        // 04:59 UTC is still the day before in Colombia; 05:00 UTC starts the day.
        assert!(same_day_in_colombia(
            at("2026-03-10T05:00:00Z"),
            at("2026-03-11T04:59:59Z")
        ));
        assert!(!same_day_in_colombia(
            at("2026-03-10T04:59:59Z"),
            at("2026-03-10T05:00:00Z")
        ));
    }

    #[test]
    fn only_an_approved_card_transaction_of_today_without_refunds_is_voided() {
        let now = at("2026-03-10T20:00:00Z");
        let tx = json!({"payment_method_type": "CARD", "status": "APPROVED",
            "created_at": "2026-03-10T12:00:00+00:00"});
        assert_eq!(void_refusal(&tx, false, now), None);
        assert!(void_refusal(&tx, true, now).is_some(), "refunded");
        let yesterday = at("2026-03-11T06:00:00Z");
        assert!(void_refusal(&tx, false, yesterday).is_some(), "another day");
        for (field, value) in [
            ("payment_method_type", "NEQUI"),
            ("status", "PENDING"),
            ("status", "VOIDED"),
        ] {
            let mut other = tx.clone();
            other[field] = json!(value);
            assert!(void_refusal(&other, false, now).is_some(), "{value}");
        }
    }
}
