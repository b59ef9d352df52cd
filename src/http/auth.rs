//! Authentication layers: API keys for `/v1`, the admin token for `/admin`.

use super::auth_failures::ClientAddr;
use super::error::ApiError;
use super::state::AppState;
use crate::ids::AccountId;
use crate::secrets::{constant_time_eq, sha256_hex};
use crate::store::accounts::Account;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{StatusCode, header, request::Parts};
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

/// The presented Bearer credential; `None` when there is none (no `Authorization` header, an
/// empty one, another scheme): no credential, no guess, nothing to count.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|credential| !credential.is_empty())
}

/// Whether `key` has the shape `secrets::new_api_key` gives every key: `sk_test_` or
/// `sk_live_`, then exactly 32 ASCII letters and digits. Anything else cannot be a key and is
/// refused without a database read.
pub fn well_formed_api_key(key: &str) -> bool {
    key.strip_prefix("sk_test_")
        .or_else(|| key.strip_prefix("sk_live_"))
        .is_some_and(|rest| rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Resolves the Bearer API key to its account, or answers 401 `authentication_error`. A valid
/// key passes whatever its address's failures; an unknown one is counted against the address,
/// or answered 429 once the address has too many (`api::auth_failures`).
pub async fn require_api_key(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(key) = bearer(request.headers()) else {
        return Err(ApiError::Authentication);
    };
    let client = ClientAddr::of(
        request.extensions(),
        request.headers(),
        &state.config.trusted_proxies,
    );
    // Looking up by the hash means the comparison happens inside the index on a value the
    // caller cannot steer byte by byte.
    let Some(hash) = well_formed_api_key(key).then(|| sha256_hex(key)) else {
        return Err(state.auth_failures.refused(client).await);
    };
    let account = match state.keys.get(&hash) {
        Some(account) => account,
        None => {
            state
                .auth_failures
                .examine(client, lookup(&state, hash))
                .await?
        }
    };
    request.extensions_mut().insert(Caller(account));
    Ok(next.run(request).await)
}

/// The account of a well-formed key's hash (`None`: no such key), from the cache if another
/// request of this client put it there meanwhile, else from the database.
async fn lookup(state: &AppState, hash: String) -> Result<Option<Arc<Account>>, ApiError> {
    if let Some(account) = state.keys.get(&hash) {
        return Ok(Some(account));
    }
    metrics::counter!("api_key_lookups_total").increment(1);
    let Some(account) = state.store.account_by_key_hash(&hash).await? else {
        return Ok(None);
    };
    let account = Arc::new(account);
    state.keys.put(hash, Arc::clone(&account));
    Ok(Some(account))
}

/// Whether `presented` is the operator's admin token (compared as hashes, in constant time).
pub fn is_admin_token(state: &AppState, presented: &str) -> bool {
    constant_time_eq(&sha256_hex(presented), &state.admin_token_hash)
}

/// Lets only the operator's admin token through, whatever its address's failures; a wrong
/// token is counted against the address, or answered 429 once it has too many.
pub async fn require_admin(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(presented) = bearer(request.headers()) else {
        return Err(ApiError::Authentication);
    };
    if !is_admin_token(&state, presented) {
        let client = ClientAddr::of(
            request.extensions(),
            request.headers(),
            &state.config.trusted_proxies,
        );
        return Err(state.auth_failures.refused(client).await);
    }
    Ok(next.run(request).await)
}

/// The in-process sandbox's administration (`_sandbox/…`, behind the admin token, checked by
/// the sandbox itself, which answers in the processor's own error shape) counts its refusals
/// of a presented token against the client's address like `require_admin`; past the limit a
/// refusal is answered 429 instead. The sandbox's check costs nothing, so it always runs: the
/// admin token passes whatever the address's failures.
pub async fn limit_sandbox_admin(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if !request.uri().path().starts_with("/_sandbox") {
        return Ok(next.run(request).await);
    }
    let presented = bearer(request.headers()).is_some();
    let client = ClientAddr::of(
        request.extensions(),
        request.headers(),
        &state.config.trusted_proxies,
    );
    let response = next.run(request).await;
    if presented && response.status() == StatusCode::UNAUTHORIZED {
        state.auth_failures.count(client).await?;
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_new_api_key_makes_is_well_formed() {
        assert!(well_formed_api_key(&crate::secrets::new_api_key(true)));
        assert!(well_formed_api_key(&crate::secrets::new_api_key(false)));
        let body = "A".repeat(32);
        assert!(well_formed_api_key(&format!("sk_test_{body}")));
        for bad in [
            "sk_test_nope".to_owned(),
            format!("sk_test_{}", "A".repeat(31)),
            format!("sk_test_{}", "A".repeat(33)),
            format!("sk_test_{}-", "A".repeat(31)),
            format!("sk_test_{}é", "A".repeat(30)),
            format!("sk_prod_{body}"),
            format!("SK_TEST_{body}"),
            body,
            String::new(),
        ] {
            assert!(!well_formed_api_key(&bad), "{bad:?}");
        }
    }
}
