//! What a subscription actor does with each message: one `apply` per command, timer and
//! processor outcome (the mini-redis shape). Every change is committed in one transaction with
//! the events it emits; charges reserve their fee in that same transaction.

use super::decide::{
    self, PendingChange, cycle_of, period_cycle_of, reschedule, status_of, stopped_due,
};
use super::{ActionError, ActionOutcome, Command, Runtime};
use crate::accounts::fee_schedule;
use crate::domain::schedule::Schedule;
use crate::domain::subscription::{Status, parse_retry_days, prorate};
use crate::domain::time::{Cycle, from_millis, rfc3339};
use crate::ids::{AccountId, EventId};
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::catalog::CatalogKind;
use crate::store::charges::{BeginChargeError, ChargeAttempt, NewCharge, ProcessorEvent};
use crate::store::subscriptions::{
    Event, PeriodCharges, StoreTxn, Subscription, SubscriptionAddon,
};
use serde_json::{Value, json};
use std::sync::Arc;

/// Charge details carried by charge events.
struct ChargeInfo<'a> {
    charge: &'a ChargeAttempt,
    raw_status: &'a str,
}

/// Applies a change-plan (now, or when its proration is approved) with its event.
async fn apply_plan_change(
    txn: &StoreTxn,
    sub: &mut Subscription,
    plan_id: String,
    cycle: Option<Cycle>,
    now: i64,
) -> Result<(), StoreError> {
    sub.plan_id = plan_id;
    if let Some(cycle) = cycle {
        // The current period keeps its end and its cycle; the new cycle starts at its end.
        reschedule(sub, |schedule| schedule.change_cycle(cycle));
    }
    emit(txn, sub, "subscription.plan_changed", None, now).await
}

/// Attaches an add-on (now, or when its proration is approved), unless it already is.
async fn apply_addon(
    txn: &StoreTxn,
    sub: &Subscription,
    addon_id: String,
    now: i64,
) -> Result<(), StoreError> {
    txn.attach_addon(SubscriptionAddon {
        subscription_id: sub.id.clone(),
        addon_id,
        account_id: sub.account_id.clone(),
        attached_at: now,
        detach_at_period_end: false,
    })
    .await
}

/// The event `event_type` of `sub`, in the spec's payload shape: `data.subscription_id`,
/// `data.metadata` (the subscription's, or null) and, for charge events, the charge's id, raw
/// processor status and amount.
pub fn subscription_event(
    sub: &Subscription,
    event_type: &str,
    charge: Option<(&ChargeAttempt, &str)>,
    now_ms: i64,
) -> Event {
    let id = EventId::generate().into_string();
    let metadata: Value = sub
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::Null);
    let mut data = json!({"subscription_id": sub.id, "metadata": metadata});
    if let Some((charge, raw_status)) = charge {
        data["charge_attempt_id"] = json!(charge.id);
        data["status"] = json!(raw_status);
        data["amount_in_cents"] = json!(charge.amount_cents);
    }
    let body = json!({"id": id, "type": event_type, "created": rfc3339(from_millis(now_ms)), "data": data});
    Event {
        id,
        account_id: sub.account_id.clone(),
        event_type: event_type.to_owned(),
        subscription_id: Some(sub.id.clone()),
        body: body.to_string(),
        created_at: now_ms,
    }
}

/// Writes one event of the subscription into the outbox, inside `txn`.
async fn emit(
    txn: &StoreTxn,
    sub: &Subscription,
    event_type: &str,
    charge: Option<ChargeInfo<'_>>,
    now_ms: i64,
) -> Result<(), StoreError> {
    let charge = charge.map(|info| (info.charge, info.raw_status));
    txn.insert_event(subscription_event(sub, event_type, charge, now_ms))
        .await
}

/// What applying a charge's outcome did, for the actor to finish after the commit.
enum Applied {
    /// The status is not final: nothing applied.
    NotFinal,
    /// Another message applied it first.
    Already,
    /// Applied now; the subscription when it was saved (its timer is then re-armed).
    Settled(Option<Subscription>),
}

/// The effect of a newly settled `charge` on `sub`, inside the transaction that settled it: the
/// charge's event and the subscription's transition with its events. True when `sub` was
/// saved (a charge of a period, or one an action waited on); any other one-off charge changes
/// only money and events.
async fn transition(
    txn: &StoreTxn,
    sub: &mut Subscription,
    account: &Account,
    charge: &ChargeAttempt,
    raw_status: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let approved = charge.status == "approved";
    let info = || ChargeInfo { charge, raw_status };
    if let Some(change) = charge.pending_change.as_deref() {
        // An action that waited on its charge: all or nothing. Declined, nothing changes and
        // nothing is emitted (CONTRACT §5: a refused action leaves no trace but the attempt).
        if !approved {
            return Ok(false);
        }
        emit(txn, sub, "charge.approved", Some(info()), now).await?;
        match serde_json::from_str::<PendingChange>(change) {
            Ok(PendingChange::Plan { plan_id, cycle }) => {
                apply_plan_change(txn, sub, plan_id, cycle, now).await?;
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
    emit(
        txn,
        sub,
        if approved {
            "charge.approved"
        } else {
            "charge.declined"
        },
        Some(info()),
        now,
    )
    .await?;
    let Some(period_start) = charge.period_start else {
        return Ok(false);
    };
    let settlement = decide::settle(
        sub,
        approved,
        period_start,
        &parse_retry_days(&account.dunning_retry_days),
        now,
    );
    if settlement.drop_detached_addons {
        txn.drop_detached_addons(&sub.id).await?;
    }
    for event_type in settlement.events {
        emit(txn, sub, event_type, None, now).await?;
    }
    sub.updated_at = now;
    *sub = txn.save_subscription(sub.clone()).await?;
    Ok(true)
}

impl Runtime {
    async fn load(&self, id: &str) -> Result<(Subscription, Arc<Account>, i64), ActionError> {
        let sub = self
            .store()
            .subscription_by_id(id)
            .await?
            .ok_or_else(|| ActionError::NotFound(format!("No subscription with id `{id}`.")))?;
        let account_id = AccountId::from_stored(sub.account_id.clone());
        let account = self
            .account(&account_id)
            .await?
            .ok_or_else(|| ActionError::NotFound("account".into()))?;
        let now = self.clock().now_ms(&account_id).await?;
        Ok((sub, account, now))
    }

    /// The per-period amount of `plan_id` for `cycle` plus the attached add-ons.
    async fn recurring_amount(
        &self,
        sub: &Subscription,
        plan_id: &str,
        cycle: Cycle,
    ) -> Result<i64, ActionError> {
        let account = AccountId::from_stored(sub.account_id.clone());
        let plan = self
            .store()
            .catalog_item(&account, CatalogKind::Plan, plan_id)
            .await?
            .ok_or_else(|| ActionError::NotFound(format!("No plan with id `{plan_id}`.")))?;
        let mut total = price(&plan, cycle);
        // A detached add-on is billed for no further period (it leaves at the period's end).
        for attached in self
            .store()
            .subscription_addons(&sub.id)
            .await?
            .into_iter()
            .filter(|a| !a.detach_at_period_end)
        {
            if let Some(addon) = self
                .store()
                .catalog_item(&account, CatalogKind::Addon, &attached.addon_id)
                .await?
            {
                total += price(&addon, cycle);
            }
        }
        Ok(total)
    }

    pub(super) async fn apply_command(
        &self,
        id: &str,
        command: Command,
    ) -> Result<ActionOutcome, ActionError> {
        let (mut sub, account, now) = self.load(id).await?;
        let status = status_of(&sub);
        let mut charge = None;
        match command {
            Command::Cancel { at_period_end } => {
                if status == Status::Canceled
                    || (at_period_end && !status.can_cancel_at_period_end())
                {
                    return Err(ActionError::Conflict(format!(
                        "A {} subscription cannot be canceled{}.",
                        sub.status,
                        if at_period_end { " at period end" } else { "" }
                    )));
                }
                let txn = self.store().begin().await?;
                if at_period_end {
                    sub.cancel_at_period_end = true;
                    sub.due_at = Some(sub.current_period_end);
                } else {
                    sub.status = Status::Canceled.as_str().to_owned();
                    sub.due_at = None;
                    emit(&txn, &sub, "subscription.canceled", None, now).await?;
                }
                self.save(&txn, &mut sub, now).await?;
                txn.commit().await?;
            }
            Command::Pause => {
                if !status.can_pause() {
                    return Err(ActionError::Conflict(format!(
                        "A {} subscription cannot be paused.",
                        sub.status
                    )));
                }
                let txn = self.store().begin().await?;
                sub.status = Status::Paused.as_str().to_owned();
                // No charge and no renewal while paused; a cancellation at the period's end
                // still happens at that end (CONTRACT §5).
                sub.due_at = stopped_due(&sub);
                emit(&txn, &sub, "subscription.paused", None, now).await?;
                self.save(&txn, &mut sub, now).await?;
                txn.commit().await?;
            }
            Command::Resume => {
                if status != Status::Paused {
                    return Err(ActionError::Conflict(format!(
                        "Only a paused subscription can be resumed; this one is {}.",
                        sub.status
                    )));
                }
                if sub.cancel_at_period_end && now >= sub.current_period_end {
                    // Its cancellation fell due while paused and its timer has not run yet:
                    // it is canceled, as it would have been at that instant.
                    self.cancel_at_end(&mut sub, now).await?;
                    return Err(ActionError::Conflict(
                        "The subscription was canceled at the end of its period.".into(),
                    ));
                }
                let txn = self.store().begin().await?;
                decide::resume(&mut sub, now);
                emit(&txn, &sub, "subscription.resumed", None, now).await?;
                self.save(&txn, &mut sub, now).await?;
                txn.commit().await?;
                if sub.due_at.is_some_and(|due| due <= now) {
                    charge = self.run_due(&mut sub, &account, now).await?;
                }
            }
            Command::ChargeNow => {
                if !status.can_charge_now() {
                    return Err(ActionError::Conflict(format!(
                        "A {} subscription cannot be charged now.",
                        sub.status
                    )));
                }
                if self.store().pending_charge_of(&sub.id).await?.is_some() {
                    return Err(ActionError::Conflict(
                        "A charge of this subscription is already pending.".into(),
                    ));
                }
                if status != Status::PastDue {
                    // The period restarts now (a pending cycle change takes effect with it).
                    sub.status = Status::Active.as_str().to_owned();
                    reschedule(&mut sub, |schedule| schedule.restart(now));
                    sub.next_charge_date = now;
                }
                sub.due_at = Some(now);
                let charges = self
                    .store()
                    .period_charges(&sub.id, sub.current_period_start)
                    .await?;
                let started = self
                    .charge_period(&mut sub, &account, &charges, now, "manual", false)
                    .await?
                    .ok_or(ActionError::InsufficientBalance)?;
                // Re-read: the processor may have answered at once.
                charge = Some(
                    self.store()
                        .charge_by_id(&started.id)
                        .await?
                        .unwrap_or(started),
                );
            }
            Command::ChangePlan {
                plan_id,
                cycle,
                prorate: with_proration,
            } => {
                let preview = self.prorated_change(&sub, &plan_id, cycle, now).await?;
                self.refuse_while_change_pending(&sub).await?;
                // Only a real change of cycle is recorded as one.
                let cycle = cycle.filter(|c| *c != cycle_of(&sub));
                if with_proration && preview > 0 {
                    // An upgrade takes effect when its prorated charge is approved: the
                    // charge carries the change, and nothing else is written now.
                    let change = PendingChange::Plan { plan_id, cycle };
                    charge = Some(
                        self.one_off_charge(&sub, &account, preview, "proration", change, now)
                            .await?,
                    );
                } else {
                    let txn = self.store().begin().await?;
                    apply_plan_change(&txn, &mut sub, plan_id, cycle, now).await?;
                    self.save(&txn, &mut sub, now).await?;
                    txn.commit().await?;
                }
            }
            Command::AttachAddon {
                addon_id,
                prorate: with_proration,
            } => {
                if status == Status::Canceled {
                    return Err(ActionError::Conflict(
                        "A canceled subscription accepts no add-ons.".into(),
                    ));
                }
                let account_id = AccountId::from_stored(sub.account_id.clone());
                let addon = self
                    .store()
                    .catalog_item(&account_id, CatalogKind::Addon, &addon_id)
                    .await?
                    .ok_or_else(|| {
                        ActionError::NotFound(format!("No add-on with id `{addon_id}`."))
                    })?;
                if !addon.active {
                    return Err(ActionError::Unprocessable(format!(
                        "Add-on `{addon_id}` is deactivated."
                    )));
                }
                if self
                    .store()
                    .subscription_addons(&sub.id)
                    .await?
                    .iter()
                    .any(|a| a.addon_id == addon_id)
                {
                    return Err(ActionError::Conflict(format!(
                        "Add-on `{addon_id}` is already attached."
                    )));
                }
                self.refuse_while_change_pending(&sub).await?;
                // The rest of the current period, at the cycle the period was billed at.
                let amount = prorate(
                    0,
                    price(&addon, period_cycle_of(&sub)),
                    sub.current_period_start,
                    sub.current_period_end,
                    now,
                );
                if with_proration && status == Status::Active && amount > 0 {
                    let change = PendingChange::Addon { addon_id };
                    charge = Some(
                        self.one_off_charge(&sub, &account, amount, "addon_proration", change, now)
                            .await?,
                    );
                } else {
                    let txn = self.store().begin().await?;
                    apply_addon(&txn, &sub, addon_id, now).await?;
                    self.save(&txn, &mut sub, now).await?;
                    txn.commit().await?;
                }
            }
            Command::DetachAddon { addon_id } => {
                let attached = self.store().subscription_addons(&sub.id).await?;
                if !attached
                    .iter()
                    .any(|a| a.addon_id == addon_id && !a.detach_at_period_end)
                {
                    return Err(ActionError::NotFound(format!(
                        "Add-on `{addon_id}` is not attached to this subscription."
                    )));
                }
                let txn = self.store().begin().await?;
                txn.mark_addon_detached(&sub.id, &addon_id).await?;
                self.save(&txn, &mut sub, now).await?;
                txn.commit().await?;
            }
            Command::SetPaymentMethod { payment_method_id } => {
                let txn = self.store().begin().await?;
                sub.default_payment_method_id = payment_method_id;
                self.save(&txn, &mut sub, now).await?;
                txn.commit().await?;
            }
        }
        let subscription = self.store().subscription_by_id(id).await?.unwrap_or(sub);
        Ok(ActionOutcome {
            subscription,
            charge,
        })
    }

    /// 409 while an action's charge is out (an upgrade or add-on waiting for approval): the
    /// second change would be decided on a subscription that is about to change.
    async fn refuse_while_change_pending(&self, sub: &Subscription) -> Result<(), ActionError> {
        if self.store().pending_change_of(&sub.id).await?.is_some() {
            return Err(ActionError::Conflict(
                "A change of this subscription is waiting for its charge; try again once it settles."
                    .into(),
            ));
        }
        Ok(())
    }

    /// Cancels a subscription whose period ended with `cancel_at_period_end` set.
    async fn cancel_at_end(&self, sub: &mut Subscription, now: i64) -> Result<(), ActionError> {
        let txn = self.store().begin().await?;
        sub.status = Status::Canceled.as_str().to_owned();
        sub.due_at = None;
        emit(&txn, sub, "subscription.canceled", None, now).await?;
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(())
    }

    /// What change-plan would charge at `now` (0 for trials and downgrades charge nothing).
    pub(super) async fn prorated_change(
        &self,
        sub: &Subscription,
        plan_id: &str,
        cycle: Option<Cycle>,
        now: i64,
    ) -> Result<i64, ActionError> {
        let status = status_of(sub);
        let account = AccountId::from_stored(sub.account_id.clone());
        let plan = self
            .store()
            .catalog_item(&account, CatalogKind::Plan, plan_id)
            .await?
            .ok_or_else(|| ActionError::NotFound(format!("No plan with id `{plan_id}`.")))?;
        if !status.can_change_plan() {
            return Err(ActionError::Conflict(format!(
                "A {} subscription cannot change plan.",
                sub.status
            )));
        }
        if !plan.active {
            return Err(ActionError::Invalid(format!(
                "Plan `{plan_id}` is inactive."
            )));
        }
        let current_cycle = cycle_of(sub);
        if plan_id == sub.plan_id && cycle.is_none_or(|c| c == current_cycle) {
            return Err(ActionError::Invalid(
                "The subscription is already on this plan and cycle.".into(),
            ));
        }
        if status == Status::Trialing {
            return Ok(0);
        }
        // Both amounts at the cycle the current period was billed at: after a cycle change
        // the period keeps its length and its prices until it ends (CONTRACT §5).
        let billed = period_cycle_of(sub);
        let old = self
            .store()
            .catalog_item(&account, CatalogKind::Plan, &sub.plan_id)
            .await?
            .map_or(0, |p| price(&p, billed));
        Ok(prorate(
            old,
            price(&plan, billed),
            sub.current_period_start,
            sub.current_period_end,
            now,
        ))
    }

    async fn save(
        &self,
        txn: &StoreTxn,
        sub: &mut Subscription,
        now: i64,
    ) -> Result<(), StoreError> {
        sub.updated_at = now;
        // Arming before the commit is harmless: the timer's `Due` waits in this actor's
        // mailbox until this message is done, and re-reads the row.
        self.arm(sub, now);
        *sub = txn.save_subscription(sub.clone()).await?;
        Ok(())
    }

    /// A timer of the subscription came due.
    pub(super) async fn apply_due(&self, id: &str) -> Result<(), ActionError> {
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

    async fn run_due(
        &self,
        sub: &mut Subscription,
        account: &Account,
        now: i64,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let status = status_of(sub);
        // Whatever happened in between (a pause, a balance too short), a subscription set to
        // cancel at its period's end is canceled at that end.
        if status != Status::Canceled && sub.cancel_at_period_end && now >= sub.current_period_end {
            self.cancel_at_end(sub, now).await?;
            return Ok(None);
        }
        // One read for the pending check and both periods' payment (the trial's end moves the
        // period forward, never back, so `since` covers every period asked about below).
        let charges = self
            .store()
            .period_charges(&sub.id, sub.current_period_start)
            .await?;
        if charges.pending {
            return Ok(None);
        }
        let in_pre_period = status == Status::Trialing || sub.period_index < 0;
        match status {
            Status::Trialing | Status::Active if in_pre_period => {
                // The trial (or the prepaid time before start_date) ends: the first period
                // starts, in the subscription's cycle (a change made meanwhile included).
                sub.status = Status::Active.as_str().to_owned();
                reschedule(sub, Schedule::advance);
                sub.next_charge_date = sub.current_period_start;
                self.charge_period(sub, account, &charges, now, "first", true)
                    .await
            }
            Status::Active => {
                self.charge_period(sub, account, &charges, now, "renewal", true)
                    .await
            }
            Status::PastDue => {
                self.charge_period(sub, account, &charges, now, "retry", true)
                    .await
            }
            Status::PausedInsufficientBalance => self.resume_after_top_up(sub, account, now).await,
            _ => Ok(None),
        }
    }

    /// A subscription paused for want of balance was woken by a top-up (its timer): resumed
    /// and charged what is due if the balance now covers the projected fee, else left paused
    /// with no timer (the next top-up wakes it again), with no event.
    async fn resume_after_top_up(
        &self,
        sub: &mut Subscription,
        account: &Account,
        now: i64,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let amount = self
            .recurring_amount(sub, &sub.plan_id.clone(), cycle_of(sub))
            .await?;
        let fee = fee_schedule(account).fee_for(amount);
        let account_id = AccountId::from_stored(sub.account_id.clone());
        let available = self
            .store()
            .balance(&account_id)
            .await?
            .map_or(0, |b| b.available_cents);
        let txn = self.store().begin().await?;
        if available < fee {
            sub.due_at = None;
            self.save(&txn, sub, now).await?;
            txn.commit().await?;
            return Ok(None);
        }
        decide::resume(sub, now);
        emit(&txn, sub, "subscription.resumed", None, now).await?;
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        if sub.due_at.is_some_and(|due| due <= now) {
            return Box::pin(self.run_due(sub, account, now)).await;
        }
        Ok(None)
    }

    /// Charges the subscription's unpaid period: the current one if it was never paid (a first
    /// charge), else the next one (a renewal). A period already paid is never charged again.
    async fn charge_period(
        &self,
        sub: &mut Subscription,
        account: &Account,
        charges: &PeriodCharges,
        now: i64,
        purpose: &'static str,
        pause_when_short: bool,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let period_start = if charges.paid(sub.current_period_start) {
            sub.current_period_end
        } else {
            sub.current_period_start
        };
        if charges.paid(period_start) {
            return Ok(None);
        }
        // The current period (a first charge) is priced at the cycle it is billed at; the next
        // one at the subscription's cycle, which a pending change has already set.
        let cycle = if period_start == sub.current_period_start {
            period_cycle_of(sub)
        } else {
            cycle_of(sub)
        };
        let amount = self
            .recurring_amount(sub, &sub.plan_id.clone(), cycle)
            .await?;
        // Bounded: a burst never has more than `IN_FLIGHT` charges out at the processor.
        let slot = self.in_flight_slot().await;
        let new = new_charge(sub, account, amount, purpose, Some(period_start), None, now);
        let mut row = sub.clone();
        row.due_at = None;
        row.updated_at = now;
        // On the writer's thread: the fee's reservation, the attempt and the subscription.
        let began = self
            .store()
            .unit(move |txn| async move {
                match txn.begin_charge(new).await {
                    Ok(charge) => {
                        let row = txn.save_subscription(row).await?;
                        txn.commit().await?;
                        Ok(Ok((charge, row)))
                    }
                    // Nothing was written (the unit rolls back).
                    Err(BeginChargeError::Store(err)) => Err(err),
                    Err(refused) => Ok(Err(refused)),
                }
            })
            .await?;
        let charge = match began {
            Ok((charge, row)) => {
                *sub = row;
                charge
            }
            // The database's own guard: the period already has a live charge (pending or
            // approved), which this actor's read did not see. Nothing to do.
            Err(BeginChargeError::PeriodTaken) => return Ok(None),
            Err(BeginChargeError::InsufficientBalance) => {
                if !pause_when_short {
                    return Ok(None);
                }
                let txn = self.store().begin().await?;
                sub.status = Status::PausedInsufficientBalance.as_str().to_owned();
                sub.due_at = None;
                self.save(&txn, sub, now).await?;
                txn.commit().await?;
                return Ok(None);
            }
            Err(BeginChargeError::Store(err)) => return Err(err.into()),
        };
        self.arm(sub, now);
        self.hold_until_settled(&charge.id, slot);
        self.submit(account, &charge).await?;
        // As it began: a caller that shows it reads it again (a renewal does not).
        Ok(Some(charge))
    }

    /// A charge an action waits on (a proration): the fee's reservation and the attempt, which
    /// carries the `change` to apply when it is approved, in one transaction; nothing else of
    /// the subscription is written now. Short of balance, nothing is written at all.
    async fn one_off_charge(
        &self,
        sub: &Subscription,
        account: &Account,
        amount: i64,
        purpose: &'static str,
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
                amount,
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
    async fn submit(&self, account: &Account, charge: &ChargeAttempt) -> Result<(), ActionError> {
        let outcome = self.charger().submit(account, charge).await;
        let Some(settlement) = outcome.settlement() else {
            return Ok(());
        };
        self.apply_outcome(
            charge.subscription_id.as_deref(),
            &charge.id,
            settlement.raw_status,
            settlement.message,
            settlement.transaction_id,
            None,
        )
        .await
    }

    /// Applies a charge's final outcome once: the money, the subscription's transition and
    /// the events, in one transaction, which also records the processor `event` that reported
    /// the outcome (when it came through the ingress).
    pub(super) async fn apply_outcome(
        &self,
        subscription_id: Option<&str>,
        charge_id: &str,
        raw_status: &str,
        message: Option<&str>,
        transaction_id: Option<&str>,
        event: Option<ProcessorEvent>,
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
        let (sub, account, now) = self.load(&sub_id).await?;
        let due_at = sub.due_at;
        let (id, raw_status) = (charge_id.to_owned(), raw_status.to_owned());
        let message = message.map(str::to_owned);
        let transaction_id = transaction_id.map(str::to_owned);
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
                if settled.charge.subscription_id.as_deref() != Some(sub.id.as_str()) {
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
                Ok(Applied::Settled(saved.then_some(sub)))
            })
            .await?;
        match applied {
            Applied::NotFinal => {}
            Applied::Already => self.release_slot(charge_id),
            Applied::Settled(None) => {
                // A timer skipped while this charge was pending runs now.
                self.release_slot(charge_id);
                if let Some(due) = due_at {
                    self.arm_at(&sub_id, due, now);
                }
            }
            Applied::Settled(Some(sub)) => {
                self.release_slot(charge_id);
                self.arm(&sub, now);
            }
        }
        Ok(())
    }
}

/// A charge of `amount` on the subscription's card, with the account's fee reserved for it.
fn new_charge(
    sub: &Subscription,
    account: &Account,
    amount: i64,
    purpose: &'static str,
    period_start: Option<i64>,
    pending_change: Option<String>,
    now: i64,
) -> NewCharge {
    NewCharge {
        account: AccountId::from_stored(sub.account_id.clone()),
        subscription_id: Some(sub.id.clone()),
        customer_id: sub.customer_id.clone(),
        payment_method_id: sub.default_payment_method_id.clone(),
        amount_cents: amount,
        fee_cents: fee_schedule(account).fee_for(amount),
        purpose,
        period_start,
        pending_change,
        now_ms: now,
    }
}

fn price(item: &crate::store::catalog::CatalogItem, cycle: Cycle) -> i64 {
    match cycle {
        Cycle::Monthly => item.monthly_amount_cents,
        Cycle::Annual => item.annual_amount_cents,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::extract::METADATA_MAX_BYTES;
    use crate::webhooks::MAX_PAYLOAD_BYTES;

    #[test]
    fn a_charge_event_with_the_largest_metadata_fits_the_payload_limit() {
        // The largest metadata a request may store: a compact object of exactly 60 KB.
        let filler = "x".repeat(METADATA_MAX_BYTES - r#"{"k":""}"#.len());
        let metadata = json!({"k": filler}).to_string();
        assert_eq!(metadata.len(), METADATA_MAX_BYTES);
        let id = "sub_01a20748d4787232924bab375e9b2bba".to_owned();
        let sub = Subscription {
            id: id.clone(),
            account_id: "acct_01a20748d4787232924bab375e9b2bba".into(),
            customer_id: "cus_01a20748d4787232924bab375e9b2bba".into(),
            plan_id: "plan_01a20748d4787232924bab375e9b2bba".into(),
            cycle: "monthly".into(),
            status: "active".into(),
            current_period_start: 0,
            current_period_end: 0,
            next_charge_date: 0,
            default_payment_method_id: "pm_01a20748d4787232924bab375e9b2bba".into(),
            trial_end: None,
            cancel_at_period_end: false,
            failed_attempts: 0,
            first_failure_at: None,
            metadata: Some(metadata),
            anchor: 0,
            period_index: 0,
            next_cycle: None,
            period_cycle: "monthly".into(),
            version: 0,
            due_at: None,
            created_at: 0,
            updated_at: 0,
        };
        let charge = ChargeAttempt {
            id: "ch_01a20748d4787232924bab375e9b2bba".into(),
            account_id: sub.account_id.clone(),
            subscription_id: Some(id),
            customer_id: sub.customer_id.clone(),
            payment_method_id: sub.default_payment_method_id.clone(),
            amount_cents: i64::MAX,
            fee_cents: 0,
            reference: "ch_01a20748d4787232924bab375e9b2bba".into(),
            processor_transaction_id: None,
            status: "approved".into(),
            processor_status: Some("APPROVED".into()),
            processor_message: None,
            purpose: "renewal".into(),
            period_start: None,
            created_at: 0,
            updated_at: 0,
            finalized_at: None,
            pending_change: None,
        };
        let event = subscription_event(
            &sub,
            "subscription.plan_changed",
            Some((&charge, "APPROVED")),
            i64::from(i32::MAX) * 1000,
        );
        assert!(
            event.body.len() <= MAX_PAYLOAD_BYTES,
            "{} bytes",
            event.body.len()
        );
    }
}
