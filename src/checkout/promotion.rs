//! `POST /checkout/{id}/promotion-code`: the page's code field (sessions made with
//! `allow_promotion_codes`). It checks a typed code against the session's plan and customer
//! and answers what the first period would then charge; it counts nothing, writes nothing: the
//! payment redeems the code in the transaction that claims the session (`payment`). Every
//! code that cannot be taken here gets one answer (one that does not exist, one that is spent,
//! another customer's, one that would make the first period free), and codes are tried at most
//! so often per session, per client address and per account (decision 0071), so the field is
//! no way to guess an account's codes: sessions are free to make, addresses less so.

use crate::domain::time::Cycle;
use crate::http::auth_failures::ClientAddr;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;
use crate::ids::{AccountId, CheckoutSessionId};
use crate::store::catalog::period_lines;
use crate::store::coupons::{Redeem, RedeemError, Redeeming};
use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

/// Codes tried per session per minute, over every node.
const TRIES_PER_MINUTE: u64 = 10;

/// Codes tried from one client address per minute, over every session and account.
const TRIES_PER_ADDRESS: u64 = 20;

/// Codes tried on one account's sessions per minute, from anywhere: a guesser with many
/// addresses still gets no more than this of an account's codes.
const TRIES_PER_ACCOUNT: u64 = 300;

/// Counts one typed code against the three limits (429 `rate_limit` past any of them).
pub(super) async fn take_try(
    state: &AppState,
    client: &ClientAddr,
    session: &CheckoutSessionId,
    account: &AccountId,
) -> ApiResult<()> {
    let limiter = &state.limiter;
    limiter
        .take(&format!("checkout-code:{session}"), TRIES_PER_MINUTE)
        .await?;
    limiter
        .take(
            &format!("checkout-code-from:{}", client.key()),
            TRIES_PER_ADDRESS,
        )
        .await?;
    limiter
        .take(&format!("checkout-code-of:{account}"), TRIES_PER_ACCOUNT)
        .await
}

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
        _ => not_valid(),
    }
}

/// The one answer to a code that cannot be taken.
pub(super) fn not_valid() -> ApiError {
    ApiError::bad_request("This code is not valid for this purchase.").param("code")
}

/// Check a promotion code typed on the hosted page (called by the page, not by integrators).
#[utoipa::path(post, path = "/checkout/{id}/promotion-code", tag = "checkout", security(()), request_body = CodeIn,
    responses((status = 200, body = CodeOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 429, body = ErrorBody)))]
async fn check_promotion_code(
    State(state): State<AppState>,
    Path(id): Path<String>,
    client: ClientAddr,
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
    let account = &session.account_id;
    take_try(&state, &client, &id, account).await?;
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
        email: session.customer_email.as_deref(),
        subscription_id: None,
        charge_id: None,
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
        // This checkout takes a first payment; a code that makes it free is refused, in the
        // words of one that does not exist.
        return Err(not_valid());
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
