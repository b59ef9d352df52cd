//! `GET` and `PATCH /v1/account/portal`: what customers may do in the portal. A PATCH merges
//! nested fields; the configuration in force when an action arrives is the one that applies,
//! also to sessions opened before it changed.

use crate::domain::portal::{CancelMode, PortalConfig, PortalPatch};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;
use crate::ids::PlanId;
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_portal_config, update_portal_config))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRuleIn {
    pub enabled: Option<bool>,
    /// `at_period_end` (access until the period ends) or `immediately`.
    #[schema(schema_with = crate::api::openapi::schemas::optional_cancel_mode)]
    pub mode: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanSwitchRuleIn {
    pub enabled: Option<bool>,
    /// The plans a customer may switch to (each a plan of this account).
    pub plan_ids: Option<Vec<String>>,
    /// Whether an upgrade charges the rest of the period at once.
    pub prorate: Option<bool>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToggleIn {
    pub enabled: Option<bool>,
}

/// Body of `PATCH /v1/account/portal`: what it names changes, at any depth.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "plan_switch": {"enabled": true, "plan_ids": ["plan_0193a1f3a0b17c2d8e9f0a1b2c3d4e5f", "plan_0193a1f3b1c27d3e8f0a1b2c3d4e5f6a"]},
    "cancel": {"mode": "immediately"}
})))]
pub struct PortalConfigIn {
    pub cancel: Option<CancelRuleIn>,
    pub plan_switch: Option<PlanSwitchRuleIn>,
    pub payment_method_update: Option<ToggleIn>,
    pub invoice_history: Option<ToggleIn>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CancelRuleOut {
    pub enabled: bool,
    #[schema(schema_with = crate::api::openapi::schemas::cancel_mode)]
    pub mode: CancelMode,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PlanSwitchRuleOut {
    pub enabled: bool,
    pub plan_ids: Vec<String>,
    pub prorate: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ToggleOut {
    pub enabled: bool,
}

/// What customers may do in the portal.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "cancel": {"enabled": true, "mode": "at_period_end"},
    "plan_switch": {"enabled": false, "plan_ids": [], "prorate": true},
    "payment_method_update": {"enabled": true},
    "invoice_history": {"enabled": true}
})))]
pub struct PortalConfigOut {
    pub cancel: CancelRuleOut,
    pub plan_switch: PlanSwitchRuleOut,
    pub payment_method_update: ToggleOut,
    pub invoice_history: ToggleOut,
}

impl From<PortalConfig> for PortalConfigOut {
    fn from(config: PortalConfig) -> Self {
        Self {
            cancel: CancelRuleOut {
                enabled: config.cancel.enabled,
                mode: config.cancel.mode,
            },
            plan_switch: PlanSwitchRuleOut {
                enabled: config.plan_switch.enabled,
                plan_ids: config
                    .plan_switch
                    .plan_ids
                    .into_iter()
                    .map(PlanId::into_string)
                    .collect(),
                prorate: config.plan_switch.prorate,
            },
            payment_method_update: ToggleOut {
                enabled: config.payment_method_update.enabled,
            },
            invoice_history: ToggleOut {
                enabled: config.invoice_history.enabled,
            },
        }
    }
}

/// The caller's portal configuration.
#[utoipa::path(get, path = "/v1/account/portal", tag = "portal",
    responses((status = 200, body = PortalConfigOut), (status = 401, body = ErrorBody)))]
async fn get_portal_config(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<PortalConfigOut>> {
    let config = state.store.portal_config(caller.account_id()).await?;
    Ok(Json(config.into()))
}

/// Change what customers may do in the portal; what the body does not name stays.
#[utoipa::path(patch, path = "/v1/account/portal", tag = "portal", request_body = PortalConfigIn,
    responses((status = 200, body = PortalConfigOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn update_portal_config(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<PortalConfigIn>,
) -> ApiResult<Json<PortalConfigOut>> {
    let account = caller.account_id();
    let cancel_mode = match body.cancel.as_ref().and_then(|c| c.mode.as_deref()) {
        None => None,
        Some(raw) => Some(CancelMode::parse(raw).ok_or_else(|| {
            ApiError::bad_request(format!(
                "cancel.mode must be one of {}.",
                CancelMode::WORDS.join(", ")
            ))
            .param("cancel.mode")
        })?),
    };
    let plan_ids: Option<Vec<PlanId>> = body
        .plan_switch
        .as_ref()
        .and_then(|p| p.plan_ids.clone())
        .map(|ids| ids.into_iter().map(PlanId::given).collect());
    if let Some(ids) = &plan_ids {
        if ids.len() > 50 {
            return Err(
                ApiError::bad_request("plan_switch.plan_ids takes at most 50 plans.")
                    .param("plan_switch.plan_ids"),
            );
        }
        for id in ids {
            if state.store.plan(account, id).await?.is_none() {
                return Err(ApiError::bad_request(format!("No plan with id `{id}`."))
                    .param("plan_switch.plan_ids"));
            }
        }
    }
    let mut unique = plan_ids;
    if let Some(ids) = unique.as_mut() {
        let mut seen = std::collections::HashSet::new();
        ids.retain(|id| seen.insert(id.clone()));
    }
    let patch = PortalPatch {
        cancel_enabled: body.cancel.as_ref().and_then(|c| c.enabled),
        cancel_mode,
        plan_switch_enabled: body.plan_switch.as_ref().and_then(|p| p.enabled),
        plan_ids: unique,
        prorate: body.plan_switch.as_ref().and_then(|p| p.prorate),
        payment_method_update_enabled: body.payment_method_update.as_ref().and_then(|t| t.enabled),
        invoice_history_enabled: body.invoice_history.as_ref().and_then(|t| t.enabled),
    };
    let config = state.store.update_portal_config(account, &patch).await?;
    Ok(Json(config.into()))
}
