//! The subscription actor's commands (the API's actions): each validated against the row, then
//! committed in one transaction with its events, or, for an upgrade or a prorated add-on,
//! recorded as a charge that carries the change and applies it when approved
//! (`charging.rs`). A refused command writes nothing.

use super::ActionError;
use super::changes::{apply_addon, apply_plan_change};
use super::context::Context;
use super::decide::{PendingChange, enter_period, stopped_due};
use super::emit;
use super::messages::{ActionOutcome, Command};
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::event_type::EventType;
use crate::domain::subscription::{Status, prorate};
use crate::domain::time::Cycle;
use crate::ids::{AddonId, PaymentMethodId, PlanId, SubscriptionId};
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::charges::ChargeAttempt;
use crate::store::coupons::discount_lines;
use crate::store::invoices::DraftLine;
use crate::store::subscriptions::Subscription;
use std::sync::Arc;

/// What a command works on: the row as read, its account, the account's instant and the
/// row's status.
struct Target<'a> {
    sub: &'a mut Subscription,
    account: &'a Arc<Account>,
    now: i64,
    status: Status,
}

impl Context<'_> {
    /// Applies `command` to subscription `id`. A command may commit in several units (a
    /// resume, then the beginning of its charge); when one of them is fenced because the
    /// shard moved to another node, whether an earlier one committed decides the answer:
    /// `Moving` (nothing was done: the request may be sent again, to the new owner) or
    /// `MovedMidway` (part of it stays done: its Idempotency-Key keeps the answer).
    pub(super) async fn apply_command(
        &self,
        id: &SubscriptionId,
        command: Command,
    ) -> Result<ActionOutcome, ActionError> {
        let (sub, account, now) = self.load(id).await?;
        let read_at = sub.version;
        match self.run_command(id, sub, account, now, command).await {
            Err(ActionError::Store(StoreError::Fenced(_)) | ActionError::Moving) => {
                Err(self.fenced_command(id, read_at).await)
            }
            result => result,
        }
    }

    /// What a fenced command did, read from the database: every unit a command commits writes
    /// its subscription's row, whose version it bumps, so a row still at the version the
    /// command read shows that none did. Anything else (a newer version, or no answer) may
    /// have come from this command and is `MovedMidway`.
    async fn fenced_command(&self, id: &SubscriptionId, read_at: i64) -> ActionError {
        match self.store().subscription_by_id(id).await {
            Ok(Some(row)) if row.version == read_at => ActionError::Moving,
            Ok(_) => ActionError::MovedMidway,
            Err(err) => {
                tracing::warn!(subscription = %id, error = %err, "could not read what a fenced command did; answering as if part of it was done");
                ActionError::MovedMidway
            }
        }
    }

    /// Runs one command on the row as read: one function per command, over the `Target`, each
    /// answering the charge it made, if any.
    async fn run_command(
        &self,
        id: &SubscriptionId,
        mut sub: Subscription,
        account: Arc<Account>,
        now: i64,
        command: Command,
    ) -> Result<ActionOutcome, ActionError> {
        let target = Target {
            status: sub.status,
            sub: &mut sub,
            account: &account,
            now,
        };
        let charge = match command {
            Command::Cancel { at_period_end } => self.cancel(target, at_period_end).await?,
            Command::Pause => self.pause(target).await?,
            Command::Resume => self.resume(target).await?,
            Command::ChargeNow => self.charge_now(target).await?,
            Command::ChangePlan {
                plan_id,
                cycle,
                prorate,
                proration_at,
                quantity,
            } => {
                let change = PlanChange {
                    plan_id,
                    cycle,
                    quantity,
                };
                self.change_plan(target, change, prorate, proration_at)
                    .await?
            }
            Command::AttachAddon { addon_id, prorate } => {
                self.attach_addon(target, addon_id, prorate).await?
            }
            Command::DetachAddon { addon_id } => self.detach_addon(target, addon_id).await?,
            Command::SetPaymentMethod { payment_method_id } => {
                self.set_payment_method(target, payment_method_id).await?
            }
            Command::SetDiscount { redeem } => {
                self.set_discount(target.sub, target.status, redeem, now)
                    .await?
            }
            Command::RemoveDiscount => self.remove_discount(target.sub, now).await?,
        };
        let subscription = self.store().subscription_by_id(id).await?.unwrap_or(sub);
        Ok(ActionOutcome {
            subscription,
            charge,
        })
    }

    /// Cancels now, or at the period's end.
    async fn cancel(
        &self,
        target: Target<'_>,
        at_period_end: bool,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let Target {
            sub, now, status, ..
        } = target;
        if status == Status::Canceled || (at_period_end && !status.can_cancel_at_period_end()) {
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
            sub.status = Status::Canceled;
            sub.due_at = None;
            emit(&txn, sub, EventType::SubscriptionCanceled, None, now).await?;
        }
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(None)
    }

    /// Pauses: no charge and no renewal until resumed.
    async fn pause(&self, target: Target<'_>) -> Result<Option<ChargeAttempt>, ActionError> {
        let Target {
            sub, now, status, ..
        } = target;
        if !status.can_pause() {
            return Err(ActionError::Conflict(format!(
                "A {} subscription cannot be paused.",
                sub.status
            )));
        }
        let txn = self.store().begin().await?;
        sub.status = Status::Paused;
        // No charge and no renewal while paused; a cancellation at the period's end
        // still happens at that end (CONTRACT §5).
        sub.due_at = stopped_due(sub);
        emit(&txn, sub, EventType::SubscriptionPaused, None, now).await?;
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(None)
    }

    /// Resumes a paused subscription, with the charge a passed renewal date makes due.
    async fn resume(&self, target: Target<'_>) -> Result<Option<ChargeAttempt>, ActionError> {
        let Target {
            sub,
            account,
            now,
            status,
        } = target;
        if status != Status::Paused {
            return Err(ActionError::Conflict(format!(
                "Only a paused subscription can be resumed; this one is {}.",
                sub.status
            )));
        }
        if sub.cancel_at_period_end && now >= sub.current_period_end {
            // Its cancellation fell due while paused and its timer has not run yet:
            // it is canceled, as it would have been at that instant.
            self.cancel_at_end(sub, now).await?;
            return Err(ActionError::Conflict(
                "The subscription was canceled at the end of its period.".into(),
            ));
        }
        // The resume and the charge it makes due (a new period when the renewal date
        // passed during the pause) are one unit: a refusal of either (a fence, the
        // balance) leaves no resumption behind (`resume_into_charge`).
        let charges = self
            .store()
            .period_charges(&sub.id, sub.current_period_start)
            .await?;
        self.resume_into_charge(sub, account, &charges, now, None)
            .await
    }

    /// Charges the period now (a past-due one, or a new period from now).
    async fn charge_now(&self, target: Target<'_>) -> Result<Option<ChargeAttempt>, ActionError> {
        let Target {
            sub,
            account,
            now,
            status,
        } = target;
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
            sub.status = Status::Active;
            enter_period(sub, |schedule| schedule.restart(now));
            sub.next_charge_date = now;
        }
        sub.due_at = Some(now);
        let charges = self
            .store()
            .period_charges(&sub.id, sub.current_period_start)
            .await?;
        let started = self
            .charge_period(
                sub,
                account,
                &charges,
                now,
                ChargePurpose::Manual,
                None,
                None,
            )
            .await?
            .ok_or(ActionError::InsufficientBalance)?;
        // Re-read: the processor may have answered at once.
        Ok(Some(
            self.store()
                .charge_by_id(&started.id)
                .await?
                .unwrap_or(started),
        ))
    }

    /// Changes the plan (and perhaps the cycle or the quantity), at once or, for a prorated
    /// upgrade or rise, when its charge is approved.
    async fn change_plan(
        &self,
        target: Target<'_>,
        change: PlanChange,
        with_proration: bool,
        proration_at: Option<i64>,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let Target {
            sub, account, now, ..
        } = target;
        let at = proration_instant(proration_at, now, sub.current_period_start)?;
        let proration = self.prorated_change(sub, &change, at).await?;
        self.refuse_while_change_pending(sub).await?;
        // Only a real change of cycle is recorded as one.
        let cycle = change.cycle.filter(|c| *c != sub.cycle);
        let PlanChange {
            plan_id, quantity, ..
        } = change;
        if with_proration && proration.amount_cents > 0 {
            // An upgrade takes effect when its prorated charge is approved: the
            // charge carries the change, and nothing else is written now.
            let change = PendingChange::Plan {
                plan_id,
                cycle,
                quantity,
            };
            return Ok(Some(
                self.one_off_charge(
                    sub,
                    account,
                    proration,
                    ChargePurpose::Proration,
                    change,
                    now,
                )
                .await?,
            ));
        } else {
            let txn = self.store().begin().await?;
            apply_plan_change(&txn, sub, (plan_id, cycle, quantity), false, now).await?;
            self.save(&txn, sub, now).await?;
            txn.commit().await?;
        }
        Ok(None)
    }

    /// Attaches an add-on, at once or, prorated, when its charge is approved.
    async fn attach_addon(
        &self,
        target: Target<'_>,
        addon_id: AddonId,
        with_proration: bool,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let Target {
            sub,
            account,
            now,
            status,
        } = target;
        if status == Status::Canceled {
            return Err(ActionError::Conflict(
                "A canceled subscription accepts no add-ons.".into(),
            ));
        }
        let account_id = &sub.account_id;
        let addon = self
            .store()
            .addon(account_id, &addon_id)
            .await?
            .ok_or_else(|| ActionError::NotFound(format!("No add-on with id `{addon_id}`.")))?;
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
        self.refuse_while_change_pending(sub).await?;
        // The rest of the current period, at the cycle the period was billed at.
        let amount = prorate(
            0,
            addon.price(sub.period_cycle),
            sub.current_period_start,
            sub.current_period_end,
            now,
        );
        let mut line = addon.line_of(amount, now, sub.current_period_end);
        if let Some(discount) = sub.discount() {
            discount_lines(std::slice::from_mut(&mut line), &discount, true);
        }
        if with_proration && status == Status::Active && line.amount_cents > 0 {
            let change = PendingChange::Addon { addon_id };
            return Ok(Some(
                self.one_off_charge(
                    sub,
                    account,
                    line,
                    ChargePurpose::AddonProration,
                    change,
                    now,
                )
                .await?,
            ));
        } else {
            let txn = self.store().begin().await?;
            apply_addon(&txn, sub, addon_id, now).await?;
            self.save(&txn, sub, now).await?;
            txn.commit().await?;
        }
        Ok(None)
    }

    /// Detaches an add-on at the period's end.
    async fn detach_addon(
        &self,
        target: Target<'_>,
        addon_id: AddonId,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let Target { sub, now, .. } = target;
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
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(None)
    }

    /// Sets the card (or Nequi account) later periods are charged to. A past-due
    /// subscription whose card was declined hard has no retry scheduled: a new payment method
    /// is charged at once (its timer is due now, `timer::run_due_with`).
    async fn set_payment_method(
        &self,
        target: Target<'_>,
        payment_method_id: PaymentMethodId,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let Target {
            sub, now, status, ..
        } = target;
        if status == Status::PastDue
            && payment_method_id != sub.default_payment_method_id
            && self.hard_declined_on_its_card(sub).await?
        {
            sub.due_at = Some(now);
            sub.next_charge_date = now;
        }
        let txn = self.store().begin().await?;
        sub.default_payment_method_id = payment_method_id;
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(None)
    }

    /// 409 while an action's charge is out (an upgrade or add-on waiting for approval): the
    /// second change would be decided on a subscription that is about to change.
    pub(super) async fn refuse_while_change_pending(
        &self,
        sub: &Subscription,
    ) -> Result<(), ActionError> {
        if self.store().pending_change_of(&sub.id).await?.is_some() {
            return Err(ActionError::Conflict(
                "A change of this subscription is waiting for its charge; try again once it settles."
                    .into(),
            ));
        }
        Ok(())
    }

    /// What change-plan would charge at `now` (0 for trials; downgrades and falls charge
    /// nothing), with the plan's line of it: the rest of the period at the difference between
    /// the new plan times the new quantity and what the period was billed at, less a
    /// percent-off discount that covers the plan (CONTRACT §14). A preview answers its amount.
    pub(super) async fn prorated_change(
        &self,
        sub: &Subscription,
        change: &PlanChange,
        now: i64,
    ) -> Result<DraftLine, ActionError> {
        let status = sub.status;
        let plan_id = &change.plan_id;
        let account = &sub.account_id;
        let plan = self
            .store()
            .plan(account, plan_id)
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
        let quantity = change.quantity.unwrap_or(sub.quantity);
        if *plan_id == sub.plan_id
            && change.cycle.is_none_or(|c| c == sub.cycle)
            && quantity == sub.quantity
        {
            return Err(ActionError::Invalid(
                "The subscription is already on this plan, cycle and quantity.".into(),
            ));
        }
        if status == Status::Trialing {
            return Ok(plan.line_of(0, now, sub.current_period_end));
        }
        // Both amounts at the cycle the current period was billed at: after a cycle change
        // the period keeps its length and its prices until it ends (CONTRACT §5).
        let billed = sub.period_cycle;
        let old = self
            .store()
            .plan(account, &sub.plan_id)
            .await?
            .map_or(0, |p| p.price(billed).saturating_mul(sub.period_quantity));
        let amount = prorate(
            old,
            plan.price(billed).saturating_mul(quantity),
            sub.current_period_start,
            sub.current_period_end,
            now,
        );
        let mut line = plan.line_of(amount, now, sub.current_period_end);
        if let Some(discount) = sub.discount() {
            discount_lines(std::slice::from_mut(&mut line), &discount, true);
        }
        Ok(line)
    }
}

/// A change of plan, cycle or quantity (`None`: as it is).
#[derive(Clone, Debug)]
pub(super) struct PlanChange {
    pub(super) plan_id: PlanId,
    pub(super) cycle: Option<Cycle>,
    pub(super) quantity: Option<i64>,
}

/// How old a preview's `proration_date` may be when the change it priced arrives.
pub(crate) const PRORATION_DATE_WINDOW_MS: i64 = 5 * 60 * 1000;

/// The instant a change's proration is priced at: `proration_at` (a preview's) when it is in
/// the current period, no later than now (a minute of skew between nodes' clocks allowed) and
/// at most `PRORATION_DATE_WINDOW_MS` old; now without one.
fn proration_instant(
    proration_at: Option<i64>,
    now: i64,
    period_start: i64,
) -> Result<i64, ActionError> {
    let Some(at) = proration_at else {
        return Ok(now);
    };
    if at > now + 60_000 || now - at > PRORATION_DATE_WINDOW_MS || at < period_start {
        return Err(ActionError::Invalid(
            "proration_date must be a preview's, at most five minutes old and in the current \
             period: preview again."
                .into(),
        ));
    }
    Ok(at)
}
