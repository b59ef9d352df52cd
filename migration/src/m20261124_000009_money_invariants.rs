//! Why: the money invariants are enforced by the database, not only by actor logic, so that no
//! bug, race or second process can break them.
//! - `charge_attempts_live_period`: at most one pending-or-approved charge per (subscription,
//!   period start). A period can then never be paid twice, nor charged while its charge is in
//!   flight, whoever tries (a partial unique index; both databases have them).
//! - `subscriptions.version`: every write of a subscription is conditional on the version it
//!   read (`UPDATE … WHERE version = ?`, then `version + 1`); a lost race fails instead of
//!   silently overwriting another writer's change.
//! - `subscriptions.period_cycle`: the cycle the current period was billed at. A cycle change
//!   shows at once in `cycle`, but the current period keeps its length and its prices until it
//!   ends (proration prices it at this cycle); before, the current period's cycle had to be
//!   guessed and renewals in flight re-computed it with the new one. Backfilled from the old
//!   `next_cycle` (set only while a change was pending).
//! - `charge_attempts.pending_change`: what an action waits on its charge for (an upgrade's new
//!   plan and cycle, an add-on to attach), applied only when the charge is approved, so a
//!   declined or unaffordable upgrade leaves nothing behind.
//!
//! The balance's own `CHECK (available_cents >= 0)` exists since the first migration.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum Subscriptions {
    Table,
    Version,
    PeriodCycle,
}

#[derive(DeriveIden, Clone, Copy)]
enum ChargeAttempts {
    Table,
    PendingChange,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Subscriptions::Table)
                    .add_column(
                        ColumnDef::new(Subscriptions::Version)
                            .big_integer()
                            .not_null()
                            .default(0),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Subscriptions::Table)
                    .add_column(
                        ColumnDef::new(Subscriptions::PeriodCycle)
                            .string()
                            .not_null()
                            .default("monthly"),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ChargeAttempts::Table)
                    .add_column(ColumnDef::new(ChargeAttempts::PendingChange).text().null())
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared(
            "UPDATE subscriptions SET period_cycle = CASE \
               WHEN next_cycle IS NULL THEN cycle \
               WHEN next_cycle = 'annual' THEN 'monthly' ELSE 'annual' END",
        )
        .await?;
        db.execute_unprepared(
            "CREATE UNIQUE INDEX charge_attempts_live_period \
             ON charge_attempts (subscription_id, period_start) \
             WHERE period_start IS NOT NULL AND status IN ('pending', 'approved')",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP INDEX charge_attempts_live_period")
            .await?;
        for (table, column) in [
            ("subscriptions", "version"),
            ("subscriptions", "period_cycle"),
            ("charge_attempts", "pending_change"),
        ] {
            db.execute_unprepared(&format!("ALTER TABLE {table} DROP COLUMN {column}"))
                .await?;
        }
        Ok(())
    }
}
