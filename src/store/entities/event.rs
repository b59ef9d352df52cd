//! The events outbox: one row per event, written in the transaction of the change that caused it.

use crate::domain::event_type::EventType;
use crate::ids::{AccountId, EventId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: EventId,
    pub account_id: AccountId,
    #[sea_orm(column_name = "type")]
    pub event_type: EventType,
    pub subscription_id: Option<SubscriptionId>,
    /// The event's JSON payload exactly as delivered.
    pub body: String,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
