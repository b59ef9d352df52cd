//! Charges and their refunds: `GET /v1/charges` (filters `subscription_id`, `customer_id`,
//! `status`; cursor pages), `GET /v1/charges/{id}`, `POST /v1/charges/{id}/refunds`,
//! `GET /v1/charges/{id}/refunds` and `GET /v1/refunds/{id}`. A refund's work is `refunds`'.

use super::openapi::schemas::CHARGE_STATUSES;
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::{ChargeStatus, RefundStatus};
use crate::domain::money::CURRENCY;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery};
use crate::http::list::{ListOut, ListQuery, page_request};
use crate::http::state::AppState;
use crate::ids::{ChargeAttemptId, CustomerId, RefundId, SubscriptionId};
use crate::refunds::{RefundError, RefundRequest};
use crate::store::charges::ChargeAttempt;
use crate::store::refunds::{BeginRefundError, ChargeFilter, Refund};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_charges))
        .routes(routes!(get_charge))
        .routes(routes!(create_refund, list_refunds))
        .routes(routes!(get_refund))
}

/// The longest `reason` kept.
const MAX_REASON: usize = 500;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ChargeListQuery {
    pub subscription_id: Option<String>,
    pub customer_id: Option<String>,
    /// pending, approved, declined, error or voided.
    #[param(schema_with = super::openapi::schemas::charge_status)]
    pub status: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// A charge attempt: one transaction posted to the processor under the charge's id.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
    "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "amount_cents": 4990000,
    "currency": "COP",
    "status": "approved",
    "processor_status": "APPROVED",
    "purpose": "renewal",
    "period_start": "2026-11-02T14:30:00Z",
    "fee_cents": 104850,
    "refunded_amount_cents": 0,
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct ChargeOut {
    pub id: String,
    /// Null for a checkout's payment that was never approved.
    pub subscription_id: Option<String>,
    pub customer_id: String,
    pub amount_cents: i64,
    pub currency: String,
    #[schema(schema_with = super::openapi::schemas::charge_status)]
    pub status: ChargeStatus,
    /// The processor's raw status (APPROVED, DECLINED, …), once it gave one.
    pub processor_status: Option<String>,
    /// Why a declined charge was declined: `insufficient_funds`, `expired_card`,
    /// `stolen_card`, `lost_card`, `invalid_card`, `do_not_honor`, `closed_account`,
    /// `try_again_later`, `generic_decline`, or `network_limit` (a retry the card network's
    /// reattempt limit stopped: never sent, `processor_status` null). Null otherwise.
    pub decline_code: Option<String>,
    #[schema(schema_with = super::openapi::schemas::charge_purpose)]
    pub purpose: ChargePurpose,
    /// The start of the period the charge pays, for a period's charge.
    #[schema(format = DateTime)]
    pub period_start: Option<String>,
    /// Our service fee: deducted from the balance when approved (reserved while pending).
    pub fee_cents: i64,
    /// What approved refunds gave back.
    pub refunded_amount_cents: i64,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<ChargeAttempt> for ChargeOut {
    fn from(charge: ChargeAttempt) -> Self {
        Self {
            created_at: rfc3339(from_millis(charge.created_at)),
            period_start: charge.period_start.map(|at| rfc3339(from_millis(at))),
            id: charge.id.into_string(),
            subscription_id: charge.subscription_id.map(SubscriptionId::into_string),
            customer_id: charge.customer_id.into_string(),
            amount_cents: charge.amount_cents,
            currency: CURRENCY.to_owned(),
            status: charge.status,
            processor_status: charge.processor_status,
            decline_code: charge.decline_code.map(|code| code.as_str().to_owned()),
            purpose: charge.purpose,
            fee_cents: charge.fee_cents,
            refunded_amount_cents: charge.refunded_cents,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"amount_cents": 1000000, "reason": "The customer was charged twice this month."})))]
pub struct RefundIn {
    /// Cents to give back; by default all that is left of the charge.
    #[schema(minimum = 1)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub amount_cents: Option<i64>,
    /// Why, kept and sent to the processor.
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "re_0193a1fe5f6a7b7c8d8e9f0a1b2c3d4e",
    "charge_id": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
    "amount_cents": 1000000,
    "status": "approved",
    "reason": "The customer was charged twice this month.",
    "failure_message": null,
    "created_at": "2026-11-24T09:15:42.318Z"
})))]
pub struct RefundOut {
    pub id: String,
    pub charge_id: String,
    pub amount_cents: i64,
    #[schema(schema_with = super::openapi::schemas::refund_status)]
    pub status: RefundStatus,
    pub reason: Option<String>,
    /// Why the processor declined it, when it did.
    pub failure_message: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<Refund> for RefundOut {
    fn from(refund: Refund) -> Self {
        Self {
            created_at: rfc3339(from_millis(refund.created_at)),
            failure_message: (refund.status == RefundStatus::Declined)
                .then_some(refund.processor_message)
                .flatten(),
            id: refund.id.into_string(),
            charge_id: refund.charge_id.into_string(),
            amount_cents: refund.amount_cents,
            status: refund.status,
            reason: refund.reason,
        }
    }
}

fn no_charge(id: &ChargeAttemptId) -> ApiError {
    ApiError::not_found(format!("No charge with id `{id}`.")).param("id")
}

/// The account's charges, newest first.
#[utoipa::path(get, path = "/v1/charges", tag = "charges", params(ChargeListQuery),
    responses((status = 200, body = ListOut<ChargeOut>), (status = 400, body = ErrorBody)))]
async fn list_charges(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ChargeListQuery>,
) -> ApiResult<Json<ListOut<ChargeOut>>> {
    if let Some(status) = &query.status
        && !CHARGE_STATUSES.contains(&status.as_str())
    {
        return Err(ApiError::bad_request(format!(
            "status must be one of {}.",
            CHARGE_STATUSES.join(", ")
        ))
        .param("status"));
    }
    let page = page_request(query.limit, query.cursor.clone())?;
    let filter = ChargeFilter {
        subscription_id: query.subscription_id.map(SubscriptionId::given),
        customer_id: query.customer_id.map(CustomerId::given),
        status: query.status,
    };
    let page = state
        .store
        .list_charges(caller.account_id(), &filter, &page)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |c| c.id.to_string(),
        ChargeOut::from,
    )))
}

/// One charge.
#[utoipa::path(get, path = "/v1/charges/{id}", tag = "charges",
    responses((status = 200, body = ChargeOut), (status = 404, body = ErrorBody)))]
async fn get_charge(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<ChargeOut>> {
    let id = ChargeAttemptId::given(id);
    let charge = state
        .store
        .charge(caller.account_id(), &id)
        .await?
        .ok_or_else(|| no_charge(&id))?;
    Ok(Json(charge.into()))
}

/// Refund an approved charge, in full or in part. The answer is the refund as it stands after
/// a short wait: `approved`, `declined`, or `pending` (it settles in the background and
/// `charge.refunded` follows when approved). One refund of a charge at a time (409 while one
/// is pending). Our service fee is not returned.
#[utoipa::path(post, path = "/v1/charges/{id}/refunds", tag = "charges", request_body = RefundIn,
    responses((status = 201, body = RefundOut), (status = 400, body = ErrorBody, description = "invalid_request: the amount is over what is left to refund, or the charge is not approved"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "a refund of this charge is pending"),
        (status = 422, body = ErrorBody, description = "processor_error: the processor refused the refund; nothing was refunded")))]
async fn create_refund(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RefundIn>,
) -> ApiResult<(StatusCode, Json<RefundOut>)> {
    let id = ChargeAttemptId::given(id);
    if let Some(amount) = body.amount_cents
        && amount < 1
    {
        return Err(
            ApiError::bad_request("amount_cents must be a positive integer.").param("amount_cents"),
        );
    }
    let reason = body
        .reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    if reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > MAX_REASON)
    {
        return Err(ApiError::bad_request(format!(
            "reason must be at most {MAX_REASON} characters."
        ))
        .param("reason"));
    }
    let request = RefundRequest {
        charge_id: id.clone(),
        amount_cents: body.amount_cents,
        reason,
    };
    // Its own task: a client that hangs up does not cut the refund off between recording it
    // and posting it (the reconciler would find it either way, later).
    let refunds = state.runtime.refunds().clone();
    let account = caller.0.clone();
    let outcome = tokio::spawn(async move { refunds.refund(&account, request).await })
        .await
        .map_err(|err| ApiError::Internal(Box::new(err)))?;
    match outcome {
        Ok(refund) => Ok((StatusCode::CREATED, Json(refund.into()))),
        Err(RefundError::Begin(err)) => Err(match err {
            BeginRefundError::NotFound => no_charge(&id),
            BeginRefundError::NotApproved(_) | BeginRefundError::NothingLeft => {
                ApiError::bad_request(format!("{err}.")).param("id")
            }
            BeginRefundError::OverRemaining { .. } => {
                ApiError::bad_request(format!("{err}.")).param("amount_cents")
            }
            BeginRefundError::InFlight => ApiError::conflict(format!("{err}.")),
            BeginRefundError::Store(err) => err.into(),
        }),
        Err(RefundError::Refused(why)) => Err(ApiError::Processor(why)),
        Err(RefundError::Store(err)) => Err(err.into()),
    }
}

/// A charge's refunds, newest first.
#[utoipa::path(get, path = "/v1/charges/{id}/refunds", tag = "charges", params(ListQuery),
    responses((status = 200, body = ListOut<RefundOut>), (status = 404, body = ErrorBody)))]
async fn list_refunds(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<RefundOut>>> {
    let id = ChargeAttemptId::given(id);
    let account = caller.account_id();
    if state.store.charge(account, &id).await?.is_none() {
        return Err(no_charge(&id));
    }
    let page = state
        .store
        .refunds_of_charge(account, &id, &query.page()?)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |r| r.id.to_string(),
        RefundOut::from,
    )))
}

/// One refund.
#[utoipa::path(get, path = "/v1/refunds/{id}", tag = "charges",
    responses((status = 200, body = RefundOut), (status = 404, body = ErrorBody)))]
async fn get_refund(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<RefundOut>> {
    let id = RefundId::given(id);
    let refund = state
        .store
        .refund(caller.account_id(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No refund with id `{id}`.")).param("id"))?;
    Ok(Json(refund.into()))
}
