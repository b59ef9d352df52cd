//! Why: refunds, Nequi payment sources and charges an integrator can list.
//! - `payment_methods.kind`: `card` or `nequi`. A card is charged with `payment_method:
//!   {installments}`, a Nequi source without; the API shows it as `type`. Rows made before are
//!   cards. `checkout_sessions.attempt_source_kind` carries the same for a checkout's payment
//!   until the session completes and the payment method is made.
//! - `charge_attempts.refunded_cents` (approved refunds) and `refunding_cents` (the refund in
//!   flight): a refund reserves its amount with a conditional update, and a CHECK keeps
//!   `refunded + refunding <= amount` whatever the code does, so a charge can never be refunded
//!   beyond what it took.
//! - `refunds`: one row per refund asked for, `pending → approved | declined`, settled once by a
//!   conditional update like a charge. `refunds_one_in_flight` (a partial unique index) allows at
//!   most one pending refund per charge: Wompi's refunds carry no reference of ours, and with one
//!   in flight an unknown answer is resolved without doubt by asking for the transaction's
//!   refunds. `recheck_at` is when to ask the processor next about a pending one.
//! - `idx_charge_attempts_account_id` serves `GET /v1/charges` (newest first, per account).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: &[&str] = &[
    "ALTER TABLE payment_methods ADD COLUMN kind VARCHAR(8) NOT NULL DEFAULT 'card'",
    "ALTER TABLE checkout_sessions ADD COLUMN attempt_source_kind VARCHAR(8) NULL",
    "ALTER TABLE charge_attempts ADD COLUMN refunded_cents BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE charge_attempts ADD COLUMN refunding_cents BIGINT NOT NULL DEFAULT 0 \
     CHECK (refunding_cents >= 0 AND refunded_cents >= 0 \
            AND refunded_cents + refunding_cents <= amount_cents)",
    "CREATE TABLE refunds (\
       id VARCHAR(64) NOT NULL PRIMARY KEY, \
       account_id VARCHAR(64) NOT NULL, \
       charge_id VARCHAR(64) NOT NULL, \
       amount_cents BIGINT NOT NULL CHECK (amount_cents > 0), \
       reason TEXT NULL, \
       status VARCHAR(16) NOT NULL, \
       processor_refund_id VARCHAR(128) NULL, \
       processor_status VARCHAR(32) NULL, \
       processor_message TEXT NULL, \
       attempts INTEGER NOT NULL DEFAULT 0, \
       recheck_at BIGINT NULL, \
       created_at BIGINT NOT NULL, \
       updated_at BIGINT NOT NULL, \
       finalized_at BIGINT NULL)",
    "CREATE UNIQUE INDEX refunds_one_in_flight ON refunds (charge_id) WHERE status = 'pending'",
    "CREATE INDEX idx_refunds_charge ON refunds (charge_id)",
    "CREATE INDEX idx_refunds_recheck ON refunds (recheck_at) WHERE status = 'pending'",
    "CREATE INDEX idx_charge_attempts_account_id ON charge_attempts (account_id, id)",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in UP {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "DROP INDEX idx_charge_attempts_account_id",
            "DROP TABLE refunds",
            "ALTER TABLE charge_attempts DROP COLUMN refunding_cents",
            "ALTER TABLE charge_attempts DROP COLUMN refunded_cents",
            "ALTER TABLE checkout_sessions DROP COLUMN attempt_source_kind",
            "ALTER TABLE payment_methods DROP COLUMN kind",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }
}
