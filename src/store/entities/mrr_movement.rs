//! A movement of the MRR ledger (CONTRACT §16): one change of one subscription's MRR, written
//! in the transaction that changed it (`store::mrr`).

use crate::domain::mrr::{MovementReason, MovementType};
use crate::ids::{AccountId, CustomerId, MrrMovementId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "mrr_movements")]
pub struct Model {
    /// `mrm_…`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: MrrMovementId,
    pub account_id: AccountId,
    pub subscription_id: SubscriptionId,
    pub customer_id: CustomerId,
    #[sea_orm(column_name = "type")]
    pub kind: MovementType,
    /// After − before: positive for a rise, negative for a fall, never 0.
    pub mrr_delta_cents: i64,
    pub mrr_after_cents: i64,
    pub reason: MovementReason,
    /// When the change was written (account clock, ms).
    pub occurred_at: i64,
    /// The subscription's row version the change wrote: unique per subscription.
    pub version: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
