//! Stored first responses of requests sent with an `Idempotency-Key`.
//!
//! The row is inserted before the request runs; the primary key (account, key) is the lock that
//! keeps two concurrent duplicates from both running. A row older than `RETENTION_MS` is
//! forgotten: a claim treats it as new, and `purge_expired_idempotency_keys` deletes it.

use super::entities::idempotency_key;
use super::{Store, StoreError, StoreResult};
use crate::ids::AccountId;
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Set,
};

/// How long a key is remembered.
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// What to do with a request carrying a key.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// First time: run it, then `finish_idempotency_key` (or release the key).
    Fresh,
    /// Done before with the same request: answer this again.
    Replay { status: u16, body: String },
    /// The key was used for another request.
    Mismatch,
    /// The first request with this key is still running.
    InFlight,
}

impl Store {
    /// Claims `key` for a request whose method, path and body hash to `request_hash`.
    pub async fn claim_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        request_hash: &str,
        now_ms: i64,
    ) -> StoreResult<Claim> {
        // Three rounds at most: a row that expires or is released between our insert and our
        // read makes us insert again; more than that is a crowd, and the crowd waits.
        for _ in 0..3 {
            let row = idempotency_key::ActiveModel {
                account_id: Set(account.clone()),
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
            let existing = idempotency_key::Entity::find_by_id((account.clone(), key.to_owned()))
                .one(self.conn())
                .await?;
            let Some(existing) = existing else {
                // Released by a request that committed nothing: the key is free again.
                continue;
            };
            if existing.created_at < now_ms - RETENTION_MS {
                // An expired record is forgotten, as if the key had never been used. Only that
                // record: a concurrent claim may already have replaced it.
                idempotency_key::Entity::delete_many()
                    .filter(idempotency_key::Entity::of(account))
                    .filter(idempotency_key::Column::Key.eq(key))
                    .filter(idempotency_key::Column::CreatedAt.lt(now_ms - RETENTION_MS))
                    .exec(self.writer())
                    .await?;
                continue;
            }
            if existing.request_hash != request_hash {
                return Ok(Claim::Mismatch);
            }
            return Ok(
                match (
                    existing.state.as_str(),
                    existing.response_status,
                    existing.response_body,
                ) {
                    ("done", Some(status), Some(body)) => Claim::Replay {
                        status: status as u16,
                        body,
                    },
                    _ => Claim::InFlight,
                },
            );
        }
        Ok(Claim::InFlight)
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
            .filter(idempotency_key::Entity::of(account))
            .filter(idempotency_key::Column::Key.eq(key))
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// Forgets a key whose request committed nothing, so that a retry runs it again.
    pub async fn release_idempotency_key(&self, account: &AccountId, key: &str) -> StoreResult<()> {
        idempotency_key::Entity::delete_many()
            .filter(idempotency_key::Entity::of(account))
            .filter(idempotency_key::Column::Key.eq(key))
            .filter(idempotency_key::Column::State.eq("running"))
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// Deletes at most `batch` keys created before `now_ms - RETENTION_MS`, of every account;
    /// returns how many. A caller loops until fewer than `batch` go, so that on SQLite the one
    /// writer is never held for the whole backlog at once.
    pub async fn purge_expired_idempotency_keys(
        &self,
        now_ms: i64,
        batch: u64,
    ) -> StoreResult<u64> {
        let cutoff = now_ms - RETENTION_MS;
        // Looked for on the readers first: most passes find nothing, and then take no write lock.
        let any = idempotency_key::Entity::find()
            .select_only()
            .column(idempotency_key::Column::CreatedAt)
            .filter(idempotency_key::Column::CreatedAt.lt(cutoff))
            .limit(1)
            .into_tuple::<i64>()
            .one(self.conn())
            .await?;
        if any.is_none() {
            return Ok(0);
        }
        let expired = Query::select()
            .columns([
                idempotency_key::Column::AccountId,
                idempotency_key::Column::Key,
            ])
            .from(idempotency_key::Entity)
            .and_where(Expr::col(idempotency_key::Column::CreatedAt).lt(cutoff))
            .limit(batch)
            .to_owned();
        let delete = Query::delete()
            .from_table(idempotency_key::Entity)
            .and_where(
                Expr::tuple([
                    Expr::col(idempotency_key::Column::AccountId),
                    Expr::col(idempotency_key::Column::Key),
                ])
                .in_subquery(expired),
            )
            .to_owned();
        Ok(self.writer().execute(&delete).await?.rows_affected())
    }
}

/// A fresh, migrated SQLite store in the temporary directory, for unit tests of this module
/// and of the layer that uses it.
#[cfg(test)]
pub(crate) async fn test_store() -> Store {
    let path =
        std::env::temp_dir().join(format!("billing-unit-{}.db", uuid::Uuid::new_v4().simple()));
    let store = Store::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn account() -> AccountId {
        AccountId::parse("acct_1").expect("an account's id")
    }

    #[tokio::test]
    async fn an_expired_key_is_claimed_as_new_even_for_another_request() {
        let store = test_store().await;
        let old = NOW - RETENTION_MS - 1;
        assert_eq!(
            store
                .claim_idempotency_key(&account(), "k", "a", old)
                .await
                .expect("claim"),
            Claim::Fresh
        );
        store
            .finish_idempotency_key(&account(), "k", 201, "{}".into())
            .await
            .expect("finish");
        assert_eq!(
            store
                .claim_idempotency_key(&account(), "k", "b", NOW)
                .await
                .expect("claim"),
            Claim::Fresh
        );
        assert_eq!(
            store
                .claim_idempotency_key(&account(), "k", "b", NOW)
                .await
                .expect("claim"),
            Claim::InFlight
        );
    }

    #[tokio::test]
    async fn releasing_frees_a_running_key_but_never_a_kept_response() {
        let store = test_store().await;
        let account = account();
        let claim = |key: &'static str| store.claim_idempotency_key(&account, key, "a", NOW);
        assert_eq!(claim("running").await.expect("claim"), Claim::Fresh);
        store
            .release_idempotency_key(&account, "running")
            .await
            .expect("release");
        assert_eq!(claim("running").await.expect("claim"), Claim::Fresh);

        assert_eq!(claim("done").await.expect("claim"), Claim::Fresh);
        store
            .finish_idempotency_key(&account, "done", 500, "{}".into())
            .await
            .expect("finish");
        store
            .release_idempotency_key(&account, "done")
            .await
            .expect("release");
        assert_eq!(
            claim("done").await.expect("claim"),
            Claim::Replay {
                status: 500,
                body: "{}".into()
            }
        );
    }

    #[tokio::test]
    async fn the_purge_deletes_expired_keys_a_batch_at_a_time_and_keeps_the_rest() {
        let store = test_store().await;
        for i in 0..5 {
            let at = NOW - RETENTION_MS - 1 - i;
            store
                .claim_idempotency_key(&account(), &format!("old-{i}"), "a", at)
                .await
                .expect("claim");
        }
        store
            .claim_idempotency_key(&account(), "young", "a", NOW - RETENTION_MS + 1)
            .await
            .expect("claim");
        let purge = || store.purge_expired_idempotency_keys(NOW, 2);
        assert_eq!(purge().await.expect("purge"), 2);
        assert_eq!(purge().await.expect("purge"), 2);
        assert_eq!(purge().await.expect("purge"), 1);
        assert_eq!(purge().await.expect("purge"), 0);
        assert_eq!(
            store
                .claim_idempotency_key(&account(), "young", "a", NOW)
                .await
                .expect("claim"),
            Claim::InFlight
        );
    }
}
