//! The sandbox's administration, everything under `_sandbox`: making a merchant and saying
//! where its events go. Only the holder of the admin token may (CONTRACT §7): in-process the
//! server's own admin token, standalone the token given to `billing sandbox-processor
//! --admin-token` (or generated and printed at start). An events URL is the operator's to set,
//! so it may be private; anyone else could otherwise point a merchant's signed events, and our
//! server's requests, anywhere.

use super::merchants::{Admitted, ProposedKeys, Refusal};
use super::{Body, SandboxProcessor, bearer, error};
use crate::secrets::{constant_time_eq, sha256_hex};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// Who may administer the sandbox: the holder of the token whose SHA-256 this keeps.
#[derive(Clone)]
pub struct AdminAuth {
    token_hash: String,
}

impl AdminAuth {
    pub fn from_token(token: &str) -> Self {
        Self {
            token_hash: sha256_hex(token),
        }
    }

    /// From the hex SHA-256 of the token, as the server keeps its own (`AppState`).
    pub fn from_hash(token_hash: impl Into<String>) -> Self {
        Self {
            token_hash: token_hash.into(),
        }
    }

    /// Compares hashes in constant time, as `api::auth::require_admin` does.
    pub(crate) fn admits(&self, presented: Option<&str>) -> bool {
        presented.is_some_and(|token| constant_time_eq(&sha256_hex(token), &self.token_hash))
    }
}

/// The `_sandbox` routes, relative, every one behind the admin token (the layer also covers a
/// wrong method on them).
pub(super) fn router(sandbox: Arc<SandboxProcessor>) -> Router {
    Router::new()
        .route("/merchants", post(create_merchant))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&sandbox),
            require_admin,
        ))
        .with_state(sandbox)
}

async fn require_admin(
    State(sandbox): State<Arc<SandboxProcessor>>,
    request: Request,
    next: Next,
) -> Response {
    if !sandbox.admin.admits(bearer(request.headers())) {
        return error(
            StatusCode::UNAUTHORIZED,
            "INVALID_ACCESS_TOKEN",
            "Se esperaba el token de administración del sandbox",
        );
    }
    next.run(request).await
}

#[derive(Deserialize)]
struct MerchantIn {
    events_url: Option<String>,
    public_key: Option<String>,
    private_key: Option<String>,
    events_secret: Option<String>,
    integrity_secret: Option<String>,
}

/// Makes a merchant (201; keys not given are generated), or, for an existing public key posted
/// with that merchant's keys, changes where its events go (200). Answers the merchant's keys.
async fn create_merchant(
    State(sandbox): State<Arc<SandboxProcessor>>,
    Body(body): Body<MerchantIn>,
) -> Response {
    let proposed = ProposedKeys {
        public_key: body.public_key,
        private_key: body.private_key,
        events_secret: body.events_secret,
        integrity_secret: body.integrity_secret,
    };
    let admitted = sandbox
        .merchants
        .admit(proposed, body.events_url, sandbox.config.max_merchants);
    let (status, merchant) = match admitted {
        Ok(Admitted::Created(merchant)) => (StatusCode::CREATED, merchant),
        Ok(Admitted::Updated(merchant)) => (StatusCode::OK, merchant),
        Err(refusal) => {
            let reason = match refusal {
                Refusal::Full(cap) => {
                    format!("El sandbox ya tiene su máximo de {cap} comercios")
                }
                Refusal::OtherKeys => {
                    "Ya existe un comercio con esta llave pública y otras llaves".into()
                }
                Refusal::PrivateKeyTaken => "Otro comercio tiene esta llave privada".into(),
            };
            return error(StatusCode::CONFLICT, "CONFLICT_ERROR", &reason);
        }
    };
    let keys = &merchant.keys;
    (
        status,
        Json(
            json!({"public_key": keys.public_key, "private_key": keys.private_key,
            "events_secret": keys.events_secret, "integrity_secret": keys.integrity_secret,
            "events_url": merchant.events_url()}),
        ),
    )
        .into_response()
}
