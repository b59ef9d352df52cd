//! Why: the MRR movement ledger (CONTRACT §16; issue 48). One row per change of a
//! subscription's MRR, written in the transaction that changes it; `subscriptions.mrr_cents`
//! keeps the MRR as last written, so that a write can tell whether it moved the MRR without
//! reading the ledger; `subscriptions.period_discount` the discount the current period was
//! billed with (a discount set or removed applies from the next period, and so does its
//! effect on MRR). `(subscription_id, version)` is unique: a subscription's row at one
//! version moved its MRR at most once. The words are closed as the other vocabularies are
//! (migration 000016), by CHECK in the table's own definition (SQLite keeps those too). The
//! opening movements of subscriptions that existed before this migration need the price
//! rule, which SQL cannot run: the service writes them at start (decision 0079).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 7] = [
    "ALTER TABLE subscriptions ADD COLUMN mrr_cents BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE subscriptions ADD COLUMN period_discount TEXT NULL",
    // Until now a row's discount was the one its current period took (as near as can be told).
    "UPDATE subscriptions SET period_discount = discount",
    "CREATE TABLE mrr_movements (
        id TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL,
        subscription_id TEXT NOT NULL,
        customer_id TEXT NOT NULL,
        type TEXT NOT NULL,
        mrr_delta_cents BIGINT NOT NULL,
        mrr_after_cents BIGINT NOT NULL,
        reason TEXT NOT NULL,
        occurred_at BIGINT NOT NULL,
        version BIGINT NOT NULL,
        CONSTRAINT mrr_movements_type_known CHECK (type IN
            ('new', 'expansion', 'contraction', 'churn', 'reactivation')),
        CONSTRAINT mrr_movements_reason_known CHECK (reason IN ('started', 'plan_change',
            'quantity', 'discount', 'paused', 'resumed', 'voluntary', 'failed_payment')),
        CONSTRAINT mrr_movements_moved CHECK (mrr_delta_cents <> 0 AND mrr_after_cents >= 0)
    )",
    "CREATE INDEX mrr_movements_by_time ON mrr_movements (account_id, occurred_at, id)",
    "CREATE UNIQUE INDEX mrr_movements_once_per_version \
     ON mrr_movements (subscription_id, version)",
    "CREATE INDEX mrr_movements_by_subscription ON mrr_movements (subscription_id, id)",
];

const DOWN: [&str; 3] = [
    "DROP TABLE mrr_movements",
    "ALTER TABLE subscriptions DROP COLUMN period_discount",
    "ALTER TABLE subscriptions DROP COLUMN mrr_cents",
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
