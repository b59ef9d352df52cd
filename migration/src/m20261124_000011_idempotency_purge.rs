//! Why: Idempotency-Keys older than 24 hours are purged by a background loop in bounded
//! batches (`DELETE … WHERE (account_id, key) IN (SELECT … WHERE created_at < ? LIMIT ?)`).
//! Without an index on `created_at` every batch, and every pass that finds nothing, would scan
//! the whole table; with it both are one range of the index.

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum IdempotencyKeys {
    Table,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        index(
            manager,
            "idx_idempotency_keys_created_at",
            IdempotencyKeys::Table,
            [IdempotencyKeys::CreatedAt],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_idempotency_keys_created_at")
                    .table(IdempotencyKeys::Table)
                    .to_owned(),
            )
            .await
    }
}
