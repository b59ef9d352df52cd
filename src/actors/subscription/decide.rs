//! The subscription's decisions, without I/O: how a settled charge, a resume or a pause moves
//! a subscription row, which events that emits, and when its timer is due. The actor
//! (`mod.rs`, `timer.rs`, `commands.rs`, `charging.rs`) reads the row, asks here, and persists the answer with its events in one
//! transaction; so every rule of the lifecycle is a plain function, tested alone below.

use crate::domain::event_type::EventType;
use crate::domain::schedule::Schedule;
use crate::domain::subscription::{Status, cancel_at, retry_at};
use crate::domain::time::Cycle;
use crate::ids::{AddonId, PlanId};
use crate::store::subscriptions::Subscription;

/// The subscription's period arithmetic (`domain::schedule`), read from its row.
fn schedule_of(sub: &Subscription) -> Schedule {
    Schedule {
        anchor: sub.anchor,
        index: sub.period_index,
        period_cycle: sub.period_cycle,
        cycle: sub.cycle,
        start: sub.current_period_start,
        end: sub.current_period_end,
    }
}

/// Writes a schedule back into the row; the actor decides nothing about periods itself.
fn set_schedule(sub: &mut Subscription, schedule: Schedule) {
    sub.anchor = schedule.anchor;
    sub.period_index = schedule.index;
    sub.period_cycle = schedule.period_cycle;
    sub.cycle = schedule.cycle;
    sub.current_period_start = schedule.start;
    sub.current_period_end = schedule.end;
    sub.next_cycle = schedule.pending_cycle().map(|(cycle, _)| cycle);
}

/// Applies `change` to the subscription's schedule.
pub(super) fn reschedule(sub: &mut Subscription, change: impl FnOnce(&mut Schedule)) {
    let mut schedule = schedule_of(sub);
    change(&mut schedule);
    set_schedule(sub, schedule);
}

/// Moves the subscription into its next period (or a new one starting now, `restart`), which
/// is billed at its quantity: a fall waits for this moment (CONTRACT §14).
pub(super) fn enter_period(sub: &mut Subscription, change: impl FnOnce(&mut Schedule)) {
    reschedule(sub, change);
    sub.period_quantity = sub.quantity;
}

/// A paid period charge begun at `charge_began` counts against the discount it took part in
/// (`Discount::after_period_paid`): one period fewer, and none once it has run out.
/// The discount that took part is the one the period is billed with (`period_discount`: what
/// MRR counts).
pub(super) fn count_discounted_period(sub: &mut Subscription, charge_began: i64) {
    let took_part = sub.discount().filter(|d| d.start <= charge_began);
    sub.period_discount = took_part.and_then(|d| serde_json::to_string(&d).ok());
    if let Some(discount) = sub.discount() {
        sub.set_discount(discount.after_period_paid(charge_began).as_ref());
    }
}

/// The timer of a subscription that is not charging (paused, or stopped with a charge in
/// flight): only a cancellation at the period's end is still due.
pub(super) fn stopped_due(sub: &Subscription) -> Option<i64> {
    sub.cancel_at_period_end.then_some(sub.current_period_end)
}

/// What an action waits on its charge for: applied only when the charge is approved.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PendingChange {
    /// An upgrade with proration: the new plan (and cycle).
    Plan {
        plan_id: PlanId,
        cycle: Option<Cycle>,
        /// The new quantity, billed from now on (the proration paid the rest of the period).
        #[serde(default)]
        quantity: Option<i64>,
    },
    /// An add-on attached with proration.
    Addon { addon_id: AddonId },
}

/// What settling a period's charge does beyond the row: the events it emits after the charge's
/// own, and whether detached add-ons leave.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Settlement {
    pub events: Vec<EventType>,
    pub drop_detached_addons: bool,
}

/// The effect on `sub` of its charge for the period starting at `period_start` settling
/// (`approved` or not; declined `hard` or not, `domain::decline`) at `now`, with the
/// account's dunning `retry_days`. A hard decline schedules no retry: the subscription stays
/// past due until the date the schedule would have canceled it (`cancel_at`), when its timer
/// cancels it unless a new card came first (`timer::run_due_with`).
pub(super) fn settle(
    sub: &mut Subscription,
    approved: bool,
    hard: bool,
    period_start: i64,
    retry_days: &[i64],
    now: i64,
) -> Settlement {
    let mut settlement = Settlement::default();
    // Canceled or paused while the charge was in flight: the money is settled and the
    // period recorded, but the subscription stays where its owner put it.
    let stopped = matches!(
        sub.status,
        Status::Canceled | Status::Paused | Status::PausedInsufficientBalance
    );
    if stopped {
        if approved && period_start == sub.current_period_end {
            enter_period(sub, Schedule::advance);
            sub.next_charge_date = sub.current_period_end;
        }
        sub.due_at = match sub.status {
            Status::Canceled => None,
            _ => stopped_due(sub),
        };
    } else if approved {
        // Every newly paid period (a renewal, a first charge, a restart) was priced without
        // the add-ons detached before it: they leave now.
        settlement.drop_detached_addons = true;
        if period_start == sub.current_period_end {
            enter_period(sub, Schedule::advance);
        }
        sub.status = Status::Active;
        sub.failed_attempts = 0;
        sub.first_failure_at = None;
        sub.next_charge_date = sub.current_period_end;
        sub.due_at = Some(sub.current_period_end);
    } else {
        sub.failed_attempts += 1;
        let first = *sub.first_failure_at.get_or_insert(now);
        if sub.failed_attempts == 1 {
            sub.status = Status::PastDue;
            settlement.events.push(EventType::SubscriptionPastDue);
        }
        let retry = retry_at(first, sub.failed_attempts as u32, retry_days);
        // Not retried on this card: due when the schedule would cancel, if it would not now.
        let next = if hard {
            retry.and(cancel_at(first, retry_days))
        } else {
            retry
        };
        match next {
            Some(retry) => {
                sub.status = Status::PastDue;
                sub.next_charge_date = retry;
                sub.due_at = Some(retry);
            }
            None => {
                sub.status = Status::Canceled;
                sub.due_at = None;
                settlement.events.push(EventType::SubscriptionCanceled);
            }
        }
    }
    sub.updated_at = now;
    settlement
}

/// Resumes a paused subscription at `now`: back to its trial if that has not ended, else
/// active (or past due, its retries still running); when the renewal date passed while paused,
/// a new period starts now and is due at once.
pub(super) fn resume(sub: &mut Subscription, now: i64) {
    if sub.trial_end.is_some_and(|end| end > now) && sub.period_index < 0 {
        sub.status = Status::Trialing;
        sub.due_at = Some(sub.current_period_end);
        return;
    }
    sub.status = if sub.failed_attempts > 0 {
        Status::PastDue
    } else {
        Status::Active
    };
    if sub.next_charge_date <= now && sub.failed_attempts == 0 {
        enter_period(sub, |schedule| schedule.restart(now));
        sub.next_charge_date = now;
    }
    sub.due_at = Some(sub.next_charge_date);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::subscription::parse_retry_days;
    use chrono::{TimeZone, Utc};

    const DAY: i64 = 86_400_000;

    fn at(y: i32, m: u32, d: u32) -> i64 {
        Utc.with_ymd_and_hms(y, m, d, 0, 0, 0)
            .single()
            .expect("date")
            .timestamp_millis()
    }

    /// Monthly from Jan 31 2027, first period paid.
    fn active() -> Subscription {
        let start = at(2027, 1, 31);
        let schedule = Schedule::starting(start, Cycle::Monthly);
        let mut sub = crate::subscribe::build(
            crate::subscribe::NewSubscription {
                id: crate::ids::SubscriptionId::generate(),
                account_id: crate::ids::AccountId::generate(),
                customer_id: crate::ids::CustomerId::generate(),
                plan_id: crate::ids::PlanId::generate(),
                cycle: Cycle::Monthly,
                payment_method_id: crate::ids::PaymentMethodId::generate(),
                metadata: None,
                start: crate::subscribe::Start::Paid,
                quantity: 1,
                discount: None,
            },
            start,
        );
        assert_eq!(sub.current_period_end, schedule.end);
        sub.due_at = Some(sub.current_period_end);
        sub
    }

    #[test]
    fn an_approved_renewal_advances_one_period_from_the_anchor() {
        let mut sub = active();
        let end = sub.current_period_end;
        let settlement = settle(&mut sub, true, false, end, &[1], end);
        assert!(settlement.events.is_empty());
        assert_eq!(sub.current_period_start, at(2027, 2, 28));
        assert_eq!(
            sub.current_period_end,
            at(2027, 3, 31),
            "no drift to Mar 28"
        );
        assert_eq!(sub.due_at, Some(at(2027, 3, 31)));
    }

    #[test]
    fn an_approved_renewal_after_a_cycle_change_starts_an_annual_series() {
        let mut sub = active();
        reschedule(&mut sub, |s| s.change_cycle(Cycle::Annual));
        assert_eq!(sub.next_cycle, Some(Cycle::Annual));
        let end = sub.current_period_end;
        settle(&mut sub, true, false, end, &[1], end);
        assert_eq!(sub.current_period_end, at(2028, 2, 28));
        assert_eq!(sub.period_cycle, Cycle::Annual);
        assert_eq!(sub.next_cycle, None);
    }

    #[test]
    fn a_renewal_approved_while_paused_after_a_cycle_change_ends_a_year_later_not_years() {
        let mut sub = active();
        reschedule(&mut sub, |s| s.change_cycle(Cycle::Annual));
        sub.status = Status::Paused;
        let end = sub.current_period_end;
        settle(&mut sub, true, false, end, &[1], end);
        assert_eq!(sub.status, Status::Paused);
        assert_eq!(sub.current_period_start, at(2027, 2, 28));
        assert_eq!(sub.current_period_end, at(2028, 2, 28));
        assert_eq!(sub.due_at, None);
    }

    #[test]
    fn a_paused_subscription_set_to_cancel_keeps_its_cancellation_timer() {
        let mut sub = active();
        sub.cancel_at_period_end = true;
        sub.status = Status::Paused;
        let end = sub.current_period_end;
        settle(&mut sub, false, false, end, &[1], end);
        assert_eq!(sub.due_at, Some(sub.current_period_end));
    }

    #[test]
    fn declines_go_past_due_then_retry_then_cancel() {
        let mut sub = active();
        let days = parse_retry_days("1,3");
        let end = sub.current_period_end;
        let first = settle(&mut sub, false, false, end, &days, end);
        assert_eq!(first.events, vec![EventType::SubscriptionPastDue]);
        assert_eq!(sub.due_at, Some(end + DAY));
        let second = settle(&mut sub, false, false, end, &days, end + DAY);
        assert!(second.events.is_empty());
        assert_eq!(sub.due_at, Some(end + 3 * DAY));
        let last = settle(&mut sub, false, false, end, &days, end + 3 * DAY);
        assert_eq!(last.events, vec![EventType::SubscriptionCanceled]);
        assert_eq!(sub.status, Status::Canceled);
        assert_eq!(sub.due_at, None);
    }

    #[test]
    fn a_hard_decline_waits_for_the_schedules_cancellation_date_without_a_retry() {
        let mut sub = active();
        let days = parse_retry_days("1,3,5,7");
        let end = sub.current_period_end;
        let first = settle(&mut sub, false, true, end, &days, end);
        assert_eq!(first.events, vec![EventType::SubscriptionPastDue]);
        assert_eq!(sub.status, Status::PastDue);
        assert_eq!(sub.failed_attempts, 1);
        assert_eq!(
            sub.due_at,
            Some(end + 7 * DAY),
            "no retry: the cancellation date"
        );
        assert_eq!(sub.next_charge_date, end + 7 * DAY);
        // A new card's charge, declined hard again on day 2: the same date.
        let again = settle(&mut sub, false, true, end, &days, end + 2 * DAY);
        assert!(again.events.is_empty());
        assert_eq!(sub.due_at, Some(end + 7 * DAY));
        // Past the schedule's attempts, a hard decline cancels as a soft one does.
        sub.failed_attempts = 4;
        let last = settle(&mut sub, false, true, end, &days, end + 7 * DAY);
        assert_eq!(last.events, vec![EventType::SubscriptionCanceled]);
        assert_eq!(sub.status, Status::Canceled);
    }

    #[test]
    fn a_soft_decline_keeps_the_schedule() {
        let mut sub = active();
        let days = parse_retry_days("1,3,5,7");
        let end = sub.current_period_end;
        for (attempt, day) in [(0, 1), (1, 3), (3, 5), (5, 7)] {
            settle(&mut sub, false, false, end, &days, end + attempt * DAY);
            assert_eq!(
                sub.due_at,
                Some(end + day * DAY),
                "after the attempt of day {attempt}"
            );
        }
    }

    #[test]
    fn a_resume_after_the_renewal_date_restarts_the_period_now() {
        let mut sub = active();
        sub.status = Status::Paused;
        let later = sub.current_period_end + 5 * DAY;
        resume(&mut sub, later);
        assert_eq!(sub.status, Status::Active);
        assert_eq!(sub.current_period_start, later);
        assert_eq!(sub.due_at, Some(later));
    }
}
