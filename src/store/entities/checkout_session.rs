//! A hosted checkout session: what it sells, its state, and the payment it took.

use crate::ids::{
    AccountId, ChargeAttemptId, CheckoutSessionId, CustomerId, PaymentMethodId, PlanId,
    SubscriptionId,
};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "checkout_sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: CheckoutSessionId,
    pub account_id: AccountId,
    pub plan_id: PlanId,
    pub cycle: String,
    pub amount_cents: i64,
    pub customer_id: Option<CustomerId>,
    pub customer_email: Option<String>,
    pub customer_name: Option<String>,
    pub success_url: Option<String>,
    pub cancel_url: Option<String>,
    pub metadata: Option<String>,
    pub status: String,
    pub expires_at: i64,
    pub subscription_id: Option<SubscriptionId>,
    pub attempt_charge_id: Option<ChargeAttemptId>,
    pub attempt_customer_id: Option<CustomerId>,
    pub attempt_payment_method_id: Option<PaymentMethodId>,
    pub attempt_payment_source_id: Option<i64>,
    /// `card` or `nequi`: what the attempt's payment source is.
    pub attempt_source_kind: Option<String>,
    pub attempt_email: Option<String>,
    pub attempt_name: Option<String>,
    pub attempt_brand: Option<String>,
    pub attempt_last4: Option<String>,
    pub attempt_expires_at: Option<i64>,
    pub attempt_card_token: Option<String>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Seats: the plan's amount is charged this many times.
    pub quantity: i64,
    /// The plan's amount times the quantity, before the discount (`amount_cents` is after).
    pub subtotal_cents: Option<i64>,
    /// JSON of `store::coupons::Redeem`: the coupon or code the integrator gave it.
    pub redeem: Option<String>,
    /// Whether the page offers a field for a promotion code.
    pub allow_promotion_codes: bool,
    /// JSON of `domain::discount::Discount`: what the attempt's payment redeemed.
    pub attempt_discount: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
