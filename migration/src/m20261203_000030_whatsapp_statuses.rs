//! Why: a WhatsApp notice learns what became of it after it was sent, from Meta's status
//! webhooks (CONTRACT §15): `delivered_at` and `read_at` (account clock, ms; NULL until told).
//! A webhook names the message by its wamid, kept in `message_id` as an e-mail's Message-ID
//! is; the index finds it within its account without reading the account's every notice.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &[
                "ALTER TABLE notices ADD COLUMN delivered_at BIGINT NULL",
                "ALTER TABLE notices ADD COLUMN read_at BIGINT NULL",
                "CREATE INDEX notices_by_message_id ON notices (account_id, message_id) \
                 WHERE message_id IS NOT NULL",
            ],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &[
                "DROP INDEX notices_by_message_id",
                "ALTER TABLE notices DROP COLUMN read_at",
                "ALTER TABLE notices DROP COLUMN delivered_at",
            ],
        )
        .await
    }
}
