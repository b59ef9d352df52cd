//! The portal's credential: the token in the path (`/portal/{token}/…`) is the whole of it (no
//! cookie, so no request can ride on a customer's browser). It is looked up by its SHA-256,
//! as API keys are, and holds while the session has not expired by its account's clock.
//! `resolve` answers the session; the layers give the JSON routes the account as the API's
//! `Caller` (so the API's Idempotency-Keys apply, in the session's own namespace:
//! `IdempotencyScope`), the session as `PortalCaller`, and a rate limit of the session's own
//! (a customer cannot spend the merchant's API budget).

use super::well_formed_token;
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult};
use crate::http::idempotency::IdempotencyScope;
use crate::http::state::AppState;
use crate::ids::{AccountId, CustomerId};
use crate::secrets::sha256_hex;
use crate::store::accounts::Account;
use crate::store::portal::PortalSession;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// The session a portal request came with, and its account.
#[derive(Clone, Debug)]
pub struct PortalCaller {
    pub session: Arc<PortalSession>,
    pub account: Arc<Account>,
    /// The account's clock when the request arrived.
    pub now_ms: i64,
}

impl PortalCaller {
    pub fn account_id(&self) -> &AccountId {
        &self.account.id
    }

    pub fn customer_id(&self) -> &CustomerId {
        &self.session.customer_id
    }
}

impl<S: Send + Sync> FromRequestParts<S> for PortalCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<PortalCaller>()
            .cloned()
            .ok_or(ApiError::PortalSession)
    }
}

/// The live session of `token` and its account; 401 for an unknown, malformed or expired one.
pub async fn resolve(state: &AppState, token: &str) -> ApiResult<PortalCaller> {
    if !well_formed_token(token) {
        return Err(ApiError::PortalSession);
    }
    let Some(session) = state
        .store
        .portal_session_by_token_hash(&sha256_hex(token))
        .await?
    else {
        return Err(ApiError::PortalSession);
    };
    let account_id = &session.account_id;
    let now_ms = state.runtime.clock().now_ms(account_id).await?;
    if session.expires_at <= now_ms {
        return Err(ApiError::PortalSession);
    }
    let account = state
        .store
        .account(account_id)
        .await?
        .ok_or(ApiError::PortalSession)?;
    Ok(PortalCaller {
        session: Arc::new(session),
        account: Arc::new(account),
        now_ms,
    })
}

/// The token of a `/portal/{token}/…` path.
fn token_of(path: &str) -> &str {
    path.trim_start_matches("/portal/")
        .split('/')
        .next()
        .unwrap_or_default()
}

/// Resolves the path's token; the request carries the session on, or is answered 401.
pub async fn require_session(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let portal = resolve(&state, token_of(request.uri().path())).await?;
    request
        .extensions_mut()
        .insert(Caller(Arc::clone(&portal.account)));
    // The session's Idempotency-Keys are its own, apart from the merchant's and from other
    // sessions' (CONTRACT §3): a customer can neither take nor replay a merchant's key.
    request
        .extensions_mut()
        .insert(IdempotencyScope(format!("portal:{}", portal.session.id)));
    request.extensions_mut().insert(portal);
    Ok(next.run(request).await)
}

/// The API's per-minute limit of the account, counted for each session on its own.
pub async fn limit_session(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(portal) = request.extensions().get::<PortalCaller>() {
        let limit = u64::try_from(portal.account.rate_limit_per_minute).unwrap_or(0);
        state
            .limiter
            .take(&format!("portal:{}", portal.session.id), limit)
            .await?;
    }
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_the_paths_second_segment() {
        assert_eq!(token_of("/portal/bpt_abc/api/customer"), "bpt_abc");
        assert_eq!(token_of("/portal/bpt_abc"), "bpt_abc");
        assert_eq!(token_of("/portal/"), "");
    }
}
