//! Why: every approved charge is invoiced with its IVA split out (CONTRACT §11, issue 34).
//!
//! - `catalog_items.tax_code` and `accounts.default_tax_code`: how a plan's or add-on's
//!   tax-inclusive price splits into base and IVA (`iva_19` until an integrator says otherwise).
//! - `charge_attempts.invoice_lines`: what a charge is for, line by line, decided with its
//!   amount when it begins (JSON; the lines add up to the amount); its invoice copies them.
//! - `invoice_series`: each account's next number per series, taken with `UPDATE … RETURNING`
//!   in the transaction that writes the invoice, so a rollback gives the number back and the
//!   series has no gap.
//! - `invoices`: one per approved charge (`charge_id` UNIQUE), numbered once per series
//!   (`UNIQUE (account_id, series, sequence)`), its sums held together by CHECKs.
//! - `customers`: the tax identity an invoice is made out to (kept on the invoice as issued);
//!   `accounts.invoicing`: the seller's (JSON: legal name, NIT, address, tax regime).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The closed vocabulary of tax codes (as migration 000016 closes the others).
pub const TAX_CODES: [&str; 4] = ["iva_19", "iva_5", "iva_exempt", "iva_excluded"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let codes = TAX_CODES
            .iter()
            .map(|code| format!("'{code}'"))
            .collect::<Vec<_>>()
            .join(", ");
        for (table, column) in [
            ("catalog_items", "tax_code"),
            ("accounts", "default_tax_code"),
        ] {
            db.execute_unprepared(&format!(
                "ALTER TABLE {table} ADD COLUMN {column} TEXT NOT NULL DEFAULT 'iva_19' \
                 CHECK ({column} IN ({codes}))"
            ))
            .await?;
        }
        for statement in [
            "ALTER TABLE charge_attempts ADD COLUMN invoice_lines TEXT NULL",
            "ALTER TABLE accounts ADD COLUMN invoicing TEXT NULL",
            "ALTER TABLE customers ADD COLUMN tax_id_type TEXT NULL",
            "ALTER TABLE customers ADD COLUMN tax_id_number TEXT NULL",
            "ALTER TABLE customers ADD COLUMN legal_name TEXT NULL",
            "ALTER TABLE customers ADD COLUMN address TEXT NULL",
            "CREATE TABLE invoice_series (
                account_id TEXT NOT NULL REFERENCES accounts (id),
                series TEXT NOT NULL,
                prefix TEXT NOT NULL,
                next_number BIGINT NOT NULL CHECK (next_number >= 1),
                PRIMARY KEY (account_id, series)
            )",
            "CREATE TABLE invoices (
                id TEXT NOT NULL PRIMARY KEY,
                account_id TEXT NOT NULL REFERENCES accounts (id),
                series TEXT NOT NULL,
                sequence BIGINT NOT NULL CHECK (sequence >= 1),
                number TEXT NOT NULL,
                charge_id TEXT NOT NULL UNIQUE REFERENCES charge_attempts (id),
                subscription_id TEXT NULL,
                customer_id TEXT NOT NULL,
                customer TEXT NOT NULL,
                lines TEXT NOT NULL,
                tax_breakdown TEXT NOT NULL,
                subtotal_cents BIGINT NOT NULL CHECK (subtotal_cents >= 0),
                tax_cents BIGINT NOT NULL CHECK (tax_cents >= 0),
                total_cents BIGINT NOT NULL CHECK (total_cents = subtotal_cents + tax_cents),
                hosted_token TEXT NOT NULL UNIQUE,
                issued_at BIGINT NOT NULL,
                UNIQUE (account_id, series, sequence),
                UNIQUE (account_id, number)
            )",
            "CREATE INDEX invoices_account ON invoices (account_id, id)",
            "CREATE INDEX invoices_subscription ON invoices (subscription_id)",
            "CREATE INDEX invoices_customer ON invoices (customer_id)",
        ] {
            db.execute_unprepared(statement).await?;
        }
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            // An invoice's total is its charge's amount, and only an approved charge has one.
            db.execute_unprepared(
                "CREATE FUNCTION invoices_match_charge() RETURNS trigger AS $$
                 BEGIN
                   IF NOT EXISTS (SELECT 1 FROM charge_attempts c WHERE c.id = NEW.charge_id
                       AND c.status = 'approved' AND c.amount_cents = NEW.total_cents
                       AND c.account_id = NEW.account_id) THEN
                     RAISE EXCEPTION 'invoices_match_charge';
                   END IF;
                   RETURN NEW;
                 END $$ LANGUAGE plpgsql",
            )
            .await?;
            db.execute_unprepared(
                "CREATE TRIGGER invoices_match_charge BEFORE INSERT OR UPDATE ON invoices \
                 FOR EACH ROW EXECUTE FUNCTION invoices_match_charge()",
            )
            .await?;
        } else {
            db.execute_unprepared(
                "CREATE TRIGGER invoices_match_charge BEFORE INSERT ON invoices
                 WHEN NOT EXISTS (SELECT 1 FROM charge_attempts c WHERE c.id = NEW.charge_id
                     AND c.status = 'approved' AND c.amount_cents = NEW.total_cents
                     AND c.account_id = NEW.account_id)
                 BEGIN SELECT RAISE(ABORT, 'invoices_match_charge'); END",
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            db.execute_unprepared("DROP TABLE invoices").await?;
            db.execute_unprepared("DROP FUNCTION invoices_match_charge()")
                .await?;
        } else {
            db.execute_unprepared("DROP TABLE invoices").await?;
        }
        for statement in [
            "DROP TABLE invoice_series",
            "ALTER TABLE customers DROP COLUMN address",
            "ALTER TABLE customers DROP COLUMN legal_name",
            "ALTER TABLE customers DROP COLUMN tax_id_number",
            "ALTER TABLE customers DROP COLUMN tax_id_type",
            "ALTER TABLE charge_attempts DROP COLUMN invoice_lines",
            "ALTER TABLE accounts DROP COLUMN invoicing",
            "ALTER TABLE accounts DROP COLUMN default_tax_code",
            "ALTER TABLE catalog_items DROP COLUMN tax_code",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }
}
