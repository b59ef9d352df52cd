//! An integrator's webhook endpoint: its URL, the events it wants, its signing secret and whether
//! it is enabled.

use crate::ids::{AccountId, WebhookEndpointId};
use crate::store::Secret;
use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: WebhookEndpointId,
    pub account_id: AccountId,
    pub url: String,
    pub secret: Secret,
    /// JSON array of subscribed event types.
    pub events: String,
    pub active: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The signing secret stays out of logs.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookEndpoint")
            .field("id", &self.id)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
