//! A processor event received at the ingress, kept so that a repeated delivery is applied once.

use crate::ids::AccountId;
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, serde::Serialize, serde::Deserialize)]
#[sea_orm(table_name = "processor_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub checksum: String,
    pub account_id: AccountId,
    pub event_type: String,
    // raw id: the processor's transaction id, as its event carried it.
    pub transaction_id: Option<String>,
    pub reference: Option<String>,
    pub status: Option<String>,
    pub body: String,
    pub received_at: i64,
    pub processed_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
