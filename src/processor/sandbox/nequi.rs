//! Nequi tokens, asked for from the browser with the public key: `POST tokens/nequi` with the
//! customer's phone number makes a PENDING token, and `GET tokens/nequi/{id}` answers PENDING
//! until `SandboxConfig::nequi_approval_delay` has passed (the customer accepting in the Nequi
//! app), then final: 3992222222 DECLINED, any other number APPROVED (see `scenario`).
//!
//! The id carries the phone number (`nequi_test_{serial}_{phone}`), so a token the sandbox no
//! longer holds (after a restart, or past its retention) still answers, as final. While held,
//! a token answers only to the merchant that made it.

use super::retention::Retention;
use super::scenario::{NEQUI_DECLINED, is_nequi_number};
use super::{Body, SandboxProcessor, invalid, not_found, unauthorized};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use dashmap::DashMap;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const PREFIX: &str = "nequi_test_";

pub(super) fn router() -> Router<Arc<SandboxProcessor>> {
    Router::new()
        .route("/tokens/nequi", axum::routing::post(create_nequi_token))
        .route("/tokens/nequi/{id}", axum::routing::get(get_nequi_token))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TokenStatus {
    Pending,
    Approved,
    Declined,
}

impl TokenStatus {
    fn as_str(self) -> &'static str {
        match self {
            TokenStatus::Pending => "PENDING",
            TokenStatus::Approved => "APPROVED",
            TokenStatus::Declined => "DECLINED",
        }
    }
}

/// A token the sandbox made and still holds.
struct Issued {
    /// The merchant's public key.
    merchant: String,
    at: Instant,
}

pub(super) struct NequiTokens {
    issued: DashMap<String, Issued>,
    retention: Retention,
}

impl NequiTokens {
    pub(super) fn new(retention: Duration) -> Self {
        Self {
            issued: DashMap::new(),
            retention: Retention::new(retention),
        }
    }

    fn issue(&self, id: &str, merchant: &str) {
        self.prune();
        self.issued.insert(
            id.to_owned(),
            Issued {
                merchant: merchant.to_owned(),
                at: Instant::now(),
            },
        );
        self.retention.made(id);
    }

    /// The token `id` as `merchant` sees it: its status and phone number. `None` when the id
    /// is not one of ours, or the token is another merchant's.
    pub(super) fn status(
        &self,
        merchant: &str,
        id: &str,
        approval_delay: Duration,
    ) -> Option<(TokenStatus, String)> {
        let phone_number = phone_number_of(id)?;
        if let Some(issued) = self.issued.get(id) {
            if issued.merchant != merchant {
                return None;
            }
            if issued.at.elapsed() < approval_delay {
                return Some((TokenStatus::Pending, phone_number));
            }
        }
        let status = if phone_number == NEQUI_DECLINED {
            TokenStatus::Declined
        } else {
            TokenStatus::Approved
        };
        Some((status, phone_number))
    }

    /// Drops the tokens made `retention` ago or earlier (they answer from their id).
    pub(super) fn prune(&self) {
        for id in self.retention.expired() {
            self.issued.remove(&id);
        }
    }
}

fn phone_number_of(id: &str) -> Option<String> {
    let (serial, phone) = id.strip_prefix(PREFIX)?.split_once('_')?;
    let ours = !serial.is_empty() && serial.bytes().all(|b| b.is_ascii_digit());
    (ours && is_nequi_number(phone)).then(|| phone.to_owned())
}

fn token_body(id: &str, status: TokenStatus, phone_number: &str) -> serde_json::Value {
    json!({"id": id, "status": status.as_str(), "phone_number": phone_number})
}

#[derive(Deserialize)]
struct NequiTokenIn {
    phone_number: Option<String>,
}

async fn create_nequi_token(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Body(body): Body<NequiTokenIn>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_public(&headers) else {
        return unauthorized("pública");
    };
    let Some(phone_number) = body.phone_number.filter(|p| is_nequi_number(p)) else {
        return invalid(
            "phone_number",
            "Debe ser un número celular de 10 dígitos que empiece por 3",
        );
    };
    let id = format!("{PREFIX}{}_{phone_number}", sandbox.next());
    sandbox.nequi_tokens.issue(&id, &merchant.keys.public_key);
    (
        StatusCode::CREATED,
        Json(json!({"status": "CREATED",
            "data": token_body(&id, TokenStatus::Pending, &phone_number)})),
    )
        .into_response()
}

async fn get_nequi_token(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_public(&headers) else {
        return unauthorized("pública");
    };
    let delay = sandbox.config.nequi_approval_delay;
    match sandbox
        .nequi_tokens
        .status(&merchant.keys.public_key, &id, delay)
    {
        Some((status, phone_number)) => {
            Json(json!({"data": token_body(&id, status, &phone_number)})).into_response()
        }
        None => not_found("Token Nequi"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELAY: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn a_token_is_pending_for_the_approval_delay_then_final_by_its_number() {
        let tokens = NequiTokens::new(Duration::from_secs(86_400));
        let approved = "nequi_test_1_3991111111";
        let declined = "nequi_test_2_3992222222";
        tokens.issue(approved, "pub_a");
        tokens.issue(declined, "pub_a");
        let status = |id| tokens.status("pub_a", id, DELAY).map(|(s, _)| s);
        assert_eq!(status(approved), Some(TokenStatus::Pending));
        tokio::time::advance(DELAY).await;
        assert_eq!(status(approved), Some(TokenStatus::Approved));
        assert_eq!(status(declined), Some(TokenStatus::Declined));
        assert_eq!(
            tokens.status("pub_b", approved, DELAY),
            None,
            "another merchant's"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_no_longer_held_answers_from_its_id_as_final() {
        let tokens = NequiTokens::new(Duration::from_secs(60));
        tokens.issue("nequi_test_1_3001234567", "pub_a");
        tokio::time::advance(Duration::from_secs(60)).await;
        tokens.prune();
        assert!(tokens.issued.is_empty(), "pruned with the retention");
        // As after a restart: a new sandbox never made it, yet it answers.
        let restarted = NequiTokens::new(Duration::from_secs(60));
        for held in [&tokens, &restarted] {
            assert_eq!(
                held.status("pub_b", "nequi_test_1_3001234567", DELAY),
                Some((TokenStatus::Approved, "3001234567".to_owned()))
            );
        }
        for not_ours in [
            "nequi_test_1_2991111111",
            "nequi_test__3991111111",
            "tok_test_1_a",
        ] {
            assert_eq!(
                restarted.status("pub_a", not_ours, DELAY),
                None,
                "{not_ours}"
            );
        }
    }
}
