//! An invoice: one per approved charge (or per period whose total was 0), numbered in its account's series, with the customer and
//! the lines as they were at issue (JSON) and its sums.

use crate::ids::{AccountId, ChargeAttemptId, CustomerId, InvoiceId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "invoices")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: InvoiceId,
    pub account_id: AccountId,
    pub series: String,
    pub sequence: i64,
    /// The series' prefix and the sequence (`FV-1`).
    pub number: String,
    /// NULL for a period whose total was 0 (no charge: CONTRACT §14).
    pub charge_id: Option<ChargeAttemptId>,
    pub subscription_id: Option<SubscriptionId>,
    pub customer_id: CustomerId,
    /// JSON of `store::invoices::Party`, as the customer was at issue.
    pub customer: String,
    /// JSON of `store::invoices::InvoiceLine`s.
    pub lines: String,
    /// JSON of `store::invoices::TaxEntry`s, one per tax code present.
    pub tax_breakdown: String,
    pub subtotal_cents: i64,
    pub tax_cents: i64,
    pub total_cents: i64,
    /// The unguessable part of the hosted page's URL.
    pub hosted_token: String,
    pub issued_at: i64,
    /// What discounts took off its lines.
    pub discount_cents: i64,
    /// The period an invoice without a charge is for (one per subscription and period).
    pub period_start: Option<i64>,
    /// JSON of `store::accounts::Seller`, the seller as it was at issue (NULL before issue 46
    /// and for an account that had set none).
    pub seller: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
