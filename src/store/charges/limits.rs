//! What the card networks' reattempt limits need of the database (CONTRACT §15, decision
//! 0074): a payment method's attempts counted over a window, and its row locked while a retry
//! is counted and begun, so that two retries on one card at once (two subscriptions of one
//! customer, on two nodes perhaps) are counted one after the other and never both pass a
//! limit. The limits themselves are `domain::reattempts`; the unit that uses these is
//! `Store::begin_counted_charge`.

use crate::domain::decline::Decline;
use crate::domain::reattempts::Window;
use crate::ids::{AccountId, PaymentMethodId};
use crate::store::entities::{charge_attempt, payment_method};
use crate::store::txn::StoreTxn;
use crate::store::{Scoped, StoreResult};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};

/// A retry a window of its card's network would not allow: `sent` attempts already fell in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrun {
    pub window: Window,
    pub sent: u64,
}

impl StoreTxn {
    /// Locks the payment method's row until the unit ends: a no-op update, which PostgreSQL
    /// holds as a row lock (SQLite's units are one at a time already). Whoever counts its
    /// attempts after this sees every attempt a unit that held it before committed.
    pub async fn lock_payment_method(
        &self,
        account: &AccountId,
        id: &PaymentMethodId,
    ) -> StoreResult<()> {
        payment_method::Entity::update_many()
            .col_expr(
                payment_method::Column::CreatedAt,
                Expr::col(payment_method::Column::CreatedAt),
            )
            .filter(payment_method::Entity::of(account))
            .filter(payment_method::Column::Id.eq(id))
            .exec(self.conn())
            .await?;
        Ok(())
    }

    /// How many charges on `payment_method_id` went to the processor (or are on their way)
    /// from `since_ms` on, by the account's clock; with `amount_cents`, only those of that
    /// amount. A retry a limit stopped was never sent and is not counted. The index on
    /// (payment method, began) answers it.
    pub async fn count_sent_attempts(
        &self,
        account: &AccountId,
        payment_method_id: &PaymentMethodId,
        since_ms: i64,
        amount_cents: Option<i64>,
    ) -> StoreResult<u64> {
        let mut query = charge_attempt::Entity::scoped(account)
            .filter(charge_attempt::Column::PaymentMethodId.eq(payment_method_id))
            .filter(charge_attempt::Column::CreatedAt.gte(since_ms))
            .filter(
                sea_orm::Condition::any()
                    .add(charge_attempt::Column::DeclineCode.is_null())
                    .add(charge_attempt::Column::DeclineCode.ne(Decline::NetworkLimit)),
            );
        if let Some(amount_cents) = amount_cents {
            query = query.filter(charge_attempt::Column::AmountCents.eq(amount_cents));
        }
        Ok(query.count(self.conn()).await?)
    }

    /// The first of `windows` that one more attempt of `amount_cents` on the payment method
    /// at `now_ms` would pass, counted in this unit.
    pub async fn overrun(
        &self,
        account: &AccountId,
        payment_method_id: &PaymentMethodId,
        windows: &[Window],
        amount_cents: i64,
        now_ms: i64,
    ) -> StoreResult<Option<Overrun>> {
        for &window in windows {
            let sent = self
                .count_sent_attempts(
                    account,
                    payment_method_id,
                    window.since(now_ms),
                    window.same_amount.then_some(amount_cents),
                )
                .await?;
            if !window.allows_another(sent) {
                return Ok(Some(Overrun { window, sent }));
            }
        }
        Ok(None)
    }
}
