//! Checkout sessions (CONTRACT §8): what an integrator creates to send a customer to the
//! hosted page, and reads back. The page and its payment live in `crate::checkout`.

use super::subscriptions::{active_plan, parse_cycle, parse_quantity, redeem_error, redeem_of};
use crate::domain::checkout::SessionStatus;
use crate::domain::money::CURRENCY;
use crate::domain::text::{Email, Name};
use crate::domain::time::{Cycle, from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery, metadata_text, metadata_value};
use crate::http::list::{ListOut, page_request};
use crate::http::state::AppState;
use crate::ids::{CheckoutSessionId, CustomerId, PlanId, SubscriptionId};
use crate::store::catalog::period_lines;
use crate::store::checkout::CheckoutSession;
use crate::store::coupons::{Redeem, Redeeming};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::middleware;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::openapi::Type;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

/// Sessions live 24 h unless `expires_in_seconds` (1,800 to 86,400) says otherwise.
const DEFAULT_EXPIRES_IN: i64 = 86_400;
const MIN_EXPIRES_IN: i64 = 1_800;

pub fn router(state: &AppState) -> OpenApiRouter<AppState> {
    let status = OpenApiRouter::new()
        .routes(routes!(get_checkout_session_status))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::layers::limit_status_route,
        ));
    let mut router = OpenApiRouter::new()
        .routes(routes!(create_checkout_session, list_checkout_sessions))
        .routes(routes!(get_checkout_session))
        .merge(status);
    super::openapi::schemas::require_one_of(
        router.get_openapi_mut(),
        "CheckoutSessionIn",
        [("customer", Type::Object), ("customer_id", Type::String)],
    );
    let openapi = router.get_openapi_mut();
    super::openapi::schemas::at_most_one_of(
        openapi,
        "CheckoutSessionIn",
        ["coupon_id", "promotion_code"],
    );
    super::openapi::schemas::code_field_or_coupon(openapi, "CheckoutSessionIn");
    router
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"email": "ana.gomez@example.co", "name": "Ana Gómez"})))]
pub struct NewCustomerIn {
    #[schema(format = Email, max_length = 254)]
    pub email: String,
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub name: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "plan_id": "plan_0193a1f3a0b17c2d8e9f0a1b2c3d4e5f",
    "cycle": "monthly",
    "customer": {"email": "ana.gomez@example.co", "name": "Ana Gómez"},
    "success_url": "https://shop.example.co/gracias",
    "cancel_url": "https://shop.example.co/planes",
    "expires_in_seconds": 86400,
    "metadata": {"order": "A-1042"}
})))]
pub struct CheckoutSessionIn {
    #[schema(pattern = "^plan_")]
    pub plan_id: String,
    /// monthly or annual.
    #[schema(schema_with = super::openapi::schemas::cycle)]
    pub cycle: String,
    /// A new customer, created when the payment is approved. Send this or `customer_id`.
    pub customer: Option<NewCustomerIn>,
    /// An existing customer. Send this or `customer`.
    pub customer_id: Option<String>,
    /// Where the customer goes after paying, with `subscription_id`, `status`,
    /// `amount_in_cents` and `currency` added to its query.
    #[schema(schema_with = super::openapi::schemas::optional_web_url)]
    pub success_url: Option<String>,
    /// Offered on the page, and where an expired session sends the customer.
    #[schema(schema_with = super::openapi::schemas::optional_web_url)]
    pub cancel_url: Option<String>,
    /// 1,800 to 86,400; default 86,400 (24 h).
    #[schema(minimum = 1800, maximum = 86400)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub expires_in_seconds: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// Seats (≥ 1, default 1): the plan's amount is charged this many times.
    #[schema(minimum = 1, maximum = 10000)]
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub quantity: Option<i64>,
    /// A coupon for the subscription it creates (or `promotion_code`, not both).
    pub coupon_id: Option<String>,
    /// A promotion code, as a customer would type it.
    #[schema(max_length = 64)]
    pub promotion_code: Option<String>,
    /// Whether the page offers a field for the customer's promotion code (default false;
    /// not with `coupon_id` or `promotion_code`).
    pub allow_promotion_codes: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"email": "ana.gomez@example.co", "name": "Ana Gómez"})))]
pub struct CustomerDetailsOut {
    #[schema(format = Email)]
    pub email: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "cs_0193a1f4b5c67d7e8f9a0b1c2d3e4f5a",
    "status": "open",
    "url": "https://billing.example.co/checkout/cs_0193a1f4b5c67d7e8f9a0b1c2d3e4f5a",
    "expires_at": "2026-11-25T09:15:42.318Z",
    "subscription_id": null,
    "plan_id": "plan_0193a1f3a0b17c2d8e9f0a1b2c3d4e5f",
    "cycle": "monthly",
    "amount_in_cents": 4990000,
    "amount_subtotal_cents": 4990000,
    "quantity": 1,
    "allow_promotion_codes": false,
    "currency": "COP",
    "customer_id": null,
    "customer": {"email": "ana.gomez@example.co", "name": "Ana Gómez"},
    "success_url": "https://shop.example.co/gracias",
    "cancel_url": "https://shop.example.co/planes",
    "metadata": {"order": "A-1042"},
    "created_at": "2026-11-24T09:15:42.318Z"
})))]
pub struct CheckoutSessionOut {
    pub id: String,
    #[schema(schema_with = super::openapi::schemas::session_status)]
    pub status: String,
    #[schema(format = "uri")]
    pub url: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    pub subscription_id: Option<String>,
    pub plan_id: String,
    #[schema(schema_with = super::openapi::schemas::cycle)]
    pub cycle: String,
    /// What the first period charges, its discount taken off (a code the customer types on
    /// the page may take more).
    pub amount_in_cents: i64,
    /// The plan's amount times `quantity`, before any discount.
    pub amount_subtotal_cents: i64,
    pub quantity: i64,
    pub allow_promotion_codes: bool,
    pub currency: String,
    /// The existing customer given, or the one the payment created.
    pub customer_id: Option<String>,
    /// The new customer's details as sent (null with `customer_id`).
    pub customer: Option<CustomerDetailsOut>,
    pub success_url: Option<String>,
    pub cancel_url: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Box<RawValue>>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"id": "cs_0193a1f4b5c67d7e8f9a0b1c2d3e4f5a", "status": "complete", "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a"})))]
pub struct CheckoutSessionStatusOut {
    pub id: String,
    #[schema(schema_with = super::openapi::schemas::session_status)]
    pub status: String,
    pub subscription_id: Option<String>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CheckoutSessionListQuery {
    /// open, complete or expired.
    #[param(schema_with = super::openapi::schemas::session_status)]
    pub status: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// `<public url>/checkout/<id>`.
fn session_url(state: &AppState, id: &CheckoutSessionId) -> String {
    format!("{}/checkout/{id}", state.config.public_url())
}

fn session_out(state: &AppState, session: CheckoutSession) -> CheckoutSessionOut {
    let at = |ms: i64| rfc3339(from_millis(ms));
    let complete = session.status == SessionStatus::Complete.as_str();
    let amount_subtotal_cents = session.subtotal_cents();
    CheckoutSessionOut {
        url: session_url(state, &session.id),
        expires_at: at(session.expires_at),
        created_at: at(session.created_at),
        metadata: metadata_value(session.metadata.as_deref()),
        customer_id: match (&session.customer_id, complete) {
            (Some(id), _) => Some(id.to_string()),
            (None, true) => session
                .attempt_customer_id
                .as_ref()
                .map(CustomerId::to_string),
            (None, false) => None,
        },
        customer: session.customer_id.is_none().then_some(CustomerDetailsOut {
            email: session.customer_email,
            name: session.customer_name,
        }),
        id: session.id.into_string(),
        status: session.status,
        subscription_id: session.subscription_id.map(SubscriptionId::into_string),
        plan_id: session.plan_id.into_string(),
        cycle: session.cycle,
        amount_subtotal_cents,
        amount_in_cents: session.amount_cents,
        quantity: session.quantity,
        allow_promotion_codes: session.allow_promotion_codes,
        currency: CURRENCY.to_owned(),
        success_url: session.success_url,
        cancel_url: session.cancel_url,
    }
}

/// An absolute http(s) URL, or a 400 naming `param`.
pub(super) fn web_url(raw: Option<String>, param: &str) -> ApiResult<Option<String>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match url::Url::parse(&raw) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Ok(Some(raw)),
        _ => Err(
            ApiError::bad_request(format!("{param} must be an absolute http(s) URL.")).param(param),
        ),
    }
}

/// The caller's session `id` as it stands now (expired once its time has passed), or 404.
async fn scoped(
    state: &AppState,
    caller: &Caller,
    id: &CheckoutSessionId,
) -> ApiResult<CheckoutSession> {
    let account = caller.account_id();
    let session = state
        .store
        .checkout_session(account, id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No checkout session with id `{id}`.")).param("id")
        })?;
    let now = state.runtime.clock().now_ms(account).await?;
    Ok(crate::checkout::current(&state.store, session, now).await?)
}

/// Create a checkout session and send the customer to its `url`.
#[utoipa::path(post, path = "/v1/checkout-sessions", tag = "checkout", request_body = CheckoutSessionIn,
    responses((status = 201, body = CheckoutSessionOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn create_checkout_session(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CheckoutSessionIn>,
) -> ApiResult<(StatusCode, Json<CheckoutSessionOut>)> {
    let account = caller.account_id();
    let Some(plan_id) = PlanId::parse(&body.plan_id) else {
        return Err(ApiError::bad_request(format!(
            "`{}` is not a plan id (they start with `plan_`).",
            body.plan_id
        ))
        .param("plan_id"));
    };
    let cycle: Cycle = parse_cycle(&body.cycle)?;
    let metadata = metadata_text(body.metadata)?;
    let success_url = web_url(body.success_url, "success_url")?;
    let cancel_url = web_url(body.cancel_url, "cancel_url")?;
    let expires_in = body.expires_in_seconds.unwrap_or(DEFAULT_EXPIRES_IN);
    if !(MIN_EXPIRES_IN..=DEFAULT_EXPIRES_IN).contains(&expires_in) {
        return Err(
            ApiError::bad_request("expires_in_seconds must be between 1800 and 86400.")
                .param("expires_in_seconds"),
        );
    }
    let (customer_id, customer_email, customer_name) = match (body.customer, body.customer_id) {
        (Some(_), Some(_)) => {
            return Err(
                ApiError::bad_request("Send customer or customer_id, not both.")
                    .param("customer_id"),
            );
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "Send customer (email and name of a new customer) or customer_id.",
            )
            .param("customer"));
        }
        (None, Some(id)) => {
            let id = CustomerId::given(id);
            state.store.customer(account, &id).await?.ok_or_else(|| {
                ApiError::not_found(format!("No customer with id `{id}`.")).param("customer_id")
            })?;
            (Some(id), None, None)
        }
        (Some(new), None) => {
            let email = Email::parse(&new.email).map_err(|why| {
                ApiError::bad_request(format!("customer.email {why}.")).param("customer.email")
            })?;
            let name = Name::parse(&new.name).map_err(|why| {
                ApiError::bad_request(format!("customer.name {why}.")).param("customer.name")
            })?;
            (None, Some(email.into_string()), Some(name.into_string()))
        }
    };
    let plan = active_plan(&state, account, &plan_id).await?;
    let quantity = parse_quantity(body.quantity)?;
    let redeem = redeem_of(body.coupon_id, body.promotion_code)?;
    let allow_promotion_codes = body.allow_promotion_codes.unwrap_or(false);
    if allow_promotion_codes && redeem.is_some() {
        return Err(ApiError::bad_request(
            "allow_promotion_codes offers the customer a code field; with a coupon or code \
             already given, send it false.",
        )
        .param("allow_promotion_codes"));
    }
    let now = state.runtime.clock().now_ms(account).await?;
    let discount = match &redeem {
        None => None,
        Some(redeem) => {
            let whom = Redeeming {
                account,
                customer_id: customer_id.as_ref(),
                email: customer_email.as_deref(),
                subscription_id: None,
                charge_id: None,
                plan_id: &plan_id,
                addon_ids: &[],
                now,
            };
            Some(
                state
                    .store
                    .check_redeem(redeem, &whom)
                    .await
                    .map_err(|err| redeem_error(err, redeem))?,
            )
        }
    };
    let plan_price = plan.price(cycle);
    let amount_cents: i64 = period_lines(&plan, [], cycle, quantity, (0, 0), discount.as_ref())
        .iter()
        .map(|line| line.amount_cents)
        .sum();
    if amount_cents == 0 {
        return Err(ApiError::bad_request(
            "This discount makes the first period free; a checkout takes a first payment. \
             Create the subscription directly instead.",
        )
        .param(redeem.as_ref().map_or("coupon_id", |r| match r {
            Redeem::Coupon(_) => "coupon_id",
            Redeem::Code(_) => "promotion_code",
        })));
    }
    let session = CheckoutSession {
        id: CheckoutSessionId::generate(),
        account_id: caller.0.id.clone(),
        plan_id,
        cycle: cycle.as_str().to_owned(),
        amount_cents,
        customer_id,
        customer_email,
        customer_name,
        success_url,
        cancel_url,
        metadata,
        status: SessionStatus::Open.as_str().to_owned(),
        expires_at: now + expires_in * 1000,
        subscription_id: None,
        attempt_charge_id: None,
        attempt_customer_id: None,
        attempt_payment_method_id: None,
        attempt_payment_source_id: None,
        attempt_source_kind: None,
        attempt_email: None,
        attempt_name: None,
        attempt_brand: None,
        attempt_last4: None,
        attempt_expires_at: None,
        attempt_card_token: None,
        last_error: None,
        created_at: now,
        updated_at: now,
        quantity,
        subtotal_cents: Some(plan_price.saturating_mul(quantity)),
        redeem: redeem.and_then(|r| serde_json::to_string(&r).ok()),
        allow_promotion_codes,
        attempt_discount: None,
    };
    let session = state.store.insert_checkout_session(session).await?;
    Ok((StatusCode::CREATED, Json(session_out(&state, session))))
}

/// List checkout sessions, newest first.
#[utoipa::path(get, path = "/v1/checkout-sessions", tag = "checkout", params(CheckoutSessionListQuery),
    responses((status = 200, body = ListOut<CheckoutSessionOut>), (status = 400, body = ErrorBody)))]
async fn list_checkout_sessions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<CheckoutSessionListQuery>,
) -> ApiResult<Json<ListOut<CheckoutSessionOut>>> {
    if let Some(status) = &query.status
        && SessionStatus::parse(status).is_none()
    {
        return Err(ApiError::bad_request(format!("Unknown status `{status}`.")).param("status"));
    }
    let page = page_request(query.limit, query.cursor.clone())?;
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    state.store.expire_checkout_sessions(account, now).await?;
    let page = state
        .store
        .list_checkout_sessions(account, query.status.as_deref(), &page)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |s| s.id.to_string(),
        |s| session_out(&state, s),
    )))
}

/// Get a checkout session, all fields.
#[utoipa::path(get, path = "/v1/checkout-sessions/{id}", tag = "checkout",
    responses((status = 200, body = CheckoutSessionOut), (status = 404, body = ErrorBody)))]
async fn get_checkout_session(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<CheckoutSessionOut>> {
    let id = CheckoutSessionId::given(id);
    let session = scoped(&state, &caller, &id).await?;
    Ok(Json(session_out(&state, session)))
}

/// A light poll of a session's status (20 a minute per key); reads our database only, never
/// the processor. Webhooks remain the source of truth.
#[utoipa::path(get, path = "/v1/checkout-sessions/{id}/status", tag = "checkout",
    responses((status = 200, body = CheckoutSessionStatusOut), (status = 404, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "rate_limit: more than 20 in 60 seconds")))]
async fn get_checkout_session_status(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<CheckoutSessionStatusOut>> {
    let id = CheckoutSessionId::given(id);
    let session = scoped(&state, &caller, &id).await?;
    Ok(Json(CheckoutSessionStatusOut {
        id: session.id.into_string(),
        status: session.status,
        subscription_id: session.subscription_id.map(SubscriptionId::into_string),
    }))
}
