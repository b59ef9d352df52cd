//! Why: dunning reads the decline (issue 47). A declined charge keeps its reason as a code
//! (`decline_code`: `insufficient_funds`, `stolen_card`, …, `network_limit` for a retry the
//! card network's reattempt limit stopped before it was sent), so that a hard decline is never
//! retried on the same card and the customer's notice says what happened. The card networks'
//! limits count a payment method's attempts over a window: the index answers that count
//! without reading every charge of the account. NULL on rows from before (and on every charge
//! that was not declined).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &[
                "ALTER TABLE charge_attempts ADD COLUMN decline_code TEXT NULL",
                "CREATE INDEX idx_charge_attempts_method_created \
                 ON charge_attempts (payment_method_id, created_at)",
            ],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &[
                "DROP INDEX idx_charge_attempts_method_created",
                "ALTER TABLE charge_attempts DROP COLUMN decline_code",
            ],
        )
        .await
    }
}
