//! The subscription actor's charges and their outcomes: a period's charge (renewal, first,
//! retry, manual) and an action's one-off charge begin with their fee reserved in one unit,
//! are posted, and settle once in the transaction that applies their effect
//! (`decide::settle` for a period, the carried `PendingChange` for an action).

use super::ActionError;
use super::changes::{apply_addon, apply_plan_change};
use super::context::Context;
use super::decide::{self, PendingChange};
use super::new_charge;
use super::periods::{Resuming, charge_event_type, period_effect};
use super::{ChargeInfo, emit};
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::ChargeStatus;
use crate::domain::event_type::EventType;
use crate::domain::schedule::Schedule;
use crate::domain::subscription::Status;
use crate::ids::{ChargeAttemptId, SubscriptionId};
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::batch::{PeriodChargeBegin, PeriodChargeSettle};
use crate::store::catalog::Customer;
use crate::store::charges::{
    BeginChargeError, ChargeAttempt, PaymentMethod, ProcessorEvent, decline_code, final_status,
};
use crate::store::invoices::DraftLine;
use crate::store::prefetch::DueSnapshot;
use crate::store::subscriptions::{PeriodCharges, Subscription};
use crate::store::txn::StoreTxn;

/// What applying a charge's outcome did, for the actor to finish after the commit.
enum Applied {
    /// The status is not final: nothing applied.
    NotFinal,
    /// Another message applied it first.
    Already,
    /// Applied now; the subscription when it was saved (its timer is then re-armed).
    Settled(Option<Box<Subscription>>),
}

/// The effect of a newly settled `charge` on `sub`, inside the transaction that settled it: the
/// charge's event and the subscription's transition with its events. True when `sub` was
/// saved (a charge of a period, or one an action waited on); any other one-off charge changes
/// only money and events.
pub(super) async fn transition(
    txn: &StoreTxn,
    sub: &mut Subscription,
    account: &Account,
    charge: &ChargeAttempt,
    raw_status: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let approved = charge.is(ChargeStatus::Approved);
    let info = || ChargeInfo { charge, raw_status };
    if let Some(change) = charge.pending_change.as_deref() {
        // An action that waited on its charge: all or nothing. Declined, nothing changes and
        // nothing is emitted (CONTRACT §5: a refused action leaves no trace but the attempt).
        if !approved {
            return Ok(false);
        }
        emit(txn, sub, EventType::ChargeApproved, Some(info()), now).await?;
        match serde_json::from_str::<PendingChange>(change) {
            Ok(PendingChange::Plan {
                plan_id,
                cycle,
                quantity,
            }) => {
                apply_plan_change(txn, sub, (plan_id, cycle, quantity), true, now).await?;
            }
            Ok(PendingChange::Addon { addon_id }) => {
                if !txn.addon_attached(&sub.id, &addon_id).await? {
                    apply_addon(txn, sub, addon_id, now).await?;
                }
            }
            Err(err) => {
                return Err(StoreError::invariant(format!(
                    "charge {} has an unreadable pending change: {err}",
                    charge.id
                )));
            }
        }
        sub.updated_at = now;
        *sub = txn.save_subscription(sub.clone()).await?;
        return Ok(true);
    }
    let Some(period_start) = charge.period_start else {
        let event_type = charge_event_type(approved);
        emit(txn, sub, event_type, Some(info()), now).await?;
        return Ok(false);
    };
    let effect = period_effect(sub, account, charge, raw_status, period_start, now);
    if effect.drop_detached_addons {
        txn.drop_detached_addons(&sub.id).await?;
    }
    for event in effect.events {
        txn.insert_event(event).await?;
    }
    *sub = txn.save_subscription(sub.clone()).await?;
    Ok(true)
}

impl Context<'_> {
    /// Charges the subscription's unpaid period: the current one if it was never paid (a first
    /// charge), else the next one (a renewal). A period already paid is never charged again.
    /// With `resuming`, the resumption commits with the charge's beginning or not at all.
    // Each argument is an input of its own to the one decision; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn charge_period(
        &self,
        sub: &mut Subscription,
        account: &Account,
        charges: &PeriodCharges,
        now: i64,
        purpose: ChargePurpose,
        snapshot: Option<&DueSnapshot>,
        resuming: Option<Resuming>,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let period_start = if charges.paid(sub.current_period_start) {
            sub.current_period_end
        } else {
            sub.current_period_start
        };
        if charges.paid(period_start) {
            // Nothing is due: a resumption commits alone.
            if let Some(resuming) = resuming {
                let txn = self.store().begin().await?;
                txn.insert_event(resuming.event).await?;
                self.save(&txn, sub, now).await?;
                txn.commit().await?;
            }
            return Ok(None);
        }
        // The current period (a first charge) is priced at the cycle and quantity it is billed
        // at; the next one at the subscription's, which a pending change has already set.
        let (cycle, quantity) = if period_start == sub.current_period_start {
            (sub.period_cycle, sub.period_quantity)
        } else {
            (sub.cycle, sub.quantity)
        };
        // The period charged, for its invoice's lines.
        let period = if period_start == sub.current_period_start {
            (sub.current_period_start, sub.current_period_end)
        } else {
            let mut next = sub.clone();
            decide::reschedule(&mut next, Schedule::advance);
            (next.current_period_start, next.current_period_end)
        };
        let prefetched =
            snapshot.and_then(|s| s.recurring_lines(&sub.plan_id, cycle, quantity, period));
        let lines = match prefetched {
            Some(lines) => lines,
            None => {
                self.recurring_lines(sub, &sub.plan_id.clone(), cycle, quantity, period)
                    .await?
            }
        };
        if lines.iter().map(|line| line.amount_cents).sum::<i64>() == 0 {
            // A discount took everything: no charge, an invoice of nothing (CONTRACT §14). A
            // charge-now has nothing to charge: it is refused, writing nothing.
            if purpose == ChargePurpose::Manual {
                return Err(ActionError::Conflict(
                    "The period's total is 0 after its discount: there is nothing to charge; \
                     it is invoiced when it renews."
                        .into(),
                ));
            }
            self.free_period(sub, account, lines, period_start, resuming, now)
                .await?;
            return Ok(None);
        }
        let new = new_charge(sub, account, lines, purpose, Some(period_start), None, now);
        // A retry is counted against its card network's limits as it begins (CONTRACT §15).
        let network = match purpose {
            ChargePurpose::Retry => self.network_of(&new, snapshot).await?,
            _ => None,
        };
        // Bounded: a burst never has more than `IN_FLIGHT` charges out at the processor.
        let slot = self.in_flight().slot().await;
        let mut row = sub.clone();
        row.due_at = None;
        row.updated_at = now;
        // The fee's reservation, the attempt and the subscription, batched with the renewals
        // that begin at the same time (`store::batch`).
        let (events, paused) = match resuming {
            Some(resuming) => (vec![resuming.event], Some(resuming.paused)),
            None => (Vec::new(), None),
        };
        let begin = PeriodChargeBegin {
            charge: new,
            row,
            events,
        };
        let began = match network {
            None => self.store().begin_period_charge(begin).await?,
            Some(network) => {
                match self
                    .store()
                    .begin_counted_charge(begin, network.windows())
                    .await?
                {
                    Ok(began) => began,
                    // Past a limit: not sent, and nothing of the begin was written.
                    Err((overrun, begin)) => {
                        drop(slot);
                        let resuming = paused.zip(begin.events.into_iter().next());
                        let resuming = resuming.map(|(paused, event)| Resuming { paused, event });
                        let refusal = network.refusal(overrun.window, overrun.sent);
                        self.decline_unsent(sub, account, begin.charge, &refusal, resuming, now)
                            .await?;
                        return Ok(None);
                    }
                }
            }
        };
        let charge = match began {
            Ok((charge, row)) => {
                *sub = row;
                charge
            }
            // The database's own guard: the period already has a live charge (pending or
            // approved), which this actor's read did not see. Nothing to do for a renewal; a
            // resumption wrote nothing either, and says so.
            Err(BeginChargeError::PeriodTaken) => {
                return match paused {
                    Some(_) => Err(StoreError::Conflict(format!(
                        "subscription {}'s period charge",
                        sub.id
                    ))
                    .into()),
                    None => Ok(None),
                };
            }
            Err(BeginChargeError::InsufficientBalance) => {
                // A timer's charge pauses the subscription; an operator's only refuses.
                if purpose == ChargePurpose::Manual {
                    return Ok(None);
                }
                // A resumption did not happen: the row as it was read (not as the resume
                // would have moved it) is paused for balance, with no event and no timer but
                // a cancellation at its period's end; the next top-up wakes it.
                if let Some(paused) = paused {
                    *sub = paused;
                    sub.due_at = decide::stopped_due(sub);
                } else {
                    sub.due_at = None;
                }
                let txn = self.store().begin().await?;
                sub.status = Status::PausedInsufficientBalance;
                self.save(&txn, sub, now).await?;
                txn.commit().await?;
                return Ok(None);
            }
            Err(BeginChargeError::Store(err)) => return Err(err.into()),
        };
        self.arm(sub, now);
        self.in_flight().hold_until_settled(&charge, slot);
        self.in_flight().keep_began(&charge.id, sub);
        let payer = snapshot.and_then(|s| s.payer.as_ref());
        self.submit_with(account, &charge, payer).await?;
        // As it began: a caller that shows it reads it again (a renewal does not).
        Ok(Some(charge))
    }

    /// A charge an action waits on (a proration): the fee's reservation and the attempt, which
    /// carries the `change` to apply when it is approved, in one transaction; nothing else of
    /// the subscription is written now but its version (every charge of a subscription bumps
    /// it, which is what makes a renewal's prefetched reads safe: `store::prefetch`). Short of
    /// balance, nothing is written at all.
    pub(super) async fn one_off_charge(
        &self,
        sub: &Subscription,
        account: &Account,
        line: DraftLine,
        purpose: ChargePurpose,
        change: PendingChange,
        now: i64,
    ) -> Result<ChargeAttempt, ActionError> {
        let change = serde_json::to_string(&change)
            .map_err(|err| StoreError::invariant(format!("pending change: {err}")))?;
        let txn = self.store().begin().await?;
        let charge = txn
            .begin_charge(new_charge(
                sub,
                account,
                vec![line],
                purpose,
                None,
                Some(change),
                now,
            ))
            .await
            .map_err(|err| match err {
                BeginChargeError::InsufficientBalance => ActionError::InsufficientBalance,
                BeginChargeError::PeriodTaken => {
                    ActionError::Conflict("A charge of this period is already live.".into())
                }
                BeginChargeError::Store(err) => err.into(),
            })?;
        txn.save_subscription(sub.clone()).await?;
        txn.commit().await?;
        self.submit(account, &charge).await?;
        Ok(self
            .store()
            .charge_by_id(&charge.id)
            .await?
            .unwrap_or(charge))
    }

    /// Posts the transaction; a final answer (or a refusal of the post) is applied at once, in
    /// this actor. Pending and unknown answers leave the charge pending: its event or a
    /// recheck (scheduled by `submit` for an unknown one) brings the outcome.
    pub(super) async fn submit(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
    ) -> Result<(), ActionError> {
        self.submit_with(account, charge, None).await
    }

    /// `submit`, with the payer's payment method and customer already read (`store::prefetch`).
    async fn submit_with(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
        payer: Option<&(PaymentMethod, Customer)>,
    ) -> Result<(), ActionError> {
        let outcome = self.charger().submit_with(account, charge, payer).await;
        let Some(settlement) = outcome.settlement() else {
            return Ok(());
        };
        let reported = Reported {
            raw_status: settlement.raw_status,
            message: settlement.message,
            transaction_id: settlement.transaction_id,
        };
        match self
            .apply_outcome(
                charge.subscription_id.as_ref(),
                &charge.id,
                reported,
                None,
                Some(charge),
            )
            .await
        {
            Err(ActionError::Store(StoreError::Fenced(_))) => {
                // The charge began and was posted, then its shard moved to another node: the
                // outcome is that node's to apply. It is sent there now (its processor event
                // and the reconciler bring it too, and it is applied once), and the charge is
                // answered as it stands, pending: the command is not "nothing done", and its
                // caller reads from the database what became of the charge.
                tracing::info!(charge = %charge.id, "the charge's shard moved before its outcome was applied; sent to the new owner");
                self.in_flight().release(&charge.id);
                self.outcome_elsewhere(charge, &settlement);
                Ok(())
            }
            result => result,
        }
    }

    /// Sends a charge's final outcome to the node that now holds its subscription, in a task
    /// of its own (this actor must not wait for a message that, should the shard come back,
    /// would queue behind its own).
    fn outcome_elsewhere(
        &self,
        charge: &ChargeAttempt,
        settlement: &crate::processor::outcome::Settlement<'_>,
    ) {
        let Some(subscription_id) = charge.subscription_id.clone() else {
            return;
        };
        let runtime = self.nodes();
        let charge = charge.clone();
        let raw_status = settlement.raw_status.to_owned();
        let message = settlement.message.map(str::to_owned);
        let transaction_id = settlement.transaction_id.map(str::to_owned);
        tokio::spawn(async move {
            if let Err(err) = runtime
                .outcome(
                    &subscription_id,
                    &charge,
                    &raw_status,
                    message.as_deref(),
                    transaction_id.as_deref(),
                    None,
                )
                .await
            {
                tracing::warn!(charge = %charge.id, error = %err, "could not send a charge's outcome to its new node; its event or the reconciler brings it there");
            }
        });
    }

    /// Applies a charge's final outcome once: the money, the subscription's transition and
    /// the events, in one transaction, which also records the processor `event` that reported
    /// the outcome (when it came through the ingress). `known` is the charge as the caller
    /// read it: a period's charge read pending is settled in a batch with the outcomes that
    /// arrive at the same time (`store::batch`), any other alone.
    pub(super) async fn apply_outcome(
        &self,
        subscription_id: Option<&SubscriptionId>,
        charge_id: &ChargeAttemptId,
        reported: Reported<'_>,
        event: Option<ProcessorEvent>,
        known: Option<&ChargeAttempt>,
    ) -> Result<(), ActionError> {
        // The actor knows its subscription; only a caller that does not reads the charge.
        let sub_id = match subscription_id {
            Some(id) => Some(id.to_owned()),
            None => self
                .store()
                .charge_by_id(charge_id)
                .await?
                .and_then(|charge| charge.subscription_id),
        };
        let Some(sub_id) = sub_id else {
            if let Some(event) = event {
                self.store().record_processor_event(event).await?;
            }
            return Ok(());
        };
        // A period's charge read pending settles in a batch, on the row its beginning left when
        // this actor kept it (the batch's conditional save refuses a row changed since). Taken
        // by every outcome, so that none leaves it behind.
        let kept = self
            .in_flight()
            .take_began(&sub_id, charge_id)
            .filter(|_| known.is_some());
        let was_kept = kept.is_some();
        let (sub, account, now) = match kept {
            Some(row) => {
                let (account, now) = self.account_and_now(&row).await?;
                (row, account, now)
            }
            None => self.load(&sub_id).await?,
        };
        let batched =
            known.and_then(|c| settle_in_batch(&sub, &account, c, &reported, &event, now));
        if let Some(settle) = batched
            && let Some(saved) = self.store().settle_period_charge(settle).await?
        {
            self.in_flight().release(charge_id);
            self.arm(&saved, now);
            return Ok(());
        }
        // Alone, on the row as it is now.
        let (sub, account, now) = if was_kept {
            self.load(&sub_id).await?
        } else {
            (sub, account, now)
        };
        let due_at = sub.due_at;
        let (id, raw_status) = (charge_id.to_owned(), reported.raw_status.to_owned());
        let message = reported.message.map(str::to_owned);
        let transaction_id = reported.transaction_id.map(str::to_owned);
        // On the writer's thread: the event's record, the money, the transition, the events.
        let applied = self
            .store()
            .unit(move |txn| async move {
                let recorded = match event {
                    Some(event) => txn.record_processor_event(event).await?,
                    None => false,
                };
                let settled = txn
                    .settle_charge(
                        &id,
                        &raw_status,
                        message.as_deref(),
                        transaction_id.as_deref(),
                        chrono::Utc::now().timestamp_millis(),
                    )
                    .await?;
                let Some(settled) = settled else {
                    if recorded {
                        txn.commit().await?;
                    }
                    return Ok::<_, StoreError>(Applied::NotFinal);
                };
                if !settled.newly {
                    // Already applied: only the event's record, if new, is kept, and the
                    // conflict it raised, if it contradicted the recorded outcome.
                    if recorded || settled.conflict {
                        txn.commit().await?;
                    }
                    return Ok(Applied::Already);
                }
                if settled.charge.subscription_id.as_ref() != Some(&sub.id) {
                    // Rolled back: the outcome reached the actor of another subscription.
                    return Err(StoreError::invariant(format!(
                        "charge {} is not of subscription {}",
                        settled.charge.id, sub.id
                    )));
                }
                let mut sub = sub;
                let saved =
                    transition(&txn, &mut sub, &account, &settled.charge, &raw_status, now).await?;
                txn.commit().await?;
                Ok(Applied::Settled(saved.then(|| Box::new(sub))))
            })
            .await?;
        match applied {
            Applied::NotFinal => {}
            Applied::Already => self.in_flight().release(charge_id),
            Applied::Settled(None) => {
                // A timer skipped while this charge was pending runs now.
                self.in_flight().release(charge_id);
                if let Some(due) = due_at {
                    self.arm_at(&sub_id, due, now);
                }
            }
            Applied::Settled(Some(sub)) => {
                self.in_flight().release(charge_id);
                self.arm(&sub, now);
            }
        }
        Ok(())
    }
}

/// What the processor reported about a charge.
pub(super) struct Reported<'a> {
    pub(super) raw_status: &'a str,
    pub(super) message: Option<&'a str>,
    pub(super) transaction_id: Option<&'a str>,
}

/// The outcome of a period's `charge` (read pending) as a batch applies it: what `transition`
/// writes for it, decided in memory. `None` for any charge that is not a period's, not read
/// pending or not final: it settles alone.
fn settle_in_batch(
    sub: &Subscription,
    account: &Account,
    charge: &ChargeAttempt,
    reported: &Reported<'_>,
    event: &Option<ProcessorEvent>,
    now: i64,
) -> Option<PeriodChargeSettle> {
    let status = final_status(reported.raw_status)?;
    let period_start = charge.period_start?;
    if !charge.is(ChargeStatus::Pending)
        || charge.pending_change.is_some()
        || charge.subscription_id.as_ref() != Some(&sub.id)
    {
        return None;
    }
    let mut charge = charge.clone();
    // Real time, as `settle_charge` records it.
    let settled_at = chrono::Utc::now().timestamp_millis();
    charge.status = status;
    charge.processor_status = Some(reported.raw_status.to_owned());
    charge.processor_message = reported.message.map(str::to_owned);
    charge.decline_code = decline_code(status, reported.message);
    if let Some(transaction_id) = reported.transaction_id {
        charge.processor_transaction_id = Some(transaction_id.to_owned());
    }
    charge.updated_at = settled_at;
    charge.finalized_at = Some(settled_at);
    let mut sub = sub.clone();
    let effect = period_effect(
        &mut sub,
        account,
        &charge,
        reported.raw_status,
        period_start,
        now,
    );
    Some(PeriodChargeSettle {
        charge,
        event: event.clone(),
        events: effect.events,
        drop_detached_addons: effect.drop_detached_addons,
        row: sub,
    })
}
