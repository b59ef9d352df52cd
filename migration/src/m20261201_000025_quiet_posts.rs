//! Why: a charge the processor never saw is posted again under its reference, and a refusal of
//! that post says nothing of an earlier post of ours still on its way; but an earlier post
//! cannot be on its way for ever (issue 46: such a charge stayed pending instead of going
//! `past_due`). `quiet_since` is the real instant since which no post of the charge went out
//! whose answer we did not get; once it is older than the in-flight bound, a refused re-post is
//! a final refusal. NULL on rows from before: counted from their next question.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &["ALTER TABLE charge_rechecks ADD COLUMN quiet_since BIGINT NULL"],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &["ALTER TABLE charge_rechecks DROP COLUMN quiet_since"],
        )
        .await
    }
}
