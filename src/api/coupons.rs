//! Coupons (CONTRACT §14): `/v1/coupons`, the money terms of a discount. Their codes are
//! `promotion_codes`; redeeming either is the subscription's business (`subscriptions`,
//! `checkout_sessions`); here they are made, read and retired.

use crate::domain::discount::{AppliesTo, Duration};
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery, metadata_text, metadata_value};
use crate::http::list::{ListOut, ListQuery};
use crate::http::state::AppState;
use crate::ids::{AddonId, CatalogItemId, CouponId, PlanId};
use crate::store::catalog::CatalogKind;
use crate::store::coupons::Coupon;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_coupon, list_coupons))
        .routes(routes!(get_coupon, update_coupon))
}

/// The largest amount off: ten billion pesos, as the catalog's largest price.
const MAX_AMOUNT_OFF_CENTS: i64 = 1_000_000_000_000;

/// The most billed periods a repeating coupon may last (ten years of months).
const MAX_PERIODS: i64 = 120;

/// Body of `POST /v1/coupons`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "name": "Lanzamiento: 20 % tres meses",
    "percent_off_bps": 2000,
    "duration": "repeating",
    "duration_in_periods": 3,
    "applies_to": {"plan_ids": ["plan_0193a1f3a0b17c2d8e9f0a1b2c3d4e5f"]},
    "max_redemptions": 100
})))]
pub struct CouponIn {
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub name: String,
    /// Basis points off each line it applies to (1 to 10 000); or `amount_off_cents`.
    #[schema(minimum = 1, maximum = 10000)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub percent_off_bps: Option<i64>,
    /// Cents off each period's total, never below zero; or `percent_off_bps`.
    #[schema(minimum = 1, maximum = 1e12)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub amount_off_cents: Option<i64>,
    #[schema(schema_with = super::openapi::schemas::coupon_duration)]
    pub duration: String,
    /// With `repeating` only: how many period charges it takes part of.
    #[schema(minimum = 1, maximum = 120)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub duration_in_periods: Option<i64>,
    pub applies_to: Option<AppliesToIn>,
    #[schema(minimum = 1)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub max_redemptions: Option<i64>,
    /// RFC 3339: no redemption from then on.
    #[schema(format = DateTime)]
    pub redeem_by: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// The plans and add-ons a coupon is limited to.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppliesToIn {
    pub plan_ids: Option<Vec<String>>,
    pub addon_ids: Option<Vec<String>>,
}

/// Body of `PATCH /v1/coupons/{id}`: its money terms never change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"valid": false})))]
pub struct CouponPatch {
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub name: Option<String>,
    /// false: no further redemptions (subscriptions that have it keep it).
    pub valid: Option<bool>,
}

/// A coupon.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "co_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "name": "Lanzamiento: 20 % tres meses",
    "percent_off_bps": 2000,
    "amount_off_cents": null,
    "duration": "repeating",
    "duration_in_periods": 3,
    "applies_to": {"plan_ids": ["plan_0193a1f3a0b17c2d8e9f0a1b2c3d4e5f"], "addon_ids": []},
    "max_redemptions": 100,
    "times_redeemed": 4,
    "redeem_by": null,
    "valid": true,
    "metadata": null,
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct CouponOut {
    pub id: String,
    pub name: String,
    pub percent_off_bps: Option<i64>,
    pub amount_off_cents: Option<i64>,
    #[schema(schema_with = super::openapi::schemas::coupon_duration)]
    pub duration: Duration,
    pub duration_in_periods: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub applies_to: Option<AppliesTo>,
    pub max_redemptions: Option<i64>,
    pub times_redeemed: i64,
    #[schema(format = DateTime)]
    pub redeem_by: Option<String>,
    /// Whether it can still be redeemed (not made invalid, before `redeem_by`, redemptions
    /// left).
    pub valid: bool,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Box<RawValue>>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl CouponOut {
    fn of(coupon: Coupon, now: i64) -> Self {
        let at = |ms: i64| rfc3339(from_millis(ms));
        Self {
            valid: coupon.valid_at(now),
            applies_to: coupon.applies_to(),
            metadata: metadata_value(coupon.metadata.as_deref()),
            redeem_by: coupon.redeem_by.map(at),
            created_at: at(coupon.created_at),
            id: coupon.id.into_string(),
            name: coupon.name,
            percent_off_bps: coupon.percent_off_bps,
            amount_off_cents: coupon.amount_off_cents,
            duration: coupon.duration,
            duration_in_periods: coupon.duration_in_periods,
            max_redemptions: coupon.max_redemptions,
            times_redeemed: coupon.times_redeemed,
        }
    }
}

/// An RFC 3339 instant after `now`, or a 400 naming `field`.
pub(super) fn future_instant(raw: &str, now: i64, field: &str) -> ApiResult<i64> {
    let at = chrono::DateTime::parse_from_rfc3339(raw)
        .map_err(|_| {
            ApiError::bad_request(format!("{field} must be an RFC 3339 datetime.")).param(field)
        })?
        .timestamp_millis();
    if at <= now {
        return Err(ApiError::bad_request(format!("{field} must be in the future.")).param(field));
    }
    Ok(at)
}

pub(super) fn positive(value: Option<i64>, field: &str, max: i64) -> ApiResult<Option<i64>> {
    match value {
        Some(v) if !(1..=max).contains(&v) => Err(ApiError::bad_request(format!(
            "{field} must be an integer from 1 to {max}."
        ))
        .param(field)),
        other => Ok(other),
    }
}

/// The plans and add-ons named, each the caller's (400 naming `applies_to` otherwise).
async fn applies_to(
    state: &AppState,
    caller: &Caller,
    given: Option<AppliesToIn>,
) -> ApiResult<Option<AppliesTo>> {
    let Some(given) = given else {
        return Ok(None);
    };
    let to = AppliesTo {
        plan_ids: given
            .plan_ids
            .unwrap_or_default()
            .into_iter()
            .map(PlanId::given)
            .collect(),
        addon_ids: given
            .addon_ids
            .unwrap_or_default()
            .into_iter()
            .map(AddonId::given)
            .collect(),
    };
    if to.plan_ids.is_empty() && to.addon_ids.is_empty() {
        return Err(
            ApiError::bad_request("applies_to must name at least one plan or add-on.")
                .param("applies_to"),
        );
    }
    let account = caller.account_id();
    let items = (to.plan_ids.iter().cloned().map(CatalogItemId::Plan))
        .chain(to.addon_ids.iter().cloned().map(CatalogItemId::Addon));
    for id in items {
        if state.store.catalog_item(account, &id).await?.is_none() {
            return Err(ApiError::bad_request(format!(
                "applies_to names `{id}`, which is no {} of this account.",
                CatalogKind::of(&id).as_str()
            ))
            .param("applies_to"));
        }
    }
    Ok(Some(to))
}

/// Create a coupon.
#[utoipa::path(post, path = "/v1/coupons", tag = "coupons", request_body = CouponIn,
    responses((status = 201, body = CouponOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_coupon(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CouponIn>,
) -> ApiResult<(StatusCode, Json<CouponOut>)> {
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    let name = super::catalog::parse_name(&body.name)?;
    let percent_off_bps = positive(body.percent_off_bps, "percent_off_bps", 10_000)?;
    let amount_off_cents = positive(
        body.amount_off_cents,
        "amount_off_cents",
        MAX_AMOUNT_OFF_CENTS,
    )?;
    if percent_off_bps.is_some() == amount_off_cents.is_some() {
        return Err(ApiError::bad_request(
            "Send exactly one of percent_off_bps and amount_off_cents.",
        )
        .param("percent_off_bps"));
    }
    let duration = Duration::parse(&body.duration).ok_or_else(|| {
        ApiError::bad_request(format!(
            "duration must be one of {}.",
            Duration::WORDS.join(", ")
        ))
        .param("duration")
    })?;
    let duration_in_periods =
        positive(body.duration_in_periods, "duration_in_periods", MAX_PERIODS)?;
    if (duration == Duration::Repeating) != duration_in_periods.is_some() {
        return Err(ApiError::bad_request(
            "duration_in_periods is required with repeating, and only with it.",
        )
        .param("duration_in_periods"));
    }
    let applies_to = applies_to(&state, &caller, body.applies_to).await?;
    let redeem_by = body
        .redeem_by
        .as_deref()
        .map(|raw| future_instant(raw, now, "redeem_by"))
        .transpose()?;
    let coupon = Coupon {
        id: CouponId::generate(),
        account_id: caller.0.id.clone(),
        name,
        percent_off_bps,
        amount_off_cents,
        duration,
        duration_in_periods,
        applies_to: applies_to
            .as_ref()
            .and_then(|to| serde_json::to_string(to).ok()),
        max_redemptions: positive(body.max_redemptions, "max_redemptions", i64::MAX)?,
        times_redeemed: 0,
        redeem_by,
        active: true,
        metadata: metadata_text(body.metadata)?,
        created_at: now,
    };
    let coupon = state.store.insert_coupon(coupon).await?;
    Ok((StatusCode::CREATED, Json(CouponOut::of(coupon, now))))
}

/// List coupons, newest first.
#[utoipa::path(get, path = "/v1/coupons", tag = "coupons", params(ListQuery),
    responses((status = 200, body = ListOut<CouponOut>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_coupons(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<CouponOut>>> {
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    let page = state.store.list_coupons(account, &query.page()?).await?;
    Ok(Json(ListOut::from_page(
        page,
        |c| c.id.to_string(),
        |c| CouponOut::of(c, now),
    )))
}

fn no_coupon(id: &CouponId) -> ApiError {
    ApiError::not_found(format!("No coupon with id `{id}`.")).param("id")
}

/// Get a coupon.
#[utoipa::path(get, path = "/v1/coupons/{id}", tag = "coupons",
    responses((status = 200, body = CouponOut), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn get_coupon(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<CouponOut>> {
    let id = CouponId::given(id);
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    let coupon = state
        .store
        .coupon(account, &id)
        .await?
        .ok_or_else(|| no_coupon(&id))?;
    Ok(Json(CouponOut::of(coupon, now)))
}

/// Rename a coupon or make it (in)valid; its money terms never change.
#[utoipa::path(patch, path = "/v1/coupons/{id}", tag = "coupons", request_body = CouponPatch,
    responses((status = 200, body = CouponOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn update_coupon(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CouponPatch>,
) -> ApiResult<Json<CouponOut>> {
    let id = CouponId::given(id);
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    let name = body
        .name
        .as_deref()
        .map(super::catalog::parse_name)
        .transpose()?;
    let coupon = state
        .store
        .update_coupon(account, &id, name, body.valid)
        .await?
        .ok_or_else(|| no_coupon(&id))?;
    Ok(Json(CouponOut::of(coupon, now)))
}
