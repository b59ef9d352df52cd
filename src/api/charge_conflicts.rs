//! `GET /admin/charge-conflicts`: processor reports that contradicted their charge and moved
//! no money (CONTRACT §7), for an operator to look into: a final status that contradicts the
//! recorded outcome (`outcome`), or an event whose amount, currency or transaction id are not
//! the charge's (`mismatch`). The event that carried one stays in the processor events, by
//! its checksum. The dashboard shows how many there are.

use super::error::{ApiResult, ErrorBody};
use super::extract::ApiQuery;
use super::list::{ListOut, ListQuery};
use super::state::AppState;
use crate::domain::time::{from_millis, rfc3339};
use crate::store::conflicts::ChargeConflict;
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn admin_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_charge_conflicts))
}

/// One processor report that did not fit its charge.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChargeConflictOut {
    pub id: String,
    pub account_id: String,
    pub charge_id: String,
    /// `outcome` or `mismatch`.
    pub kind: String,
    /// The charge's status when the report came.
    pub recorded_status: String,
    /// The processor's raw status in the report (APPROVED, DECLINED, …).
    pub reported_status: Option<String>,
    pub transaction_id: Option<String>,
    pub amount_cents: Option<i64>,
    pub currency: Option<String>,
    /// The checksum of the processor event that carried it, when it came as an event.
    pub event_checksum: Option<String>,
    pub detail: String,
    pub created_at: String,
}

fn conflict_out(row: ChargeConflict) -> ChargeConflictOut {
    ChargeConflictOut {
        created_at: rfc3339(from_millis(row.created_at)),
        id: row.id,
        account_id: row.account_id,
        charge_id: row.charge_id,
        kind: row.kind,
        recorded_status: row.recorded_status,
        reported_status: row.reported_status,
        transaction_id: row.transaction_id,
        amount_cents: row.amount_cents,
        currency: row.currency,
        event_checksum: row.event_checksum,
        detail: row.detail,
    }
}

/// Charge conflicts over every account, newest first.
#[utoipa::path(get, path = "/admin/charge-conflicts", tag = "admin", params(ListQuery),
    responses((status = 200, body = ListOut<ChargeConflictOut>), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody)))]
async fn list_charge_conflicts(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<ChargeConflictOut>>> {
    let page = state.store.list_charge_conflicts(&query.page()?).await?;
    Ok(Json(ListOut::from_page(
        page,
        |row| row.id.clone(),
        conflict_out,
    )))
}
