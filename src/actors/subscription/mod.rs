//! The subscription actor: one per subscription, which serialises its changes. Its messages
//! (`messages`) are the API's commands (`commands`), its timer (`timer`) and its charges'
//! outcomes (`charging`), with the decisions themselves pure (`decide`); the charges it has out
//! at the processor are `in_flight`. Every change is committed in one transaction with the
//! events it emits; charges reserve their fee in that same transaction. This file holds the
//! actor itself and what its handlers share: loading, saving, events, prices.

mod changes;
mod charging;
mod commands;
mod context;
mod decide;
mod discounts;
pub mod in_flight;
pub mod messages;
mod periods;
mod reattempts;
mod timer;

use super::tree::{ActorStats, KindView};
use super::{ActionError, Request, Runtime, SubscriptionMsg};
use crate::accounts::fee_schedule;
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::event_type::EventType;
use crate::domain::subscription::Status;
use crate::domain::time::Cycle;
use crate::events::subscription_event;
use crate::ids::{PlanId, SubscriptionId};
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::catalog::period_lines;
use crate::store::charges::{ChargeAttempt, NewCharge};
use crate::store::invoices::DraftLine;
use crate::store::subscriptions::Subscription;
use crate::store::txn::StoreTxn;
use commands::PlanChange;
use context::Context;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

pub(super) struct SubscriptionActor {
    pub(super) runtime: Runtime,
}

pub(super) struct ActorState {
    id: SubscriptionId,
    last_message: Instant,
    stats: Arc<ActorStats>,
}

impl Actor for SubscriptionActor {
    type Msg = SubscriptionMsg;
    type State = ActorState;
    type Arguments = (SubscriptionId, Arc<ActorStats>);

    async fn pre_start(
        &self,
        myself: ActorRef<SubscriptionMsg>,
        (id, stats): (SubscriptionId, Arc<ActorStats>),
    ) -> Result<ActorState, ActorProcessingErr> {
        // One idle check at a time, re-armed by the check itself (the timer task is detached:
        // dropping its handle does not cancel it).
        drop(myself.send_after(self.runtime.idle(), || SubscriptionMsg::IdleCheck));
        Ok(ActorState {
            id,
            last_message: Instant::now(),
            stats,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SubscriptionMsg>,
        msg: SubscriptionMsg,
        state: &mut ActorState,
    ) -> Result<(), ActorProcessingErr> {
        let (request, span) = match msg {
            SubscriptionMsg::Request(request, span) => (request, span),
            SubscriptionMsg::IdleCheck => {
                self.check_idle(myself, state);
                return Ok(());
            }
        };
        if !self.runtime.owns(state.id.as_str()) {
            // The shard moved to another node while this message waited: refused, and the
            // actor stops (the sender finds the new owner).
            refuse(request);
            self.runtime.in_flight().forget_began(&state.id);
            self.stop_now(&myself, state);
            return Ok(());
        }
        state.stats.begin();
        let settles = matches!(request, Request::Outcome { .. });
        let result = self.handle_counted(request, state).instrument(span).await;
        state.stats.end();
        state.last_message = Instant::now();
        if settles && state.stats.queued() == 0 {
            // A charge's outcome ends a renewal's work: nothing is asked of this subscription
            // again for a period, and all it holds is in the database (or the runtime's
            // maps). Stopped now rather than when idle: a burst of renewals otherwise keeps
            // the last `idle` seconds' actors live (a gigabyte at 100,000 due at once). A
            // message that reached the mailbox meanwhile is refused unhandled, and its
            // sender asks a fresh actor (`Runtime::call`).
            self.stop_now(&myself, state);
        }
        result
    }
}

impl SubscriptionActor {
    /// Stops the actor when it has handled nothing for `idle`, else checks again when it
    /// could have been.
    fn check_idle(&self, myself: ActorRef<SubscriptionMsg>, state: &ActorState) {
        let idle = state.last_message.elapsed();
        if idle >= self.runtime.idle() {
            self.stop_now(&myself, state);
        } else {
            let left = self.runtime.idle() - idle;
            drop(myself.send_after(left, || SubscriptionMsg::IdleCheck));
        }
    }

    /// Leaves the registry (the next message spawns a fresh actor) and stops after this
    /// message.
    fn stop_now(&self, myself: &ActorRef<SubscriptionMsg>, state: &ActorState) {
        self.runtime
            .subscriptions()
            .forget(state.id.as_str(), myself.get_id(), false);
        myself.stop(None);
    }
}

/// Answers `request` with `ActionError::Moving` without handling it.
fn refuse(request: Request) {
    match request {
        Request::Act(_, reply) => drop(reply.send(Err(ActionError::Moving))),
        Request::Preview { reply, .. } => drop(reply.send(Err(ActionError::Moving))),
        Request::Due(reply) | Request::DuePrefetched(_, reply) | Request::Outcome { reply, .. } => {
            drop(reply.send(Err(ActionError::Moving)))
        }
    }
}

impl SubscriptionActor {
    async fn handle_counted(
        &self,
        request: Request,
        state: &mut ActorState,
    ) -> Result<(), ActorProcessingErr> {
        let runtime = &self.runtime;
        let cx = Context::of(runtime);
        match request {
            Request::Act(command, reply) => {
                tracing::info!(subscription = %state.id, ?command, "applying a command");
                // A command may change the row: its charge's outcome reads it again.
                runtime.in_flight().forget_began(&state.id);
                let _ = reply.send(Box::pin(cx.apply_command(&state.id, command)).await);
            }
            Request::Preview {
                plan_id,
                quantity,
                at,
                reply,
            } => {
                let result = async {
                    let sub = runtime
                        .store()
                        .subscription_by_id(&state.id)
                        .await?
                        .ok_or_else(|| ActionError::NotFound("subscription".into()))?;
                    let now = runtime.clock().now_ms(&sub.account_id).await?;
                    let change = PlanChange {
                        plan_id,
                        cycle: None,
                        quantity,
                    };
                    let line = cx.prorated_change(&sub, &change, at.unwrap_or(now)).await?;
                    Ok(line.amount_cents)
                };
                let _ = reply.send(Box::pin(result).await);
            }
            // Each step's future is boxed: several kilobytes of state that would otherwise be
            // part of this handler's future, which ractor moves for every message.
            Request::Due(reply) => {
                let _ = reply.send(Box::pin(cx.apply_due(&state.id)).await);
            }
            Request::DuePrefetched(snapshot, reply) => {
                let _ = reply.send(Box::pin(cx.apply_due_prefetched(&state.id, &snapshot)).await);
            }
            Request::Outcome {
                charge_id,
                raw_status,
                message,
                transaction_id,
                event,
                charge,
                reply,
            } => {
                let _ = reply.send(
                    Box::pin(cx.apply_outcome(
                        Some(&state.id),
                        &charge_id,
                        charging::Reported {
                            raw_status: &raw_status,
                            message: message.as_deref(),
                            transaction_id: transaction_id.as_deref(),
                        },
                        event.map(|e| *e),
                        charge.as_deref(),
                    ))
                    .await,
                );
            }
        }
        Ok(())
    }
}

/// Charge details carried by charge events.
pub(super) struct ChargeInfo<'a> {
    pub(super) charge: &'a ChargeAttempt,
    pub(super) raw_status: &'a str,
}

/// Writes one event of the subscription into the outbox, inside `txn`.
pub(super) async fn emit(
    txn: &StoreTxn,
    sub: &Subscription,
    event_type: EventType,
    charge: Option<ChargeInfo<'_>>,
    now_ms: i64,
) -> Result<(), StoreError> {
    let charge = charge.map(|info| (info.charge, info.raw_status));
    txn.insert_event(subscription_event(sub, event_type, charge, now_ms))
        .await
}

impl Context<'_> {
    pub(super) async fn load(
        &self,
        id: &SubscriptionId,
    ) -> Result<(Subscription, Arc<Account>, i64), ActionError> {
        let sub = self
            .store()
            .subscription_by_id(id)
            .await?
            .ok_or_else(|| ActionError::NotFound(format!("No subscription with id `{id}`.")))?;
        let (account, now) = self.account_and_now(&sub).await?;
        Ok((sub, account, now))
    }

    /// The subscription's account and the time in its clock.
    pub(super) async fn account_and_now(
        &self,
        sub: &Subscription,
    ) -> Result<(Arc<Account>, i64), ActionError> {
        let account_id = &sub.account_id;
        let account = self
            .account(account_id)
            .await?
            .ok_or_else(|| ActionError::NotFound("account".into()))?;
        let now = self.clock().now_ms(account_id).await?;
        Ok((account, now))
    }

    /// The invoice lines of one period from `start` to `end` of `quantity` of `plan_id` for
    /// `cycle`, of the attached add-ons and with the discount (`catalog::period_lines`): their
    /// sum is the period's amount.
    pub(super) async fn recurring_lines(
        &self,
        sub: &Subscription,
        plan_id: &PlanId,
        cycle: Cycle,
        quantity: i64,
        period: (i64, i64),
    ) -> Result<Vec<DraftLine>, ActionError> {
        let account = &sub.account_id;
        let plan = self
            .store()
            .plan(account, plan_id)
            .await?
            .ok_or_else(|| ActionError::NotFound(format!("No plan with id `{plan_id}`.")))?;
        let mut addons = Vec::new();
        // A detached add-on is billed for no further period (it leaves at the period's end).
        for attached in self
            .store()
            .subscription_addons(&sub.id)
            .await?
            .into_iter()
            .filter(|a| !a.detach_at_period_end)
        {
            if let Some(addon) = self.store().addon(account, &attached.addon_id).await? {
                addons.push(addon);
            }
        }
        Ok(period_lines(
            &plan,
            &addons,
            cycle,
            quantity,
            period,
            sub.discount().as_ref(),
        ))
    }

    /// Cancels a subscription whose period ended with `cancel_at_period_end` set.
    /// Cancels `sub` now with its event (at its period's end, or unpaid when a hard decline's
    /// wait ran out).
    pub(super) async fn cancel_at_end(
        &self,
        sub: &mut Subscription,
        now: i64,
    ) -> Result<(), ActionError> {
        let txn = self.store().begin().await?;
        sub.status = Status::Canceled;
        sub.due_at = None;
        emit(&txn, sub, EventType::SubscriptionCanceled, None, now).await?;
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(())
    }

    pub(super) async fn save(
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
}

/// A charge of what `lines` add up to on the subscription's card, with the account's fee
/// reserved for it; the lines are its invoice's.
pub(super) fn new_charge(
    sub: &Subscription,
    account: &Account,
    lines: Vec<DraftLine>,
    purpose: ChargePurpose,
    period_start: Option<i64>,
    pending_change: Option<String>,
    now: i64,
) -> NewCharge {
    let amount = lines.iter().map(|line| line.amount_cents).sum();
    NewCharge {
        account: sub.account_id.clone(),
        subscription_id: Some(sub.id.clone()),
        customer_id: sub.customer_id.clone(),
        payment_method_id: sub.default_payment_method_id.clone(),
        amount_cents: amount,
        fee_cents: fee_schedule(account).fee_for(amount),
        purpose,
        period_start,
        pending_change,
        now_ms: now,
        lines,
    }
}

#[cfg(test)]
mod tests;
