//! An event to deliver to one endpoint, with when to try next and how it ended.

use crate::ids::{AccountId, DeliveryId, EventId, WebhookEndpointId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: DeliveryId,
    pub account_id: AccountId,
    pub endpoint_id: WebhookEndpointId,
    pub event_id: EventId,
    /// pending, delivered, failed.
    pub status: String,
    pub attempts: i32,
    /// Account clock; None once delivered or failed.
    pub next_attempt_at: Option<i64>,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
