//! A coupon: what comes off (percent or amount), for how many billed periods, on which plans
//! and add-ons, and how often it may still be redeemed. Its money terms never change.

use crate::domain::discount::Duration;
use crate::ids::{AccountId, CouponId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "coupons")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: CouponId,
    pub account_id: AccountId,
    pub name: String,
    /// Exactly one of the two is set.
    pub percent_off_bps: Option<i64>,
    pub amount_off_cents: Option<i64>,
    pub duration: Duration,
    /// With `repeating` only: how many period charges it takes part of.
    pub duration_in_periods: Option<i64>,
    /// JSON of `domain::discount::AppliesTo`; NULL: every line.
    pub applies_to: Option<String>,
    pub max_redemptions: Option<i64>,
    /// Moved only by a conditional `UPDATE` in the redeeming transaction (`store::coupons`).
    pub times_redeemed: i64,
    pub redeem_by: Option<i64>,
    /// Unset by `PATCH {valid: false}`: no further redemptions.
    pub active: bool,
    pub metadata: Option<String>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
