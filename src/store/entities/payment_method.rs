//! A customer's card or Nequi account, as the processor's payment source.

use crate::ids::{AccountId, CustomerId, PaymentMethodId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payment_methods")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: PaymentMethodId,
    pub account_id: AccountId,
    pub customer_id: CustomerId,
    pub processor_payment_source_id: i64,
    pub brand: Option<String>,
    pub last4: Option<String>,
    /// `card` or `nequi` (`processor::client::SourceKind`).
    pub kind: String,
    pub created_at: i64,
    /// A card's end: the first instant (Colombian time) after its expiry month, as the
    /// processor gave it when the card was attached; none for Nequi.
    pub expires_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
