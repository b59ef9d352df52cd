//! A customer's Ley 2300 slot (CONTRACT §15): `day:<ms>` (the Colombian day's first instant,
//! account clock) is the one collection message of that day, `week:<ms>` the week's channel.
//! The first notice to take one holds it; the primary key lets only one take it.

use crate::ids::{AccountId, CustomerId, NoticeId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "collection_slots")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub account_id: AccountId,
    #[sea_orm(primary_key, auto_increment = false)]
    pub customer_id: CustomerId,
    #[sea_orm(primary_key, auto_increment = false)]
    pub period: String,
    /// `email` or `whatsapp`.
    pub channel: String,
    pub notice_id: NoticeId,
    pub taken_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
