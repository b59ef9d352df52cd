//! Operator queries across accounts: the plan deletion the dashboard owns (CONTRACT §2) and the
//! dashboard's overviews. These are not tenant-scoped on purpose: only the admin token reaches
//! them.

use super::entities::{catalog_item, charge_attempt, subscription, webhook_delivery};
use super::{Store, StoreResult};
use crate::ids::{CatalogItemId, PlanId};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect};

pub use charge_attempt::Model as ChargeRow;
pub use webhook_delivery::Model as DeliveryRow;

/// What `delete_plan` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanDeletion {
    Deleted,
    NotFound,
    /// Subscriptions (of any status) still reference the plan.
    InUse(u64),
}

impl Store {
    /// Deletes a plan unless a subscription uses it; the check and the delete share one
    /// transaction.
    pub async fn delete_plan(&self, plan_id: &PlanId) -> StoreResult<PlanDeletion> {
        let txn = self.begin().await?;
        let item = CatalogItemId::Plan(plan_id.clone());
        let exists = catalog_item::Entity::find_by_id(item.clone())
            .filter(catalog_item::Column::Kind.eq("plan"))
            .count(txn.conn())
            .await?
            > 0;
        if !exists {
            return Ok(PlanDeletion::NotFound);
        }
        let used = subscription::Entity::find()
            .filter(subscription::Column::PlanId.eq(plan_id))
            .count(txn.conn())
            .await?;
        if used > 0 {
            return Ok(PlanDeletion::InUse(used));
        }
        catalog_item::Entity::delete_by_id(item)
            .exec(txn.conn())
            .await?;
        txn.commit().await?;
        Ok(PlanDeletion::Deleted)
    }

    /// Every plan of every account, newest first, with how many subscriptions use each.
    pub async fn all_plans_with_usage(
        &self,
        limit: u64,
    ) -> StoreResult<Vec<(super::catalog::CatalogItem, u64)>> {
        let plans = catalog_item::Entity::find()
            .filter(catalog_item::Column::Kind.eq("plan"))
            .order_by_desc(catalog_item::Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?;
        let mut out = Vec::with_capacity(plans.len());
        for plan in plans {
            let used = subscription::Entity::find()
                .filter(subscription::Column::PlanId.eq(&plan.id))
                .count(self.conn())
                .await?;
            out.push((plan, used));
        }
        Ok(out)
    }

    /// Subscriptions per status, over every account.
    pub async fn subscriptions_by_status(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(subscription::Entity::find()
            .select_only()
            .column(subscription::Column::Status)
            .column_as(subscription::Column::Id.count(), "n")
            .group_by(subscription::Column::Status)
            .order_by_asc(subscription::Column::Status)
            .into_tuple::<(String, i64)>()
            .all(self.conn())
            .await?)
    }

    /// The newest charges that did not succeed, over every account.
    pub async fn recent_failed_charges(&self, limit: u64) -> StoreResult<Vec<ChargeRow>> {
        Ok(charge_attempt::Entity::find()
            .filter(charge_attempt::Column::Status.is_in(["declined", "error"]))
            .order_by_desc(charge_attempt::Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?)
    }

    /// The newest webhook deliveries, over every account.
    pub async fn recent_deliveries(&self, limit: u64) -> StoreResult<Vec<DeliveryRow>> {
        Ok(webhook_delivery::Entity::find()
            .order_by_desc(webhook_delivery::Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?)
    }
}
