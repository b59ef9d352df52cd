//! What a subscription actor does with each message: one `apply` per command, timer and
//! processor outcome (the mini-redis shape). Every change is committed in one transaction with
//! the events it emits; charges reserve their fee in that same transaction.

use super::{ActionError, ActionOutcome, Command, Runtime};
use crate::accounts::fee_schedule;
use crate::domain::subscription::{Status, parse_retry_days, prorate, retry_at};
use crate::domain::time::{Cycle, from_millis, period_boundary, rfc3339};
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

fn status_of(sub: &Subscription) -> Status {
    Status::parse(&sub.status).unwrap_or(Status::Canceled)
}

fn cycle_of(sub: &Subscription) -> Cycle {
    Cycle::parse(&sub.cycle).unwrap_or(Cycle::Monthly)
}

/// Makes the period starting at `period_start` current: its end is the next boundary of the
/// subscription's anchor and cycle after `period_index`.
fn enter_period(sub: &mut Subscription, period_start: i64) {
    sub.current_period_start = period_start;
    sub.current_period_end = period_boundary(
        from_millis(sub.anchor),
        cycle_of(sub),
        sub.period_index as u32 + 1,
    )
    .timestamp_millis();
}

/// Starts a new series of periods at `anchor` (a trial's end, a resume, a manual charge).
fn restart_periods(sub: &mut Subscription, anchor: i64) {
    sub.anchor = anchor;
    sub.period_index = 0;
    enter_period(sub, anchor);
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
/// saved (a charge of a period); a one-off charge changes only money and events.
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
    // Canceled or paused while the charge was in flight: the money is settled and the
    // period recorded, but the subscription stays where its owner put it.
    let stopped = matches!(status_of(sub), Status::Canceled | Status::Paused);
    if let Some(period_start) = charge.period_start {
        if stopped {
            if approved && period_start == sub.current_period_end {
                sub.period_index += 1;
                enter_period(sub, period_start);
                sub.next_charge_date = sub.current_period_end;
            }
            sub.due_at = None;
        } else if approved {
            if period_start == sub.current_period_end {
                txn.drop_detached_addons(&sub.id).await?;
                if sub.next_cycle.take().is_some() {
                    restart_periods(sub, period_start);
                } else {
                    sub.period_index += 1;
                    enter_period(sub, period_start);
                }
            }
            sub.status = Status::Active.as_str().to_owned();
            sub.failed_attempts = 0;
            sub.first_failure_at = None;
            sub.next_charge_date = sub.current_period_end;
            sub.due_at = Some(sub.current_period_end);
        } else {
            sub.failed_attempts += 1;
            let first = *sub.first_failure_at.get_or_insert(now);
            if sub.failed_attempts == 1 {
                sub.status = Status::PastDue.as_str().to_owned();
                emit(txn, sub, "subscription.past_due", None, now).await?;
            }
            match retry_at(
                first,
                sub.failed_attempts as u32,
                &parse_retry_days(&account.dunning_retry_days),
            ) {
                Some(retry) => {
                    sub.status = Status::PastDue.as_str().to_owned();
                    sub.next_charge_date = retry;
                    sub.due_at = Some(retry);
                }
                None => {
                    sub.status = Status::Canceled.as_str().to_owned();
                    sub.due_at = None;
                    emit(txn, sub, "subscription.canceled", None, now).await?;
                }
            }
        }
        sub.updated_at = now;
        txn.save_subscription(sub.clone()).await?;
        return Ok(true);
    }
    Ok(false)
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
                sub.due_at = None;
                emit(&txn, &sub, "subscription.paused", None, now).await?;
                self.save(&txn, &mut sub, now).await?;
                txn.commit().await?;
            }
            Command::Resume | Command::ResumeAfterTopUp => {
                let from = if matches!(command, Command::Resume) {
                    Status::Paused
                } else {
                    Status::PausedInsufficientBalance
                };
                if status != from {
                    return Err(ActionError::Conflict(format!(
                        "Only a {} subscription can be resumed; this one is {}.",
                        from.as_str(),
                        sub.status
                    )));
                }
                let txn = self.store().begin().await?;
                self.resume(&mut sub, now);
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
                    // The period restarts now.
                    sub.status = Status::Active.as_str().to_owned();
                    restart_periods(&mut sub, now);
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
                let txn = self.store().begin().await?;
                sub.plan_id = plan_id;
                if let Some(cycle) = cycle {
                    if cycle != cycle_of(&sub) {
                        sub.cycle = cycle.as_str().to_owned();
                        // The current period keeps its end; the next one starts a new anchor.
                        sub.next_cycle = Some(cycle.as_str().to_owned());
                    }
                }
                emit(&txn, &sub, "subscription.plan_changed", None, now).await?;
                self.save(&txn, &mut sub, now).await?;
                txn.commit().await?;
                if with_proration && preview > 0 {
                    charge = self
                        .one_off_charge(&sub, &account, preview, "proration", now)
                        .await?;
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
                let txn = self.store().begin().await?;
                txn.attach_addon(SubscriptionAddon {
                    subscription_id: sub.id.clone(),
                    addon_id: addon_id.clone(),
                    account_id: sub.account_id.clone(),
                    attached_at: now,
                    detach_at_period_end: false,
                })
                .await?;
                self.save(&txn, &mut sub, now).await?;
                txn.commit().await?;
                let amount = prorate(
                    0,
                    price(&addon, cycle_of(&sub)),
                    sub.current_period_start,
                    sub.current_period_end,
                    now,
                );
                if with_proration && status == Status::Active && amount > 0 {
                    charge = self
                        .one_off_charge(&sub, &account, amount, "addon_proration", now)
                        .await?;
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
        let old = self
            .store()
            .catalog_item(&account, CatalogKind::Plan, &sub.plan_id)
            .await?
            .map_or(0, |p| price(&p, current_cycle));
        Ok(prorate(
            old,
            price(&plan, current_cycle),
            sub.current_period_start,
            sub.current_period_end,
            now,
        ))
    }

    fn resume(&self, sub: &mut Subscription, now: i64) {
        if sub.trial_end.is_some_and(|end| end > now) && sub.period_index < 0 {
            sub.status = Status::Trialing.as_str().to_owned();
            sub.due_at = Some(sub.current_period_end);
            return;
        }
        sub.status = if sub.failed_attempts > 0 {
            Status::PastDue
        } else {
            Status::Active
        }
        .as_str()
        .to_owned();
        if sub.next_charge_date <= now && sub.failed_attempts == 0 {
            // The renewal date passed while paused: a new period starts now and is charged.
            restart_periods(sub, now);
            sub.next_charge_date = now;
        }
        sub.due_at = Some(sub.next_charge_date);
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
        txn.save_subscription(sub.clone()).await
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
        // One read for the pending check and both periods' payment (the trial's end moves the
        // period forward, never back, so `since` covers every period asked about below).
        let charges = self
            .store()
            .period_charges(&sub.id, sub.current_period_start)
            .await?;
        if charges.pending {
            return Ok(None);
        }
        let status = status_of(sub);
        let in_pre_period = status == Status::Trialing || sub.period_index < 0;
        if matches!(status, Status::Active | Status::Trialing)
            && sub.cancel_at_period_end
            && now >= sub.current_period_end
        {
            let txn = self.store().begin().await?;
            sub.status = Status::Canceled.as_str().to_owned();
            sub.due_at = None;
            emit(&txn, sub, "subscription.canceled", None, now).await?;
            self.save(&txn, sub, now).await?;
            txn.commit().await?;
            return Ok(None);
        }
        match status {
            Status::Trialing | Status::Active if in_pre_period => {
                // The trial (or the prepaid time before start_date) ends: the first period starts.
                sub.status = Status::Active.as_str().to_owned();
                restart_periods(sub, sub.current_period_end);
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
            _ => Ok(None),
        }
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
        let amount = self
            .recurring_amount(sub, &sub.plan_id.clone(), cycle_of(sub))
            .await?;
        // Bounded: a burst never has more than `IN_FLIGHT` charges out at the processor.
        let slot = self.in_flight_slot().await;
        let new = new_charge(sub, account, amount, purpose, Some(period_start), now);
        let mut row = sub.clone();
        row.due_at = None;
        row.updated_at = now;
        // On the writer's thread: the fee's reservation, the attempt and the subscription.
        let began = self
            .store()
            .unit(move |txn| async move {
                match txn.begin_charge(new).await {
                    Ok(charge) => {
                        txn.save_subscription(row).await?;
                        txn.commit().await?;
                        Ok(Ok(charge))
                    }
                    // Nothing was written: the reservation matched no row.
                    Err(BeginChargeError::InsufficientBalance) => {
                        Ok(Err(BeginChargeError::InsufficientBalance))
                    }
                    Err(BeginChargeError::Store(err)) => Err(err),
                }
            })
            .await?;
        let charge = match began {
            Ok(charge) => charge,
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
        sub.due_at = None;
        sub.updated_at = now;
        self.arm(sub, now);
        self.hold_until_settled(&charge.id, slot);
        self.submit(account, &charge).await?;
        // As it began: a caller that shows it reads it again (a renewal does not).
        Ok(Some(charge))
    }

    /// A charge outside the period cycle (proration): no state change, only money and events.
    async fn one_off_charge(
        &self,
        sub: &Subscription,
        account: &Account,
        amount: i64,
        purpose: &'static str,
        now: i64,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let txn = self.store().begin().await?;
        let charge = txn
            .begin_charge(new_charge(sub, account, amount, purpose, None, now))
            .await
            .map_err(|err| match err {
                BeginChargeError::InsufficientBalance => ActionError::InsufficientBalance,
                BeginChargeError::Store(err) => err.into(),
            })?;
        txn.commit().await?;
        self.submit(account, &charge).await?;
        Ok(Some(
            self.store()
                .charge_by_id(&charge.id)
                .await?
                .unwrap_or(charge),
        ))
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
            Applied::Already | Applied::Settled(None) => self.release_slot(charge_id),
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
