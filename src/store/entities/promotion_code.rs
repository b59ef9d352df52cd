//! A promotion code: the text a customer types for a coupon, with its own limits (redemptions,
//! expiry, one customer, first-time customers only).

use crate::ids::{AccountId, CouponId, CustomerId, PromotionCodeId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "promotion_codes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: PromotionCodeId,
    pub account_id: AccountId,
    pub coupon_id: CouponId,
    /// As the merchant wrote it.
    pub code: String,
    /// Lowercase: what a typed code is matched by, unique among the account's active codes.
    pub code_key: String,
    pub active: bool,
    pub max_redemptions: Option<i64>,
    pub times_redeemed: i64,
    pub expires_at: Option<i64>,
    /// Only this customer may redeem it.
    pub customer_id: Option<CustomerId>,
    /// Only a customer with no approved charge yet may redeem it.
    pub first_time_only: bool,
    pub metadata: Option<String>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
