//! `POST /checkout/{id}/promotion-code`: the page's code field (sessions made with
//! `allow_promotion_codes`). It checks a typed code against the session's plan and customer
//! and answers what the first period would then charge; it counts nothing, writes nothing: the
//! payment redeems the code in the transaction that claims the session (`payment`). Limited
//! per session like payments, so the field is no way to guess an account's codes.

use crate::domain::time::Cycle;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;
use crate::ids::CheckoutSessionId;
use crate::store::catalog::period_lines;
use crate::store::coupons::{Redeem, RedeemError, Redeeming};
use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

/// Codes tried per session per minute, over every node.
const TRIES_PER_MINUTE: u64 = 10;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(check_promotion_code))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"code": "BIENVENIDA"})))]
pub struct CodeIn {
    #[schema(max_length = 64)]
    pub code: String,
}

#[derive(Debug, Deserialize)]
pub struct LangQuery {
    lang: Option<String>,
}

/// What the first period charges with the code, in cents and as the page writes it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "code": "BIENVENIDA",
    "subtotal_cents": 4990000, "discount_cents": 499000, "amount_in_cents": 4491000,
    "subtotal": "$ 49.900,00 COP", "discount": "$ 4.990,00 COP", "total": "$ 44.910,00 COP"
})))]
pub struct CodeOut {
    pub code: String,
    pub subtotal_cents: i64,
    pub discount_cents: i64,
    pub amount_in_cents: i64,
    pub subtotal: String,
    pub discount: String,
    pub total: String,
}

/// A typed code that cannot be redeemed, whatever the reason: one answer for a code that does
/// not exist and one that is spent, so the field tells a guesser nothing.
pub(super) fn refused_code(err: RedeemError) -> ApiError {
    match err {
        RedeemError::Store(err) => err.into(),
        _ => ApiError::bad_request("This code is not valid for this purchase.").param("code"),
    }
}

/// Check a promotion code typed on the hosted page (called by the page, not by integrators).
#[utoipa::path(post, path = "/checkout/{id}/promotion-code", tag = "checkout", security(()), request_body = CodeIn,
    responses((status = 200, body = CodeOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 429, body = ErrorBody)))]
async fn check_promotion_code(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<LangQuery>,
    ApiJson(body): ApiJson<CodeIn>,
) -> ApiResult<Json<CodeOut>> {
    let id = CheckoutSessionId::given(id);
    let not_found =
        || ApiError::not_found(format!("No checkout session with id `{id}`.")).param("id");
    let session = state
        .store
        .checkout_session_by_id(&id)
        .await?
        .ok_or_else(not_found)?;
    if !session.allow_promotion_codes {
        return Err(ApiError::bad_request("This checkout takes no promotion code.").param("code"));
    }
    state
        .limiter
        .take(&format!("checkout-code:{id}"), TRIES_PER_MINUTE)
        .await?;
    let account = &session.account_id;
    let plan = state
        .store
        .plan(account, &session.plan_id)
        .await?
        .ok_or_else(not_found)?;
    let now = state.runtime.clock().now_ms(account).await?;
    let redeem = Redeem::Code(body.code.trim().to_owned());
    let whom = Redeeming {
        account,
        customer_id: session.customer_id.as_ref(),
        plan_id: &session.plan_id,
        addon_ids: &[],
        now,
    };
    let discount = state
        .store
        .check_redeem(&redeem, &whom)
        .await
        .map_err(refused_code)?;
    let cycle = Cycle::parse(&session.cycle).unwrap_or(Cycle::Monthly);
    let lines = period_lines(&plan, [], cycle, session.quantity, (0, 0), Some(&discount));
    let amount: i64 = lines.iter().map(|l| l.amount_cents).sum();
    let off: i64 = lines.iter().map(|l| l.discount_cents).sum();
    if amount == 0 {
        return Err(ApiError::bad_request(
            "This code makes the first period free; this checkout takes a first payment.",
        )
        .param("code"));
    }
    let locale = super::i18n::Locale::choose(query.lang.as_deref(), None);
    Ok(Json(CodeOut {
        code: body.code,
        subtotal_cents: amount + off,
        discount_cents: off,
        amount_in_cents: amount,
        subtotal: locale.money(amount + off),
        discount: locale.money(off),
        total: locale.money(amount),
    }))
}
