//! Accounts: the operator's admin API and `GET /v1/account` (CONTRACT §2).

use super::balance::BalanceOut;
use super::openapi::schemas::{constrain, null, one_of_values};
use crate::accounts::{
    AccountError, AccountSpec, ProcessorSpec, create_account, processor_base_url,
};
use crate::domain::money::FeeSchedule;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;
use crate::ids::AccountId;
use crate::store::accounts::{Account, AccountLimitsPatch};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn admin_router() -> OpenApiRouter<AppState> {
    let mut router = OpenApiRouter::new()
        .routes(routes!(create_account_admin))
        .routes(routes!(update_account_limits))
        .routes(routes!(top_up));
    constrain(router.get_openapi_mut(), "AccountIn", one_mode());
    router
}

/// The two kinds of account (`accounts::check_processor`): a sandbox account, with `_test_`
/// processor keys or none (it then gets fresh keys at the in-process sandbox), or a live one,
/// with `_prod_` keys and the processor's URL.
fn one_mode() -> Schema {
    let processor = |mode: &str, base_url: Object| {
        let text = || ObjectBuilder::new().schema_type(Type::String);
        ObjectBuilder::new()
            .property("base_url", base_url)
            .property("public_key", text().pattern(Some(format!("^pub_{mode}_"))))
            .property("private_key", text().pattern(Some(format!("^prv_{mode}_"))))
            .property("events_secret", text().min_length(Some(1)))
            .property("integrity_secret", text().min_length(Some(1)))
    };
    let http_url = |types: SchemaType| {
        ObjectBuilder::new()
            .schema_type(types)
            .pattern(Some("^https?://"))
            .build()
    };
    let sandbox = ObjectBuilder::new()
        .property("sandbox", one_of_values([true]))
        .property(
            "processor",
            OneOfBuilder::new()
                .item(processor(
                    "test",
                    http_url(SchemaType::from_iter([Type::String, Type::Null])),
                ))
                .item(null()),
        )
        .required("sandbox");
    let live = ObjectBuilder::new()
        .property("sandbox", one_of_values([false]))
        .property(
            "processor",
            processor("prod", http_url(Type::String.into())).required("base_url"),
        )
        .required("processor");
    OneOfBuilder::new().item(sandbox).item(live).build().into()
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_account))
}

/// `Debug` leaves the private key and both secrets out (see the impl below).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "base_url": "https://sandbox.wompi.co/v1",
    "public_key": "pub_test_Q5yDA9xoKdePzhSGeVe9HAez7HgGORGf",
    "private_key": "prv_test_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    "events_secret": "test_events_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    "integrity_secret": "test_integrity_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"
})))]
pub struct ProcessorIn {
    /// Omit for the in-process sandbox processor (sandbox accounts only).
    pub base_url: Option<String>,
    pub public_key: String,
    pub private_key: String,
    pub events_secret: String,
    pub integrity_secret: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"percent_bps": 150, "fixed_cents": 30000})))]
pub struct FeeIn {
    #[schema(minimum = 0, maximum = 10_000)]
    #[serde(deserialize_with = "crate::http::extract::whole")]
    pub percent_bps: i64,
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::http::extract::whole")]
    pub fixed_cents: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "name": "Tienda Andina",
    "sandbox": true,
    "fee": {"percent_bps": 150, "fixed_cents": 30000},
    "rate_limit_per_minute": 100,
    "status_rate_limit_per_minute": 20
})))]
pub struct AccountIn {
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub name: String,
    #[serde(default)]
    pub sandbox: bool,
    pub processor: Option<ProcessorIn>,
    pub fee: Option<FeeIn>,
    /// Requests per 60 s over the API (default 100; 0 = unlimited).
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub rate_limit_per_minute: Option<i64>,
    /// Requests per 60 s on the checkout status route (default 20; 0 = unlimited).
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub status_rate_limit_per_minute: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"rate_limit_per_minute": 600, "status_rate_limit_per_minute": 60})))]
pub struct AccountLimitsIn {
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub rate_limit_per_minute: Option<i64>,
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub status_rate_limit_per_minute: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "base_url": "https://billing.example.co/sandbox/processor/v1",
    "public_key": "pub_test_Q5yDA9xoKdePzhSGeVe9HAez7HgGORGf"
})))]
pub struct ProcessorOut {
    pub base_url: String,
    pub public_key: String,
}

/// `Debug` leaves the API key out (see the impl below).
#[derive(Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "acct_0193a1f2c4d57e8f9a0b1c2d3e4f5a6b",
    "name": "Tienda Andina",
    "sandbox": true,
    "api_key": "sk_test_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    "processor": {
        "base_url": "https://billing.example.co/sandbox/processor/v1",
        "public_key": "pub_test_Q5yDA9xoKdePzhSGeVe9HAez7HgGORGf"
    },
    "fee": {"percent_bps": 150, "fixed_cents": 30000},
    "rate_limit_per_minute": 100,
    "status_rate_limit_per_minute": 20,
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct AccountOut {
    pub id: String,
    pub name: String,
    pub sandbox: bool,
    /// Present only in the creation response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    pub processor: ProcessorOut,
    pub fee: FeeOut,
    pub rate_limit_per_minute: i64,
    pub status_rate_limit_per_minute: i64,
    #[schema(format = DateTime)]
    pub created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"percent_bps": 150, "fixed_cents": 30000})))]
pub struct FeeOut {
    pub percent_bps: i64,
    pub fixed_cents: i64,
}

impl AccountOut {
    pub fn new(account: &Account, api_key: Option<String>, public_url: &str) -> Self {
        Self {
            id: account.id.to_string(),
            name: account.name.clone(),
            sandbox: account.sandbox,
            api_key,
            processor: ProcessorOut {
                base_url: processor_base_url(account, public_url),
                public_key: account.processor_public_key.clone(),
            },
            fee: FeeOut {
                percent_bps: account.fee_percent_bps,
                fixed_cents: account.fee_fixed_cents,
            },
            rate_limit_per_minute: account.rate_limit_per_minute,
            status_rate_limit_per_minute: account.status_rate_limit_per_minute,
            created_at: rfc3339(from_millis(account.created_at)),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"amount_cents": 50000000})))]
pub struct TopUpIn {
    /// Integer cents of COP, > 0.
    #[schema(minimum = 1, maximum = 1e12)]
    #[serde(deserialize_with = "crate::http::extract::whole")]
    pub amount_cents: i64,
}

/// Create an account (operator only). The API key is shown in this response only.
#[utoipa::path(post, path = "/admin/accounts", tag = "admin", request_body = AccountIn,
    responses((status = 201, body = AccountOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_account_admin(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<AccountIn>,
) -> ApiResult<(StatusCode, Json<AccountOut>)> {
    let spec = AccountSpec {
        name: body.name,
        sandbox: body.sandbox,
        processor: body.processor.map(|p| ProcessorSpec {
            base_url: p.base_url,
            public_key: p.public_key,
            private_key: p.private_key,
            events_secret: p.events_secret,
            integrity_secret: p.integrity_secret,
        }),
        fee: body.fee.map(|fee| FeeSchedule {
            percent_bps: fee.percent_bps,
            fixed_cents: fee.fixed_cents,
        }),
        rate_limit_per_minute: body.rate_limit_per_minute,
        status_rate_limit_per_minute: body.status_rate_limit_per_minute,
    };
    let created = create_account(&state.store, spec, chrono::Utc::now().timestamp_millis())
        .await
        .map_err(|err| match err {
            AccountError::Invalid { message, param } => ApiError::bad_request(message).param(param),
            AccountError::Store(err) => err.into(),
        })?;
    state.register_sandbox_merchant(&created.account);
    let out = AccountOut::new(
        &created.account,
        Some(created.api_key),
        &state.config.public_url(),
    );
    Ok((StatusCode::CREATED, Json(out)))
}

/// Change an account's rate limits (operator only; 0 = unlimited).
#[utoipa::path(patch, path = "/admin/accounts/{id}", tag = "admin", request_body = AccountLimitsIn,
    responses((status = 200, body = AccountOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn update_account_limits(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AccountLimitsIn>,
) -> ApiResult<Json<AccountOut>> {
    for (value, param) in [
        (body.rate_limit_per_minute, "rate_limit_per_minute"),
        (
            body.status_rate_limit_per_minute,
            "status_rate_limit_per_minute",
        ),
    ] {
        if value.is_some_and(|v| v < 0) {
            return Err(ApiError::bad_request(format!("{param} must be ≥ 0.")).param(param));
        }
    }
    let patch = AccountLimitsPatch {
        rate_limit_per_minute: body.rate_limit_per_minute,
        status_rate_limit_per_minute: body.status_rate_limit_per_minute,
    };
    let account = state
        .store
        .update_account_limits(&AccountId::given(id.as_str()), patch)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No account with id `{id}`.")).param("id"))?;
    state.keys.forget_account(&account.id);
    // Other nodes drop their cached copies before this answers, so the new limits hold
    // wherever the next request lands.
    state.runtime.account_changed(&account.id).await?;
    Ok(Json(AccountOut::new(
        &account,
        None,
        &state.config.public_url(),
    )))
}

/// Add prepaid balance to an account (operator only).
#[utoipa::path(post, path = "/admin/accounts/{id}/balance/top-ups", tag = "admin", request_body = TopUpIn,
    responses((status = 201, body = BalanceOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn top_up(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<TopUpIn>,
) -> ApiResult<(StatusCode, Json<BalanceOut>)> {
    if body.amount_cents <= 0 || body.amount_cents > 1_000_000_000_000 {
        return Err(
            ApiError::bad_request("amount_cents must be an integer > 0 (at most 10^12).")
                .param("amount_cents"),
        );
    }
    let account = AccountId::given(id.as_str());
    let clock = state.runtime.clock().now_ms(&account).await?;
    // The subscriptions paused for want of balance get a timer in the same transaction; their
    // actors resume those the new balance covers and charge what is due. The work is in the
    // rows, not in this request: a client that hangs up, or a crash, loses none of it.
    let (balance, woken) = state
        .store
        .top_up_and_wake(
            &account,
            body.amount_cents,
            chrono::Utc::now().timestamp_millis(),
            clock,
        )
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No account with id `{id}`.")).param("id"))?;
    state.runtime.wake_paused(&account, &woken, clock, clock);
    let balance = state.store.balance(&account).await?.unwrap_or(balance);
    Ok((StatusCode::CREATED, Json(balance.into())))
}

/// The caller's account: what an integrator needs to tokenize cards.
#[utoipa::path(get, path = "/v1/account", tag = "account",
    responses((status = 200, body = AccountOut), (status = 401, body = ErrorBody)))]
async fn get_account(State(state): State<AppState>, caller: Caller) -> Json<AccountOut> {
    Json(AccountOut::new(&caller.0, None, &state.config.public_url()))
}

impl std::fmt::Debug for ProcessorIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorIn")
            .field("base_url", &self.base_url)
            .field("public_key", &self.public_key)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for AccountOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountOut")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("sandbox", &self.sandbox)
            .field("processor", &self.processor)
            .finish_non_exhaustive()
    }
}
