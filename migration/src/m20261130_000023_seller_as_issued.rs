//! Why: an invoice or a credit note is the seller's statement as it was issued, and a later
//! change of the account's invoicing data (legal name, NIT, address, regime) must not reach
//! one issued before it (issue 46, R6). Each row keeps the seller as it was at issue: `seller`,
//! JSON of `store::accounts::Seller`, written in the transaction that writes the row. NULL on
//! the rows issued before this migration (and on those of an account that had set none): they
//! print the account's seller as it is, as they always did.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 2] = [
    "ALTER TABLE invoices ADD COLUMN seller TEXT NULL",
    "ALTER TABLE credit_notes ADD COLUMN seller TEXT NULL",
];

const DOWN: [&str; 2] = [
    "ALTER TABLE credit_notes DROP COLUMN seller",
    "ALTER TABLE invoices DROP COLUMN seller",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for statement in UP {
            manager
                .get_connection()
                .execute_unprepared(statement)
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for statement in DOWN {
            manager
                .get_connection()
                .execute_unprepared(statement)
                .await?;
        }
        Ok(())
    }
}
