//! The balance's ledger: one row per top-up or fee, the sum of which is the account's balance.

use crate::ids::{AccountId, BalanceTransactionId, ChargeAttemptId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "balance_transactions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: BalanceTransactionId,
    pub account_id: AccountId,
    /// `top_up` or `fee` (`api::schemas::BALANCE_TRANSACTION_TYPES`).
    pub kind: String,
    /// Signed movement of `available_cents` (a fee records what left the reservation).
    pub amount_cents: i64,
    pub charge_attempt_id: Option<ChargeAttemptId>,
    pub description: String,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
