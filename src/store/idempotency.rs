//! Stored first responses of requests sent with an `Idempotency-Key`.
//!
//! The row is inserted before the request runs; the primary key (account, key) is the lock that
//! keeps two concurrent duplicates from both running.

use super::entities::idempotency_key;
use super::{Store, StoreError, StoreResult};
use crate::ids::AccountId;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};

/// How long a key is remembered.
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// What to do with a request carrying a key.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// First time: run it, then `finish_idempotent`.
    Fresh,
    /// Done before with the same request: answer this again.
    Replay { status: u16, body: String },
    /// The key was used for another request.
    Mismatch,
    /// The first request with this key is still running.
    InFlight,
}

impl Store {
    pub async fn claim_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        request_hash: &str,
        now_ms: i64,
    ) -> StoreResult<Claim> {
        // An expired record is forgotten, as if the key had never been used.
        idempotency_key::Entity::delete_many()
            .filter(idempotency_key::Column::AccountId.eq(account.as_str()))
            .filter(idempotency_key::Column::Key.eq(key))
            .filter(idempotency_key::Column::CreatedAt.lt(now_ms - RETENTION_MS))
            .exec(self.writer())
            .await?;
        let row = idempotency_key::ActiveModel {
            account_id: Set(account.as_str().to_owned()),
            key: Set(key.to_owned()),
            request_hash: Set(request_hash.to_owned()),
            state: Set("running".to_owned()),
            response_status: Set(None),
            response_body: Set(None),
            created_at: Set(now_ms),
        };
        match row.insert(self.writer()).await {
            Ok(_) => return Ok(Claim::Fresh),
            Err(err) => {
                let err = StoreError::from(err);
                if !err.is_unique_violation() {
                    return Err(err);
                }
            }
        }
        let Some(existing) =
            idempotency_key::Entity::find_by_id((account.as_str().to_owned(), key.to_owned()))
                .one(self.conn())
                .await?
        else {
            // Deleted between our insert and read (the first request failed): treat as new.
            return Ok(Claim::InFlight);
        };
        if existing.request_hash != request_hash {
            return Ok(Claim::Mismatch);
        }
        match (
            existing.state.as_str(),
            existing.response_status,
            existing.response_body,
        ) {
            ("done", Some(status), Some(body)) => Ok(Claim::Replay {
                status: status as u16,
                body,
            }),
            _ => Ok(Claim::InFlight),
        }
    }

    /// Records the response to replay.
    pub async fn finish_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        status: u16,
        body: String,
    ) -> StoreResult<()> {
        idempotency_key::Entity::update_many()
            .col_expr(idempotency_key::Column::State, "done".into())
            .col_expr(
                idempotency_key::Column::ResponseStatus,
                i32::from(status).into(),
            )
            .col_expr(idempotency_key::Column::ResponseBody, body.into())
            .filter(idempotency_key::Column::AccountId.eq(account.as_str()))
            .filter(idempotency_key::Column::Key.eq(key))
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// Forgets a key whose request failed on our side, so that a retry runs it again.
    pub async fn release_idempotency_key(&self, account: &AccountId, key: &str) -> StoreResult<()> {
        idempotency_key::Entity::delete_many()
            .filter(idempotency_key::Column::AccountId.eq(account.as_str()))
            .filter(idempotency_key::Column::Key.eq(key))
            .exec(self.writer())
            .await?;
        Ok(())
    }
}
