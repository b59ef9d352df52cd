//! When to ask the processor next about a charge whose outcome is unknown, and how many times
//! it was asked.

use crate::ids::{AccountId, ChargeAttemptId};
use sea_orm::entity::prelude::*;

/// A pending charge whose outcome is unknown: when to ask the processor about it next.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "charge_rechecks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub charge_id: ChargeAttemptId,
    pub account_id: AccountId,
    /// How many times the outcome was found unknown (or still pending) so far.
    pub attempts: i32,
    /// Real time (not the account's test clock), milliseconds.
    pub recheck_at: i64,
    pub last_reason: Option<String>,
    pub updated_at: i64,
    /// Real time since which no post of the charge went out whose answer we did not get
    /// (migration 000025); None on rows from before it, until their next question.
    pub quiet_since: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
