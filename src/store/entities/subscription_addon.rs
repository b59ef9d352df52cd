//! An add-on attached to a subscription, and when it was detached.

use crate::ids::{AccountId, AddonId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "subscription_addons")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub subscription_id: SubscriptionId,
    #[sea_orm(primary_key, auto_increment = false)]
    pub addon_id: AddonId,
    pub account_id: AccountId,
    pub attached_at: i64,
    pub detach_at_period_end: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
