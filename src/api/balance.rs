//! The prepaid balance (CONTRACT §6): `GET /v1/balance` and its ledger.

use crate::domain::money::CURRENCY;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiQuery;
use crate::http::list::{ListOut, ListQuery};
use crate::http::state::AppState;
use crate::ids::ChargeAttemptId;
use crate::store::balance::{Balance, BalanceTransaction};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_balance))
        .routes(routes!(list_balance_transactions))
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"available_cents": 48500000, "reserved_cents": 104850, "currency": "COP"})))]
pub struct BalanceOut {
    pub available_cents: i64,
    /// Fees reserved for charges whose outcome is not known yet.
    pub reserved_cents: i64,
    pub currency: &'static str,
}

impl From<Balance> for BalanceOut {
    fn from(balance: Balance) -> Self {
        Self {
            available_cents: balance.available_cents,
            reserved_cents: balance.reserved_cents,
            currency: CURRENCY,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "btx_0193a1fc3d4e7f5a8b6c7d8e9f0a1b2c",
    "type": "fee",
    "amount_cents": -104850,
    "charge_attempt_id": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
    "description": "Fee for charge ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f of 4990000 cents",
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct BalanceTransactionOut {
    pub id: String,
    /// top_up (an operator's) or fee (an approved charge's).
    #[serde(rename = "type")]
    #[schema(schema_with = super::openapi::schemas::balance_transaction_type)]
    pub kind: String,
    /// Signed change of the available balance, in cents.
    pub amount_cents: i64,
    pub charge_attempt_id: Option<String>,
    pub description: String,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<BalanceTransaction> for BalanceTransactionOut {
    fn from(row: BalanceTransaction) -> Self {
        Self {
            created_at: rfc3339(from_millis(row.created_at)),
            id: row.id.into_string(),
            kind: row.kind,
            amount_cents: row.amount_cents,
            charge_attempt_id: row.charge_attempt_id.map(ChargeAttemptId::into_string),
            description: row.description,
        }
    }
}

/// The caller's prepaid balance.
#[utoipa::path(get, path = "/v1/balance", tag = "balance",
    responses((status = 200, body = BalanceOut), (status = 401, body = ErrorBody)))]
async fn get_balance(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<BalanceOut>> {
    let balance = state
        .store
        .balance(caller.account_id())
        .await?
        .ok_or(ApiError::Authentication)?;
    Ok(Json(balance.into()))
}

/// The ledger of balance movements, newest first.
#[utoipa::path(get, path = "/v1/balance/transactions", tag = "balance", params(ListQuery),
    responses((status = 200, body = ListOut<BalanceTransactionOut>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_balance_transactions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<BalanceTransactionOut>>> {
    let page = state
        .store
        .list_balance_transactions(caller.account_id(), &query.page()?)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |row| row.id.to_string(),
        BalanceTransactionOut::from,
    )))
}
