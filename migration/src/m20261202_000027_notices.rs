//! Why: customers hear from the merchant (CONTRACT §15; issue 47). Each account keeps its
//! notice settings as JSON (`accounts.notices`; NULL: nothing is sent). Customers gain a phone
//! and whether they opted in to WhatsApp. A notice is a row written in the transaction of the
//! event that causes it; `(account_id, cause, channel)` is unique, so a cause gives at most one
//! notice a channel however often its event is written or replayed. `due_at` is when the
//! delivery worker takes it next (its `scheduled_for` first, then its backoff); `claim` lets
//! one worker at a time send it. A failed payment's notice links to `/pay/<token>`: the token's
//! SHA-256 in `pay_links`, which opens the portal's card update for its subscription for as
//! long as that subscription is `past_due`.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 7] = [
    "ALTER TABLE accounts ADD COLUMN notices TEXT NULL",
    "ALTER TABLE customers ADD COLUMN phone TEXT NULL",
    "ALTER TABLE customers ADD COLUMN whatsapp_opt_in BOOLEAN NOT NULL DEFAULT FALSE",
    "CREATE TABLE notices (
        id TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        channel TEXT NOT NULL,
        cause TEXT NOT NULL,
        customer_id TEXT NOT NULL,
        subscription_id TEXT NULL,
        invoice_id TEXT NULL,
        charge_id TEXT NULL,
        recipient TEXT NULL,
        subject TEXT NULL,
        status TEXT NOT NULL,
        scheduled_for BIGINT NOT NULL,
        sent_at BIGINT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT NULL,
        suppressed_reason TEXT NULL,
        message_id TEXT NULL,
        due_at BIGINT NULL,
        claim TEXT NULL,
        created_at BIGINT NOT NULL,
        CONSTRAINT notices_status CHECK (status IN ('scheduled', 'sent', 'failed', 'suppressed'))
    )",
    "CREATE UNIQUE INDEX notices_once_per_cause ON notices (account_id, cause, channel)",
    "CREATE INDEX notices_due ON notices (due_at) WHERE due_at IS NOT NULL",
    "CREATE TABLE pay_links (
        token_hash TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL,
        subscription_id TEXT NOT NULL,
        customer_id TEXT NOT NULL,
        created_at BIGINT NOT NULL
    )",
];

const DOWN: [&str; 5] = [
    "DROP TABLE pay_links",
    "DROP TABLE notices",
    "ALTER TABLE customers DROP COLUMN whatsapp_opt_in",
    "ALTER TABLE customers DROP COLUMN phone",
    "ALTER TABLE accounts DROP COLUMN notices",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(manager, &DOWN).await
    }
}
