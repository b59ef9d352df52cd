//! A processor report about a charge that moved no money (another transaction, another amount),
//! kept for the operator.

use crate::ids::{AccountId, ChargeAttemptId, ChargeConflictId};
use sea_orm::entity::prelude::*;

/// A processor report that moved no money because it contradicted the charge (see migration
/// 000010).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "charge_conflicts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: ChargeConflictId,
    pub account_id: AccountId,
    pub charge_id: ChargeAttemptId,
    /// `outcome` (contradicts the recorded final outcome) or `mismatch` (amount, currency or
    /// transaction id not the charge's).
    pub kind: String,
    /// The charge's status when the report came: pending, approved, declined, error, voided.
    pub recorded_status: String,
    /// The processor's raw status in the report.
    pub reported_status: Option<String>,
    // raw id: the processor's transaction id the report named, whatever it was.
    pub transaction_id: Option<String>,
    pub amount_cents: Option<i64>,
    pub currency: Option<String>,
    /// The processor event that carried it, when it came through the ingress.
    pub event_checksum: Option<String>,
    pub detail: String,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
