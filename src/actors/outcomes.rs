//! The router of charge outcomes. Whoever learns what the processor said about a charge (the
//! ingress, the reconciler, the checkout page's wait) hands the `ProcessorOutcome` here, and
//! it goes to the charge's owner: a subscription's charge to that subscription's actor (which
//! settles the money, moves the subscription and emits `charge.*` in one transaction), a
//! checkout's to `checkout_settlement::settle` (which also completes or reopens its session), any other
//! to `Charger::settle`. Only this router knows all three, so `charges` needs neither. The
//! subscription actor's own create answer is the one outcome applied in place, inside the
//! actor, through the same `apply_outcome`.
//!
//! Only a final outcome (or a refusal of the post) settles; pending and unknown ones are
//! noted (an event's row is still kept) and the charge stays pending.

use super::{ActionError, Runtime};
use crate::checkout_settlement::settle as settle_checkout;
use crate::domain::charge_purpose::ChargePurpose;
use crate::processor::outcome::ProcessorOutcome;
use crate::store::accounts::Account;
use crate::store::charges::{ChargeAttempt, ProcessorEvent};

impl Runtime {
    /// Applies `outcome` of `charge` through its owner, recording the processor `event` that
    /// reported it in the same transaction. True unless the outcome had been applied before
    /// (the ingress's `first_delivery`).
    pub async fn apply_processor_outcome(
        &self,
        charge: &ChargeAttempt,
        outcome: &ProcessorOutcome,
        event: Option<ProcessorEvent>,
    ) -> Result<bool, ActionError> {
        if outcome.settlement().is_none() {
            // Noted below (a pending transaction's id): the charge as it began is stale.
            self.in_flight().charge_touched(&charge.id);
        }
        let settled = match (charge.subscription_id.as_ref(), outcome.settlement()) {
            (Some(subscription), Some(settlement)) => {
                self.outcome(
                    subscription,
                    charge,
                    settlement.raw_status,
                    settlement.message,
                    settlement.transaction_id,
                    event,
                )
                .await?;
                return Ok(true);
            }
            (None, Some(settlement)) if charge.purpose == ChargePurpose::Checkout => {
                settle_checkout(
                    self.store(),
                    &charge.id,
                    settlement.raw_status,
                    settlement.message,
                    settlement.transaction_id,
                    event,
                )
                .await?
            }
            _ => self.charger().settle(charge, outcome, event).await?,
        };
        Ok(settled.is_none_or(|s| s.newly))
    }

    /// Asks the processor about a pending charge (posting it again under its reference when
    /// the processor never saw it) and applies a final answer through its owner. Anything
    /// else leaves the charge pending with its next question scheduled.
    pub async fn recheck_charge(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
    ) -> Result<ProcessorOutcome, ActionError> {
        // A recheck may note the transaction's id or flag a mismatch: the ingress reads the
        // charge from then on.
        self.in_flight().charge_touched(&charge.id);
        let outcome = self.charger().recheck(account, charge).await;
        if outcome.settlement().is_some() {
            self.apply_processor_outcome(charge, &outcome, None).await?;
        }
        Ok(outcome)
    }
}
