//! One attempt to deliver a webhook: the receiver's status code or the error, and its timing.

use crate::ids::{AccountId, AttemptId, DeliveryId, WebhookEndpointId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: AttemptId,
    pub delivery_id: DeliveryId,
    pub endpoint_id: WebhookEndpointId,
    pub account_id: AccountId,
    /// Real time, milliseconds.
    pub attempted_at: i64,
    pub status_code: Option<i32>,
    pub latency_ms: i64,
    pub error: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
