//! The console's rows (CONTRACT §17): its people, their invitations, their sessions and the
//! record of every action they took, each answered action also an event (`console.action`).
//! Tokens (an invitation's, a session's) are kept only as their SHA-256; an invitation is used
//! once, by a conditional update in the transaction that sets the password.

use super::entities::{console_action, console_invitation, console_session, console_user};
use super::{Store, StoreResult};
use crate::domain::event_type::EventType;
use crate::ids::{AccountId, ConsoleActionId, ConsoleUserId};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait, Func, LikeExpr};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    Set,
};

pub type ConsoleUser = console_user::Model;
pub type ConsoleSession = console_session::Model;
pub type ConsoleAction = console_action::Model;
pub type ConsoleInvitation = console_invitation::Model;

/// Why a new console user was not stored.
#[derive(Debug)]
pub enum NewUserError {
    /// Another console user has the e-mail address.
    EmailTaken,
    Store(super::StoreError),
}

impl From<super::StoreError> for NewUserError {
    fn from(err: super::StoreError) -> Self {
        NewUserError::Store(err)
    }
}

impl From<sea_orm::DbErr> for NewUserError {
    fn from(err: sea_orm::DbErr) -> Self {
        NewUserError::Store(err.into())
    }
}

impl Store {
    /// Stores a person and their invitation together: neither exists without the other.
    pub async fn create_console_user(
        &self,
        user: ConsoleUser,
        invitation: ConsoleInvitation,
    ) -> Result<ConsoleUser, NewUserError> {
        let txn = self.begin().await?;
        let inserted = console_user::ActiveModel {
            id: Set(user.id.clone()),
            account_id: Set(user.account_id.clone()),
            email: Set(user.email.clone()),
            role: Set(user.role.clone()),
            password_hash: Set(None),
            locale: Set(user.locale.clone()),
            created_at: Set(user.created_at),
            activated_at: Set(None),
            removed_at: Set(None),
        }
        .insert(txn.conn())
        .await;
        match inserted {
            Err(err) if super::StoreError::from(err.clone()).is_unique_violation() => {
                return Err(NewUserError::EmailTaken);
            }
            Err(err) => return Err(err.into()),
            Ok(_) => {}
        }
        insert_invitation(txn.conn(), invitation).await?;
        txn.commit().await?;
        Ok(user)
    }

    /// A new invitation for a person who has not accepted theirs yet; the older ones stop
    /// opening.
    pub async fn reinvite_console_user(&self, invitation: ConsoleInvitation) -> StoreResult<()> {
        let txn = self.begin().await?;
        console_invitation::Entity::update_many()
            .col_expr(
                console_invitation::Column::UsedAt,
                Expr::value(invitation.created_at),
            )
            .filter(console_invitation::Column::UserId.eq(invitation.user_id.clone()))
            .filter(console_invitation::Column::UsedAt.is_null())
            .exec(txn.conn())
            .await?;
        insert_invitation(txn.conn(), invitation).await?;
        txn.commit().await?;
        Ok(())
    }

    /// `account`'s console users, removed ones too, oldest first.
    pub async fn console_users(&self, account: &AccountId) -> StoreResult<Vec<ConsoleUser>> {
        Ok(console_user::Entity::scoped(account)
            .order_by_asc(console_user::Column::CreatedAt)
            .order_by_asc(console_user::Column::Id)
            .limit(1_000)
            .all(self.conn())
            .await?)
    }

    pub async fn console_user(
        &self,
        account: &AccountId,
        id: &ConsoleUserId,
    ) -> StoreResult<Option<ConsoleUser>> {
        Ok(console_user::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// The person a sign-in names (lower-cased e-mail), whichever their account, unless removed.
    pub async fn console_user_by_email(&self, email: &str) -> StoreResult<Option<ConsoleUser>> {
        Ok(console_user::Entity::find()
            .filter(console_user::Column::Email.eq(email))
            .filter(console_user::Column::RemovedAt.is_null())
            .one(self.conn())
            .await?)
    }

    /// The person a session or an invitation belongs to (an id the caller got from one).
    pub async fn console_user_of(&self, id: &ConsoleUserId) -> StoreResult<Option<ConsoleUser>> {
        Ok(console_user::Entity::find_by_id(id.clone())
            .one(self.conn())
            .await?)
    }

    /// The invitation `token_hash` names, used or not.
    pub async fn console_invitation(
        &self,
        token_hash: &str,
    ) -> StoreResult<Option<ConsoleInvitation>> {
        Ok(
            console_invitation::Entity::find_by_id(token_hash.to_owned())
                .one(self.conn())
                .await?,
        )
    }

    /// Uses the invitation and sets its person's password, in one transaction; false (and
    /// nothing changed) when it was used, expired or its person removed meanwhile.
    pub async fn accept_console_invitation(
        &self,
        token_hash: &str,
        password_hash: &str,
        now_ms: i64,
    ) -> StoreResult<Option<ConsoleUserId>> {
        let txn = self.begin().await?;
        let Some(invitation) = console_invitation::Entity::find_by_id(token_hash.to_owned())
            .one(txn.conn())
            .await?
        else {
            return Ok(None);
        };
        let used = console_invitation::Entity::update_many()
            .col_expr(console_invitation::Column::UsedAt, Expr::value(now_ms))
            .filter(console_invitation::Column::TokenHash.eq(token_hash))
            .filter(console_invitation::Column::UsedAt.is_null())
            .filter(console_invitation::Column::ExpiresAt.gt(now_ms))
            .exec(txn.conn())
            .await?
            .rows_affected;
        if used != 1 {
            return Ok(None);
        }
        let set = console_user::Entity::update_many()
            .col_expr(
                console_user::Column::PasswordHash,
                Expr::value(password_hash.to_owned()),
            )
            .col_expr(console_user::Column::ActivatedAt, Expr::value(now_ms))
            .filter(console_user::Column::Id.eq(invitation.user_id.clone()))
            .filter(console_user::Column::RemovedAt.is_null())
            .exec(txn.conn())
            .await?
            .rows_affected;
        if set != 1 {
            return Ok(None);
        }
        txn.commit().await?;
        Ok(Some(invitation.user_id))
    }

    /// Removes a person: they can no longer sign in, and every session of theirs ends now.
    pub async fn remove_console_user(
        &self,
        account: &AccountId,
        id: &ConsoleUserId,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let txn = self.begin().await?;
        let removed = console_user::Entity::update_many()
            .col_expr(console_user::Column::RemovedAt, Expr::value(now_ms))
            .filter(console_user::Entity::of(account))
            .filter(console_user::Column::Id.eq(id.clone()))
            .filter(console_user::Column::RemovedAt.is_null())
            .exec(txn.conn())
            .await?
            .rows_affected;
        console_session::Entity::delete_many()
            .filter(console_session::Column::UserId.eq(id.clone()))
            .exec(txn.conn())
            .await?;
        console_invitation::Entity::update_many()
            .col_expr(console_invitation::Column::UsedAt, Expr::value(now_ms))
            .filter(console_invitation::Column::UserId.eq(id.clone()))
            .filter(console_invitation::Column::UsedAt.is_null())
            .exec(txn.conn())
            .await?;
        txn.commit().await?;
        Ok(removed == 1)
    }

    pub async fn insert_console_session(&self, session: ConsoleSession) -> StoreResult<()> {
        console_session::ActiveModel {
            token_hash: Set(session.token_hash),
            account_id: Set(session.account_id),
            user_id: Set(session.user_id),
            csrf: Set(session.csrf),
            expires_at: Set(session.expires_at),
            created_at: Set(session.created_at),
        }
        .insert(self.writer())
        .await?;
        Ok(())
    }

    /// The session the cookie's token hashes to, expired or not.
    pub async fn console_session(&self, token_hash: &str) -> StoreResult<Option<ConsoleSession>> {
        Ok(console_session::Entity::find_by_id(token_hash.to_owned())
            .one(self.conn())
            .await?)
    }

    /// Ends one session.
    pub async fn end_console_session(&self, token_hash: &str) -> StoreResult<()> {
        console_session::Entity::delete_by_id(token_hash.to_owned())
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// Deletes the sessions and invitations that expired before `now_ms`, real time: no
    /// account's clock is behind it (a test clock only moves forward), so each was expired by
    /// its own account's clock too. How many rows went.
    pub async fn purge_expired_console_rows(&self, now_ms: i64) -> StoreResult<u64> {
        let sessions = console_session::Entity::delete_many()
            .filter(console_session::Column::ExpiresAt.lt(now_ms))
            .exec(self.writer())
            .await?
            .rows_affected;
        let invitations = console_invitation::Entity::delete_many()
            .filter(console_invitation::Column::ExpiresAt.lt(now_ms))
            .exec(self.writer())
            .await?
            .rows_affected;
        Ok(sessions + invitations)
    }

    /// Ends every session of a person (and those already expired).
    pub async fn end_console_sessions_of(&self, user: &ConsoleUserId) -> StoreResult<u64> {
        Ok(console_session::Entity::delete_many()
            .filter(console_session::Column::UserId.eq(user.clone()))
            .exec(self.writer())
            .await?
            .rows_affected)
    }

    /// Records an action before it is taken; `finish_console_action` adds the API's answer.
    pub async fn record_console_action(&self, action: ConsoleAction) -> StoreResult<()> {
        console_action::ActiveModel {
            id: Set(action.id),
            account_id: Set(action.account_id),
            user_id: Set(action.user_id),
            action: Set(action.action),
            object_id: Set(action.object_id),
            idempotency_key: Set(action.idempotency_key),
            status: Set(None),
            created_at: Set(action.created_at),
        }
        .insert(self.writer())
        .await?;
        Ok(())
    }

    /// Adds the API's answer to the action `id` and writes its event, `console.action` (who
    /// took it, what, on what, under which key, the answer), in one transaction; an action
    /// already answered is left as it is, and a form posted again under the same key (the
    /// API replays its answer) writes no second event.
    pub async fn finish_console_action(
        &self,
        account: &AccountId,
        id: &ConsoleActionId,
        status: u16,
        now_ms: i64,
    ) -> StoreResult<()> {
        let txn = self.begin().await?;
        let answered = console_action::Entity::update_many()
            .col_expr(
                console_action::Column::Status,
                Expr::value(i32::from(status)),
            )
            .filter(console_action::Entity::of(account))
            .filter(console_action::Column::Id.eq(id.clone()))
            .filter(console_action::Column::Status.is_null())
            .exec(txn.conn())
            .await?
            .rows_affected
            == 1;
        let action = console_action::Entity::find_scoped(account, id.clone())
            .one(txn.conn())
            .await?;
        let Some(action) = action.filter(|_| answered) else {
            return Ok(());
        };
        // A form posted again under its key is the API's replay of one action: its event was
        // written when it was first answered.
        let replay = console_action::Entity::scoped(account)
            .filter(console_action::Column::UserId.eq(action.user_id.clone()))
            .filter(console_action::Column::IdempotencyKey.eq(action.idempotency_key.clone()))
            .filter(console_action::Column::Action.eq(action.action.clone()))
            .filter(console_action::Column::Id.ne(action.id.clone()))
            .filter(console_action::Column::Status.is_not_null())
            .one(txn.conn())
            .await?
            .is_some();
        if replay {
            return txn.commit().await;
        }
        let person = console_user::Entity::find_scoped(account, action.user_id.clone())
            .one(txn.conn())
            .await?;
        let subscription = crate::ids::SubscriptionId::parse(&action.object_id);
        let mut data = serde_json::json!({
            "console_action_id": action.id,
            "action": action.action,
            "object_id": action.object_id,
            "idempotency_key": action.idempotency_key,
            "http_status": status,
            "console_user": {
                "id": action.user_id,
                "email": person.as_ref().map(|p| p.email.as_str()),
                "role": person.as_ref().map(|p| p.role.as_str()),
            },
        });
        if let Some(subscription) = &subscription {
            data["subscription_id"] = serde_json::json!(subscription);
        }
        txn.insert_event(super::outbox::event_row(
            account,
            subscription.as_ref(),
            EventType::ConsoleAction,
            data,
            now_ms,
        ))
        .await?;
        txn.commit().await
    }

    /// The actions people took on `object_id`, newest first (at most 200).
    pub async fn console_actions_on(
        &self,
        account: &AccountId,
        object_ids: &[String],
    ) -> StoreResult<Vec<ConsoleAction>> {
        Ok(console_action::Entity::scoped(account)
            .filter(console_action::Column::ObjectId.is_in(object_ids.iter().cloned()))
            .order_by_desc(console_action::Column::CreatedAt)
            .limit(200)
            .all(self.conn())
            .await?)
    }

    /// `account`'s customers whose e-mail, name, legal name or tax id holds `needle` (any
    /// case), newest first, at most `limit`.
    pub async fn search_customers(
        &self,
        account: &AccountId,
        needle: &str,
        limit: u64,
    ) -> StoreResult<Vec<super::entities::customer::Model>> {
        use super::entities::customer;
        let escaped: String = needle
            .to_lowercase()
            .chars()
            .flat_map(|c| match c {
                '%' | '_' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let pattern = format!("%{escaped}%");
        let like = |column: customer::Column| {
            Expr::expr(Func::lower(Expr::col(column)))
                .like(LikeExpr::new(pattern.clone()).escape('\\'))
        };
        Ok(customer::Entity::scoped(account)
            .filter(
                Condition::any()
                    .add(like(customer::Column::Email))
                    .add(like(customer::Column::Name))
                    .add(like(customer::Column::LegalName))
                    .add(like(customer::Column::TaxIdNumber)),
            )
            .order_by_desc(customer::Column::CreatedAt)
            .order_by_desc(customer::Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?)
    }
}

async fn insert_invitation(
    conn: &impl sea_orm::ConnectionTrait,
    invitation: ConsoleInvitation,
) -> StoreResult<()> {
    console_invitation::ActiveModel {
        token_hash: Set(invitation.token_hash),
        account_id: Set(invitation.account_id),
        user_id: Set(invitation.user_id),
        expires_at: Set(invitation.expires_at),
        used_at: Set(None),
        created_at: Set(invitation.created_at),
    }
    .insert(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(account: &AccountId, token_hash: &str, expires_at: i64) -> ConsoleSession {
        ConsoleSession {
            token_hash: token_hash.to_owned(),
            account_id: account.clone(),
            user_id: ConsoleUserId::generate(),
            csrf: "csrf".to_owned(),
            expires_at,
            created_at: 0,
        }
    }

    #[tokio::test]
    async fn the_purge_takes_expired_sessions_only() {
        let store = crate::store::idempotency::test_store().await;
        let account = AccountId::generate();
        let now = 1_700_000_000_000;
        for (hash, expires_at) in [("gone", now - 1), ("live", now + 1)] {
            store
                .insert_console_session(session(&account, hash, expires_at))
                .await
                .expect("insert");
        }
        assert_eq!(
            store.purge_expired_console_rows(now).await.expect("purge"),
            1
        );
        assert!(store.console_session("gone").await.expect("read").is_none());
        assert!(store.console_session("live").await.expect("read").is_some());
        assert_eq!(
            store.purge_expired_console_rows(now).await.expect("purge"),
            0
        );
    }
}
