//! Why: a subscription's actor asks, on every timer and outcome, for that subscription's pending
//! charge and whether a period is already paid. Those queries name the subscription but not the
//! account, so the (account_id, subscription_id) index of 000002 cannot serve them and SQLite
//! fell back to the status index: a scan of every pending (or approved) charge, which made a
//! burst of N renewals cost O(N²). This index serves both lookups.

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum ChargeAttempts {
    Table,
    SubscriptionId,
    PeriodStart,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        index(
            manager,
            "idx_charge_attempts_subscription_period",
            ChargeAttempts::Table,
            [ChargeAttempts::SubscriptionId, ChargeAttempts::PeriodStart],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_charge_attempts_subscription_period")
                    .table(ChargeAttempts::Table)
                    .to_owned(),
            )
            .await
    }
}
