//! Subscriptions: direct creation, reads, and the actions, each sent to the subscription's
//! actor (the handler never changes a subscription itself).

use super::openapi::error_responses::ShardMoving;
use crate::actors::{ActionError, ActionOutcome, Command};
use crate::domain::subscription::Status;
use crate::domain::time::{Cycle, from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery, metadata_text, metadata_value};
use crate::http::list::{ListOut, page_request};
use crate::http::state::AppState;
use crate::ids::AccountId;
use crate::store::catalog::{CatalogItem, CatalogKind};
use crate::store::charges::ChargeAttempt;
use crate::store::subscriptions::{Subscription, SubscriptionFilter};
use crate::subscribe::{self, NewSubscription, Start};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_subscription, list_subscriptions))
        .routes(routes!(get_subscription, update_subscription))
        .routes(routes!(cancel_subscription))
        .routes(routes!(pause_subscription))
        .routes(routes!(resume_subscription))
        .routes(routes!(change_plan))
        .routes(routes!(preview_change_plan))
        .routes(routes!(charge_now))
        .routes(routes!(attach_addon, list_addons))
        .routes(routes!(detach_addon))
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "plan_id": "plan_0193a1f3a0b17c2d8e9f0a1b2c3d4e5f",
    "status": "active",
    "cycle": "monthly",
    "current_period_start": "2026-11-02T14:30:00Z",
    "current_period_end": "2026-12-02T14:30:00Z",
    "next_charge_date": "2026-12-02T14:30:00Z",
    "default_payment_method_id": "pm_0193a1f6c3b27a1d8e7f6a5b4c3d2e1f",
    "trial_end": null,
    "cancel_at_period_end": false,
    "failed_attempts": 0,
    "created_at": "2026-11-02T14:30:00Z",
    "metadata": {"order": "A-1042"}
})))]
pub struct SubscriptionOut {
    pub id: String,
    pub customer_id: String,
    pub plan_id: String,
    #[schema(schema_with = super::openapi::schemas::subscription_status)]
    pub status: String,
    #[schema(schema_with = super::openapi::schemas::cycle)]
    pub cycle: String,
    #[schema(format = DateTime)]
    pub current_period_start: String,
    #[schema(format = DateTime)]
    pub current_period_end: String,
    #[schema(format = DateTime)]
    pub next_charge_date: String,
    pub default_payment_method_id: String,
    #[schema(format = DateTime)]
    pub trial_end: Option<String>,
    pub cancel_at_period_end: bool,
    pub failed_attempts: i32,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Box<RawValue>>,
}

impl From<Subscription> for SubscriptionOut {
    fn from(sub: Subscription) -> Self {
        let at = |ms: i64| rfc3339(from_millis(ms));
        Self {
            current_period_start: at(sub.current_period_start),
            current_period_end: at(sub.current_period_end),
            next_charge_date: at(sub.next_charge_date),
            trial_end: sub.trial_end.map(at),
            created_at: at(sub.created_at),
            metadata: metadata_value(sub.metadata.as_deref()),
            id: sub.id,
            customer_id: sub.customer_id,
            plan_id: sub.plan_id,
            status: sub.status,
            cycle: sub.cycle,
            default_payment_method_id: sub.default_payment_method_id,
            cancel_at_period_end: sub.cancel_at_period_end,
            failed_attempts: sub.failed_attempts,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "plan_id": "plan_0193a1f3a0b17c2d8e9f0a1b2c3d4e5f",
    "cycle": "monthly",
    "payment_method_id": "pm_0193a1f6c3b27a1d8e7f6a5b4c3d2e1f",
    "trial_days": 14,
    "metadata": {"order": "A-1042"}
})))]
pub struct SubscriptionIn {
    pub customer_id: String,
    pub plan_id: String,
    /// monthly or annual.
    #[schema(schema_with = super::openapi::schemas::cycle)]
    pub cycle: String,
    pub payment_method_id: String,
    #[schema(minimum = 0, maximum = 730)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub trial_days: Option<i64>,
    /// RFC 3339; in the future for a customer who has paid until then.
    #[schema(format = DateTime)]
    pub start_date: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SubscriptionListQuery {
    #[param(schema_with = super::openapi::schemas::subscription_status)]
    pub status: Option<String>,
    pub customer_id: Option<String>,
    pub plan_id: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// The plan `plan_id` of the caller, which must exist (404) and be active (400).
pub async fn active_plan(
    state: &AppState,
    account: &AccountId,
    plan_id: &str,
) -> ApiResult<CatalogItem> {
    let plan = state
        .store
        .catalog_item(account, CatalogKind::Plan, plan_id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No plan with id `{plan_id}`.")).param("plan_id")
        })?;
    if !plan.active {
        return Err(
            ApiError::bad_request(format!("Plan `{}` is inactive.", plan.id)).param("plan_id"),
        );
    }
    Ok(plan)
}

pub fn parse_cycle(raw: &str) -> ApiResult<Cycle> {
    Cycle::parse(raw)
        .ok_or_else(|| ApiError::bad_request("cycle must be monthly or annual.").param("cycle"))
}

/// Maps an actor's business failure to the contract's errors.
fn action_error(err: ActionError) -> ApiError {
    match err {
        ActionError::NotFound(message) => ApiError::not_found(message),
        ActionError::Conflict(message) => ApiError::conflict(message),
        ActionError::Invalid(message) => ApiError::bad_request(message),
        ActionError::Unprocessable(message) => ApiError::unprocessable(message),
        ActionError::InsufficientBalance => ApiError::InsufficientBalance(
            "The prepaid balance does not cover the fee of this charge.".into(),
        ),
        ActionError::Store(err) => err.into(),
        ActionError::Unavailable => ApiError::Internal("subscription actor unavailable".into()),
        ActionError::Moving => ApiError::Unavailable {
            retry_after_secs: 1,
        },
        ActionError::MovedMidway => ApiError::MovedMidway,
        ActionError::Remote(message) => ApiError::Internal(message.into()),
    }
}

async fn scoped(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Subscription> {
    state
        .store
        .subscription(&caller.account_id(), id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No subscription with id `{id}`.")).param("id"))
}

async fn act(
    state: &AppState,
    caller: &Caller,
    id: &str,
    command: Command,
) -> ApiResult<ActionOutcome> {
    scoped(state, caller, id).await?;
    state.runtime.act(id, command).await.map_err(action_error)
}

/// Create a subscription directly (the customer already has a payment method).
#[utoipa::path(post, path = "/v1/subscriptions", tag = "subscriptions", request_body = SubscriptionIn,
    responses((status = 201, body = SubscriptionOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn create_subscription(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SubscriptionIn>,
) -> ApiResult<(StatusCode, Json<SubscriptionOut>)> {
    // Until the row commits a failure leaves nothing behind, so its Idempotency-Key is freed.
    let (sub, start, now) = new_subscription(&state, &caller, body)
        .await
        .map_err(ApiError::before_any_write)?;
    let txn = state
        .store
        .begin()
        .await
        .map_err(|err| ApiError::from(err).before_any_write())?;
    subscribe::insert(&txn, &sub, now)
        .await
        .map_err(|err| ApiError::from(err).before_any_write())?;
    // Not marked: a commit that failed on a lost connection may still have committed.
    txn.commit().await?;
    state.runtime.arm(&sub, now);
    // From here on the subscription exists: the answer is 201 with it as it stands, never an
    // error that would invite the client to create it again.
    let sub = if start == Start::ChargeNow {
        charge_first_period(&state, &caller.account_id(), sub).await
    } else {
        sub
    };
    Ok((StatusCode::CREATED, Json(sub.into())))
}

/// List subscriptions, newest first.
#[utoipa::path(get, path = "/v1/subscriptions", tag = "subscriptions", params(SubscriptionListQuery),
    responses((status = 200, body = ListOut<SubscriptionOut>), (status = 400, body = ErrorBody)))]
async fn list_subscriptions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<SubscriptionListQuery>,
) -> ApiResult<Json<ListOut<SubscriptionOut>>> {
    if let Some(status) = &query.status
        && Status::parse(status).is_none()
    {
        return Err(ApiError::bad_request(format!("Unknown status `{status}`.")).param("status"));
    }
    let page = page_request(query.limit, query.cursor.clone())?;
    let filter = SubscriptionFilter {
        status: query.status,
        customer_id: query.customer_id,
        plan_id: query.plan_id,
    };
    let page = state
        .store
        .list_subscriptions(&caller.account_id(), &filter, &page)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |s| s.id.clone(),
        SubscriptionOut::from,
    )))
}

/// Get a subscription.
#[utoipa::path(get, path = "/v1/subscriptions/{id}", tag = "subscriptions",
    responses((status = 200, body = SubscriptionOut), (status = 404, body = ErrorBody)))]
async fn get_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SubscriptionOut>> {
    Ok(Json(scoped(&state, &caller, &id).await?.into()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"default_payment_method_id": "pm_0193a1f6c3b27a1d8e7f6a5b4c3d2e1f"})))]
pub struct SubscriptionPatch {
    /// A payment method of the same customer; used from the next charge.
    pub default_payment_method_id: String,
}

/// Change the card used from the next charge.
#[utoipa::path(patch, path = "/v1/subscriptions/{id}", tag = "subscriptions", request_body = SubscriptionPatch,
    responses((status = 200, body = SubscriptionOut), (status = 404, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
async fn update_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SubscriptionPatch>,
) -> ApiResult<Json<SubscriptionOut>> {
    let sub = scoped(&state, &caller, &id).await?;
    let method = state
        .store
        .payment_method(&caller.account_id(), &body.default_payment_method_id)
        .await?;
    if method.is_none_or(|m| m.customer_id != sub.customer_id) {
        return Err(
            ApiError::not_found("No payment method with that id for this customer.")
                .param("default_payment_method_id"),
        );
    }
    let outcome = act(
        &state,
        &caller,
        &id,
        Command::SetPaymentMethod {
            payment_method_id: body.default_payment_method_id,
        },
    )
    .await?;
    Ok(Json(outcome.subscription.into()))
}

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
async fn cancel_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CancelIn>,
) -> ApiResult<Json<SubscriptionOut>> {
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
async fn pause_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SubscriptionOut>> {
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
async fn resume_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SubscriptionOut>> {
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
    #[schema(schema_with = super::openapi::schemas::optional_cycle)]
    pub cycle: Option<String>,
    /// Default true.
    pub prorate: Option<bool>,
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
async fn change_plan(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ChangePlanIn>,
) -> ApiResult<Response> {
    let cycle = body.cycle.as_deref().map(parse_cycle).transpose()?;
    let command = Command::ChangePlan {
        plan_id: body.plan_id,
        cycle,
        prorate: body.prorate.unwrap_or(true),
    };
    let outcome = act(&state, &caller, &id, command).await?;
    action_after_charge(&state, &caller, outcome).await
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"plan_id": "plan_0193a1f3b1c27d3e8f0a1b2c3d4e5f6a"})))]
pub struct PreviewIn {
    pub plan_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"prorated_amount_cents": 2495000, "immediate_charge": true})))]
pub struct PreviewOut {
    pub prorated_amount_cents: i64,
    pub immediate_charge: bool,
}

/// What change-plan would charge now, for the current cycle. Changes nothing.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/change-plan/preview", tag = "subscriptions", request_body = PreviewIn,
    responses((status = 200, body = PreviewOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
async fn preview_change_plan(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PreviewIn>,
) -> ApiResult<Json<PreviewOut>> {
    scoped(&state, &caller, &id).await?;
    let amount = state
        .runtime
        .preview(&id, &body.plan_id)
        .await
        .map_err(action_error)?;
    Ok(Json(PreviewOut {
        prorated_amount_cents: amount,
        immediate_charge: amount > 0,
    }))
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
    #[schema(schema_with = super::openapi::schemas::charge_status)]
    pub status: String,
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
async fn charge_now(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let outcome = act(&state, &caller, &id, Command::ChargeNow).await?;
    let Some(charge) = outcome.charge else {
        return Err(ApiError::InsufficientBalance(
            "The prepaid balance does not cover the fee of this charge.".into(),
        ));
    };
    let charge = settled_charge(&state, &caller.account_id(), charge).await?;
    let out = ChargeOut {
        created_at: rfc3339(from_millis(charge.created_at)),
        id: charge.id,
        subscription_id: charge.subscription_id,
        amount_in_cents: charge.amount_cents,
        status: charge.status.clone(),
        processor_status: charge.processor_status.clone(),
        processor_transaction_id: charge.processor_transaction_id,
        reference: charge.reference,
    };
    match charge.status.as_str() {
        "approved" => Ok((StatusCode::OK, Json(out)).into_response()),
        "pending" => Ok((StatusCode::ACCEPTED, Json(out)).into_response()),
        _ => Err(ApiError::Processor(format!(
            "The payment processor rejected the charge ({}).",
            charge.processor_status.as_deref().unwrap_or("ERROR")
        ))),
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
async fn attach_addon(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AttachAddonIn>,
) -> ApiResult<Response> {
    let command = Command::AttachAddon {
        addon_id: body.addon_id,
        prorate: body.prorate.unwrap_or(true),
    };
    let outcome = act(&state, &caller, &id, command).await?;
    action_after_charge(&state, &caller, outcome).await
}

/// How long an action waits for the charge it made (charge-now, an upgrade's proration).
const CHARGE_WAIT: Duration = Duration::from_secs(10);

/// Waits (up to `CHARGE_WAIT`) for `charge` to leave `pending`, and returns it as stored.
async fn settled_charge(
    state: &AppState,
    account: &AccountId,
    charge: ChargeAttempt,
) -> ApiResult<ChargeAttempt> {
    let deadline = tokio::time::Instant::now() + CHARGE_WAIT;
    let in_flight = state.runtime.in_flight();
    let mut charge = charge;
    while charge.status == "pending" && tokio::time::Instant::now() < deadline {
        let settled = in_flight.settlement(&charge.id);
        charge = state
            .store
            .charge(account, &charge.id)
            .await?
            .unwrap_or(charge);
        if charge.status != "pending" {
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
async fn action_after_charge(
    state: &AppState,
    caller: &Caller,
    outcome: ActionOutcome,
) -> ApiResult<Response> {
    let Some(charge) = outcome.charge else {
        return Ok(Json(SubscriptionOut::from(outcome.subscription)).into_response());
    };
    let account = caller.account_id();
    let charge = settled_charge(state, &account, charge).await?;
    let subscription = scoped(state, caller, &outcome.subscription.id).await?;
    match charge.status.as_str() {
        "approved" => Ok(Json(SubscriptionOut::from(subscription)).into_response()),
        "pending" => Ok((
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
async fn detach_addon(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, addon_id)): Path<(String, String)>,
) -> ApiResult<Json<SubscriptionOut>> {
    Ok(Json(
        act(&state, &caller, &id, Command::DetachAddon { addon_id })
            .await?
            .subscription
            .into(),
    ))
}

/// The add-ons billed with this subscription.
#[utoipa::path(get, path = "/v1/subscriptions/{id}/addons", tag = "subscriptions",
    responses((status = 200, body = ListOut<super::catalog::CatalogItemOut>), (status = 404, body = ErrorBody)))]
async fn list_addons(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<ListOut<super::catalog::CatalogItemOut>>> {
    scoped(&state, &caller, &id).await?;
    let account: AccountId = caller.account_id();
    let mut data = Vec::new();
    for attached in state.store.subscription_addons(&id).await? {
        if attached.detach_at_period_end {
            continue;
        }
        if let Some(addon) = state
            .store
            .catalog_item(&account, CatalogKind::Addon, &attached.addon_id)
            .await?
        {
            data.push(addon.into());
        }
    }
    Ok(Json(ListOut {
        data,
        has_more: false,
        next_cursor: None,
    }))
}

/// How long a direct create waits for its first charge's outcome (charge-now waits as long).
const FIRST_CHARGE_WAIT: Duration = Duration::from_secs(10);

/// Checks a direct create and builds its row, its start and the account's `now`; writes
/// nothing.
async fn new_subscription(
    state: &AppState,
    caller: &Caller,
    body: SubscriptionIn,
) -> ApiResult<(Subscription, Start, i64)> {
    let account = caller.account_id();
    let cycle = parse_cycle(&body.cycle)?;
    let metadata = metadata_text(body.metadata)?;
    state
        .store
        .customer(&account, &body.customer_id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No customer with id `{}`.", body.customer_id))
                .param("customer_id")
        })?;
    let plan = active_plan(state, &account, &body.plan_id).await?;
    let method = state
        .store
        .payment_method(&account, &body.payment_method_id)
        .await?;
    if method.is_none_or(|m| m.customer_id != body.customer_id) {
        return Err(
            ApiError::not_found("No payment method with that id for this customer.")
                .param("payment_method_id"),
        );
    }
    let now = state.runtime.clock().now_ms(&account).await?;
    let trial_days = body.trial_days.unwrap_or(0);
    if !(0..=730).contains(&trial_days) {
        return Err(
            ApiError::bad_request("trial_days must be between 0 and 730.").param("trial_days"),
        );
    }
    let start = match &body.start_date {
        None => None,
        Some(raw) => {
            let parsed = chrono::DateTime::parse_from_rfc3339(raw)
                .map_err(|_| {
                    ApiError::bad_request("start_date must be an RFC 3339 datetime.")
                        .param("start_date")
                })?
                .timestamp_millis();
            if parsed < now {
                return Err(ApiError::bad_request("start_date must not be in the past.")
                    .param("start_date"));
            }
            Some(parsed)
        }
    };
    if trial_days > 0 && start.is_some() {
        return Err(
            ApiError::bad_request("Send trial_days or start_date, not both.").param("start_date"),
        );
    }
    let start = match (trial_days, start) {
        (days, _) if days > 0 => Start::Trial { days },
        (_, Some(start)) if start > now => Start::At(start),
        _ => Start::ChargeNow,
    };
    let sub = subscribe::build(
        NewSubscription {
            id: state.store.ownership().local_subscription_id(),
            account_id: caller.0.id.clone(),
            customer_id: body.customer_id,
            plan_id: plan.id,
            cycle,
            payment_method_id: body.payment_method_id,
            metadata,
            start,
        },
        now,
    );
    Ok((sub, start, now))
}

/// Charges the first period of `sub`, just committed, and answers the subscription as it
/// stands once the charge's outcome is applied (approved: `next_charge_date` is the period's
/// end; declined: `past_due`; short of balance: `paused_insufficient_balance`), as `GET`
/// shows it. The outcome comes later, through the ingress, so it is waited for up to
/// `FIRST_CHARGE_WAIT`; still pending then, the answer is the subscription with its first
/// charge in flight (`active`, `next_charge_date` = the charge's instant), and `GET` shows
/// the outcome once it arrives.
async fn charge_first_period(
    state: &AppState,
    account: &AccountId,
    sub: Subscription,
) -> Subscription {
    if let Err(err) = state.runtime.due(&sub.id).await {
        // The row and its timer are committed: the scheduler charges the period.
        tracing::warn!(subscription = %sub.id, error = %err, "the first charge is left to the timer");
        return current(state, account, sub).await;
    }
    let deadline = tokio::time::Instant::now() + FIRST_CHARGE_WAIT;
    let in_flight = state.runtime.in_flight();
    let mut waited = None;
    loop {
        match state.store.pending_charge_of(&sub.id).await {
            Ok(Some(charge)) if tokio::time::Instant::now() < deadline => {
                // Registered, then read again: an outcome applied in between is not missed.
                let settled = in_flight.settlement(&charge.id);
                if matches!(state.store.pending_charge_of(&sub.id).await, Ok(Some(_))) {
                    wait_for(settled, deadline).await;
                }
                waited = Some(charge.id);
            }
            Ok(_) => break,
            Err(err) => {
                tracing::warn!(subscription = %sub.id, error = %err, "could not follow the first charge");
                break;
            }
        }
    }
    if let Some(charge_id) = waited {
        in_flight.stop_waiting(&charge_id);
    }
    current(state, account, sub).await
}

/// The subscription as stored, or `sub` when it cannot be read (it is committed either way).
async fn current(state: &AppState, account: &AccountId, sub: Subscription) -> Subscription {
    match state.store.subscription(account, &sub.id).await {
        Ok(Some(stored)) => stored,
        _ => sub,
    }
}
