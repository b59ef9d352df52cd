//! Authentication layers: API keys for `/v1`, the admin token for `/admin`.

use super::error::ApiError;
use super::state::AppState;
use crate::ids::AccountId;
use crate::secrets::{constant_time_eq, sha256_hex};
use crate::store::accounts::Account;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, request::Parts};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// The authenticated account of a `/v1` request.
#[derive(Clone)]
pub struct Caller(pub Arc<Account>);

impl Caller {
    pub fn account_id(&self) -> AccountId {
        AccountId::from_stored(self.0.id.clone())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Authentication)
    }
}

fn bearer(parts: &axum::http::HeaderMap) -> Option<&str> {
    parts
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// Resolves the Bearer API key to its account, or answers 401 `authentication_error`.
pub async fn require_api_key(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(key) = bearer(request.headers()) else {
        return Err(ApiError::Authentication);
    };
    if !(key.starts_with("sk_test_") || key.starts_with("sk_live_")) {
        return Err(ApiError::Authentication);
    }
    // Looking up by the hash means the comparison happens inside the index on a value the
    // caller cannot steer byte by byte.
    let account = state.store.account_by_key_hash(&sha256_hex(key)).await?;
    let Some(account) = account else {
        return Err(ApiError::Authentication);
    };
    request.extensions_mut().insert(Caller(Arc::new(account)));
    Ok(next.run(request).await)
}

/// Lets only the operator's admin token through.
pub async fn require_admin(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = bearer(request.headers()).map(sha256_hex);
    match presented {
        Some(hash) if constant_time_eq(&hash, &state.admin_token_hash) => {
            Ok(next.run(request).await)
        }
        _ => Err(ApiError::Authentication),
    }
}
