//! The layers and extractors that need the handlers' shared state: API keys and the admin
//! token (`auth`), failed authentications per client address (`auth_failures`), rate limits
//! (`rate_limit`) and Idempotency-Keys (`idempotency`). Those modules hold the rules and the
//! counters; this one reads them from `AppState` for a request.

use super::auth::{Caller, bearer, well_formed_api_key};
use super::auth_failures::ClientAddr;
use super::error::ApiError;
use super::idempotency::{HEADER, HeldKey, IdempotencyScope, MAX_BODY, parse_key};
use super::state::AppState;
use crate::secrets::{constant_time_eq, sha256_hex};
use crate::store::accounts::Account;
use axum::body::{Body, to_bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{Method, StatusCode, request::Parts};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use tracing::Instrument;

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

/// The global limit over the whole `/v1` API.
pub async fn limit_api(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(caller) = request.extensions().get::<Caller>() {
        let limit = u64::try_from(caller.0.rate_limit_per_minute).unwrap_or(0);
        state.limiter.take(caller.0.id.as_str(), limit).await?;
    }
    Ok(next.run(request).await)
}

/// The extra limit of the checkout status route.
pub async fn limit_status_route(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(caller) = request.extensions().get::<Caller>() {
        let limit = u64::try_from(caller.0.status_rate_limit_per_minute).unwrap_or(0);
        state
            .limiter
            .take(&format!("{}:status", caller.0.id), limit)
            .await?;
    }
    Ok(next.run(request).await)
}

pub async fn idempotent_posts(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if request.method() != Method::POST {
        return Ok(next.run(request).await);
    }
    let Some(raw) = request.headers().get(HEADER) else {
        return Ok(next.run(request).await);
    };
    let key = parse_key(raw.as_bytes())
        .map_err(|err| ApiError::bad_request(format!("{err}.")).param("Idempotency-Key"))?;
    // A portal session's keys are its own: neither a replay of the merchant's answer under the
    // same key nor a refusal of it (CONTRACT §3).
    let key = match request.extensions().get::<IdempotencyScope>() {
        Some(scope) => scope.scoped_key(key),
        None => key.to_owned(),
    };
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return Ok(next.run(request).await);
    };
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::invalid(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large."))?;
    let fingerprint = {
        let mut material = format!("{} {}\n", parts.method, parts.uri.path()).into_bytes();
        material.extend_from_slice(&bytes);
        sha256_hex(material)
    };
    let held = HeldKey {
        store: state.store.clone(),
        account: caller.account_id().clone(),
        key,
    };
    let work = next.run(Request::from_parts(parts, Body::from(bytes)));
    // The claim too runs in the request's own task: a client that hangs up while the claim is
    // being written would drop this future after the claim committed and before `run` took
    // over, leaving the key `running` (409 to every retry for a day) with nothing under it.
    let task = async move {
        if let Some(kept) = held.claim(&fingerprint).await? {
            return Ok(kept);
        }
        Ok(held.run(work).await)
    };
    state
        .requests
        .spawn(task.in_current_span())
        .await
        .unwrap_or_else(|_| Err(ApiError::Internal("request task failed".into())))
}

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self::of(
            &parts.extensions,
            &parts.headers,
            &state.config.trusted_proxies,
        ))
    }
}
