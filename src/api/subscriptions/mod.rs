//! Subscriptions: direct creation, reads, and the actions, each sent to the subscription's
//! actor (the handler never changes a subscription itself).

use super::openapi::error_responses::ShardMoving;
use crate::actors::{ActionError, ActionOutcome, Command};
use crate::domain::discount::Discount;
use crate::domain::subscription::Status;
use crate::domain::time::{Cycle, from_millis, rfc3339};
use crate::http::auth::Caller;
pub use crate::http::error::redeem_error;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery, metadata_value};
use crate::http::list::{ListOut, page_request};
use crate::http::state::AppState;
use crate::ids::{
    AccountId, CouponId, CustomerId, PaymentMethodId, PlanId, PromotionCodeId, SubscriptionId,
};
use crate::store::catalog::CatalogItem;
use crate::store::coupons::Redeem;
use crate::store::subscriptions::{Subscription, SubscriptionFilter};
use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

pub(super) mod actions;
mod create;
mod discount;

pub fn router() -> OpenApiRouter<AppState> {
    let mut router = OpenApiRouter::new()
        .routes(routes!(create::create_subscription, list_subscriptions))
        .routes(routes!(get_subscription, update_subscription))
        .routes(routes!(actions::cancel_subscription))
        .routes(routes!(actions::pause_subscription))
        .routes(routes!(actions::resume_subscription))
        .routes(routes!(actions::change_plan))
        .routes(routes!(actions::preview_change_plan))
        .routes(routes!(actions::charge_now))
        .routes(routes!(actions::attach_addon, actions::list_addons))
        .routes(routes!(actions::detach_addon))
        .routes(routes!(discount::set_discount, discount::delete_discount));
    // A coupon by its id or by a code, as `redeem_of` takes it: at most one on a create,
    // exactly one on a discount.
    let openapi = router.get_openapi_mut();
    let redeemed = ["coupon_id", "promotion_code"];
    super::openapi::schemas::at_most_one_of(openapi, "SubscriptionIn", redeemed);
    super::openapi::schemas::require_one_of(
        openapi,
        "DiscountIn",
        redeemed.map(|field| (field, utoipa::openapi::schema::Type::String)),
    );
    router
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
    "metadata": {"order": "A-1042"},
    "quantity": 1,
    "current_period_quantity": 1,
    "discount": null
})))]
pub struct SubscriptionOut {
    pub id: String,
    pub customer_id: String,
    pub plan_id: String,
    #[schema(schema_with = super::openapi::schemas::subscription_status)]
    pub status: Status,
    #[schema(schema_with = super::openapi::schemas::cycle)]
    pub cycle: Cycle,
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
    /// Seats: the plan's amount is charged this many times. A fall takes effect at the next
    /// period (the current one was billed at `current_period_quantity`).
    pub quantity: i64,
    pub current_period_quantity: i64,
    /// The coupon it has (CONTRACT §14); null once it has run out.
    pub discount: Option<DiscountOut>,
}

/// A subscription's discount.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "coupon_id": "co_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "promotion_code_id": null,
    "start": "2026-11-02T14:30:00Z",
    "periods_left": 2
})))]
pub struct DiscountOut {
    pub coupon_id: String,
    pub promotion_code_id: Option<String>,
    #[schema(format = DateTime)]
    pub start: String,
    /// Period charges it still takes part of; null for `forever`.
    pub periods_left: Option<i64>,
}

impl From<Discount> for DiscountOut {
    fn from(discount: Discount) -> Self {
        Self {
            start: rfc3339(from_millis(discount.start)),
            coupon_id: discount.coupon_id.into_string(),
            promotion_code_id: discount.promotion_code_id.map(PromotionCodeId::into_string),
            periods_left: discount.periods_left,
        }
    }
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
            discount: sub.discount().map(DiscountOut::from),
            quantity: sub.quantity,
            current_period_quantity: sub.period_quantity,
            id: sub.id.into_string(),
            customer_id: sub.customer_id.into_string(),
            plan_id: sub.plan_id.into_string(),
            status: sub.status,
            cycle: sub.cycle,
            default_payment_method_id: sub.default_payment_method_id.into_string(),
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
    "quantity": 3,
    "promotion_code": "BIENVENIDA",
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
    /// Seats (≥ 1, default 1): the plan's amount is charged this many times.
    #[schema(minimum = 1, maximum = 10000)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub quantity: Option<i64>,
    /// A coupon to redeem for it (or `promotion_code`, not both).
    pub coupon_id: Option<String>,
    /// A promotion code as the customer typed it (any case).
    #[schema(max_length = 64)]
    pub promotion_code: Option<String>,
}

/// The largest quantity accepted.
pub const MAX_QUANTITY: i64 = 10_000;

/// A quantity of seats, 1 to `MAX_QUANTITY`, or a 400 naming `quantity`.
pub fn parse_quantity(raw: Option<i64>) -> ApiResult<i64> {
    let quantity = raw.unwrap_or(1);
    if !(1..=MAX_QUANTITY).contains(&quantity) {
        return Err(ApiError::bad_request(format!(
            "quantity must be an integer from 1 to {MAX_QUANTITY}."
        ))
        .param("quantity"));
    }
    Ok(quantity)
}

/// What a body asks to redeem (`coupon_id` or `promotion_code`), or a 400 when it sends both.
pub fn redeem_of(
    coupon_id: Option<String>,
    promotion_code: Option<String>,
) -> ApiResult<Option<Redeem>> {
    match (coupon_id, promotion_code) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "Send coupon_id or promotion_code, not both.",
        )
        .param("promotion_code")),
        (Some(id), None) => Ok(Some(Redeem::Coupon(CouponId::given(id)))),
        (None, Some(code)) => Ok(Some(Redeem::Code(code))),
        (None, None) => Ok(None),
    }
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
    plan_id: &PlanId,
) -> ApiResult<CatalogItem> {
    let plan = state.store.plan(account, plan_id).await?.ok_or_else(|| {
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
pub(super) fn action_error(err: ActionError) -> ApiError {
    match err {
        ActionError::NotFound(message) => ApiError::not_found(message),
        ActionError::Conflict(message) => ApiError::conflict(message),
        ActionError::Invalid(message) => ApiError::bad_request(message),
        ActionError::InvalidField { param, message } => ApiError::bad_request(message).param(param),
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

pub(super) async fn scoped(
    state: &AppState,
    caller: &Caller,
    id: &SubscriptionId,
) -> ApiResult<Subscription> {
    state
        .store
        .subscription(caller.account_id(), id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No subscription with id `{id}`.")).param("id"))
}

pub(super) async fn act(
    state: &AppState,
    caller: &Caller,
    id: &SubscriptionId,
    command: Command,
) -> ApiResult<ActionOutcome> {
    scoped(state, caller, id).await?;
    state.runtime.act(id, command).await.map_err(action_error)
}

/// List subscriptions, newest first.
#[utoipa::path(get, path = "/v1/subscriptions", tag = "subscriptions", params(SubscriptionListQuery),
    responses((status = 200, body = ListOut<SubscriptionOut>), (status = 400, body = ErrorBody)))]
async fn list_subscriptions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<SubscriptionListQuery>,
) -> ApiResult<Json<ListOut<SubscriptionOut>>> {
    let status = match query.status.as_deref() {
        None => None,
        Some(raw) => Some(Status::parse(raw).ok_or_else(|| {
            ApiError::bad_request(format!("Unknown status `{raw}`.")).param("status")
        })?),
    };
    let page = page_request(query.limit, query.cursor.clone())?;
    let filter = SubscriptionFilter {
        status,
        customer_id: query.customer_id.map(CustomerId::given),
        plan_id: query.plan_id.map(PlanId::given),
    };
    let page = state
        .store
        .list_subscriptions(caller.account_id(), &filter, &page)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |s| s.id.to_string(),
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
    let id = SubscriptionId::given(id);
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
    let id = SubscriptionId::given(id);
    let sub = scoped(&state, &caller, &id).await?;
    let method = state
        .store
        .payment_method(
            caller.account_id(),
            &PaymentMethodId::given(body.default_payment_method_id),
        )
        .await?
        .filter(|m| m.customer_id == sub.customer_id)
        .ok_or_else(|| {
            ApiError::not_found("No payment method with that id for this customer.")
                .param("default_payment_method_id")
        })?;
    let outcome = act(
        &state,
        &caller,
        &id,
        Command::SetPaymentMethod {
            payment_method_id: method.id,
        },
    )
    .await?;
    Ok(Json(outcome.subscription.into()))
}
