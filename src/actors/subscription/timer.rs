//! A subscription's timer: when it comes due (one at a time, or prefetched with its batch),
//! what is due is done: a renewal's charge, a retry, a trial's end, a scheduled cancellation or
//! plan change, a paused subscription's resumption once its fee is covered.

use super::ActionError;
use super::context::Context;
use super::decide::{self, reschedule};
use super::periods::Resuming;
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::decline::Decline;
use crate::domain::event_type::EventType;
use crate::domain::schedule::Schedule;
use crate::domain::subscription::{Status, cancel_at, parse_retry_days};
use crate::events::subscription_event;
use crate::ids::SubscriptionId;
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::charges::ChargeAttempt;
use crate::store::prefetch::DueSnapshot;
use crate::store::subscriptions::{PeriodCharges, Subscription};

impl Context<'_> {
    /// A timer of the subscription came due.
    pub(super) async fn apply_due(&self, id: &SubscriptionId) -> Result<(), ActionError> {
        let (mut sub, account, now) = self.load(id).await?;
        if sub.due_at.is_none_or(|due| due > now) {
            return Ok(());
        }
        metrics::counter!("renewals_due_total").increment(1);
        let result = self.run_due(&mut sub, &account, now).await;
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("renewals_processed_total", "result" => outcome).increment(1);
        result.map(|_| ())
    }

    /// `apply_due` with the reads prefetched for the timer's batch. A snapshot that turns out
    /// stale (the subscription changed since it was read) ends in a refused conditional save
    /// with nothing written; the timer then runs again on fresh reads.
    pub(super) async fn apply_due_prefetched(
        &self,
        id: &SubscriptionId,
        snapshot: &DueSnapshot,
    ) -> Result<(), ActionError> {
        let mut sub = snapshot.sub.clone();
        let (account, now) = self.account_and_now(&sub).await?;
        // Not due when read: an early or stale timer, as in `apply_due` (whatever made the row
        // due since then armed its timer again).
        if sub.due_at.is_none_or(|due| due > now) {
            return Ok(());
        }
        metrics::counter!("renewals_due_total").increment(1);
        let result = match self
            .run_due_with(&mut sub, &account, now, Some(snapshot))
            .await
        {
            Err(ActionError::Store(StoreError::Conflict(_))) => {
                metrics::counter!("renewal_snapshots_stale_total").increment(1);
                let (mut sub, account, now) = self.load(id).await?;
                if sub.due_at.is_none_or(|due| due > now) {
                    return Ok(());
                }
                self.run_due(&mut sub, &account, now).await
            }
            other => other,
        };
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("renewals_processed_total", "result" => outcome).increment(1);
        result.map(|_| ())
    }

    pub(super) async fn run_due(
        &self,
        sub: &mut Subscription,
        account: &Account,
        now: i64,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        self.run_due_with(sub, account, now, None).await
    }

    /// The timer's work on `sub` (read at `now`), reading what it needs unless `snapshot`
    /// holds it.
    pub(super) async fn run_due_with(
        &self,
        sub: &mut Subscription,
        account: &Account,
        now: i64,
        snapshot: Option<&DueSnapshot>,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let status = sub.status;
        // Whatever happened in between (a pause, a balance too short), a subscription set to
        // cancel at its period's end is canceled at that end.
        if status != Status::Canceled && sub.cancel_at_period_end && now >= sub.current_period_end {
            self.cancel_at_end(sub, now).await?;
            return Ok(None);
        }
        // One read for the pending check and both periods' payment (the trial's end moves the
        // period forward, never back, so `since` covers every period asked about below).
        let charges = match snapshot {
            Some(snapshot) => snapshot.charges.clone(),
            None => {
                self.store()
                    .period_charges(&sub.id, sub.current_period_start)
                    .await?
            }
        };
        if charges.pending {
            return Ok(None);
        }
        if status == Status::PastDue && self.hard_declined_on_its_card(sub).await? {
            self.await_new_card(sub, account, now).await?;
            return Ok(None);
        }
        self.charge_due(sub, account, &charges, now, snapshot, None)
            .await
    }

    /// Whether the last charge of `sub` was declined hard (`Decline::is_hard`) on the payment
    /// method it still has: that card is never tried again.
    pub(super) async fn hard_declined_on_its_card(
        &self,
        sub: &Subscription,
    ) -> Result<bool, StoreError> {
        let last = self
            .store()
            .last_settled_charge(&sub.account_id, &sub.id)
            .await?;
        Ok(last.is_some_and(|charge| {
            charge.payment_method_id == sub.default_payment_method_id
                && charge.decline_code.is_some_and(Decline::is_hard)
        }))
    }

    /// A past-due `sub` whose card was declined hard waits for a new one until the date its
    /// schedule would have canceled it, and is canceled then (unpaid: its failed attempts say
    /// so), with no retry in between.
    async fn await_new_card(
        &self,
        sub: &mut Subscription,
        account: &Account,
        now: i64,
    ) -> Result<(), ActionError> {
        let retry_days = parse_retry_days(&account.dunning_retry_days);
        let cancel = sub
            .first_failure_at
            .and_then(|first| cancel_at(first, &retry_days));
        if let Some(at) = cancel.filter(|at| *at > now) {
            let txn = self.store().begin().await?;
            sub.due_at = Some(at);
            sub.next_charge_date = at;
            self.save(&txn, sub, now).await?;
            txn.commit().await?;
            return Ok(());
        }
        self.cancel_at_end(sub, now).await
    }

    /// Begins the charge that is due on `sub` (read at `now`, its period's charges in
    /// `charges`) as its status says; with `resuming`, in the unit that resumes it.
    pub(super) async fn charge_due(
        &self,
        sub: &mut Subscription,
        account: &Account,
        charges: &PeriodCharges,
        now: i64,
        snapshot: Option<&DueSnapshot>,
        resuming: Option<Resuming>,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let status = sub.status;
        let in_pre_period = status == Status::Trialing || sub.period_index < 0;
        let purpose = match status {
            Status::Trialing | Status::Active if in_pre_period => {
                // The trial (or the prepaid time before start_date) ends: the first period
                // starts, in the subscription's cycle (a change made meanwhile included).
                sub.status = Status::Active;
                reschedule(sub, Schedule::advance);
                sub.next_charge_date = sub.current_period_start;
                ChargePurpose::First
            }
            Status::Active => ChargePurpose::Renewal,
            Status::PastDue => ChargePurpose::Retry,
            // Paused for want of balance and woken by a top-up (its timer): resumed and
            // charged what is due if the balance covers the projected fee, else left paused
            // with no timer (the next top-up wakes it again) and no event.
            Status::PausedInsufficientBalance if resuming.is_none() => {
                return self
                    .resume_into_charge(sub, account, charges, now, snapshot)
                    .await;
            }
            _ => return Ok(None),
        };
        self.charge_period(sub, account, charges, now, purpose, snapshot, resuming)
            .await
    }

    /// Resumes a paused `sub` (read at `now`, with the charges of its period since the current
    /// one began in `charges`) with its `subscription.resumed` event. When the resume makes a
    /// charge due (the renewal date passed during the pause, or the charge that paused it for
    /// balance), the resumption, its event and the charge's beginning (the fee's reservation,
    /// a conditional update that never takes the balance below zero) are one unit: all of it
    /// commits or none of it. A balance short of the fee leaves the row as read, paused for
    /// balance, with no event. A charge still pending (its outcome not yet applied) begins
    /// nothing: the resumption commits alone, as when nothing is due.
    pub(super) async fn resume_into_charge(
        &self,
        sub: &mut Subscription,
        account: &Account,
        charges: &PeriodCharges,
        now: i64,
        snapshot: Option<&DueSnapshot>,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let paused = sub.clone();
        decide::resume(sub, now);
        let event = subscription_event(sub, EventType::SubscriptionResumed, None, now);
        if charges.pending || sub.due_at.is_none_or(|due| due > now) {
            let txn = self.store().begin().await?;
            txn.insert_event(event).await?;
            self.save(&txn, sub, now).await?;
            txn.commit().await?;
            return Ok(None);
        }
        let resuming = Resuming { paused, event };
        Box::pin(self.charge_due(sub, account, charges, now, snapshot, Some(resuming))).await
    }
}
