//! Why: every electronic document reaches an end, or waits where an operator sees why (issue
//! 46, CONTRACT §12a).
//!
//! - `dian_documents.waiting`: why a document that is neither accepted nor rejected waits for
//!   something only an operator can give (`awaiting_range`: a range; `numbering_failed`: its
//!   numbering failed and is retried; `invoice_rejected`: a credit note whose invoice DIAN
//!   rejected; `settings`: DIAN turned off or its certificate unusable); NULL while it is
//!   simply on its way. `waiting_since` (the account's time) lets the dashboard and the gauge
//!   name what has waited more than a day.
//! - `dian_documents.application_response`: DIAN's ApplicationResponse for an accepted
//!   document (the XML DIAN answered in `XmlBase64Bytes`), written in the transaction that
//!   marks it accepted; the AttachedDocument the buyer receives embeds it.
//! - `dian_documents.replaced_number`: the number an invoice had before it was renumbered
//!   (its range expired before it could be sent), kept for the record.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "ALTER TABLE dian_documents ADD COLUMN waiting TEXT NULL \
             CHECK (waiting IN ('awaiting_range', 'numbering_failed', 'invoice_rejected', 'settings'))",
            "ALTER TABLE dian_documents ADD COLUMN waiting_since BIGINT NULL",
            "ALTER TABLE dian_documents ADD COLUMN application_response TEXT NULL",
            "ALTER TABLE dian_documents ADD COLUMN replaced_number TEXT NULL",
            // Every document still waiting for a range says so.
            "UPDATE dian_documents SET waiting = 'awaiting_range', waiting_since = issued_at \
             WHERE status = 'awaiting_range'",
            "CREATE INDEX dian_documents_waiting_for ON dian_documents (waiting_since) \
             WHERE waiting IS NOT NULL",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "DROP INDEX dian_documents_waiting_for",
            "ALTER TABLE dian_documents DROP COLUMN replaced_number",
            "ALTER TABLE dian_documents DROP COLUMN application_response",
            "ALTER TABLE dian_documents DROP COLUMN waiting_since",
            "ALTER TABLE dian_documents DROP COLUMN waiting",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }
}
