//! Refunds, with the private key: `POST refunds` (201 PENDING, final after `settle_delay`:
//! APPROVED, or DECLINED when the transaction's payment source is the refund-declining test
//! card), `GET refunds/{id}` and `GET refunds?transaction_id=` (how the service finds out
//! what came of a refund whose POST went unanswered). No event is sent for a refund.
//!
//! A refund is refused (422) unless its transaction is APPROVED and the amount is at least 1
//! and at most what is left: the transaction's amount less its refunds that were not DECLINED.
//! A Nequi transaction is refunded whole or not at all.

use super::ledger::Refund;
use super::scenario::SourceId;
use super::{Body, SandboxProcessor, invalid, not_found, unauthorized};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

pub(super) fn router() -> Router<Arc<SandboxProcessor>> {
    Router::new()
        .route("/refunds", post(create_refund).get(find_refunds))
        .route("/refunds/{id}", get(get_refund))
}

#[derive(Deserialize)]
struct RefundIn {
    transaction_id: String,
    amount_in_cents: i64,
    reason: Option<String>,
}

/// Why `amount` cannot be refunded from `tx` with `refunds` made already: the field to name
/// and the message.
fn refusal(tx: &Value, refunds: &[Refund], amount: i64) -> Option<(&'static str, &'static str)> {
    if tx["status"] != "APPROVED" {
        return Some((
            "transaction_id",
            "Solo se puede reembolsar una transacción APPROVED",
        ));
    }
    let total = tx["amount_in_cents"].as_i64().unwrap_or(0);
    let taken: i64 = refunds
        .iter()
        .filter(|refund| refund.status != "DECLINED")
        .map(|refund| refund.amount_in_cents)
        .sum();
    if amount < 1 || amount > total - taken {
        return Some((
            "amount_in_cents",
            "El monto debe ser al menos 1 y no más de lo que queda por reembolsar",
        ));
    }
    if tx["payment_method_type"] == "NEQUI" && amount != total {
        return Some((
            "amount_in_cents",
            "Las transacciones Nequi solo se reembolsan completas",
        ));
    }
    None
}

async fn create_refund(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Body(body): Body<RefundIn>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    let id = format!("{}-refund", sandbox.next());
    let made = sandbox.ledger.amend(
        &merchant.keys.public_key,
        &body.transaction_id,
        |tx, refunds| {
            if let Some(refused) = refusal(tx, refunds, body.amount_in_cents) {
                return Err(refused);
            }
            let refund = Refund {
                id,
                transaction_id: body.transaction_id.clone(),
                amount_in_cents: body.amount_in_cents,
                status: "PENDING",
                reason: body.reason,
                created_at: chrono::Utc::now().to_rfc3339(),
            };
            refunds.push(refund.clone());
            let source = tx["payment_source_id"].as_i64().and_then(SourceId::decode);
            Ok((refund, source))
        },
    );
    let (refund, source) = match made {
        None => return not_found("Transacción"),
        Some(Err((field, message))) => return invalid(field, message),
        Some(Ok(made)) => made,
    };
    let status = source.map_or("APPROVED", |source| source.scenario.refund_status());
    sandbox.settle_refund_later(refund.id.clone(), status);
    (StatusCode::CREATED, Json(json!({"data": refund}))).into_response()
}

async fn get_refund(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    match sandbox.ledger.refund(&merchant.keys.public_key, &id) {
        Some(refund) => Json(json!({"data": refund})).into_response(),
        None => not_found("Reembolso"),
    }
}

/// The refunds of one transaction of the merchant's (none for another merchant's).
async fn find_refunds(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    let Some(transaction_id) = query.get("transaction_id") else {
        return invalid("transaction_id", "Se requiere la transacción");
    };
    let refunds = sandbox
        .ledger
        .refunds_of(&merchant.keys.public_key, transaction_id)
        .unwrap_or_default();
    Json(json!({"data": refunds})).into_response()
}

impl SandboxProcessor {
    fn settle_refund_later(self: &Arc<Self>, id: String, status: &'static str) {
        let sandbox = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(sandbox.config.settle_delay).await;
            sandbox.ledger.settle_refund(&id, status);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund(amount_in_cents: i64, status: &'static str) -> Refund {
        Refund {
            id: String::new(),
            transaction_id: String::new(),
            amount_in_cents,
            status,
            reason: None,
            created_at: String::new(),
        }
    }

    fn approved(method: &str) -> Value {
        json!({"status": "APPROVED", "amount_in_cents": 10_000, "payment_method_type": method})
    }

    #[test]
    fn a_refund_takes_at_most_what_refunds_not_declined_left() {
        let tx = approved("CARD");
        let refunds = [
            refund(3_000, "APPROVED"),
            refund(2_000, "PENDING"),
            refund(4_000, "DECLINED"),
        ];
        assert_eq!(
            refusal(&tx, &refunds, 5_000),
            None,
            "10 000 - 3 000 - 2 000"
        );
        for too_much in [5_001, 0, -1] {
            assert_eq!(
                refusal(&tx, &refunds, too_much).map(|(field, _)| field),
                Some("amount_in_cents"),
                "{too_much}"
            );
        }
    }

    #[test]
    fn only_an_approved_transaction_is_refunded_and_nequi_only_whole() {
        for status in ["PENDING", "DECLINED", "VOIDED", "ERROR"] {
            let mut tx = approved("CARD");
            tx["status"] = json!(status);
            assert_eq!(
                refusal(&tx, &[], 100).map(|(field, _)| field),
                Some("transaction_id"),
                "{status}"
            );
        }
        let nequi = approved("NEQUI");
        assert_eq!(refusal(&nequi, &[], 10_000), None);
        assert_eq!(
            refusal(&nequi, &[], 9_999).map(|(field, _)| field),
            Some("amount_in_cents")
        );
    }
}
