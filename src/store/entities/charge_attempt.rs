//! One charge posted (or to be posted) to the processor: its unique reference, amount, reserved
//! fee, purpose, status and refunded amounts.

use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::ChargeStatus;
use crate::domain::decline::Decline;
use crate::ids::{AccountId, ChargeAttemptId, CustomerId, PaymentMethodId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, serde::Serialize, serde::Deserialize)]
#[sea_orm(table_name = "charge_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: ChargeAttemptId,
    pub account_id: AccountId,
    pub subscription_id: Option<SubscriptionId>,
    pub customer_id: CustomerId,
    pub payment_method_id: PaymentMethodId,
    pub amount_cents: i64,
    /// The fee reserved for this charge, deducted on approval, released otherwise.
    pub fee_cents: i64,
    pub reference: String,
    // raw id: the processor's transaction id, in its own format (no prefix of ours).
    pub processor_transaction_id: Option<String>,
    pub status: ChargeStatus,
    /// The processor's raw status (APPROVED, DECLINED, …).
    pub processor_status: Option<String>,
    pub processor_message: Option<String>,
    pub purpose: ChargePurpose,
    pub period_start: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finalized_at: Option<i64>,
    /// What an action waits on this charge for (JSON of `PendingChange`), applied only if
    /// it is approved: an upgrade's plan and cycle, an add-on to attach.
    pub pending_change: Option<String>,
    /// What approved refunds gave back.
    pub refunded_cents: i64,
    /// The amount of the refund in flight (at most one); `refunded + refunding <= amount`.
    pub refunding_cents: i64,
    /// What the charge is for, line by line (JSON of `store::invoices::DraftLine`s adding up
    /// to the amount), decided with the amount; its invoice copies them. None: one line.
    pub invoice_lines: Option<String>,
    /// Why a declined charge was declined (`Decline::read` of the processor's message, or
    /// `network_limit` for a retry never sent); NULL for any other charge.
    pub decline_code: Option<Decline>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
