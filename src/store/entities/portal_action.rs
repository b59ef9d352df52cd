//! An action a customer took through the portal, with the session it came from.

use crate::ids::{AccountId, CustomerId, PortalActionId, PortalSessionId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "portal_actions")]
pub struct Model {
    /// `bpa_…`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: PortalActionId,
    pub account_id: AccountId,
    pub session_id: PortalSessionId,
    pub customer_id: CustomerId,
    pub subscription_id: Option<SubscriptionId>,
    /// `payment_method_update`, `subscription_cancel`, `plan_switch` or `customer_update`.
    pub action: String,
    /// JSON: what the action carried (the reason given, the plan switched to, …).
    pub detail: Option<String>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
