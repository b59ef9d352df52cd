//! A failed payment's link (`/pay/<token>`, CONTRACT §15): the token's SHA-256 and the
//! subscription whose card it lets the customer replace while it is `past_due`, or, for a
//! card's expiry reminder, while that card (`payment_method_id`) is still the subscription's.

use crate::ids::{AccountId, CustomerId, PaymentMethodId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "pay_links")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub token_hash: String,
    pub account_id: AccountId,
    pub subscription_id: SubscriptionId,
    pub customer_id: CustomerId,
    pub created_at: i64,
    pub payment_method_id: Option<PaymentMethodId>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
