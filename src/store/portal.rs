//! The customer portal's rows (CONTRACT §13): sessions (their token stored as its SHA-256),
//! each account's configuration, and the record of every action taken through the portal.

use super::entities::{account, portal_action, portal_session};
use super::{Store, StoreError, StoreResult};
use crate::domain::portal::{PortalConfig, PortalPatch};
use crate::ids::{AccountId, PortalActionId, PortalSessionId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QuerySelect, Set};

/// How long a session's URL opens the portal.
pub const SESSION_TTL_MS: i64 = 60 * 60 * 1000;

/// The token in a session's URL: `bpt_` and 43 letters or digits (about 256 bits).
pub const TOKEN_PREFIX: &str = "bpt_";
pub const TOKEN_LEN: usize = 43;

pub type PortalSession = portal_session::Model;
pub type PortalAction = portal_action::Model;

/// A portal action to record: what the customer did, through which session.
pub struct NewPortalAction<'a> {
    pub session: &'a PortalSession,
    pub subscription_id: Option<&'a SubscriptionId>,
    /// `payment_method_update`, `subscription_cancel`, `plan_switch`, `customer_update`.
    pub action: &'static str,
    pub detail: Option<serde_json::Value>,
    pub now_ms: i64,
}

impl Store {
    /// `account`'s portal configuration as it is now (read from the database, not from a
    /// cached account row: the configuration in force when an action arrives is the one that
    /// applies).
    pub async fn portal_config(&self, account: &AccountId) -> StoreResult<PortalConfig> {
        let raw: Option<Option<String>> = account::Entity::find_by_id(account.clone())
            .select_only()
            .column(account::Column::Portal)
            .into_tuple()
            .one(self.conn())
            .await?;
        Ok(PortalConfig::from_stored(raw.flatten().as_deref()))
    }

    /// Merges `patch` into `account`'s configuration and answers the result. A compare and
    /// swap on the stored JSON: two PATCHes at once both land, one merged over the other.
    pub async fn update_portal_config(
        &self,
        account: &AccountId,
        patch: &PortalPatch,
    ) -> StoreResult<PortalConfig> {
        for _ in 0..16 {
            let stored: Option<Option<String>> = account::Entity::find_by_id(account.clone())
                .select_only()
                .column(account::Column::Portal)
                .into_tuple()
                .one(self.writer())
                .await?;
            let Some(stored) = stored else {
                return Err(StoreError::invariant(format!("no account {account}")));
            };
            let merged = PortalConfig::from_stored(stored.as_deref()).merged(patch);
            let raw = serde_json::to_string(&merged)
                .map_err(|err| StoreError::invariant(format!("portal configuration: {err}")))?;
            let mut update = account::Entity::update_many()
                .col_expr(account::Column::Portal, Some(raw).into())
                .filter(account::Column::Id.eq(account));
            update = match &stored {
                Some(old) => update.filter(account::Column::Portal.eq(old.as_str())),
                None => update.filter(account::Column::Portal.is_null()),
            };
            if update.exec(self.writer()).await?.rows_affected == 1 {
                return Ok(merged);
            }
        }
        Err(StoreError::invariant(format!(
            "the portal configuration of {account} kept changing under its update"
        )))
    }

    /// Stores a new session.
    pub async fn insert_portal_session(&self, session: PortalSession) -> StoreResult<()> {
        portal_session::ActiveModel {
            id: Set(session.id),
            account_id: Set(session.account_id),
            customer_id: Set(session.customer_id),
            token_hash: Set(session.token_hash),
            return_url: Set(session.return_url),
            locale: Set(session.locale),
            flow_type: Set(session.flow_type),
            flow_subscription_id: Set(session.flow_subscription_id),
            expires_at: Set(session.expires_at),
            created_at: Set(session.created_at),
        }
        .insert(self.writer())
        .await?;
        Ok(())
    }

    /// `account`'s session `id`.
    pub async fn portal_session(
        &self,
        account: &AccountId,
        id: &PortalSessionId,
    ) -> StoreResult<Option<PortalSession>> {
        Ok(portal_session::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// The session whose token hashes to `token_hash`, expired or not (the caller compares
    /// `expires_at` with its account's clock).
    pub async fn portal_session_by_token_hash(
        &self,
        token_hash: &str,
    ) -> StoreResult<Option<PortalSession>> {
        Ok(portal_session::Entity::find()
            .filter(portal_session::Column::TokenHash.eq(token_hash))
            .one(self.conn())
            .await?)
    }

    /// Records an action taken through the portal (after it took effect).
    pub async fn record_portal_action(&self, new: NewPortalAction<'_>) -> StoreResult<()> {
        portal_action::ActiveModel {
            id: Set(PortalActionId::generate()),
            account_id: Set(new.session.account_id.clone()),
            session_id: Set(new.session.id.clone()),
            customer_id: Set(new.session.customer_id.clone()),
            subscription_id: Set(new.subscription_id.cloned()),
            action: Set(new.action.to_owned()),
            detail: Set(new.detail.map(|detail| detail.to_string())),
            created_at: Set(new.now_ms),
        }
        .insert(self.writer())
        .await?;
        Ok(())
    }

    /// The actions taken through `session_id`'s session, oldest first.
    pub async fn portal_actions_of_session(
        &self,
        account: &AccountId,
        session_id: &PortalSessionId,
    ) -> StoreResult<Vec<PortalAction>> {
        use sea_orm::QueryOrder;
        Ok(portal_action::Entity::scoped(account)
            .filter(portal_action::Column::SessionId.eq(session_id))
            .order_by_asc(portal_action::Column::Id)
            .all(self.conn())
            .await?)
    }
}
