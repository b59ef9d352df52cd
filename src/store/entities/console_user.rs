//! A person of an account who signs in to the console (CONTRACT §17), with their role and,
//! once they accepted their invitation, their password's argon2id hash.

use crate::ids::{AccountId, ConsoleUserId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "console_users")]
pub struct Model {
    /// `csu_…`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: ConsoleUserId,
    pub account_id: AccountId,
    /// Lower-cased; one person of the deployment.
    pub email: String,
    /// `admin`, `support` or `accountant`.
    pub role: String,
    /// The PHC string of an argon2id hash; `None` until the invitation is accepted.
    pub password_hash: Option<String>,
    /// `es` or `en`: the language of their pages.
    pub locale: String,
    pub created_at: i64,
    pub activated_at: Option<i64>,
    /// Set when removed: they can no longer sign in, and their sessions are gone.
    pub removed_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
