//! Why: the accountant's exports (CONTRACT §16) read an account's invoices and credit notes
//! issued in a range of Colombian days, in issue order, a page at a time by the key
//! `(issued_at, id)`; the lists filter by the same dates. Without these indexes every page
//! would sort all of the account's documents again (a month of 100,000 invoices is 200 pages).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &[
                "CREATE INDEX invoices_by_issue ON invoices (account_id, issued_at, id)",
                "CREATE INDEX credit_notes_by_issue ON credit_notes (account_id, issued_at, id)",
            ],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &[
                "DROP INDEX credit_notes_by_issue",
                "DROP INDEX invoices_by_issue",
            ],
        )
        .await
    }
}
