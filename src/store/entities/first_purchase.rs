//! A customer's claim on a `first_time_only` promotion code: one per customer and account
//! (migration 000024).

use crate::ids::{AccountId, ChargeAttemptId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "first_purchases")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub account_id: AccountId,
    /// The payer's e-mail in lower case, or `id:` and the customer's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub customer_key: String,
    /// The checkout payment that claimed it (a declined one gives it back).
    pub charge_id: Option<ChargeAttemptId>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
