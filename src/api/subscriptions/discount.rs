//! `POST` and `DELETE /v1/subscriptions/{id}/discount` (CONTRACT §14): a coupon or promotion
//! code given to a subscription after its creation, or taken away; both through its actor.

use super::{SubscriptionOut, act, redeem_of};
use crate::actors::Command;
use crate::api::openapi::error_responses::ShardMoving;
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;
use crate::ids::SubscriptionId;
use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use utoipa::ToSchema;

/// Body of `POST /v1/subscriptions/{id}/discount`: one of the two.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"promotion_code": "BIENVENIDA"})))]
pub struct DiscountIn {
    pub coupon_id: Option<String>,
    /// As the customer typed it (any case).
    #[schema(max_length = 64)]
    pub promotion_code: Option<String>,
}

/// Give the subscription a coupon's discount (replacing any); it takes part in the period
/// charges that begin from now on. An invalid, expired, exhausted or non-applicable coupon or
/// code: 400 naming the field, nothing changed.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/discount", tag = "subscriptions", request_body = DiscountIn,
    responses((status = 200, body = SubscriptionOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
pub(super) async fn set_discount(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DiscountIn>,
) -> ApiResult<Json<SubscriptionOut>> {
    let id = SubscriptionId::given(id);
    let redeem = redeem_of(body.coupon_id, body.promotion_code)?.ok_or_else(|| {
        ApiError::bad_request("Send coupon_id or promotion_code.").param("coupon_id")
    })?;
    let outcome = act(&state, &caller, &id, Command::SetDiscount { redeem }).await?;
    Ok(Json(outcome.subscription.into()))
}

/// Take the subscription's discount away: the next period charges the full amount.
#[utoipa::path(delete, path = "/v1/subscriptions/{id}/discount", tag = "subscriptions",
    responses((status = 200, body = SubscriptionOut), (status = 404, body = ErrorBody), (status = 503, response = inline(ShardMoving))))]
pub(super) async fn delete_discount(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SubscriptionOut>> {
    let id = SubscriptionId::given(id);
    let outcome = act(&state, &caller, &id, Command::RemoveDiscount).await?;
    Ok(Json(outcome.subscription.into()))
}
