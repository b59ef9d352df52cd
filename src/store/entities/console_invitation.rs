//! A console user's invitation: a link to set their password, used once, its token kept only as
//! its SHA-256.

use crate::ids::{AccountId, ConsoleUserId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "console_invitations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub token_hash: String,
    pub account_id: AccountId,
    pub user_id: ConsoleUserId,
    pub expires_at: i64,
    pub used_at: Option<i64>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
