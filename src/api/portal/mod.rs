//! The customer portal (CONTRACT §13). What integrators call with their API key: sessions
//! (`POST /v1/portal-sessions`) and the account's configuration (`/v1/account/portal`), here;
//! what the customer's browser calls with the session's token alone: the page
//! (`page`, `GET /portal/{token}`) and the JSON behind it (`customer`, `/portal/{token}/api/…`),
//! whose token is resolved by `session`.
//!
//! An action through the portal is the API's action: the same command to the subscription's
//! actor, the same rules of CONTRACT §5, the same events and Idempotency-Keys, recorded in
//! `portal_actions` with the session it came from.

mod config;
mod customer;
mod i18n;
mod page;
mod pay;
mod session;

use crate::domain::portal::FlowKind;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;
use crate::ids::{CustomerId, PortalSessionId, SubscriptionId};
use crate::secrets::{random_token, sha256_hex};
use crate::store::portal::PortalSession;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use session::PortalCaller;

pub use crate::store::portal::{SESSION_TTL_MS, TOKEN_LEN, TOKEN_PREFIX};

/// The integrator's routes (API key): sessions and the configuration.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_portal_session))
        .routes(routes!(get_portal_session))
        .merge(config::router())
}

/// The customer's routes (the session's token): the page, its assets and its JSON.
pub fn customer_router(state: &AppState) -> axum::Router<AppState> {
    page::router()
        .merge(customer::router(state))
        .merge(pay::router())
}

/// The one action a session opens directly.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FlowIn {
    /// `payment_method_update` or `subscription_cancel`.
    #[serde(rename = "type")]
    #[schema(schema_with = super::openapi::schemas::portal_flow)]
    pub kind: String,
    /// One of the customer's subscriptions.
    pub subscription_id: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "return_url": "https://shop.example.co/cuenta",
    "flow": {"type": "payment_method_update", "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a"}
})))]
pub struct PortalSessionIn {
    pub customer_id: String,
    /// Where the page's "back" link goes.
    #[schema(schema_with = super::openapi::schemas::optional_web_url)]
    pub return_url: Option<String>,
    /// `es` or `en`; absent: the customer's browser chooses (Spanish unless it asks for English).
    #[schema(schema_with = super::openapi::schemas::optional_locale)]
    pub locale: Option<String>,
    pub flow: Option<FlowIn>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "bps_0193a1fa0b1c7d2e8f3a4b5c6d7e8f9a",
    "url": "https://billing.example.co/portal/bpt_Q7m2Kx9PzR4tW8yB3nD6fH1jL5vC0sEaGh2Jk4Lm6Np",
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "return_url": "https://shop.example.co/cuenta",
    "locale": null,
    "flow": {"type": "payment_method_update", "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a"},
    "expires_at": "2026-11-27T15:30:00Z",
    "created_at": "2026-11-27T14:30:00Z"
})))]
pub struct PortalSessionOut {
    pub id: String,
    /// The page; its token is the customer's only credential. Shown once: only its hash is kept.
    pub url: String,
    pub customer_id: String,
    pub return_url: Option<String>,
    pub locale: Option<String>,
    pub flow: Option<FlowIn>,
    /// An hour after creation.
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// Open the portal for one customer: an hour-long page where they replace their card or Nequi
/// account, cancel, switch plan, edit their invoicing data and download their invoices, as the
/// account's portal configuration allows.
#[utoipa::path(post, path = "/v1/portal-sessions", tag = "portal", request_body = PortalSessionIn,
    responses((status = 201, body = PortalSessionOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn create_portal_session(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<PortalSessionIn>,
) -> ApiResult<(StatusCode, Json<PortalSessionOut>)> {
    let account = caller.account_id();
    let return_url = super::checkout_sessions::web_url(body.return_url, "return_url")?;
    let locale = match body.locale.as_deref() {
        None => None,
        Some(code @ ("es" | "en")) => Some(code.to_owned()),
        Some(_) => {
            return Err(ApiError::bad_request("locale must be `es` or `en`.").param("locale"));
        }
    };
    let customer = state
        .store
        .customer(account, &CustomerId::given(body.customer_id.as_str()))
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No customer with id `{}`.", body.customer_id))
                .param("customer_id")
        })?;
    if let Some(flow) = &body.flow {
        let kind = FlowKind::parse(&flow.kind).ok_or_else(|| {
            ApiError::bad_request(format!(
                "flow.type must be one of {}.",
                FlowKind::WORDS.join(", ")
            ))
            .param("flow.type")
        })?;
        let config = state.store.portal_config(account).await?;
        let enabled = match kind {
            FlowKind::PaymentMethodUpdate => config.payment_method_update.enabled,
            FlowKind::SubscriptionCancel => config.cancel.enabled,
        };
        if !enabled {
            return Err(ApiError::bad_request(format!(
                "{} is disabled in the account's portal configuration.",
                kind.as_str()
            ))
            .param("flow.type"));
        }
        let theirs = state
            .store
            .subscription(
                account,
                &SubscriptionId::given(flow.subscription_id.as_str()),
            )
            .await?
            .is_some_and(|sub| sub.customer_id == customer.id);
        if !theirs {
            return Err(ApiError::not_found(format!(
                "No subscription with id `{}` for this customer.",
                flow.subscription_id
            ))
            .param("flow.subscription_id"));
        }
    }
    let now = state.runtime.clock().now_ms(account).await?;
    let token = random_token(TOKEN_PREFIX, TOKEN_LEN);
    let session = PortalSession {
        id: PortalSessionId::generate(),
        account_id: account.clone(),
        customer_id: customer.id,
        token_hash: sha256_hex(&token),
        return_url,
        locale,
        flow_type: body.flow.as_ref().map(|flow| flow.kind.clone()),
        flow_subscription_id: body
            .flow
            .as_ref()
            .map(|flow| SubscriptionId::given(flow.subscription_id.as_str())),
        expires_at: now + SESSION_TTL_MS,
        created_at: now,
    };
    state.store.insert_portal_session(session.clone()).await?;
    let at = |ms: i64| rfc3339(from_millis(ms));
    Ok((
        StatusCode::CREATED,
        Json(PortalSessionOut {
            url: format!("{}/portal/{token}", state.config.public_url()),
            id: session.id.into_string(),
            customer_id: session.customer_id.into_string(),
            return_url: session.return_url,
            locale: session.locale,
            flow: body.flow,
            expires_at: at(session.expires_at),
            created_at: at(session.created_at),
        }),
    ))
}

/// An action a customer took through a session.
#[derive(Debug, Serialize, ToSchema)]
pub struct PortalActionOut {
    /// `payment_method_update`, `subscription_cancel`, `plan_switch` or `customer_update`.
    pub action: String,
    pub subscription_id: Option<String>,
    /// What it carried: the reason given, the plan switched to, the fields changed.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// A session as read back: without its URL (only the token's hash is kept), with what the
/// customer did through it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "bps_0193a1fa0b1c7d2e8f3a4b5c6d7e8f9a",
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "return_url": "https://shop.example.co/cuenta",
    "locale": null,
    "flow": null,
    "expires_at": "2026-11-27T15:30:00Z",
    "created_at": "2026-11-27T14:30:00Z",
    "actions": [{"action": "subscription_cancel", "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
        "detail": {"reason": "Muy caro", "mode": "at_period_end"}, "created_at": "2026-11-27T14:34:10Z"}]
})))]
pub struct PortalSessionRead {
    pub id: String,
    pub customer_id: String,
    pub return_url: Option<String>,
    pub locale: Option<String>,
    pub flow: Option<FlowIn>,
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// Oldest first.
    pub actions: Vec<PortalActionOut>,
}

/// A portal session and every action its customer took through it.
#[utoipa::path(get, path = "/v1/portal-sessions/{id}", tag = "portal",
    responses((status = 200, body = PortalSessionRead), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_portal_session(
    State(state): State<AppState>,
    caller: Caller,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult<Json<PortalSessionRead>> {
    let id = PortalSessionId::given(id);
    let account = caller.account_id();
    let session = state
        .store
        .portal_session(account, &id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No portal session with id `{id}`.")).param("id")
        })?;
    let at = |ms: i64| rfc3339(from_millis(ms));
    let actions = state
        .store
        .portal_actions_of_session(account, &session.id)
        .await?
        .into_iter()
        .map(|action| PortalActionOut {
            detail: action
                .detail
                .as_deref()
                .and_then(|raw| serde_json::from_str(raw).ok())
                .unwrap_or(serde_json::Value::Null),
            action: action.action,
            subscription_id: action.subscription_id.map(SubscriptionId::into_string),
            created_at: at(action.created_at),
        })
        .collect();
    Ok(Json(PortalSessionRead {
        flow: session
            .flow_type
            .clone()
            .zip(
                session
                    .flow_subscription_id
                    .clone()
                    .map(SubscriptionId::into_string),
            )
            .map(|(kind, subscription_id)| FlowIn {
                kind,
                subscription_id,
            }),
        id: session.id.into_string(),
        customer_id: session.customer_id.into_string(),
        return_url: session.return_url,
        locale: session.locale,
        expires_at: at(session.expires_at),
        created_at: at(session.created_at),
        actions,
    }))
}

/// Whether `token` has the shape of a session's token (anything else is not looked up).
fn well_formed_token(token: &str) -> bool {
    token.strip_prefix(TOKEN_PREFIX).is_some_and(|rest| {
        rest.len() == TOKEN_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_a_session_makes_is_well_formed() {
        let token = random_token(TOKEN_PREFIX, TOKEN_LEN);
        assert!(well_formed_token(&token));
        assert!(!well_formed_token(&token[1..]));
        assert!(!well_formed_token(&format!("{token}x")));
        assert!(!well_formed_token(&token.replace(TOKEN_PREFIX, "bpx_")));
        assert!(!well_formed_token(&format!(
            "{}%",
            &token[..token.len() - 1]
        )));
    }
}
