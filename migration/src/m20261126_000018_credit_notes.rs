//! Why: every approved refund has exactly one credit note against its charge's invoice
//! (CONTRACT §11, issue 34), written in the transaction that approves the refund and numbered in
//! its own series (`NC-1`, …) from `invoice_series`, as invoices are. `refund_id` is unique; a
//! trigger refuses a credit note whose refund is not approved or whose total is not the refund's
//! amount; CHECKs hold the sums.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "CREATE TABLE credit_notes (
                id TEXT NOT NULL PRIMARY KEY,
                account_id TEXT NOT NULL REFERENCES accounts (id),
                series TEXT NOT NULL,
                sequence BIGINT NOT NULL CHECK (sequence >= 1),
                number TEXT NOT NULL,
                invoice_id TEXT NOT NULL REFERENCES invoices (id),
                refund_id TEXT NOT NULL UNIQUE REFERENCES refunds (id),
                charge_id TEXT NOT NULL,
                lines TEXT NOT NULL,
                subtotal_cents BIGINT NOT NULL CHECK (subtotal_cents >= 0),
                tax_cents BIGINT NOT NULL CHECK (tax_cents >= 0),
                total_cents BIGINT NOT NULL CHECK (total_cents = subtotal_cents + tax_cents),
                issued_at BIGINT NOT NULL,
                UNIQUE (account_id, series, sequence),
                UNIQUE (account_id, number)
            )",
            "CREATE INDEX credit_notes_account ON credit_notes (account_id, id)",
            "CREATE INDEX credit_notes_invoice ON credit_notes (invoice_id)",
            "CREATE INDEX credit_notes_charge ON credit_notes (charge_id)",
        ] {
            db.execute_unprepared(statement).await?;
        }
        let refund_matches = "EXISTS (SELECT 1 FROM refunds r WHERE r.id = NEW.refund_id \
             AND r.status = 'approved' AND r.amount_cents = NEW.total_cents \
             AND r.charge_id = NEW.charge_id AND r.account_id = NEW.account_id)";
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            db.execute_unprepared(&format!(
                "CREATE FUNCTION credit_notes_match_refund() RETURNS trigger AS $$
                 BEGIN
                   IF NOT {refund_matches} THEN
                     RAISE EXCEPTION 'credit_notes_match_refund';
                   END IF;
                   RETURN NEW;
                 END $$ LANGUAGE plpgsql"
            ))
            .await?;
            db.execute_unprepared(
                "CREATE TRIGGER credit_notes_match_refund BEFORE INSERT OR UPDATE ON credit_notes \
                 FOR EACH ROW EXECUTE FUNCTION credit_notes_match_refund()",
            )
            .await?;
        } else {
            db.execute_unprepared(&format!(
                "CREATE TRIGGER credit_notes_match_refund BEFORE INSERT ON credit_notes
                 WHEN NOT {refund_matches}
                 BEGIN SELECT RAISE(ABORT, 'credit_notes_match_refund'); END"
            ))
            .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP TABLE credit_notes").await?;
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            db.execute_unprepared("DROP FUNCTION credit_notes_match_refund()")
                .await?;
        }
        Ok(())
    }
}
