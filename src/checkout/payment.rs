//! `POST /checkout/{id}/complete`: the hosted page's payment, called with the card token or
//! the approved Nequi token the browser got from the processor, and the tokens of the two
//! documents the customer accepted (read by `api::payment_source`, as a payment method's are).
//!
//! Order of work: the session must be open (409 otherwise) → if a payment of this session is
//! already in flight, wait for that one (a double submission never starts a second charge) →
//! create the processor payment source (no money moves, nothing of ours is created) → one
//! transaction reserves the fee, records the charge and claims the session's payment lock →
//! post the transaction → wait for its outcome, which `settle` applies in one transaction
//! whichever path learns it first. Approved: 200 with the summary. Declined: 422
//! `processor_error`, the session stays open and nothing is created.

use crate::accounts::fee_schedule;
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::ChargeStatus;
use crate::domain::checkout::SessionStatus;
use crate::domain::money::CURRENCY;
use crate::domain::text::{Email, Name};
use crate::domain::time::{Cycle, from_millis, period_boundary};
use crate::http::auth_failures::ClientAddr;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::error::{processor_error, redeem_error};
use crate::http::extract::ApiJson;
use crate::http::payment_source::SourceFields;
use crate::http::state::AppState;
use crate::ids::{AccountId, ChargeAttemptId, CheckoutSessionId, CustomerId, PaymentMethodId};
use crate::processor::client::SourceKind;
use crate::store::accounts::Account;
use crate::store::catalog::period_lines;
use crate::store::charges::{BeginChargeError, NewCharge};
use crate::store::checkout::{CheckoutAttempt, CheckoutSession};
use crate::store::coupons::{Redeem, RedeemError, Redeeming};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

/// How long the page's request waits for the processor's answer before answering 202.
const OUTCOME_WAIT: Duration = Duration::from_secs(20);
/// After this long without an event, the processor is asked directly, then every as long.
const POLL_AFTER: Duration = Duration::from_secs(2);
/// How often the charge's row is read again while no settlement is announced in this process:
/// the bound on how late a settlement by another node is seen.
const READ_AGAIN: Duration = Duration::from_millis(250);
/// Payment attempts per session per minute, over every node: a brake on card testing through
/// one session.
const ATTEMPTS_PER_MINUTE: u64 = 10;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(complete_checkout))
}

/// The payment as the page sends it: a card token, or a Nequi token the customer approved in
/// the Nequi app, with both documents the customer accepted on the page.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "type": "card",
    "card_token": "tok_test_41978_b6E1a0b3C7f2d9E4A8c5F0e1B2d3C4a5",
    "acceptance_token": "eyJhbGciOiJIUzI1NiJ9.eyJjb250cmFjdF9pZCI6MSwicGVybWFsaW5rIjoiaHR0cHM6Ly93b21waS5jb20vYWNlcHRhY2lvbiJ9.Kq3c",
    "accept_personal_auth": "eyJhbGciOiJIUzI1NiJ9.eyJjb250cmFjdF9pZCI6MiwicGVybWFsaW5rIjoiaHR0cHM6Ly93b21waS5jb20vZGF0b3MifQ.Zm8w",
    "customer_name": "Ana Gómez",
    "customer_email": "ana.gomez@example.co"
})))]
pub struct CompleteIn {
    /// `card` (the default, with `card_token`) or `nequi` (with `nequi_token`).
    #[serde(rename = "type")]
    pub kind: Option<SourceKind>,
    /// The processor's card token (`tok_…`), made by the browser with the public key.
    pub card_token: Option<String>,
    /// The processor's Nequi token, once its status is `APPROVED` (the customer accepted in the
    /// Nequi app); made and polled by the browser with the public key.
    pub nequi_token: Option<String>,
    /// Required: the token of the processor's end-user policy (`presigned_acceptance`),
    /// which the customer accepted.
    pub acceptance_token: Option<String>,
    /// Required: the token of the authorization to process personal data
    /// (`presigned_personal_data_auth`), which the customer accepted.
    pub accept_personal_auth: Option<String>,
    /// A new customer's name as typed on the page; defaults to the session's `customer.name`.
    pub customer_name: Option<String>,
    /// A new customer's e-mail as typed on the page; defaults to the session's `customer.email`.
    pub customer_email: Option<String>,
    /// A promotion code typed on the page (sessions with `allow_promotion_codes` only).
    #[schema(max_length = 64)]
    pub promotion_code: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "status": "APPROVED",
    "customer_email": "ana.gomez@example.co",
    "customer_name": "Ana Gómez",
    "plan_name": "Plan Pro",
    "amount_in_cents": 4990000,
    "currency": "COP",
    "payment_method_type": "card",
    "card_brand": "VISA",
    "card_last4": "4242",
    "nequi_phone_last4": null
})))]
pub struct SummaryOut {
    /// The processor's status of the payment: APPROVED.
    pub status: String,
    pub customer_email: String,
    pub customer_name: String,
    pub plan_name: String,
    pub amount_in_cents: i64,
    pub currency: String,
    /// What paid: `card` or `nequi`.
    pub payment_method_type: SourceKind,
    /// The card's network; null for Nequi.
    pub card_brand: Option<String>,
    /// The card's last four digits; null for Nequi.
    pub card_last4: Option<String>,
    /// The last four digits of the Nequi phone number; null for a card.
    pub nequi_phone_last4: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "status": "complete",
    "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "redirect_url": "https://shop.example.co/gracias?subscription_id=sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a&status=APPROVED&amount_in_cents=4990000&currency=COP",
    "summary": {
        "status": "APPROVED",
        "customer_email": "ana.gomez@example.co",
        "customer_name": "Ana Gómez",
        "plan_name": "Plan Pro",
        "amount_in_cents": 4990000,
        "currency": "COP",
        "payment_method_type": "card",
        "card_brand": "VISA",
        "card_last4": "4242",
        "nequi_phone_last4": null
    }
})))]
pub struct CompleteOut {
    /// The session's status: `complete`, or `open` (202) while the processor has not answered.
    pub status: String,
    pub subscription_id: Option<String>,
    /// `success_url` with `subscription_id`, `status`, `amount_in_cents` and `currency`; null
    /// without a `success_url` (the page shows its own confirmation).
    pub redirect_url: Option<String>,
    /// For the page only: it holds personal data and never goes into `redirect_url`.
    pub summary: Option<SummaryOut>,
}

/// Pay a checkout session (called by the hosted page, not by integrators).
#[utoipa::path(post, path = "/checkout/{id}/complete", tag = "checkout", security(()), request_body = CompleteIn,
    responses((status = 200, body = CompleteOut), (status = 202, body = CompleteOut, description = "the processor has not answered yet; post again to keep waiting"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the session is complete or expired"),
        (status = 422, body = ErrorBody, description = "processor_error: declined; insufficient_balance: the merchant's fee balance is short"),
        (status = 429, body = ErrorBody)))]
async fn complete_checkout(
    State(state): State<AppState>,
    Path(id): Path<String>,
    client: ClientAddr,
    ApiJson(body): ApiJson<CompleteIn>,
) -> ApiResult<Response> {
    let id = CheckoutSessionId::given(id);
    let (session, account) = open_session(&state, &id).await?;
    state
        .limiter
        .take(&format!("checkout:{id}"), ATTEMPTS_PER_MINUTE)
        .await?;
    if let Some(charge_id) = &session.attempt_charge_id {
        return outcome(&state, &account, &id, charge_id).await;
    }
    let request = SourceFields {
        kind: body.kind,
        card_token: body.card_token,
        nequi_token: body.nequi_token,
        acceptance_token: body.acceptance_token,
        accept_personal_auth: body.accept_personal_auth,
    }
    .parse()?;
    // A token pays once: the same card or Nequi token again (a re-sent request after its
    // payment was declined) gets that answer again instead of a second attempt.
    if session.attempt_card_token.as_deref() == Some(request.token.as_str()) {
        return Err(ApiError::Processor(format!(
            "This {} was already tried on this checkout: {}",
            match request.kind {
                SourceKind::Card => "card",
                SourceKind::Nequi => "Nequi account",
            },
            session.last_error.as_deref().unwrap_or("declined")
        )));
    }
    let account_id = &account.id;
    let (customer_id, email, name) = payer(
        &state,
        account_id,
        &session,
        body.customer_name,
        body.customer_email,
    )
    .await?;
    let plan = state.store.plan(account_id, &session.plan_id).await?;
    let Some(plan) = plan.filter(|plan| plan.active) else {
        return Err(ApiError::conflict("This plan is no longer offered."));
    };
    let now = state.runtime.clock().now_ms(account_id).await?;
    // A code typed on the page (not the integrator's) is refused in one word, as the field's.
    let typed = session.redeem().is_none() && body.promotion_code.is_some();
    if typed {
        // A payment is another way to try a code: it counts against the field's limits.
        super::promotion::take_try(&state, &client, &id, account_id).await?;
    }
    let redeem = redeem_for(&session, body.promotion_code)?;
    let whom = Redeeming {
        account: account_id,
        customer_id: session.customer_id.as_ref(),
        // The address the payment is made with (the customer it creates is found by it).
        email: session.customer_id.is_none().then_some(email.as_str()),
        subscription_id: None,
        charge_id: None,
        plan_id: &session.plan_id,
        addon_ids: &[],
        now,
    };
    // Checked before anything is made; counted in the transaction that claims the session.
    let discount = match &redeem {
        Some(redeem) => Some(
            state
                .store
                .check_redeem(redeem, &whom)
                .await
                .map_err(|err| refused(err, redeem, typed))?,
        ),
        None => None,
    };
    let cycle = Cycle::parse(&session.cycle).unwrap_or(Cycle::Monthly);
    // The first period, one cycle from when the payment began (the subscription's own starts
    // when it is approved: `subscribe::build`).
    let period = (
        now,
        period_boundary(from_millis(now), cycle, 1).timestamp_millis(),
    );
    let lines = period_lines(
        &plan,
        [],
        cycle,
        session.quantity,
        period,
        discount.as_ref(),
    );
    let amount_cents: i64 = lines.iter().map(|line| line.amount_cents).sum();
    if amount_cents == 0 && typed {
        return Err(super::promotion::not_valid().param("promotion_code"));
    }
    if amount_cents == 0 {
        return Err(ApiError::bad_request(
            "This code makes the first period free; this checkout takes a first payment.",
        )
        .param("promotion_code"));
    }

    // The processor's payment source: made before anything of ours, so a card or Nequi
    // token the processor refuses here leaves no trace.
    let credentials = state
        .charger
        .credentials(&account)
        .map_err(processor_error)?;
    let token = request.token.clone();
    let source = state
        .processor
        .create_payment_source(&credentials, &request.for_customer(email.clone()))
        .await
        .map_err(processor_error)?;

    let payment_method_id = PaymentMethodId::generate();
    let txn = state.store.begin().await?;
    let charge = txn
        .begin_charge(NewCharge {
            account: account_id.clone(),
            subscription_id: None,
            customer_id: customer_id.clone(),
            payment_method_id: payment_method_id.clone(),
            amount_cents,
            fee_cents: fee_schedule(&account).fee_for(amount_cents),
            purpose: ChargePurpose::Checkout,
            period_start: None,
            pending_change: None,
            now_ms: now,
            lines,
        })
        .await
        .map_err(|err| match err {
            BeginChargeError::InsufficientBalance => ApiError::InsufficientBalance(
                "The merchant's prepaid balance does not cover the fee of this payment.".into(),
            ),
            // A checkout's charge has no period yet: the index cannot refuse it.
            BeginChargeError::PeriodTaken => ApiError::conflict("This payment is already live."),
            BeginChargeError::Store(err) => err.into(),
        })?;
    let discount = match &redeem {
        // This payment's own pending charge is not another purchase.
        Some(redeem) => match txn
            .redeem(
                &state.store,
                redeem,
                &Redeeming {
                    charge_id: Some(&charge.id),
                    ..whom
                },
            )
            .await
        {
            Ok(discount) => Some(discount),
            // Spent since the check (another customer took the last one): nothing is charged.
            Err(err) => return Err(refused(err, redeem, typed)),
        },
        None => None,
    };
    let attempt = CheckoutAttempt {
        charge_id: charge.id.clone(),
        customer_id,
        payment_method_id,
        payment_source_id: source.id,
        source_kind: source.kind,
        email,
        name,
        brand: source.brand,
        last4: source.last_four,
        expires_at: source.expires_at,
        token,
        discount: discount.and_then(|d| serde_json::to_string(&d).ok()),
    };
    if !txn.claim_checkout_session(&id, &attempt, now).await? {
        // Another submission claimed the session first (or it closed): charge nothing here.
        drop(txn);
        let (session, account) = open_session(&state, &id).await?;
        return match &session.attempt_charge_id {
            Some(charge_id) => outcome(&state, &account, &id, charge_id).await,
            None => Err(ApiError::conflict(
                "The session changed while paying; reload the page.",
            )),
        };
    }
    txn.commit().await?;

    // A final answer (or a refused post) settles the session now; a pending or unknown one
    // leaves the charge pending, and the wait below asks the processor again.
    let posted = state.charger.submit(&account, &charge).await;
    if posted.settlement().is_some() {
        state
            .runtime
            .apply_processor_outcome(&charge, &posted, None)
            .await
            .map_err(|err| ApiError::Internal(Box::new(err)))?;
    }
    outcome(&state, &account, &id, &charge.id).await
}

/// A refused redemption: a typed code's in one word (param `promotion_code`), the integrator's
/// coupon's or code's as the API words it.
fn refused(err: RedeemError, redeem: &Redeem, typed: bool) -> ApiError {
    if typed {
        return super::promotion::refused_code(err).param("promotion_code");
    }
    redeem_error(err, redeem)
}

/// What the payment redeems: the integrator's coupon or code, else a code the customer typed
/// (only where the page offers the field).
fn redeem_for(session: &CheckoutSession, typed: Option<String>) -> ApiResult<Option<Redeem>> {
    match (session.redeem(), typed) {
        (Some(preset), _) => Ok(Some(preset)),
        (None, Some(code)) if session.allow_promotion_codes => Ok(Some(Redeem::Code(code))),
        (None, Some(_)) => Err(
            ApiError::bad_request("This checkout takes no promotion code.").param("promotion_code"),
        ),
        (None, None) => Ok(None),
    }
}

/// Who pays: the session's existing customer, or a new one from the name and e-mail typed on
/// the page (defaulting to those the integrator sent). A new customer's id is chosen now and
/// used only if the payment is approved.
async fn payer(
    state: &AppState,
    account: &AccountId,
    session: &CheckoutSession,
    typed_name: Option<String>,
    typed_email: Option<String>,
) -> ApiResult<(CustomerId, String, String)> {
    if let Some(customer_id) = &session.customer_id {
        let customer = state
            .store
            .customer(account, customer_id)
            .await?
            .ok_or_else(|| ApiError::conflict("The session's customer no longer exists."))?;
        return Ok((customer.id, customer.email, customer.name));
    }
    let name = typed_name.or_else(|| session.customer_name.clone());
    let email = typed_email.or_else(|| session.customer_email.clone());
    let name = Name::parse(name.as_deref().unwrap_or_default()).map_err(|why| {
        ApiError::bad_request(format!("customer_name {why}.")).param("customer_name")
    })?;
    let email = Email::parse(email.as_deref().unwrap_or_default()).map_err(|why| {
        ApiError::bad_request(format!("customer_email {why}.")).param("customer_email")
    })?;
    Ok((
        CustomerId::generate(),
        email.into_string(),
        name.into_string(),
    ))
}

/// The session, which must exist (404) and be open (409), with its account.
async fn open_session(
    state: &AppState,
    id: &CheckoutSessionId,
) -> ApiResult<(CheckoutSession, Account)> {
    let not_found =
        || ApiError::not_found(format!("No checkout session with id `{id}`.")).param("id");
    let session = state
        .store
        .checkout_session_by_id(id)
        .await?
        .ok_or_else(not_found)?;
    let account_id = &session.account_id;
    let account = state
        .store
        .account(account_id)
        .await?
        .ok_or_else(not_found)?;
    let now = state.runtime.clock().now_ms(account_id).await?;
    let session = super::current(&state.store, session, now).await?;
    match SessionStatus::parse(&session.status) {
        Some(SessionStatus::Complete) => Err(ApiError::conflict(
            "This checkout session is already complete.",
        )),
        Some(SessionStatus::Expired) => {
            Err(ApiError::conflict("This checkout session has expired."))
        }
        _ => Ok((session, account)),
    }
}

/// Waits for the charge's outcome and answers with it: 200 approved, 422 declined, 202 when
/// the processor has still not answered.
async fn outcome(
    state: &AppState,
    account: &Account,
    session_id: &CheckoutSessionId,
    charge_id: &ChargeAttemptId,
) -> ApiResult<Response> {
    let started = tokio::time::Instant::now();
    let mut next_poll = started + POLL_AFTER;
    // Registered before the first read, so a settlement committed after it wakes this at once.
    let mut settled = state.store.settled().watch(charge_id);
    let charge = loop {
        let Some(charge) = state.store.charge_by_id(charge_id).await? else {
            return Err(ApiError::Internal("checkout charge vanished".into()));
        };
        if !charge.is(ChargeStatus::Pending) {
            break charge;
        }
        let now = tokio::time::Instant::now();
        if now >= started + OUTCOME_WAIT {
            let out = CompleteOut {
                status: SessionStatus::Open.as_str().into(),
                subscription_id: None,
                redirect_url: None,
                summary: None,
            };
            return Ok((StatusCode::ACCEPTED, Json(out)).into_response());
        }
        if now >= next_poll {
            // No event yet: ask the processor (posting again under the same reference if it
            // never saw the charge); a final answer settles through the same path.
            if let Err(err) = state.runtime.recheck_charge(account, &charge).await {
                tracing::warn!(charge = %charge.id, error = %err, "asking the processor about a checkout payment failed");
            }
            next_poll = now + POLL_AFTER;
        }
        // Until the settlement is announced in this process; a settlement by another node (the
        // processor's event reached it) is read within `READ_AGAIN`.
        let until = next_poll
            .min(started + OUTCOME_WAIT)
            .min(tokio::time::Instant::now() + READ_AGAIN);
        settled
            .wait(until.saturating_duration_since(tokio::time::Instant::now()))
            .await;
    };
    let session = state
        .store
        .checkout_session_by_id(session_id)
        .await?
        .ok_or_else(|| ApiError::Internal("checkout session vanished".into()))?;
    let (Some(subscription_id), ChargeStatus::Approved) = (&session.subscription_id, charge.status)
    else {
        return Err(ApiError::Processor(format!(
            "The payment processor rejected the payment ({}): {}",
            charge.processor_status.as_deref().unwrap_or("ERROR"),
            charge
                .processor_message
                .as_deref()
                .unwrap_or("no reason given"),
        )));
    };
    let plan_name = state
        .store
        .plan(&account.id, &session.plan_id)
        .await?
        .map(|plan| plan.name)
        .unwrap_or_default();
    let status = charge.processor_status.unwrap_or_else(|| "APPROVED".into());
    let kind = SourceKind::from_stored(session.attempt_source_kind.as_deref().unwrap_or("card"));
    let (card_last4, nequi_phone_last4) = match kind {
        SourceKind::Card => (session.attempt_last4, None),
        SourceKind::Nequi => (None, session.attempt_last4),
    };
    let out = CompleteOut {
        redirect_url: session.success_url.as_deref().and_then(|url| {
            super::redirect_url(url, subscription_id, &status, charge.amount_cents)
        }),
        subscription_id: Some(subscription_id.to_string()),
        status: session.status,
        summary: Some(SummaryOut {
            status,
            customer_email: session.attempt_email.unwrap_or_default(),
            customer_name: session.attempt_name.unwrap_or_default(),
            plan_name,
            amount_in_cents: charge.amount_cents,
            currency: CURRENCY.to_owned(),
            payment_method_type: kind,
            card_brand: session.attempt_brand,
            card_last4,
            nequi_phone_last4,
        }),
    };
    Ok((StatusCode::OK, Json(out)).into_response())
}
