//! Seeding and triggering for the renewal benchmark (`billing bench renewals`): bulk inserts
//! in large transactions and one statement that makes every seeded subscription due. Not used
//! by the service itself.

use super::entities::{charge_attempt, subscription};
use super::subscriptions::Subscription;
use super::{Store, StoreResult};
use crate::ids::AccountId;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};

impl Store {
    /// Inserts rows in transactions of `chunk` rows (one multi-row INSERT per 500 rows).
    pub async fn seed_subscriptions(&self, rows: Vec<Subscription>) -> StoreResult<()> {
        let txn = self.begin().await?;
        for chunk in rows.chunks(500) {
            subscription::Entity::insert_many(
                chunk
                    .iter()
                    .cloned()
                    .map(sea_orm::IntoActiveModel::into_active_model),
            )
            .exec(txn.conn())
            .await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Makes every active subscription of `account` due at `at`: its period becomes
    /// [at, at + 30 days), unpaid and due now, so the timer charges it once (one charge, one
    /// fee, one `charge.approved`, the next charge date set), as a renewal would.
    pub async fn make_all_due(&self, account: &AccountId, at: i64) -> StoreResult<u64> {
        let result = subscription::Entity::update_many()
            .col_expr(subscription::Column::CurrentPeriodStart, Expr::value(at))
            .col_expr(subscription::Column::Anchor, Expr::value(at))
            .col_expr(
                subscription::Column::CurrentPeriodEnd,
                Expr::value(at + 30 * 86_400_000),
            )
            .col_expr(subscription::Column::NextChargeDate, Expr::value(at))
            .col_expr(subscription::Column::DueAt, Expr::value(at))
            .filter(subscription::Column::AccountId.eq(account.as_str()))
            .filter(subscription::Column::Status.eq("active"))
            .exec(self.writer())
            .await?;
        Ok(result.rows_affected)
    }

    /// How many active subscriptions of `account` were renewed after `at`: their next timer is
    /// the next period's end, a month on. The `due_at` index keeps this poll from scanning
    /// every subscription (at 100,000 a full scan every poll took a visible share of the two
    /// cores it measures).
    pub async fn count_renewed(&self, account: &AccountId, at: i64) -> StoreResult<u64> {
        Ok(subscription::Entity::find()
            .filter(subscription::Column::DueAt.gt(at + 86_400_000))
            .filter(subscription::Column::AccountId.eq(account.as_str()))
            .filter(subscription::Column::NextChargeDate.gt(at))
            .filter(subscription::Column::Status.eq("active"))
            .count(self.conn())
            .await?)
    }

    /// Approved charges of `account`.
    pub async fn count_approved_charges(&self, account: &AccountId) -> StoreResult<u64> {
        Ok(charge_attempt::Entity::find()
            .filter(charge_attempt::Column::AccountId.eq(account.as_str()))
            .filter(charge_attempt::Column::Status.eq("approved"))
            .count(self.conn())
            .await?)
    }
}
