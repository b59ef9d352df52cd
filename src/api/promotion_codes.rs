//! Promotion codes (CONTRACT §14): `/v1/promotion-codes`, what a customer types for a coupon,
//! matched in any case, unique among the account's active codes, with limits of their own.

use super::coupons::{future_instant, positive};
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery, metadata_text, metadata_value};
use crate::http::list::{ListOut, page_request};
use crate::http::state::AppState;
use crate::ids::{CouponId, CustomerId, PromotionCodeId};
use crate::store::coupons::{PromotionCode, code_key};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_promotion_code, list_promotion_codes))
        .routes(routes!(get_promotion_code, update_promotion_code))
}

/// Body of `POST /v1/promotion-codes`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "coupon_id": "co_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "code": "BIENVENIDA",
    "max_redemptions": 50,
    "first_time_only": true
})))]
pub struct PromotionCodeIn {
    pub coupon_id: String,
    /// Letters, digits, `-` and `_`; matched in any case; unique among the account's active
    /// codes.
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub code: String,
    #[schema(minimum = 1)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub max_redemptions: Option<i64>,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// Only this customer may redeem it.
    pub customer_id: Option<String>,
    /// Only a customer with no approved charge yet may redeem it.
    pub first_time_only: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// Body of `PATCH /v1/promotion-codes/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"active": false})))]
pub struct PromotionCodePatch {
    pub active: bool,
}

/// A promotion code.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "promo_0193a1f7b2c37d5e8f6a7b8c9d0e1f2b",
    "coupon_id": "co_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "code": "BIENVENIDA",
    "active": true,
    "max_redemptions": 50,
    "times_redeemed": 1,
    "expires_at": null,
    "customer_id": null,
    "first_time_only": true,
    "metadata": null,
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct PromotionCodeOut {
    pub id: String,
    pub coupon_id: String,
    pub code: String,
    pub active: bool,
    pub max_redemptions: Option<i64>,
    pub times_redeemed: i64,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    pub customer_id: Option<String>,
    pub first_time_only: bool,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Box<RawValue>>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<PromotionCode> for PromotionCodeOut {
    fn from(code: PromotionCode) -> Self {
        let at = |ms: i64| rfc3339(from_millis(ms));
        Self {
            metadata: metadata_value(code.metadata.as_deref()),
            expires_at: code.expires_at.map(at),
            created_at: at(code.created_at),
            id: code.id.into_string(),
            coupon_id: code.coupon_id.into_string(),
            code: code.code,
            active: code.active,
            max_redemptions: code.max_redemptions,
            times_redeemed: code.times_redeemed,
            customer_id: code.customer_id.map(CustomerId::into_string),
            first_time_only: code.first_time_only,
        }
    }
}

/// Filters of `GET /v1/promotion-codes`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PromotionCodeListQuery {
    pub coupon_id: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// A code's letters, or a 400 naming `code`.
fn parse_code(raw: &str) -> ApiResult<String> {
    let ok = (1..=64).contains(&raw.len())
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(
            ApiError::bad_request("code must be 1 to 64 letters, digits, `-` or `_`.")
                .param("code"),
        );
    }
    Ok(raw.to_owned())
}

fn code_taken(code: &str) -> ApiError {
    ApiError::bad_request(format!(
        "An active promotion code `{code}` exists already (codes are matched in any case)."
    ))
    .param("code")
}

/// Create a promotion code for a coupon.
#[utoipa::path(post, path = "/v1/promotion-codes", tag = "coupons", request_body = PromotionCodeIn,
    responses((status = 201, body = PromotionCodeOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn create_promotion_code(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<PromotionCodeIn>,
) -> ApiResult<(StatusCode, Json<PromotionCodeOut>)> {
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    let code = parse_code(&body.code)?;
    let coupon_id = CouponId::given(body.coupon_id);
    let customer_id = body.customer_id.map(CustomerId::given);
    state
        .store
        .coupon(account, &coupon_id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No coupon with id `{coupon_id}`.")).param("coupon_id")
        })?;
    if let Some(customer) = &customer_id {
        state
            .store
            .customer(account, customer)
            .await?
            .ok_or_else(|| {
                ApiError::not_found(format!("No customer with id `{customer}`."))
                    .param("customer_id")
            })?;
    }
    let expires_at = body
        .expires_at
        .as_deref()
        .map(|raw| future_instant(raw, now, "expires_at"))
        .transpose()?;
    if state.store.active_code_exists(account, &code).await? {
        return Err(code_taken(&code));
    }
    let row = PromotionCode {
        id: PromotionCodeId::generate(),
        account_id: caller.0.id.clone(),
        coupon_id,
        code_key: code_key(&code),
        code: code.clone(),
        active: true,
        max_redemptions: positive(body.max_redemptions, "max_redemptions", i64::MAX)?,
        times_redeemed: 0,
        expires_at,
        customer_id,
        first_time_only: body.first_time_only.unwrap_or(false),
        metadata: metadata_text(body.metadata)?,
        created_at: now,
    };
    // A concurrent twin passes the check above; the unique index refuses it.
    let row = match state.store.insert_promotion_code(row).await {
        Ok(row) => row,
        Err(err) if err.is_unique_violation() => return Err(code_taken(&code)),
        Err(err) => return Err(err.into()),
    };
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// List promotion codes, newest first.
#[utoipa::path(get, path = "/v1/promotion-codes", tag = "coupons", params(PromotionCodeListQuery),
    responses((status = 200, body = ListOut<PromotionCodeOut>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_promotion_codes(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<PromotionCodeListQuery>,
) -> ApiResult<Json<ListOut<PromotionCodeOut>>> {
    let page = page_request(query.limit, query.cursor.clone())?;
    let page = state
        .store
        .list_promotion_codes(
            caller.account_id(),
            query.coupon_id.map(CouponId::given).as_ref(),
            &page,
        )
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |c| c.id.to_string(),
        PromotionCodeOut::from,
    )))
}

fn no_code(id: &PromotionCodeId) -> ApiError {
    ApiError::not_found(format!("No promotion code with id `{id}`.")).param("id")
}

/// Get a promotion code.
#[utoipa::path(get, path = "/v1/promotion-codes/{id}", tag = "coupons",
    responses((status = 200, body = PromotionCodeOut), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn get_promotion_code(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<PromotionCodeOut>> {
    let id = PromotionCodeId::given(id);
    state
        .store
        .promotion_code(caller.account_id(), &id)
        .await?
        .map(|code| Json(code.into()))
        .ok_or_else(|| no_code(&id))
}

/// (De)activate a promotion code; an inactive code cannot be redeemed and frees its letters.
#[utoipa::path(patch, path = "/v1/promotion-codes/{id}", tag = "coupons", request_body = PromotionCodePatch,
    responses((status = 200, body = PromotionCodeOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn update_promotion_code(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PromotionCodePatch>,
) -> ApiResult<Json<PromotionCodeOut>> {
    let id = PromotionCodeId::given(id);
    match state
        .store
        .set_promotion_code_active(caller.account_id(), &id, body.active)
        .await
    {
        Ok(Some(code)) => Ok(Json(code.into())),
        Ok(None) => Err(no_code(&id)),
        Err(err) if err.is_unique_violation() => Err(ApiError::bad_request(
            "Another active promotion code has the same letters.",
        )
        .param("active")),
        Err(err) => Err(err.into()),
    }
}
