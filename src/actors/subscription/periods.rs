//! How a period ends up paid or not: a settled period charge's effect on its subscription
//! (`period_effect`, the one decision of a period's outcome, written alone or in a batch), and
//! a period whose total is 0 (a discount took everything, CONTRACT §14), which advances as a
//! paid one does with an invoice of 0 and no charge: no attempt, no processor call, no fee and
//! no charge event. That invoice is what records the period as paid (`PeriodCharges` reads
//! it), and the database keeps it to one per period, never beside a live charge of it.

use super::context::Context;
use super::{ActionError, decide, emit};
use crate::domain::charge_status::ChargeStatus;
use crate::domain::event_type::EventType;
use crate::domain::subscription::parse_retry_days;
use crate::events::subscription_event;
use crate::store::accounts::Account;
use crate::store::charges::ChargeAttempt;
use crate::store::invoices::DraftLine;
use crate::store::subscriptions::Event;
use crate::store::subscriptions::Subscription;

/// The event type of a settled charge.
pub(super) fn charge_event_type(approved: bool) -> EventType {
    if approved {
        EventType::ChargeApproved
    } else {
        EventType::ChargeDeclined
    }
}

/// A paused subscription resuming into the charge then due (a top-up's wake, or the API's
/// resume after the renewal date passed): the row as read before the resume, and its
/// `subscription.resumed` event, which is written in the unit that begins the charge, so that
/// it exists only if the charge began (CONTRACT §5).
pub(super) struct Resuming {
    /// The row as read, still paused: what stays when the charge cannot begin.
    pub(super) paused: Subscription,
    pub(super) event: Event,
}

/// What a period's settled `charge` does to its subscription.
pub(super) struct PeriodEffect {
    /// In order: the charge's event, then the transition's.
    pub(super) events: Vec<Event>,
    /// Whether the add-ons detached at the period's end leave now.
    pub(super) drop_detached_addons: bool,
}

/// Moves `sub` as the settled `charge` of the period starting at `period_start` says
/// (`decide::settle`), and returns the events that emits and whether detached add-ons leave:
/// the one decision of a period's outcome, written alone (`transition`) or in a batch
/// (`settle_in_batch`).
pub(super) fn period_effect(
    sub: &mut Subscription,
    account: &Account,
    charge: &ChargeAttempt,
    raw_status: &str,
    period_start: i64,
    now: i64,
) -> PeriodEffect {
    let approved = charge.is(ChargeStatus::Approved);
    let mut events = vec![subscription_event(
        sub,
        charge_event_type(approved),
        Some((charge, raw_status)),
        now,
    )];
    let hard = charge.decline_code.is_some_and(|decline| decline.is_hard());
    let settlement = settle_period(
        sub,
        account,
        (approved, hard),
        period_start,
        charge.created_at,
        now,
    );
    events.extend(
        settlement
            .events
            .iter()
            .map(|event_type| subscription_event(sub, *event_type, None, now)),
    );
    sub.updated_at = now;
    PeriodEffect {
        events,
        drop_detached_addons: settlement.drop_detached_addons,
    }
}

/// Moves `sub` as the period starting at `period_start` settled (`approved` or not) by a
/// charge begun at `began` says (`decide::settle`), and counts the discount it took part in.
fn settle_period(
    sub: &mut Subscription,
    account: &Account,
    (approved, hard): (bool, bool),
    period_start: i64,
    began: i64,
    now: i64,
) -> decide::Settlement {
    let retry_days = parse_retry_days(&account.dunning_retry_days);
    let settlement = decide::settle(sub, approved, hard, period_start, &retry_days, now);
    if approved {
        decide::count_discounted_period(sub, began);
    }
    settlement
}

impl Context<'_> {
    /// Settles the period of `sub` starting at `period_start`, whose `lines` add up to 0, in
    /// one transaction: its invoice, the period's advance with its events, the discount
    /// counted, and (when resuming) the resumption's event.
    pub(super) async fn free_period(
        &self,
        sub: &mut Subscription,
        account: &Account,
        lines: Vec<DraftLine>,
        period_start: i64,
        resuming: Option<Resuming>,
        now: i64,
    ) -> Result<(), ActionError> {
        let txn = self.store().begin().await?;
        if let Some(resuming) = resuming {
            txn.insert_event(resuming.event).await?;
        }
        txn.issue_free_invoice(sub, lines, period_start, now)
            .await?;
        let settlement = settle_period(sub, account, (true, false), period_start, now, now);
        if settlement.drop_detached_addons {
            txn.drop_detached_addons(&sub.id).await?;
        }
        for event_type in settlement.events {
            emit(&txn, sub, event_type, None, now).await?;
        }
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(())
    }
}
