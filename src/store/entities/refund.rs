//! A refund of a charge: its amount, reason, the processor's refund id and status, and while
//! pending when to ask about it next.

use crate::domain::charge_status::RefundStatus;
use crate::ids::{AccountId, ChargeAttemptId, RefundId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "refunds")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: RefundId,
    pub account_id: AccountId,
    pub charge_id: ChargeAttemptId,
    pub amount_cents: i64,
    pub reason: Option<String>,
    pub status: RefundStatus,
    // raw id: the processor's refund id, in its own format.
    pub processor_refund_id: Option<String>,
    pub processor_status: Option<String>,
    pub processor_message: Option<String>,
    /// How many times the processor was asked about it while pending.
    pub attempts: i32,
    /// When to ask the processor next, while pending.
    pub recheck_at: Option<i64>,
    /// When its one post to the processor was about to be sent (real time); None while it
    /// was never sent.
    pub posted_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finalized_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
