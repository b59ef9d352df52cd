//! A subscription's discount set or removed after creation (`POST` / `DELETE
//! /v1/subscriptions/{id}/discount`, CONTRACT §14): the redemption is counted in the
//! transaction that saves the row, so a refused one leaves nothing behind.

use super::ActionError;
use super::context::Context;
use crate::domain::subscription::Status;
use crate::ids::AddonId;
use crate::store::charges::ChargeAttempt;
use crate::store::coupons::{Redeem, RedeemError, Redeeming};
use crate::store::subscriptions::Subscription;

impl Context<'_> {
    /// Redeems `redeem` for the subscription and gives it that discount, replacing any: it
    /// takes part in the period charges that begin from now on.
    pub(super) async fn set_discount(
        &self,
        sub: &mut Subscription,
        status: Status,
        redeem: Redeem,
        now: i64,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        if status == Status::Canceled {
            return Err(ActionError::Conflict(
                "A canceled subscription takes no discount.".into(),
            ));
        }
        let addon_ids: Vec<AddonId> = self
            .store()
            .subscription_addons(&sub.id)
            .await?
            .into_iter()
            .filter(|a| !a.detach_at_period_end)
            .map(|a| a.addon_id)
            .collect();
        let txn = self.store().begin().await?;
        let whom = Redeeming {
            account: &sub.account_id,
            customer_id: Some(&sub.customer_id),
            email: None,
            subscription_id: Some(&sub.id),
            charge_id: None,
            plan_id: &sub.plan_id,
            addon_ids: &addon_ids,
            now,
        };
        let discount = match txn.redeem(self.store(), &redeem, &whom).await {
            Ok(discount) => discount,
            Err(RedeemError::Store(err)) => return Err(err.into()),
            Err(refused) => {
                return Err(ActionError::InvalidField {
                    param: match redeem {
                        Redeem::Coupon(_) => "coupon_id",
                        Redeem::Code(_) => "promotion_code",
                    }
                    .into(),
                    message: refused.to_string(),
                });
            }
        };
        sub.set_discount(Some(&discount));
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(None)
    }

    /// Takes the discount away: the next period charges the full amount.
    pub(super) async fn remove_discount(
        &self,
        sub: &mut Subscription,
        now: i64,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        if sub.discount.is_none() {
            return Err(ActionError::NotFound(
                "This subscription has no discount.".into(),
            ));
        }
        let txn = self.store().begin().await?;
        sub.set_discount(None);
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(None)
    }
}
