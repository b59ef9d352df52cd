//! Why: a refund whose post's answer was lost stays pending until the processor shows it, for as
//! long as that takes (issue 32): its outcome is unknown, and Wompi's refunds carry no reference
//! or idempotency key of ours, so it can be neither posted again nor declared unseen by the
//! clock. What can still be known is whether it was ever sent: `refunds.posted_at` is set, by a
//! conditional update, just before the one post. A refund recorded but never sent (a crash or a
//! request cut off in between) has none, and the reconciler ends it declined with the same kind
//! of conditional update; whichever of the two writes comes first wins, so a refund is either
//! sent or closed, never both.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("ALTER TABLE refunds ADD COLUMN posted_at BIGINT NULL")
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("ALTER TABLE refunds DROP COLUMN posted_at")
            .await?;
        Ok(())
    }
}
