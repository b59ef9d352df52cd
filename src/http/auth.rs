//! Authentication layers: API keys for `/v1`, the admin token for `/admin`.

use super::error::ApiError;
use crate::ids::AccountId;
use crate::store::accounts::Account;
use axum::extract::FromRequestParts;
use axum::http::{header, request::Parts};
use dashmap::DashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The authenticated account of a `/v1` request.
#[derive(Clone)]
pub struct Caller(pub Arc<Account>);

impl Caller {
    pub fn account_id(&self) -> &AccountId {
        &self.0.id
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

    pub(super) fn get(&self, hash: &str) -> Option<Arc<Account>> {
        let entry = self.entries.get(hash)?;
        (entry.1.elapsed() < Self::TTL).then(|| Arc::clone(&entry.0))
    }

    pub(super) fn put(&self, hash: String, account: Arc<Account>) {
        // Expired entries of keys no longer used go as the cache turns over.
        if self.entries.len() > 10_000 {
            self.entries.retain(|_, (_, at)| at.elapsed() < Self::TTL);
        }
        self.entries.insert(hash, (account, Instant::now()));
    }

    /// Drops every cached key of `account_id`.
    pub fn forget_account(&self, account_id: &AccountId) {
        self.entries
            .retain(|_, (account, _)| account.id != *account_id);
    }
}

/// The presented Bearer credential; `None` when there is none (no `Authorization` header, an
/// empty one, another scheme): no credential, no guess, nothing to count.
pub(super) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
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
