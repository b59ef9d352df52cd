//! Logged-in `/dashboard` sessions, in the database so that a login on one node holds on every
//! node. Only the SHA-256 of a session id is stored: whoever reads the table cannot present a
//! session. Expired sessions are purged when a new one is created (logins are rare, so the
//! table stays small without a loop of its own).

use super::entities::dashboard_session;
use super::{Store, StoreResult};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};

impl Store {
    /// Stores a new session (its id's hash, its CSRF token, its expiry) and forgets every
    /// session expired by `now_ms`.
    pub async fn create_dashboard_session(
        &self,
        id_hash: &str,
        csrf: &str,
        expires_at: i64,
        now_ms: i64,
    ) -> StoreResult<()> {
        dashboard_session::Entity::delete_many()
            .filter(dashboard_session::Column::ExpiresAt.lte(now_ms))
            .exec(self.writer())
            .await?;
        dashboard_session::ActiveModel {
            id_hash: Set(id_hash.to_owned()),
            csrf: Set(csrf.into()),
            expires_at: Set(expires_at),
            created_at: Set(now_ms),
        }
        .insert(self.writer())
        .await?;
        Ok(())
    }

    /// The CSRF token of the session whose id hashes to `id_hash`, while it has not expired.
    pub async fn dashboard_session_csrf(
        &self,
        id_hash: &str,
        now_ms: i64,
    ) -> StoreResult<Option<String>> {
        let session = dashboard_session::Entity::find_by_id(id_hash.to_owned())
            .filter(dashboard_session::Column::ExpiresAt.gt(now_ms))
            .one(self.conn())
            .await?;
        Ok(session.map(|session| session.csrf.into()))
    }

    /// Ends a session (logout).
    pub async fn delete_dashboard_session(&self, id_hash: &str) -> StoreResult<()> {
        dashboard_session::Entity::delete_by_id(id_hash.to_owned())
            .exec(self.writer())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::store::idempotency::test_store;

    const NOW: i64 = 1_800_000_000_000;

    #[tokio::test]
    async fn a_session_lives_until_its_expiry_and_a_new_login_purges_the_expired() {
        let store = test_store().await;
        store
            .create_dashboard_session("old", "csrf_old", NOW + 10, NOW)
            .await
            .expect("create");
        assert_eq!(
            store
                .dashboard_session_csrf("old", NOW + 9)
                .await
                .expect("read")
                .as_deref(),
            Some("csrf_old")
        );
        assert_eq!(
            store
                .dashboard_session_csrf("old", NOW + 10)
                .await
                .expect("read"),
            None
        );
        store
            .create_dashboard_session("new", "csrf_new", NOW + 1000, NOW + 10)
            .await
            .expect("create");
        // Purged, not merely hidden: even an earlier clock no longer finds it.
        assert_eq!(
            store
                .dashboard_session_csrf("old", NOW)
                .await
                .expect("read"),
            None
        );
        store.delete_dashboard_session("new").await.expect("delete");
        assert_eq!(
            store
                .dashboard_session_csrf("new", NOW + 11)
                .await
                .expect("read"),
            None
        );
    }
}
