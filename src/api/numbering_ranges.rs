//! DIAN's numbering ranges of an account (CONTRACT §12): `POST` and `GET
//! /v1/account/invoicing/numbering-ranges`. A range is validated whole before anything is
//! written, may be added with DIAN on or off, and numbers the invoices awaiting one (in issue
//! order) in the transaction that adds it (`Store::create_dian_range`). Its technical key is
//! kept for the CUFEs and never returned.

use crate::domain::dian::{RangeUse, colombian_date, is_range_prefix};
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::list::ListOut;
use crate::http::state::AppState;
use crate::store::dian::{CREDIT_NOTE_PREFIX, DianRange, NewRange};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_numbering_range, list_numbering_ranges))
}

/// A numbering range DIAN authorised (its resolution).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "resolution_number": "18760000001",
    "prefix": "SETP",
    "from": 990000000,
    "to": 995000000,
    "valid_from": "2026-01-01",
    "valid_to": "2027-12-31",
    "technical_key": "fc8eac422eba16e22ffd8c6f94b3f40a6e38162c"
})))]
pub struct RangeIn {
    /// The resolution's number: 1 to 40 digits.
    #[schema(pattern = "^[0-9]{1,40}$")]
    pub resolution_number: String,
    /// 1 to 4 letters or digits (`NC` is the credit notes').
    #[schema(pattern = "^[A-Za-z0-9]{1,4}$")]
    pub prefix: String,
    #[schema(minimum = 1, maximum = 999_999_999_999_i64)]
    pub from: i64,
    /// At least `from`.
    #[schema(minimum = 1, maximum = 999_999_999_999_i64)]
    pub to: i64,
    #[schema(format = Date)]
    pub valid_from: String,
    #[schema(format = Date)]
    pub valid_to: String,
    /// The range's technical key (the CUFE's): stored, never returned.
    #[schema(max_length = 200)]
    pub technical_key: String,
}

impl std::fmt::Debug for RangeIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeIn")
            .field("resolution_number", &self.resolution_number)
            .field("prefix", &self.prefix)
            .field("from", &self.from)
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

/// A numbering range and what is left of it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "nr_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b",
    "resolution_number": "18760000001",
    "prefix": "SETP",
    "from": 990000000,
    "to": 995000000,
    "valid_from": "2026-01-01",
    "valid_to": "2027-12-31",
    "next_number": 990000001,
    "remaining": 5000000,
    "warning": false,
    "created_at": "2026-11-24T09:15:42.318Z"
})))]
pub struct RangeOut {
    pub id: String,
    pub resolution_number: String,
    pub prefix: String,
    pub from: i64,
    pub to: i64,
    #[schema(format = Date)]
    pub valid_from: String,
    #[schema(format = Date)]
    pub valid_to: String,
    /// The number the next invoice takes (`to + 1` once all are taken).
    pub next_number: i64,
    /// Numbers not taken yet.
    pub remaining: i64,
    /// Whether 90 % of it is used or it ends within 30 days.
    pub warning: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl RangeOut {
    fn of(range: DianRange) -> Self {
        let used = RangeUse::of(
            range.range_from,
            range.range_to,
            range.next_number,
            range.valid_to_date(),
            colombian_date(chrono::Utc::now()),
        );
        Self {
            remaining: (range.range_to - range.next_number + 1).max(0),
            warning: used.needs_warning(),
            created_at: rfc3339(from_millis(range.created_at)),
            id: range.id.into_string(),
            resolution_number: range.resolution_number,
            prefix: range.prefix,
            from: range.range_from,
            to: range.range_to,
            valid_from: range.valid_from,
            valid_to: range.valid_to,
            next_number: range.next_number,
        }
    }
}

fn date(raw: &str, param: &str) -> ApiResult<NaiveDate> {
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .filter(|_| raw.len() == 10)
        .ok_or_else(|| {
            ApiError::bad_request(format!("{param} must be a date, YYYY-MM-DD.")).param(param)
        })
}

/// The range of `body`, or the first thing wrong with it.
fn parse(body: RangeIn) -> ApiResult<NewRange> {
    let resolution = body.resolution_number.trim();
    if resolution.is_empty()
        || resolution.len() > 40
        || !resolution.chars().all(|c| c.is_ascii_digit())
    {
        return Err(
            ApiError::bad_request("resolution_number must be 1 to 40 digits.")
                .param("resolution_number"),
        );
    }
    if !is_range_prefix(&body.prefix) {
        return Err(
            ApiError::bad_request("prefix must be 1 to 4 letters or digits.").param("prefix"),
        );
    }
    if body.prefix == CREDIT_NOTE_PREFIX {
        return Err(ApiError::bad_request(format!(
            "prefix {CREDIT_NOTE_PREFIX} is the credit notes' series."
        ))
        .param("prefix"));
    }
    if body.from < 1 || body.from > 999_999_999_999 {
        return Err(
            ApiError::bad_request("from must be between 1 and 999999999999.").param("from"),
        );
    }
    if body.to < body.from || body.to > 999_999_999_999 {
        return Err(
            ApiError::bad_request("to must be at least from and at most 999999999999.").param("to"),
        );
    }
    let valid_from = date(&body.valid_from, "valid_from")?;
    let valid_to = date(&body.valid_to, "valid_to")?;
    if valid_to < valid_from {
        return Err(
            ApiError::bad_request("valid_to must not be before valid_from.").param("valid_to"),
        );
    }
    let key = body.technical_key.trim();
    if key.is_empty() || key.len() > 200 || key.chars().any(char::is_whitespace) {
        return Err(ApiError::bad_request(
            "technical_key must have 1 to 200 characters, none of them spaces.",
        )
        .param("technical_key"));
    }
    Ok(NewRange {
        resolution_number: resolution.to_owned(),
        prefix: body.prefix,
        from: body.from,
        to: body.to,
        valid_from,
        valid_to,
        technical_key: key.to_owned(),
    })
}

/// Add a numbering range; invoices awaiting one are numbered from it at once, in issue order.
#[utoipa::path(post, path = "/v1/account/invoicing/numbering-ranges", tag = "account",
    request_body = RangeIn,
    responses((status = 201, body = RangeOut), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Its numbers overlap another range's of the same prefix.")))]
async fn create_numbering_range(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<RangeIn>,
) -> ApiResult<(StatusCode, Json<RangeOut>)> {
    let new = parse(body)?;
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    let range = state
        .store
        .create_dian_range(account, new, now)
        .await?
        .map_err(|why| {
            ApiError::conflict(format!("The range cannot be added: {why}.")).param("from")
        })?;
    Ok((StatusCode::CREATED, Json(RangeOut::of(range))))
}

/// The account's numbering ranges, oldest first, with what is left of each.
#[utoipa::path(get, path = "/v1/account/invoicing/numbering-ranges", tag = "account",
    responses((status = 200, body = ListOut<RangeOut>)))]
async fn list_numbering_ranges(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<ListOut<RangeOut>>> {
    let ranges = state.store.dian_ranges(caller.account_id()).await?;
    Ok(Json(ListOut {
        data: ranges.into_iter().map(RangeOut::of).collect(),
        has_more: false,
        next_cursor: None,
    }))
}
