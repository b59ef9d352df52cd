//! The subscription actions (`/v1/subscriptions/{id}/…`): each a command sent to the
//! subscription's actor; those whose change waits on a charge (charge-now, an upgrade's or an
//! add-on's proration) answer once the charge's outcome is applied, or 202 while it is pending.

use super::{SubscriptionOut, act, action_error, parse_cycle, parse_quantity, scoped};
use crate::actors::{ActionOutcome, Command};
use crate::api::openapi::error_responses::ShardMoving;
use crate::domain::charge_status::ChargeStatus;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::list::ListOut;
use crate::http::state::AppState;
use crate::ids::{AccountId, AddonId, PlanId, SubscriptionId};
use crate::store::charges::ChargeAttempt;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::ToSchema;

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"at_period_end": true})))]
pub struct CancelIn {
    /// Default true.
    pub at_period_end: Option<bool>,
}

/// Cancel now (`at_period_end: false`) or at the end of the period (default).
#[utoipa::path(post, path = "/v1/subscriptions/{id}/cancel", tag = "subscriptions", request_body = CancelIn,
    responses((status = 200, body = SubscriptionOut), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
pub(super) async fn cancel_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CancelIn>,
) -> ApiResult<Json<SubscriptionOut>> {
    let id = SubscriptionId::given(id);
    let command = Command::Cancel {
        at_period_end: body.at_period_end.unwrap_or(true),
    };
    Ok(Json(
        act(&state, &caller, &id, command)
            .await?
            .subscription
            .into(),
    ))
}

/// Pause: no charge and no renewal until resumed.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/pause", tag = "subscriptions",
    responses((status = 200, body = SubscriptionOut), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
pub(super) async fn pause_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SubscriptionOut>> {
    let id = SubscriptionId::given(id);
    Ok(Json(
        act(&state, &caller, &id, Command::Pause)
            .await?
            .subscription
            .into(),
    ))
}

/// Resume a paused subscription.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/resume", tag = "subscriptions",
    responses((status = 200, body = SubscriptionOut), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
pub(super) async fn resume_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SubscriptionOut>> {
    let id = SubscriptionId::given(id);
    Ok(Json(
        act(&state, &caller, &id, Command::Resume)
            .await?
            .subscription
            .into(),
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"plan_id": "plan_0193a1f3b1c27d3e8f0a1b2c3d4e5f6a", "cycle": "annual", "prorate": true})))]
pub struct ChangePlanIn {
    pub plan_id: String,
    #[schema(schema_with = crate::api::openapi::schemas::optional_cycle)]
    pub cycle: Option<String>,
    /// Default true.
    pub prorate: Option<bool>,
    /// A preview's `proration_date` (at most five minutes old, in the current period): the
    /// upgrade is then charged exactly what that preview said. Default: now.
    #[schema(format = DateTime)]
    pub proration_date: Option<String>,
    /// Seats from now on: a rise is prorated like an upgrade, a fall applies from the next
    /// period. Default: as it is.
    #[schema(minimum = 1, maximum = 10000)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub quantity: Option<i64>,
}

/// A `proration_date` as sent: an RFC 3339 instant, or a 400 naming it.
pub(in crate::api) fn parse_proration_date(raw: Option<&str>) -> ApiResult<Option<i64>> {
    raw.map(|raw| {
        chrono::DateTime::parse_from_rfc3339(raw)
            .map(|at| at.timestamp_millis())
            .map_err(|_| {
                ApiError::bad_request("proration_date must be an RFC 3339 instant.")
                    .param("proration_date")
            })
    })
    .transpose()
}

/// Change plan (and optionally cycle). An upgrade with proration is charged at once and takes
/// effect when the charge is approved (200); declined or short of balance, nothing changes
/// (422); still pending after 10 s, 202 with the subscription as it is, and the change applies
/// if the charge is later approved.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/change-plan", tag = "subscriptions", request_body = ChangePlanIn,
    responses((status = 200, body = SubscriptionOut), (status = 202, body = SubscriptionOut, description = "the upgrade's charge is still pending"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "insufficient_balance: the prepaid balance does not cover the fee of the proration; processor_error: the processor declined it, nothing changed"),
        (status = 503, response = inline(ShardMoving))))]
pub(super) async fn change_plan(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ChangePlanIn>,
) -> ApiResult<Response> {
    let id = SubscriptionId::given(id);
    let cycle = body.cycle.as_deref().map(parse_cycle).transpose()?;
    let proration_at = parse_proration_date(body.proration_date.as_deref())?;
    let quantity = body.quantity.map(|q| parse_quantity(Some(q))).transpose()?;
    let command = Command::ChangePlan {
        plan_id: PlanId::given(body.plan_id),
        cycle,
        prorate: body.prorate.unwrap_or(true),
        proration_at,
        quantity,
    };
    let outcome = act(&state, &caller, &id, command).await?;
    action_after_charge(&state, &caller, outcome).await
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"plan_id": "plan_0193a1f3b1c27d3e8f0a1b2c3d4e5f6a"})))]
pub struct PreviewIn {
    pub plan_id: String,
    /// The quantity to price (default: the subscription's).
    #[schema(minimum = 1, maximum = 10000)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub quantity: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"prorated_amount_cents": 2495000, "immediate_charge": true, "proration_date": "2026-11-17T14:30:00.000Z"})))]
pub struct PreviewOut {
    pub prorated_amount_cents: i64,
    pub immediate_charge: bool,
    /// The instant the proration was priced at: send it as change-plan's `proration_date` to
    /// be charged exactly this amount.
    #[schema(format = DateTime)]
    pub proration_date: String,
}

/// What change-plan would charge now, for the current cycle. Changes nothing.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/change-plan/preview", tag = "subscriptions", request_body = PreviewIn,
    responses((status = 200, body = PreviewOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
pub(super) async fn preview_change_plan(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PreviewIn>,
) -> ApiResult<Json<PreviewOut>> {
    let id = SubscriptionId::given(id);
    scoped(&state, &caller, &id).await?;
    let quantity = body.quantity.map(|q| parse_quantity(Some(q))).transpose()?;
    let at = state.runtime.clock().now_ms(caller.account_id()).await?;
    let amount = state
        .runtime
        .preview(&id, &PlanId::given(body.plan_id), quantity, Some(at))
        .await
        .map_err(action_error)?;
    Ok(Json(PreviewOut::at(amount, at)))
}

impl PreviewOut {
    /// A preview of `amount`, priced at `at`.
    pub(in crate::api) fn at(amount: i64, at: i64) -> Self {
        Self {
            prorated_amount_cents: amount,
            immediate_charge: amount > 0,
            proration_date: rfc3339(from_millis(at)),
        }
    }
}

/// A charge attempt as charge-now answers it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = ManualChargeOut)]
#[schema(examples(json!({
    "id": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
    "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "amount_in_cents": 4990000,
    "status": "approved",
    "processor_status": "APPROVED",
    "processor_transaction_id": "1234-1764581400-49201",
    "reference": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
    "created_at": "2026-11-24T09:15:42.318Z"
})))]
pub struct ChargeOut {
    pub id: String,
    pub subscription_id: Option<String>,
    pub amount_in_cents: i64,
    /// pending, approved, declined, error, voided.
    #[schema(schema_with = crate::api::openapi::schemas::charge_status)]
    pub status: ChargeStatus,
    pub processor_status: Option<String>,
    pub processor_transaction_id: Option<String>,
    pub reference: String,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// Force a charge attempt now and wait (up to 10 s) for its outcome.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/charge-now", tag = "subscriptions",
    responses((status = 200, body = ChargeOut), (status = 202, body = ChargeOut, description = "still pending"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "insufficient_balance: the prepaid balance does not cover the fee; processor_error: the processor declined the charge"), (status = 503, response = inline(ShardMoving))))]
pub(super) async fn charge_now(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let id = SubscriptionId::given(id);
    let outcome = act(&state, &caller, &id, Command::ChargeNow).await?;
    let Some(charge) = outcome.charge else {
        return Err(ApiError::InsufficientBalance(
            "The prepaid balance does not cover the fee of this charge.".into(),
        ));
    };
    let charge = settled_charge(&state, caller.account_id(), charge).await?;
    let status = charge.status;
    let processor_status = charge.processor_status.clone();
    let out = ChargeOut::from(charge);
    match status {
        ChargeStatus::Approved => Ok((StatusCode::OK, Json(out)).into_response()),
        ChargeStatus::Pending => Ok((StatusCode::ACCEPTED, Json(out)).into_response()),
        _ => Err(ApiError::Processor(format!(
            "The payment processor rejected the charge ({}).",
            processor_status.as_deref().unwrap_or("ERROR")
        ))),
    }
}

impl From<ChargeAttempt> for ChargeOut {
    fn from(charge: ChargeAttempt) -> Self {
        Self {
            created_at: rfc3339(from_millis(charge.created_at)),
            id: charge.id.into_string(),
            subscription_id: charge.subscription_id.map(SubscriptionId::into_string),
            amount_in_cents: charge.amount_cents,
            status: charge.status,
            processor_status: charge.processor_status,
            processor_transaction_id: charge.processor_transaction_id,
            reference: charge.reference,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"addon_id": "addon_0193a1f3e7d87b1a9c2d3e4f5a6b7c8d", "prorate": true})))]
pub struct AttachAddonIn {
    pub addon_id: String,
    /// Default true.
    pub prorate: Option<bool>,
}

/// Attach an add-on. With proration on an active subscription the rest of the period is
/// charged at once and the add-on is attached when the charge is approved, as change-plan.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/addons", tag = "subscriptions", request_body = AttachAddonIn,
    responses((status = 200, body = SubscriptionOut), (status = 202, body = SubscriptionOut, description = "the proration's charge is still pending"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "invalid_request: the add-on is deactivated; insufficient_balance: the prepaid balance does not cover the fee of the proration; processor_error: the processor declined it, nothing changed"),
        (status = 503, response = inline(ShardMoving))))]
pub(super) async fn attach_addon(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AttachAddonIn>,
) -> ApiResult<Response> {
    let id = SubscriptionId::given(id);
    let command = Command::AttachAddon {
        addon_id: AddonId::given(body.addon_id),
        prorate: body.prorate.unwrap_or(true),
    };
    let outcome = act(&state, &caller, &id, command).await?;
    action_after_charge(&state, &caller, outcome).await
}

/// How long an action waits for the charge it made (charge-now, an upgrade's proration).
const CHARGE_WAIT: Duration = Duration::from_secs(10);

/// Waits (up to `CHARGE_WAIT`) for `charge` to leave `pending`, and returns it as stored.
pub(in crate::api) async fn settled_charge(
    state: &AppState,
    account: &AccountId,
    charge: ChargeAttempt,
) -> ApiResult<ChargeAttempt> {
    let deadline = tokio::time::Instant::now() + CHARGE_WAIT;
    let in_flight = state.runtime.in_flight();
    let mut charge = charge;
    while charge.is(ChargeStatus::Pending) && tokio::time::Instant::now() < deadline {
        let settled = in_flight.settlement(&charge.id);
        charge = state
            .store
            .charge(account, &charge.id)
            .await?
            .unwrap_or(charge);
        if !charge.is(ChargeStatus::Pending) {
            break;
        }
        wait_for(settled, deadline).await;
    }
    in_flight.stop_waiting(&charge.id);
    Ok(charge)
}

/// How often a request waiting for a charge reads it even if this node applied no outcome:
/// the outcome may be applied on another node.
const CHARGE_READ_EVERY: Duration = Duration::from_millis(250);

/// Waits for `settled` (the charge's outcome applied on this node), for at most
/// `CHARGE_READ_EVERY`, and never past `deadline`.
async fn wait_for(
    settled: std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>,
    deadline: tokio::time::Instant,
) {
    let until = deadline.min(tokio::time::Instant::now() + CHARGE_READ_EVERY);
    let _ = tokio::time::timeout_at(until, settled).await;
}

/// The answer of an action that may have made a charge it takes effect with: the subscription
/// as it stands once the charge is approved (200); 422 `processor_error` when the charge was
/// declined (nothing changed); 202 with the subscription as it is while still pending.
pub(in crate::api) async fn action_after_charge(
    state: &AppState,
    caller: &Caller,
    outcome: ActionOutcome,
) -> ApiResult<Response> {
    let Some(charge) = outcome.charge else {
        return Ok(Json(SubscriptionOut::from(outcome.subscription)).into_response());
    };
    let account = caller.account_id();
    let charge = settled_charge(state, account, charge).await?;
    let subscription = scoped(state, caller, &outcome.subscription.id).await?;
    match charge.status {
        ChargeStatus::Approved => Ok(Json(SubscriptionOut::from(subscription)).into_response()),
        ChargeStatus::Pending => Ok((
            StatusCode::ACCEPTED,
            Json(SubscriptionOut::from(subscription)),
        )
            .into_response()),
        _ => Err(ApiError::Processor(format!(
            "The payment processor rejected the charge ({}); nothing was changed.",
            charge.processor_status.as_deref().unwrap_or("ERROR")
        ))),
    }
}

/// Detach an add-on: it stops billing from the next period.
#[utoipa::path(delete, path = "/v1/subscriptions/{id}/addons/{addon_id}", tag = "subscriptions",
    responses((status = 200, body = SubscriptionOut), (status = 404, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
pub(super) async fn detach_addon(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, addon_id)): Path<(String, String)>,
) -> ApiResult<Json<SubscriptionOut>> {
    let id = SubscriptionId::given(id);
    Ok(Json(
        act(
            &state,
            &caller,
            &id,
            Command::DetachAddon {
                addon_id: AddonId::given(addon_id),
            },
        )
        .await?
        .subscription
        .into(),
    ))
}

/// The add-ons billed with this subscription.
#[utoipa::path(get, path = "/v1/subscriptions/{id}/addons", tag = "subscriptions",
    responses((status = 200, body = ListOut<crate::api::catalog::CatalogItemOut>), (status = 404, body = ErrorBody)))]
pub(super) async fn list_addons(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<ListOut<crate::api::catalog::CatalogItemOut>>> {
    let id = SubscriptionId::given(id);
    scoped(&state, &caller, &id).await?;
    let account = caller.account_id();
    let mut data = Vec::new();
    for attached in state.store.subscription_addons(&id).await? {
        if attached.detach_at_period_end {
            continue;
        }
        if let Some(addon) = state.store.addon(account, &attached.addon_id).await? {
            data.push(addon.into());
        }
    }
    Ok(Json(ListOut {
        data,
        has_more: false,
        next_cursor: None,
    }))
}
