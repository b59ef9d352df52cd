//! Why: merchants launch with a discount and sell per seat (CONTRACT §14, issue 36).
//!
//! - `coupons`: the money terms (percent or amount off, how many billed periods, which plans and
//!   add-ons), and its redemptions counted by a conditional `UPDATE` that a CHECK backs: two
//!   customers racing for the last redemption cannot both win.
//! - `promotion_codes`: what a customer types, matched case-insensitively (`code_key`, the
//!   lowercase code, unique among an account's active codes), with limits of its own.
//! - `subscriptions.quantity` (what later periods bill) and `period_quantity` (what the current
//!   period was billed at: a fall applies from the next period), and `discount` (JSON of
//!   `domain::discount::Discount`: the coupon's terms as redeemed, the periods left).
//! - `invoices`: `discount_cents`, and a period whose total is 0 has an invoice without a
//!   charge (`charge_id` NULL, then `total_cents` 0), one per subscription and period start
//!   (`period_start`). On SQLite a column's NOT NULL cannot be dropped, so the table is
//!   rebuilt (with foreign keys off on the one writer connection, as SQLite's ALTER TABLE
//!   documentation prescribes), keeping its rows, indexes and trigger.
//! - A period is paid once: triggers refuse an invoice of nothing beside a live charge of its
//!   period, and a period charge beside an invoice of nothing (the unique indexes of each
//!   table cannot see the other).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

const COUPON_TABLES: [&str; 5] = [
    "CREATE TABLE coupons (
        id TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        name TEXT NOT NULL,
        percent_off_bps BIGINT NULL CHECK (percent_off_bps BETWEEN 1 AND 10000),
        amount_off_cents BIGINT NULL CHECK (amount_off_cents >= 1),
        duration TEXT NOT NULL CHECK (duration IN ('once', 'repeating', 'forever')),
        duration_in_periods BIGINT NULL CHECK (duration_in_periods >= 1),
        applies_to TEXT NULL,
        max_redemptions BIGINT NULL CHECK (max_redemptions >= 1),
        times_redeemed BIGINT NOT NULL DEFAULT 0 CHECK (times_redeemed >= 0),
        redeem_by BIGINT NULL,
        active BOOLEAN NOT NULL,
        metadata TEXT NULL,
        created_at BIGINT NOT NULL,
        CHECK ((percent_off_bps IS NULL) <> (amount_off_cents IS NULL)),
        CHECK ((duration = 'repeating') = (duration_in_periods IS NOT NULL)),
        CHECK (max_redemptions IS NULL OR times_redeemed <= max_redemptions)
    )",
    "CREATE INDEX coupons_account ON coupons (account_id, id)",
    "CREATE TABLE promotion_codes (
        id TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        coupon_id TEXT NOT NULL REFERENCES coupons (id),
        code TEXT NOT NULL,
        code_key TEXT NOT NULL,
        active BOOLEAN NOT NULL,
        max_redemptions BIGINT NULL CHECK (max_redemptions >= 1),
        times_redeemed BIGINT NOT NULL DEFAULT 0 CHECK (times_redeemed >= 0),
        expires_at BIGINT NULL,
        customer_id TEXT NULL REFERENCES customers (id),
        first_time_only BOOLEAN NOT NULL,
        metadata TEXT NULL,
        created_at BIGINT NOT NULL,
        CHECK (max_redemptions IS NULL OR times_redeemed <= max_redemptions)
    )",
    "CREATE INDEX promotion_codes_account ON promotion_codes (account_id, id)",
    "CREATE UNIQUE INDEX promotion_codes_active_code ON promotion_codes (account_id, code_key) \
     WHERE active",
];

const SUBSCRIPTION_COLUMNS: [&str; 8] = [
    "ALTER TABLE subscriptions ADD COLUMN quantity BIGINT NOT NULL DEFAULT 1 CHECK (quantity >= 1)",
    "ALTER TABLE subscriptions ADD COLUMN period_quantity BIGINT NOT NULL DEFAULT 1 \
     CHECK (period_quantity >= 1)",
    "ALTER TABLE subscriptions ADD COLUMN discount TEXT NULL",
    // A checkout sells `quantity` seats, with the integrator's coupon or code (`redeem`, JSON
    // of `store::coupons::Redeem`) or a code field on the page; the discount its payment's
    // attempt redeemed (`attempt_discount`) is given back if that payment is declined.
    "ALTER TABLE checkout_sessions ADD COLUMN quantity BIGINT NOT NULL DEFAULT 1 \
     CHECK (quantity >= 1)",
    "ALTER TABLE checkout_sessions ADD COLUMN redeem TEXT NULL",
    "ALTER TABLE checkout_sessions ADD COLUMN subtotal_cents BIGINT NULL",
    "ALTER TABLE checkout_sessions ADD COLUMN allow_promotion_codes BOOLEAN NOT NULL DEFAULT FALSE",
    "ALTER TABLE checkout_sessions ADD COLUMN attempt_discount TEXT NULL",
];

/// The invoices table as it is from this migration on (SQLite's rebuild creates it so).
const INVOICES: &str = "CREATE TABLE invoices (
    id TEXT NOT NULL PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    series TEXT NOT NULL,
    sequence BIGINT NOT NULL CHECK (sequence >= 1),
    number TEXT NOT NULL,
    charge_id TEXT NULL UNIQUE REFERENCES charge_attempts (id),
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
    discount_cents BIGINT NOT NULL DEFAULT 0 CHECK (discount_cents >= 0),
    period_start BIGINT NULL,
    UNIQUE (account_id, series, sequence),
    UNIQUE (account_id, number),
    CHECK (charge_id IS NOT NULL OR (total_cents = 0 AND subscription_id IS NOT NULL
        AND period_start IS NOT NULL))
)";

/// One invoice of nothing per subscription and period: a period is documented once.
const ZERO_INVOICE_INDEX: &str = "CREATE UNIQUE INDEX invoices_zero_period \
     ON invoices (subscription_id, period_start) WHERE charge_id IS NULL";

const INVOICE_INDEXES: [&str; 3] = [
    "CREATE INDEX invoices_account ON invoices (account_id, id)",
    "CREATE INDEX invoices_subscription ON invoices (subscription_id)",
    "CREATE INDEX invoices_customer ON invoices (customer_id)",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in COUPON_TABLES.iter().chain(&SUBSCRIPTION_COLUMNS) {
            db.execute_unprepared(statement).await?;
        }
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            for statement in [
                "ALTER TABLE invoices ALTER COLUMN charge_id DROP NOT NULL",
                "ALTER TABLE invoices ADD COLUMN discount_cents BIGINT NOT NULL DEFAULT 0 \
                 CHECK (discount_cents >= 0)",
                "ALTER TABLE invoices ADD COLUMN period_start BIGINT NULL",
                "ALTER TABLE invoices ADD CONSTRAINT invoices_without_charge CHECK \
                 (charge_id IS NOT NULL OR (total_cents = 0 AND subscription_id IS NOT NULL \
                  AND period_start IS NOT NULL))",
                ZERO_INVOICE_INDEX,
                // An invoice with a charge matches it; one without is of nothing.
                "CREATE OR REPLACE FUNCTION invoices_match_charge() RETURNS trigger AS $$
                 BEGIN
                   IF NEW.charge_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM charge_attempts c
                       WHERE c.id = NEW.charge_id AND c.status = 'approved'
                       AND c.amount_cents = NEW.total_cents
                       AND c.account_id = NEW.account_id) THEN
                     RAISE EXCEPTION 'invoices_match_charge';
                   END IF;
                   RETURN NEW;
                 END $$ LANGUAGE plpgsql",
                "CREATE FUNCTION free_period_paid_once() RETURNS trigger AS $$
                 BEGIN
                   IF NEW.charge_id IS NULL AND EXISTS (SELECT 1 FROM charge_attempts c
                       WHERE c.subscription_id = NEW.subscription_id
                       AND c.period_start = NEW.period_start
                       AND c.status IN ('pending', 'approved')) THEN
                     RAISE EXCEPTION 'periods_paid_once';
                   END IF;
                   RETURN NEW;
                 END $$ LANGUAGE plpgsql",
                "CREATE FUNCTION charged_period_paid_once() RETURNS trigger AS $$
                 BEGIN
                   IF NEW.period_start IS NOT NULL AND EXISTS (SELECT 1 FROM invoices i
                       WHERE i.charge_id IS NULL AND i.subscription_id = NEW.subscription_id
                       AND i.period_start = NEW.period_start) THEN
                     RAISE EXCEPTION 'periods_paid_once';
                   END IF;
                   RETURN NEW;
                 END $$ LANGUAGE plpgsql",
                "CREATE TRIGGER invoices_period_paid_once BEFORE INSERT ON invoices \
                 FOR EACH ROW EXECUTE FUNCTION free_period_paid_once()",
                "CREATE TRIGGER charge_attempts_period_paid_once BEFORE INSERT ON charge_attempts \
                 FOR EACH ROW EXECUTE FUNCTION charged_period_paid_once()",
            ] {
                db.execute_unprepared(statement).await?;
            }
            return Ok(());
        }
        // SQLite: the documented rebuild, in one transaction, foreign keys off around it (a
        // PRAGMA that only takes effect outside a transaction; the writer is one connection).
        db.execute_unprepared("PRAGMA foreign_keys = OFF").await?;
        let rebuilt = rebuild_sqlite_invoices(db).await;
        db.execute_unprepared("PRAGMA foreign_keys = ON").await?;
        rebuilt
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "DROP TABLE promotion_codes",
            "DROP TABLE coupons",
            "ALTER TABLE checkout_sessions DROP COLUMN attempt_discount",
            "ALTER TABLE checkout_sessions DROP COLUMN allow_promotion_codes",
            "ALTER TABLE checkout_sessions DROP COLUMN redeem",
            "ALTER TABLE checkout_sessions DROP COLUMN subtotal_cents",
            "ALTER TABLE checkout_sessions DROP COLUMN quantity",
            "ALTER TABLE subscriptions DROP COLUMN discount",
            "ALTER TABLE subscriptions DROP COLUMN period_quantity",
            "ALTER TABLE subscriptions DROP COLUMN quantity",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }
}

async fn rebuild_sqlite_invoices(db: &SchemaManagerConnection<'_>) -> Result<(), DbErr> {
    let mut statements = vec![
        "BEGIN".to_owned(),
        INVOICES.replace("CREATE TABLE invoices", "CREATE TABLE invoices_rebuilt"),
        "INSERT INTO invoices_rebuilt (id, account_id, series, sequence, number, charge_id, \
         subscription_id, customer_id, customer, lines, tax_breakdown, subtotal_cents, \
         tax_cents, total_cents, hosted_token, issued_at) \
         SELECT id, account_id, series, sequence, number, charge_id, subscription_id, \
         customer_id, customer, lines, tax_breakdown, subtotal_cents, tax_cents, total_cents, \
         hosted_token, issued_at FROM invoices"
            .to_owned(),
        "DROP TABLE invoices".to_owned(),
        "ALTER TABLE invoices_rebuilt RENAME TO invoices".to_owned(),
    ];
    statements.extend(INVOICE_INDEXES.iter().map(|s| (*s).to_owned()));
    statements.push(ZERO_INVOICE_INDEX.to_owned());
    statements.push(
        "CREATE TRIGGER invoices_period_paid_once BEFORE INSERT ON invoices
         WHEN NEW.charge_id IS NULL AND EXISTS (SELECT 1 FROM charge_attempts c
             WHERE c.subscription_id = NEW.subscription_id AND c.period_start = NEW.period_start
             AND c.status IN ('pending', 'approved'))
         BEGIN SELECT RAISE(ABORT, 'periods_paid_once'); END"
            .to_owned(),
    );
    statements.push(
        "CREATE TRIGGER charge_attempts_period_paid_once BEFORE INSERT ON charge_attempts
         WHEN NEW.period_start IS NOT NULL AND EXISTS (SELECT 1 FROM invoices i
             WHERE i.charge_id IS NULL AND i.subscription_id = NEW.subscription_id
             AND i.period_start = NEW.period_start)
         BEGIN SELECT RAISE(ABORT, 'periods_paid_once'); END"
            .to_owned(),
    );
    statements.push(
        "CREATE TRIGGER invoices_match_charge BEFORE INSERT ON invoices
         WHEN NEW.charge_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM charge_attempts c
             WHERE c.id = NEW.charge_id AND c.status = 'approved'
             AND c.amount_cents = NEW.total_cents AND c.account_id = NEW.account_id)
         BEGIN SELECT RAISE(ABORT, 'invoices_match_charge'); END"
            .to_owned(),
    );
    for statement in &statements {
        if let Err(err) = db.execute_unprepared(statement).await {
            let _ = db.execute_unprepared("ROLLBACK").await;
            return Err(err);
        }
    }
    // Every credit note still names an invoice that exists.
    let broken = db
        .query_all_raw(sea_orm_migration::sea_orm::Statement::from_string(
            DatabaseBackend::Sqlite,
            "PRAGMA foreign_key_check",
        ))
        .await?;
    if !broken.is_empty() {
        let _ = db.execute_unprepared("ROLLBACK").await;
        return Err(DbErr::Migration(
            "rebuilding invoices broke a foreign key".into(),
        ));
    }
    db.execute_unprepared("COMMIT").await?;
    Ok(())
}
