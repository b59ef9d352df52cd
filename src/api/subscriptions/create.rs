//! `POST /v1/subscriptions`: a direct create, checked, committed with its first timer, and
//! its first period charged at once unless it starts later (a trial or a start date).

use super::actions::settled_charge;
use super::{
    SubscriptionIn, SubscriptionOut, active_plan, parse_cycle, parse_quantity, redeem_error,
    redeem_of,
};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, metadata_text};
use crate::http::state::AppState;
use crate::ids::{AccountId, CustomerId, PaymentMethodId, PlanId};
use crate::store::coupons::{Redeem, Redeeming};
use crate::store::subscriptions::Subscription;
use crate::subscribe::{self, NewSubscription, Start};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

/// Create a subscription directly (the customer already has a payment method).
#[utoipa::path(post, path = "/v1/subscriptions", tag = "subscriptions", request_body = SubscriptionIn,
    responses((status = 201, body = SubscriptionOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn create_subscription(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SubscriptionIn>,
) -> ApiResult<(StatusCode, Json<SubscriptionOut>)> {
    // Until the row commits a failure leaves nothing behind, so its Idempotency-Key is freed.
    let (mut sub, start, now, redeem) = new_subscription(&state, &caller, body)
        .await
        .map_err(ApiError::before_any_write)?;
    let txn = state
        .store
        .begin()
        .await
        .map_err(|err| ApiError::from(err).before_any_write())?;
    if let Some(redeem) = &redeem {
        // Counted in the transaction that inserts the subscription: refused or rolled back,
        // nothing is redeemed.
        let whom = Redeeming {
            account: caller.account_id(),
            customer_id: Some(&sub.customer_id),
            email: None,
            subscription_id: None,
            charge_id: None,
            plan_id: &sub.plan_id,
            addon_ids: &[],
            now,
        };
        let discount = txn
            .redeem(&state.store, redeem, &whom)
            .await
            .map_err(|err| redeem_error(err, redeem).before_any_write())?;
        sub.set_discount(Some(&discount));
    }
    subscribe::insert(&txn, &sub, now)
        .await
        .map_err(|err| ApiError::from(err).before_any_write())?;
    // Not marked: a commit that failed on a lost connection may still have committed.
    txn.commit().await?;
    state.runtime.arm(&sub, now);
    // From here on the subscription exists: the answer is 201 with it as it stands, never an
    // error that would invite the client to create it again.
    let sub = if start == Start::ChargeNow {
        charge_first_period(&state, caller.account_id(), sub).await
    } else {
        sub
    };
    Ok((StatusCode::CREATED, Json(sub.into())))
}

/// Checks a direct create and builds its row, its start and the account's `now`; writes
/// nothing.
pub(super) async fn new_subscription(
    state: &AppState,
    caller: &Caller,
    body: SubscriptionIn,
) -> ApiResult<(Subscription, Start, i64, Option<Redeem>)> {
    let account = caller.account_id();
    let cycle = parse_cycle(&body.cycle)?;
    let quantity = parse_quantity(body.quantity)?;
    let redeem = redeem_of(body.coupon_id, body.promotion_code)?;
    let metadata = metadata_text(body.metadata)?;
    let customer = state
        .store
        .customer(account, &CustomerId::given(body.customer_id.as_str()))
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No customer with id `{}`.", body.customer_id))
                .param("customer_id")
        })?;
    let plan_id = PlanId::given(body.plan_id);
    active_plan(state, account, &plan_id).await?;
    let method = state
        .store
        .payment_method(account, &PaymentMethodId::given(body.payment_method_id))
        .await?
        .filter(|m| m.customer_id == customer.id)
        .ok_or_else(|| {
            ApiError::not_found("No payment method with that id for this customer.")
                .param("payment_method_id")
        })?;
    let now = state.runtime.clock().now_ms(account).await?;
    let trial_days = body.trial_days.unwrap_or(0);
    if !(0..=730).contains(&trial_days) {
        return Err(
            ApiError::bad_request("trial_days must be between 0 and 730.").param("trial_days"),
        );
    }
    let start = match &body.start_date {
        None => None,
        Some(raw) => {
            let parsed = chrono::DateTime::parse_from_rfc3339(raw)
                .map_err(|_| {
                    ApiError::bad_request("start_date must be an RFC 3339 datetime.")
                        .param("start_date")
                })?
                .timestamp_millis();
            if parsed < now {
                return Err(ApiError::bad_request("start_date must not be in the past.")
                    .param("start_date"));
            }
            Some(parsed)
        }
    };
    if trial_days > 0 && start.is_some() {
        return Err(
            ApiError::bad_request("Send trial_days or start_date, not both.").param("start_date"),
        );
    }
    let start = match (trial_days, start) {
        (days, _) if days > 0 => Start::Trial { days },
        (_, Some(start)) if start > now => Start::At(start),
        _ => Start::ChargeNow,
    };
    let sub = subscribe::build(
        NewSubscription {
            id: state.store.ownership().local_subscription_id(),
            account_id: caller.0.id.clone(),
            customer_id: customer.id,
            plan_id,
            cycle,
            payment_method_id: method.id,
            metadata,
            start,
            quantity,
            discount: None,
        },
        now,
    );
    Ok((sub, start, now, redeem))
}

/// Charges the first period of `sub`, just committed, and answers the subscription as it
/// stands once the charge's outcome is applied (approved: `next_charge_date` is the period's
/// end; declined: `past_due`; short of balance: `paused_insufficient_balance`), as `GET`
/// shows it. The outcome comes later, through the ingress, so it is waited for as an action
/// waits for its charge (`settled_charge`, up to 10 s); still pending then, the answer is the
/// subscription with its first charge in flight (`active`, `next_charge_date` = the charge's
/// instant), and `GET` shows the outcome once it arrives.
pub(super) async fn charge_first_period(
    state: &AppState,
    account: &AccountId,
    sub: Subscription,
) -> Subscription {
    if let Err(err) = state.runtime.due(&sub.id).await {
        // The row and its timer are committed: the scheduler charges the period.
        tracing::warn!(subscription = %sub.id, error = %err, "the first charge is left to the timer");
        return current(state, account, sub).await;
    }
    // Waited for as an action's charge is (`settled_charge`): woken when its outcome is
    // applied on this node, read again now and then otherwise.
    match state.store.pending_charge_of(&sub.id).await {
        Ok(Some(charge)) => {
            if let Err(err) = settled_charge(state, account, charge).await {
                tracing::warn!(subscription = %sub.id, error = %err, "could not follow the first charge");
            }
        }
        Ok(None) => {}
        Err(err) => {
            tracing::warn!(subscription = %sub.id, error = %err, "could not follow the first charge");
        }
    }
    current(state, account, sub).await
}

/// The subscription as stored, or `sub` when it cannot be read (it is committed either way).
pub(super) async fn current(
    state: &AppState,
    account: &AccountId,
    sub: Subscription,
) -> Subscription {
    match state.store.subscription(account, &sub.id).await {
        Ok(Some(stored)) => stored,
        _ => sub,
    }
}
