//! A customer portal session (CONTRACT §13): one customer of one account, an hour long, its
//! URL's token stored only as its SHA-256.

use crate::ids::{AccountId, CustomerId, PortalSessionId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "portal_sessions")]
pub struct Model {
    /// `bps_…`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: PortalSessionId,
    pub account_id: AccountId,
    pub customer_id: CustomerId,
    /// SHA-256 (hex) of the token in the session's URL.
    pub token_hash: String,
    pub return_url: Option<String>,
    /// `es` or `en`; `None`: the browser's language.
    pub locale: Option<String>,
    /// `payment_method_update` or `subscription_cancel`: the action the page opens with.
    pub flow_type: Option<String>,
    pub flow_subscription_id: Option<SubscriptionId>,
    pub expires_at: i64,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
