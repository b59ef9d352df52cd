//! A subscription: customer, plan, cycle, status, its current period, its timer (`due_at`) and
//! the version every conditional save checks.

use crate::domain::subscription::Status;
use crate::domain::time::Cycle;
use crate::ids::{AccountId, CustomerId, PaymentMethodId, PlanId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, serde::Serialize, serde::Deserialize)]
#[sea_orm(table_name = "subscriptions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: SubscriptionId,
    pub account_id: AccountId,
    pub customer_id: CustomerId,
    pub plan_id: PlanId,
    pub cycle: Cycle,
    pub status: Status,
    pub current_period_start: i64,
    pub current_period_end: i64,
    pub next_charge_date: i64,
    pub default_payment_method_id: PaymentMethodId,
    pub trial_end: Option<i64>,
    pub cancel_at_period_end: bool,
    pub failed_attempts: i32,
    pub first_failure_at: Option<i64>,
    pub metadata: Option<String>,
    pub anchor: i64,
    pub period_index: i32,
    /// The new cycle while a cycle change is pending (it equals `cycle` then); kept in step
    /// with `period_cycle` for readers of the row.
    pub next_cycle: Option<Cycle>,
    /// The cycle the current period was billed at: its length and its prices.
    pub period_cycle: Cycle,
    /// Bumped by every write; writes are conditional on it (`StoreTxn::save_subscription`).
    pub version: i64,
    pub due_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// What later periods bill: the plan's amount times it (CONTRACT §14).
    pub quantity: i64,
    /// What the current period was billed at; a fall of `quantity` waits for the next one.
    pub period_quantity: i64,
    /// JSON of `domain::discount::Discount`; NULL once it has run out.
    pub discount: Option<String>,
    /// The MRR as last written (CONTRACT §16): every write that moves it writes a movement
    /// (`store::mrr`); a write that leaves it as it is writes none.
    pub mrr_cents: i64,
    /// JSON of the `Discount` the current period was billed with (what MRR counts: a
    /// discount's change applies from the next period); NULL: none.
    pub period_discount: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
