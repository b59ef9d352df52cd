//! A credit note: one per approved refund, against its charge's invoice, numbered in its own
//! series, with the part of each invoice line it gives back (JSON) and its sums.

use crate::ids::{AccountId, ChargeAttemptId, CreditNoteId, InvoiceId, RefundId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "credit_notes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: CreditNoteId,
    pub account_id: AccountId,
    pub series: String,
    pub sequence: i64,
    /// The series' prefix and the sequence (`NC-1`).
    pub number: String,
    pub invoice_id: InvoiceId,
    pub refund_id: RefundId,
    pub charge_id: ChargeAttemptId,
    /// JSON of `store::credit_notes::CreditLine`s.
    pub lines: String,
    pub subtotal_cents: i64,
    pub tax_cents: i64,
    pub total_cents: i64,
    pub issued_at: i64,
    /// JSON of `store::accounts::Seller`, the seller as it was at issue (NULL before issue 46
    /// and for an account that had set none).
    pub seller: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
