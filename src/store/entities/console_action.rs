//! An action a person took through the console: who, what, on which object, under which
//! Idempotency-Key, and the status the API answered (`None` while it has not answered).

use crate::ids::{AccountId, ConsoleActionId, ConsoleUserId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "console_actions")]
pub struct Model {
    /// `csa_…`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: ConsoleActionId,
    pub account_id: AccountId,
    pub user_id: ConsoleUserId,
    /// `cancel`, `pause`, `resume`, `charge_now`, `change_plan`, `refund`, `portal_link`.
    pub action: String,
    /// The subscription or charge it was taken on.
    // raw id: a subscription's or a charge's, whichever the action was taken on.
    pub object_id: String,
    pub idempotency_key: String,
    pub status: Option<i32>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
