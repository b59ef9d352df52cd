//! Starting a subscription: the one place that decides a new subscription's first period and
//! writes the row with its `subscription.created` event. Direct creation
//! (`POST /v1/subscriptions`) and the hosted checkout both start subscriptions here; every
//! later change goes through the subscription's actor.

use crate::domain::discount::Discount;
use crate::domain::event_type::EventType;
use crate::domain::subscription::Status;
use crate::domain::time::{Cycle, from_millis, period_boundary};
use crate::events::subscription_event;
use crate::ids::{AccountId, CustomerId, PaymentMethodId, PlanId, SubscriptionId};
use crate::store::StoreResult;
use crate::store::subscriptions::Subscription;
use crate::store::txn::StoreTxn;

/// How the first period begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A trial of this many days; the first charge is at its end.
    Trial { days: i64 },
    /// Prepaid until this instant (a migrated customer); the first charge is then.
    At(i64),
    /// The first period starts now and is charged at once by the actor.
    ChargeNow,
    /// The first period starts now and is already paid (the checkout charged it).
    Paid,
}

/// What a new subscription is made of.
#[derive(Clone, Debug)]
pub struct NewSubscription {
    /// Its id (`cluster::Ownership::local_subscription_id`, or any fresh one).
    pub id: SubscriptionId,
    pub account_id: AccountId,
    pub customer_id: CustomerId,
    pub plan_id: PlanId,
    pub cycle: Cycle,
    pub payment_method_id: PaymentMethodId,
    /// Compact JSON text, already checked against the 60 KB limit.
    pub metadata: Option<String>,
    pub start: Start,
    /// Seats: the plan's amount is charged this many times (at least 1).
    pub quantity: i64,
    /// The coupon redeemed for it, if any (`StoreTxn::redeem`, in the transaction that
    /// inserts it).
    pub discount: Option<Discount>,
}

/// The row of a new subscription at `now` (the account's clock).
///
/// Before the first real period (trial, or prepaid until a start date) the period index is −1
/// and the period is [now, first charge); otherwise the first period starts now.
pub fn build(new: NewSubscription, now: i64) -> Subscription {
    let first_period_end = || period_boundary(from_millis(now), new.cycle, 1).timestamp_millis();
    let (status, period_end, period_index, trial_end, next_charge) = match new.start {
        Start::Trial { days } => {
            let end = now + days * 86_400_000;
            (Status::Trialing, end, -1, Some(end), end)
        }
        Start::At(start) => (Status::Active, start, -1, None, start),
        Start::ChargeNow => (Status::Active, first_period_end(), 0, None, now),
        Start::Paid => {
            let end = first_period_end();
            (Status::Active, end, 0, None, end)
        }
    };
    let discount = new.discount.and_then(|d| serde_json::to_string(&d).ok());
    Subscription {
        id: new.id,
        account_id: new.account_id,
        customer_id: new.customer_id,
        plan_id: new.plan_id,
        cycle: new.cycle,
        status,
        current_period_start: now,
        current_period_end: period_end,
        next_charge_date: next_charge,
        default_payment_method_id: new.payment_method_id,
        trial_end,
        cancel_at_period_end: false,
        failed_attempts: 0,
        first_failure_at: None,
        metadata: new.metadata,
        anchor: now,
        period_index,
        next_cycle: None,
        period_cycle: new.cycle,
        version: 0,
        due_at: Some(next_charge),
        created_at: now,
        updated_at: now,
        quantity: new.quantity,
        period_quantity: new.quantity,
        // Set where it is inserted (`StoreTxn::insert_subscription`), to its discount then.
        period_discount: None,
        discount,
        mrr_cents: 0,
    }
}

/// Writes the new subscription and its `subscription.created` event inside `txn`.
pub async fn insert(txn: &StoreTxn, sub: &Subscription, now: i64) -> StoreResult<()> {
    txn.insert_subscription(sub.clone()).await?;
    txn.insert_event(subscription_event(
        sub,
        EventType::SubscriptionCreated,
        None,
        now,
    ))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(start: Start) -> NewSubscription {
        NewSubscription {
            id: SubscriptionId::generate(),
            account_id: AccountId::generate(),
            customer_id: CustomerId::generate(),
            plan_id: PlanId::generate(),
            cycle: Cycle::Monthly,
            payment_method_id: PaymentMethodId::generate(),
            metadata: None,
            start,
            quantity: 1,
            discount: None,
        }
    }

    #[test]
    fn a_paid_first_period_is_due_only_at_its_end() {
        let now = 1_700_000_000_000;
        let sub = build(new(Start::Paid), now);
        assert_eq!(sub.status, Status::Active);
        assert_eq!(sub.period_index, 0);
        assert_eq!(sub.current_period_start, now);
        assert!(sub.current_period_end > now);
        assert_eq!(sub.next_charge_date, sub.current_period_end);
        assert_eq!(sub.due_at, Some(sub.current_period_end));
    }

    #[test]
    fn a_charge_now_start_is_due_at_once_and_a_trial_at_its_end() {
        let now = 1_700_000_000_000;
        let sub = build(new(Start::ChargeNow), now);
        assert_eq!(sub.due_at, Some(now));
        let trial = build(new(Start::Trial { days: 3 }), now);
        assert_eq!(trial.status, Status::Trialing);
        assert_eq!(trial.trial_end, Some(now + 3 * 86_400_000));
        assert_eq!(trial.due_at, trial.trial_end);
        assert_eq!(trial.period_index, -1);
    }
}
