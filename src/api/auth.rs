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
use dashmap::DashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Accounts by API-key hash, each kept for a few seconds so that a burst of requests costs one
/// lookup, not one per request. The cached row is a snapshot: handlers read from it only what
/// does not move under them (id, mode, processor keys, rate limits); balances and the clock are
/// always read from the database. An operator's change of an account drops its entries at
/// once, so new limits apply to the next request.
#[derive(Default)]
pub struct KeyCache {
    entries: DashMap<String, (Arc<Account>, Instant)>,
}

impl KeyCache {
    const TTL: Duration = Duration::from_secs(5);

    fn get(&self, hash: &str) -> Option<Arc<Account>> {
        let entry = self.entries.get(hash)?;
        (entry.1.elapsed() < Self::TTL).then(|| Arc::clone(&entry.0))
    }

    fn put(&self, hash: String, account: Arc<Account>) {
        // Expired entries of keys no longer used go as the cache turns over.
        if self.entries.len() > 10_000 {
            self.entries.retain(|_, (_, at)| at.elapsed() < Self::TTL);
        }
        self.entries.insert(hash, (account, Instant::now()));
    }

    /// Drops every cached key of `account_id`.
    pub fn forget_account(&self, account_id: &str) {
        self.entries
            .retain(|_, (account, _)| account.id != account_id);
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
    let hash = sha256_hex(key);
    let account = match state.keys.get(&hash) {
        Some(account) => account,
        None => {
            let Some(account) = state.store.account_by_key_hash(&hash).await? else {
                return Err(ApiError::Authentication);
            };
            let account = Arc::new(account);
            state.keys.put(hash, Arc::clone(&account));
            account
        }
    };
    request.extensions_mut().insert(Caller(account));
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
