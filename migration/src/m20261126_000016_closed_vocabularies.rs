//! Why: statuses, cycles and charge purposes are text columns whose every reader maps a value it
//! does not know to something (issue 33: an unreadable subscription status read as `canceled`).
//! The database now refuses any value outside each column's vocabulary, so a reader never meets
//! one: PostgreSQL with CHECK constraints, SQLite (which cannot add one to an existing table)
//! with triggers that abort the insert or update. The vocabularies are the service's
//! (`domain::subscription::Status`, `domain::time::Cycle`, `domain::charge_purpose`, the charge
//! and refund statuses of `store`); a test inserts each value and an unknown one on both
//! databases.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Each closed column: table, column, its values.
pub const VOCABULARIES: [(&str, &str, &[&str]); 6] = [
    (
        "subscriptions",
        "status",
        &[
            "trialing",
            "active",
            "past_due",
            "paused",
            "paused_insufficient_balance",
            "canceled",
        ],
    ),
    ("subscriptions", "cycle", &["monthly", "annual"]),
    ("subscriptions", "period_cycle", &["monthly", "annual"]),
    (
        "charge_attempts",
        "status",
        &["pending", "approved", "declined", "voided", "error"],
    ),
    (
        "charge_attempts",
        "purpose",
        &[
            "first",
            "renewal",
            "retry",
            "manual",
            "proration",
            "addon_proration",
            "checkout",
        ],
    ),
    ("refunds", "status", &["pending", "approved", "declined"]),
];

fn listed(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("'{v}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for (table, column, values) in VOCABULARIES {
            let values = listed(values);
            if manager.get_database_backend() == DatabaseBackend::Postgres {
                db.execute_unprepared(&format!(
                    "ALTER TABLE {table} ADD CONSTRAINT {table}_{column}_known \
                     CHECK ({column} IN ({values}))"
                ))
                .await?;
            } else {
                let events = [
                    ("insert", "INSERT".to_owned()),
                    ("update", format!("UPDATE OF {column}")),
                ];
                for (when, event) in events {
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER {table}_{column}_known_{when} BEFORE {event} ON {table} \
                         WHEN NEW.{column} NOT IN ({values}) \
                         BEGIN SELECT RAISE(ABORT, 'CHECK constraint failed: {table}_{column}_known'); END"
                    ))
                    .await?;
                }
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for (table, column, _) in VOCABULARIES {
            if manager.get_database_backend() == DatabaseBackend::Postgres {
                db.execute_unprepared(&format!(
                    "ALTER TABLE {table} DROP CONSTRAINT {table}_{column}_known"
                ))
                .await?;
            } else {
                for when in ["insert", "update"] {
                    db.execute_unprepared(&format!("DROP TRIGGER {table}_{column}_known_{when}"))
                        .await?;
                }
            }
        }
        Ok(())
    }
}
