//! The changes a command makes that a charge may carry instead (an upgrade's plan, a prorated
//! add-on): applied at once by the command, or by the charge's outcome when it is approved.

use super::decide::reschedule;
use super::emit;
use crate::domain::event_type::EventType;
use crate::domain::time::Cycle;
use crate::ids::{AddonId, PlanId};
use crate::store::StoreError;
use crate::store::subscriptions::{Subscription, SubscriptionAddon};
use crate::store::txn::StoreTxn;

/// Applies a change-plan (now, or when its proration is approved) with its event. A new
/// `quantity` bills from the next period, or from now when a proration paid for it
/// (`prorated`): a rise is charged like an upgrade, a fall waits (CONTRACT §14).
pub(super) async fn apply_plan_change(
    txn: &StoreTxn,
    sub: &mut Subscription,
    (plan_id, cycle, quantity): (PlanId, Option<Cycle>, Option<i64>),
    prorated: bool,
    now: i64,
) -> Result<(), StoreError> {
    sub.plan_id = plan_id;
    if let Some(quantity) = quantity {
        sub.quantity = quantity;
        if prorated {
            sub.period_quantity = quantity;
        }
    }
    if let Some(cycle) = cycle {
        // The current period keeps its end and its cycle; the new cycle starts at its end.
        reschedule(sub, |schedule| schedule.change_cycle(cycle));
    }
    emit(txn, sub, EventType::SubscriptionPlanChanged, None, now).await
}

/// Attaches an add-on (now, or when its proration is approved), unless it already is.
pub(super) async fn apply_addon(
    txn: &StoreTxn,
    sub: &Subscription,
    addon_id: AddonId,
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
