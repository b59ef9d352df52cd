//! The card networks' reattempt limits as the subscription actor keeps them (CONTRACT §15,
//! decision 0074): before a retry is posted, its payment method's attempts are counted by the
//! database (`Store::count_sent_attempts`) over each window of its brand
//! (`domain::reattempts`); a retry past a limit is recorded declined (`network_limit`) and
//! settled as a soft decline in one unit, never posted. What a limit is lives in the domain;
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
    /// Why the card network's reattempt limits stop the attempt `new`, if they do: one more
    /// on its payment method would go past a limit of its brand (`domain::reattempts`),
    /// counted by the database over the charges already made on it.
    pub(super) async fn reattempt_refusal(
        &self,
        new: &NewCharge,
        snapshot: Option<&DueSnapshot>,
    ) -> Result<Option<String>, StoreError> {
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
        let Some(network) = Network::of_brand(method.and_then(|m| m.brand).as_deref()) else {
            return Ok(None);
        };
        for window in network.windows() {
            let sent = self
                .store()
                .count_sent_attempts(
                    &new.account,
                    &new.payment_method_id,
                    window.since(new.now_ms),
                    window.same_amount.then_some(new.amount_cents),
                )
                .await?;
            if !window.allows_another(sent) {
                return Ok(Some(format!(
                    "Not sent: {network:?} allows at most {} attempts in {} day(s) on a card{}, \
                     and {sent} were made",
                    window.limit,
                    window.span_ms / 86_400_000,
                    if window.same_amount {
                        " for one amount"
                    } else {
                        ""
                    },
                )));
            }
        }
        Ok(None)
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
