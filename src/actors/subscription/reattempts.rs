//! The card networks' reattempt limits as the subscription actor keeps them (CONTRACT §15,
//! decision 0074): a retry on a card of a known brand begins in a unit of its own that locks
//! the payment method and counts its attempts over each window of the brand
//! (`Store::begin_counted_charge`, `domain::reattempts`); a retry past a limit is recorded
//! declined (`network_limit`) and settled as a soft decline in one unit, never posted. What a limit is lives in the domain;
//! when a charge is a retry, in `charging::charge_period`.

use super::ActionError;
use super::charging::transition;
use super::context::Context;
use super::periods::Resuming;
use crate::domain::reattempts::Network;
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::charges::NewCharge;
use crate::store::prefetch::DueSnapshot;
use crate::store::subscriptions::Subscription;

impl Context<'_> {
    /// The card network whose reattempt limits a retry `new` keeps, by its payment method's
    /// brand; `None` when it has none (`domain::reattempts`).
    pub(super) async fn network_of(
        &self,
        new: &NewCharge,
        snapshot: Option<&DueSnapshot>,
    ) -> Result<Option<Network>, StoreError> {
        let prefetched = snapshot
            .and_then(|s| s.payer.as_ref())
            .map(|(method, _)| method)
            .filter(|method| method.id == new.payment_method_id)
            .cloned();
        let method = match prefetched {
            Some(method) => Some(method),
            None => {
                self.store()
                    .payment_method(&new.account, &new.payment_method_id)
                    .await?
            }
        };
        Ok(Network::of_brand(method.and_then(|m| m.brand).as_deref()))
    }

    /// Records the attempt `new` as declined without posting it (`refusal` says why) and
    /// moves `sub` as a soft decline does, in one transaction with a resumption's event; no
    /// fee is reserved, no processor is called, no money moves.
    pub(super) async fn decline_unsent(
        &self,
        sub: &mut Subscription,
        account: &Account,
        new: NewCharge,
        refusal: &str,
        resuming: Option<Resuming>,
        now: i64,
    ) -> Result<(), ActionError> {
        metrics::counter!("charges_over_network_limit_total").increment(1);
        let txn = self.store().begin().await?;
        if let Some(resuming) = resuming {
            txn.insert_event(resuming.event).await?;
        }
        let charge = txn.record_unsent_decline(new, refusal).await?;
        // Its event says DECLINED, with `decline_code: network_limit`; the row keeps no
        // processor status, since no processor saw it.
        transition(&txn, sub, account, &charge, "DECLINED", now).await?;
        txn.commit().await?;
        self.arm(sub, now);
        Ok(())
    }
}
