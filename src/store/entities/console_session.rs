//! A signed-in console user: the row the cookie's token hashes to, with the CSRF token every
//! form of the session carries.

use crate::ids::{AccountId, ConsoleUserId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "console_sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub token_hash: String,
    pub account_id: AccountId,
    pub user_id: ConsoleUserId,
    pub csrf: String,
    pub expires_at: i64,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
