//! Why: several `billing serve` processes may share one PostgreSQL database, and each
//! subscription and webhook endpoint must be acted on by one of them at a time. Work is split
//! into 256 shards (an id's shard is its last byte); `shard_leases` says which node holds each
//! shard, under which epoch (from the one sequence `shard_epochs`, so a takeover always moves
//! it forward) and until when (the database's clock, milliseconds). `cluster_nodes` lists the
//! live nodes (a heartbeat with an expiry) and the URL where each takes forwarded requests, so
//! shards are spread evenly and requests reach their owner. SQLite, one process's file, gets
//! the same tables and never uses them. The scheduler's row claims of migration 000008
//! (`subscriptions.claimed_until`) are dropped: a node loads only its own shards' rows.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let postgres = manager.get_database_backend() == DbBackend::Postgres;
        db.execute_unprepared(
            "CREATE TABLE cluster_nodes (
                id TEXT PRIMARY KEY,
                url TEXT NOT NULL,
                started_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                leaving BOOLEAN NOT NULL DEFAULT FALSE
            )",
        )
        .await?;
        db.execute_unprepared(
            "CREATE TABLE shard_leases (
                shard SMALLINT PRIMARY KEY,
                owner TEXT NULL,
                epoch BIGINT NOT NULL DEFAULT 0,
                expires_at BIGINT NOT NULL DEFAULT 0
            )",
        )
        .await?;
        if postgres {
            db.execute_unprepared("CREATE SEQUENCE shard_epochs")
                .await?;
            db.execute_unprepared(
                "INSERT INTO shard_leases (shard) SELECT generate_series(0, 255)",
            )
            .await?;
        } else {
            db.execute_unprepared(
                "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 255)
                 INSERT INTO shard_leases (shard) SELECT n FROM s",
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("ALTER TABLE subscriptions ADD COLUMN claimed_until BIGINT NULL")
            .await?;
        db.execute_unprepared("DROP TABLE shard_leases").await?;
        db.execute_unprepared("DROP TABLE cluster_nodes").await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            db.execute_unprepared("DROP SEQUENCE shard_epochs").await?;
        }
        Ok(())
    }
}
