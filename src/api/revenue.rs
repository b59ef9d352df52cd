//! Revenue (CONTRACT §16): the MRR ledger, `GET /v1/revenue/movements`, and a Colombian
//! month's figures, `GET /v1/revenue/summary?month=YYYY-MM`. The rules are in `domain::mrr`
//! and the movements are written by `store::mrr`; this only reads them. The exports are not
//! here.

use crate::domain::mrr::{MovementType, colombian_month, parse_month};
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiQuery;
use crate::http::list::{ListOut, page_request};
use crate::http::state::AppState;
use crate::ids::SubscriptionId;
use crate::store::mrr::MrrMovement;
use crate::store::revenue::{MovementFilter, Summary};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_movements))
        .routes(routes!(revenue_summary))
}

/// One change of a subscription's MRR.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "mrm_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b",
    "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "type": "expansion", "mrr_delta_cents": 4202000, "mrr_after_cents": 8403000,
    "reason": "quantity", "occurred_at": "2026-12-02T14:30:00Z"
})))]
pub struct MrrMovementOut {
    pub id: String,
    pub subscription_id: String,
    pub customer_id: String,
    /// `new`, `expansion`, `contraction`, `churn` or `reactivation`.
    #[serde(rename = "type")]
    #[schema(schema_with = crate::api::openapi::schemas::movement_type)]
    pub kind: String,
    /// After − before (cents, signed; never 0).
    pub mrr_delta_cents: i64,
    /// The subscription's MRR after it (cents, net of IVA and of its discount, per month).
    #[schema(minimum = 0)]
    pub mrr_after_cents: i64,
    /// `started`, `plan_change`, `quantity`, `discount`, `paused`, `resumed`, `voluntary` or
    /// `failed_payment`.
    #[schema(schema_with = crate::api::openapi::schemas::movement_reason)]
    pub reason: String,
    #[schema(format = DateTime)]
    pub occurred_at: String,
}

impl From<MrrMovement> for MrrMovementOut {
    fn from(movement: MrrMovement) -> Self {
        Self {
            id: movement.id.into_string(),
            subscription_id: movement.subscription_id.into_string(),
            customer_id: movement.customer_id.into_string(),
            kind: movement.kind.as_str().to_owned(),
            mrr_delta_cents: movement.mrr_delta_cents,
            mrr_after_cents: movement.mrr_after_cents,
            reason: movement.reason.as_str().to_owned(),
            occurred_at: rfc3339(from_millis(movement.occurred_at)),
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MovementListQuery {
    pub subscription_id: Option<String>,
    #[serde(rename = "type")]
    #[param(rename = "type", schema_with = crate::api::openapi::schemas::optional_movement_type)]
    pub kind: Option<String>,
    /// Movements that occurred at or after this instant (RFC 3339).
    #[param(format = DateTime)]
    pub from: Option<String>,
    /// Movements that occurred at or before this instant (RFC 3339).
    #[param(format = DateTime)]
    pub to: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// An RFC 3339 instant as ms, or a 400 naming `field`.
fn instant(raw: Option<&str>, field: &str) -> ApiResult<Option<i64>> {
    raw.map(|raw| {
        chrono::DateTime::parse_from_rfc3339(raw)
            .map(|at| at.timestamp_millis())
            .map_err(|_| {
                ApiError::bad_request(format!("{field} must be an RFC 3339 datetime.")).param(field)
            })
    })
    .transpose()
}

/// The caller's MRR movements, newest first: one per change of a subscription's MRR.
#[utoipa::path(get, path = "/v1/revenue/movements", tag = "revenue", params(MovementListQuery),
    responses((status = 200, body = ListOut<MrrMovementOut>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_movements(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<MovementListQuery>,
) -> ApiResult<Json<ListOut<MrrMovementOut>>> {
    let kind = match query.kind.as_deref() {
        None => None,
        Some(raw) => Some(MovementType::parse(raw).ok_or_else(|| {
            ApiError::bad_request(format!(
                "type must be one of {}.",
                MovementType::WORDS.join(", ")
            ))
            .param("type")
        })?),
    };
    let filter = MovementFilter {
        subscription_id: query.subscription_id.map(SubscriptionId::given),
        kind,
        from: instant(query.from.as_deref(), "from")?,
        to: instant(query.to.as_deref(), "to")?,
    };
    let page = page_request(query.limit, query.cursor)?;
    let page = state
        .store
        .list_movements(caller.account_id(), &filter, &page)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |m| m.id.to_string(),
        MrrMovementOut::from,
    )))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SummaryQuery {
    /// The Colombian calendar month (America/Bogota), `YYYY-MM`.
    #[param(pattern = "^[0-9]{4}-(0[1-9]|1[0-2])$", example = "2026-12")]
    pub month: String,
}

/// A Colombian month's revenue figures. `mrr_end_cents` = `mrr_start_cents` + `new_cents` +
/// `expansion_cents` + `reactivation_cents` − `contraction_cents` − `churn_voluntary_cents` −
/// `churn_failed_payment_cents`, exactly; the current month is as of now.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "month": "2026-12", "mrr_start_cents": 12605000, "mrr_end_cents": 14706000,
    "new_cents": 4202000, "expansion_cents": 840000, "contraction_cents": 420000,
    "churn_voluntary_cents": 2101000, "churn_failed_payment_cents": 0,
    "reactivation_cents": 1580000, "active_subscriptions": 7, "recovered_charges": 1,
    "failed_charges": 2, "invoiced_cents": 17500000, "iva_cents": 2794118,
    "credited_cents": 0
})))]
pub struct RevenueSummaryOut {
    /// `YYYY-MM`.
    pub month: String,
    pub mrr_start_cents: i64,
    pub mrr_end_cents: i64,
    pub new_cents: i64,
    pub expansion_cents: i64,
    /// A positive amount.
    pub contraction_cents: i64,
    /// A positive amount.
    pub churn_voluntary_cents: i64,
    /// A positive amount.
    pub churn_failed_payment_cents: i64,
    pub reactivation_cents: i64,
    /// `active` or `past_due` at the month's end (now, for the current month).
    pub active_subscriptions: i64,
    /// Approved charges of the month for a period an earlier charge failed to collect.
    pub recovered_charges: i64,
    /// Charges declined in the month.
    pub failed_charges: i64,
    /// The totals of the invoices issued in the month.
    pub invoiced_cents: i64,
    /// Their IVA.
    pub iva_cents: i64,
    /// The totals of the credit notes issued in the month.
    pub credited_cents: i64,
}

impl RevenueSummaryOut {
    fn of(month: String, summary: Summary) -> Self {
        Self {
            month,
            mrr_start_cents: summary.mrr_start_cents,
            mrr_end_cents: summary.mrr_end_cents,
            new_cents: summary.new_cents,
            expansion_cents: summary.expansion_cents,
            contraction_cents: summary.contraction_cents,
            churn_voluntary_cents: summary.churn_voluntary_cents,
            churn_failed_payment_cents: summary.churn_failed_payment_cents,
            reactivation_cents: summary.reactivation_cents,
            active_subscriptions: summary.active_subscriptions,
            recovered_charges: summary.recovered_charges,
            failed_charges: summary.failed_charges,
            invoiced_cents: summary.invoiced_cents,
            iva_cents: summary.iva_cents,
            credited_cents: summary.credited_cents,
        }
    }
}

/// A Colombian calendar month's MRR movements, charges, invoices and credit notes.
#[utoipa::path(get, path = "/v1/revenue/summary", tag = "revenue", params(SummaryQuery),
    responses((status = 200, body = RevenueSummaryOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn revenue_summary(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<SummaryQuery>,
) -> ApiResult<Json<RevenueSummaryOut>> {
    let month = parse_month(&query.month)
        .and_then(|(year, month)| colombian_month(year, month))
        .ok_or_else(|| {
            ApiError::bad_request("month must be a month as YYYY-MM (01 to 12).").param("month")
        })?;
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    let summary = state.store.revenue_summary(account, month, now).await?;
    Ok(Json(RevenueSummaryOut::of(query.month, summary)))
}
