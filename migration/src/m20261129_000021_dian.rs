//! Why: with DIAN on, every invoice and credit note is an electronic document DIAN validates
//! (CONTRACT §12, issue 37's second part).
//!
//! - `accounts.dian`: the account's DIAN settings (JSON: environment, software id, the
//!   certificate's subject and expiry); `dian_software_pin`, `dian_certificate` (the PKCS#12
//!   file, base64) and `dian_certificate_password`: its secrets, kept like the processor's keys.
//! - `dian_ranges`: the numbering ranges DIAN authorised, each with its next number, taken by a
//!   conditional `UPDATE … RETURNING` in the transaction that writes the invoice.
//! - `dian_documents`: one row per invoice or credit note of an account with DIAN on, beside
//!   (not inside) `invoices` and `credit_notes`, whose rows stay as they are: its DIAN number
//!   (`UNIQUE (account_id, prefix, sequence)`: each number once), its CUFE or CUDE (fixed at
//!   numbering), its status, the signed XML exactly as sent, DIAN's messages, and the
//!   submission's bookkeeping (the claim of the node sending it, when it was sent, the next
//!   attempt).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "ALTER TABLE accounts ADD COLUMN dian TEXT NULL",
            "ALTER TABLE accounts ADD COLUMN dian_software_pin TEXT NULL",
            "ALTER TABLE accounts ADD COLUMN dian_certificate TEXT NULL",
            "ALTER TABLE accounts ADD COLUMN dian_certificate_password TEXT NULL",
            "CREATE TABLE dian_ranges (
                id TEXT NOT NULL PRIMARY KEY,
                account_id TEXT NOT NULL REFERENCES accounts (id),
                resolution_number TEXT NOT NULL,
                prefix TEXT NOT NULL,
                range_from BIGINT NOT NULL CHECK (range_from >= 1),
                range_to BIGINT NOT NULL,
                valid_from TEXT NOT NULL,
                valid_to TEXT NOT NULL,
                technical_key TEXT NOT NULL,
                next_number BIGINT NOT NULL,
                created_at BIGINT NOT NULL,
                CHECK (range_from <= range_to),
                CHECK (valid_from <= valid_to),
                CHECK (next_number >= range_from AND next_number <= range_to + 1)
            )",
            "CREATE INDEX dian_ranges_account ON dian_ranges (account_id, id)",
            "CREATE TABLE dian_documents (
                id TEXT NOT NULL PRIMARY KEY,
                account_id TEXT NOT NULL REFERENCES accounts (id),
                kind TEXT NOT NULL CHECK (kind IN ('invoice', 'credit_note')),
                invoice_id TEXT NULL,
                status TEXT NOT NULL
                    CHECK (status IN ('awaiting_range', 'pending', 'accepted', 'rejected')),
                environment TEXT NOT NULL CHECK (environment IN ('test', 'production')),
                issuer TEXT NOT NULL,
                issued_at BIGINT NOT NULL,
                prefix TEXT NULL,
                sequence BIGINT NULL,
                number TEXT NULL,
                range_id TEXT NULL REFERENCES dian_ranges (id),
                unique_code TEXT NULL,
                xml TEXT NULL,
                messages TEXT NULL,
                sent_at BIGINT NULL,
                attempts BIGINT NOT NULL DEFAULT 0,
                next_at BIGINT NULL,
                claim TEXT NULL,
                claimed_until BIGINT NULL,
                updated_at BIGINT NOT NULL,
                UNIQUE (account_id, prefix, sequence),
                CHECK ((status = 'awaiting_range') = (number IS NULL)),
                CHECK ((number IS NULL) = (unique_code IS NULL)),
                CHECK (status = 'awaiting_range' OR kind = 'invoice' OR range_id IS NULL)
            )",
            "CREATE INDEX dian_documents_due ON dian_documents (next_at) WHERE status = 'pending'",
            "CREATE INDEX dian_documents_waiting ON dian_documents (account_id, issued_at) \
             WHERE status = 'awaiting_range'",
            "CREATE INDEX dian_documents_invoice ON dian_documents (invoice_id)",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "DROP TABLE dian_documents",
            "DROP TABLE dian_ranges",
            "ALTER TABLE accounts DROP COLUMN dian_certificate_password",
            "ALTER TABLE accounts DROP COLUMN dian_certificate",
            "ALTER TABLE accounts DROP COLUMN dian_software_pin",
            "ALTER TABLE accounts DROP COLUMN dian",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }
}
