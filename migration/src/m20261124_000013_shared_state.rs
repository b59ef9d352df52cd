//! Why: state that one process used to keep in memory must be shared when several `billing
//! serve` nodes run on one PostgreSQL database (issue 15), or each node would apply its own
//! limits and know only its own logins.
//!
//! - `dashboard_sessions` (both databases): a login on one node is a login on every node. The
//!   session id is stored only as its SHA-256 (a copy of the table logs nobody in); the CSRF
//!   token in clear, since the page must print it; `expires_at` is indexed for the purge.
//! - `rate_windows` (PostgreSQL only): the sliding windows of the API rate limits, of checkout
//!   attempts and of failed authentications per client address, one row per key holding the
//!   instants of its requests of the last minute (`store::rate_windows` explains the shape).
//!   UNLOGGED: the rows are rewritten on every API request and are worth nothing after a crash
//!   (losing them forgets at most a minute of counting), so they skip the write-ahead log, and
//!   a transaction that writes only them commits without waiting for a WAL flush. SQLite has
//!   one node, whose windows stay in its memory, and the table would hold PostgreSQL arrays:
//!   it is not created there.

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum DashboardSessions {
    Table,
    IdHash,
    Csrf,
    ExpiresAt,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(DashboardSessions::Table)
                    .col(string(DashboardSessions::IdHash).primary_key())
                    .col(text(DashboardSessions::Csrf))
                    .col(big_integer(DashboardSessions::ExpiresAt))
                    .col(big_integer(DashboardSessions::CreatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_dashboard_sessions_expires_at",
            DashboardSessions::Table,
            [DashboardSessions::ExpiresAt],
        )
        .await?;
        if manager.get_database_backend() != DatabaseBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        // `ats` ascending; `counts[i]` requests share the instant `ats[i]` (at the window's
        // resolution); `refused_for_ms` is the verdict of the last take, read back by RETURNING.
        db.execute_unprepared(
            "CREATE UNLOGGED TABLE rate_windows (\
               key TEXT PRIMARY KEY, \
               ats BIGINT[] NOT NULL, \
               counts BIGINT[] NOT NULL, \
               refused_for_ms BIGINT NOT NULL, \
               last_at BIGINT NOT NULL)",
        )
        .await?;
        db.execute_unprepared("CREATE INDEX idx_rate_windows_last_at ON rate_windows (last_at)")
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            manager
                .get_connection()
                .execute_unprepared("DROP TABLE rate_windows")
                .await?;
        }
        manager
            .drop_table(Table::drop().table(DashboardSessions::Table).to_owned())
            .await
    }
}
