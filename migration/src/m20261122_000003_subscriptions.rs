//! Subscriptions, their add-ons, and the events outbox.
//!
//! Why `due_at`: every timer of a subscription (trial end, renewal, dunning retry, period-end
//! cancellation) is one instant in this indexed column, in the account's clock; the scheduler
//! reads only the soon-due window of it. `NULL` means nothing is scheduled (paused, canceled).
//! Why `events` is written with the change: the outbox makes "no change without its event, no
//! event without its change" a property of one transaction.

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum Subscriptions {
    Table,
    Id,
    AccountId,
    CustomerId,
    PlanId,
    Cycle,
    Status,
    CurrentPeriodStart,
    CurrentPeriodEnd,
    NextChargeDate,
    DefaultPaymentMethodId,
    TrialEnd,
    CancelAtPeriodEnd,
    FailedAttempts,
    FirstFailureAt,
    Metadata,
    /// The instant periods are counted from, and how many periods have passed since.
    Anchor,
    PeriodIndex,
    /// Set by a cycle change: the next renewal starts a new period anchor.
    NextCycle,
    DueAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum SubscriptionAddons {
    Table,
    SubscriptionId,
    AddonId,
    AccountId,
    AttachedAt,
    /// Set by detach: the add-on stops billing from the next period.
    DetachAtPeriodEnd,
}

#[derive(DeriveIden, Clone, Copy)]
enum Events {
    Table,
    Id,
    AccountId,
    Type,
    SubscriptionId,
    Body,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Subscriptions::Table)
                    .col(string(Subscriptions::Id).primary_key())
                    .col(string(Subscriptions::AccountId))
                    .col(string(Subscriptions::CustomerId))
                    .col(string(Subscriptions::PlanId))
                    .col(string(Subscriptions::Cycle))
                    .col(string(Subscriptions::Status))
                    .col(big_integer(Subscriptions::CurrentPeriodStart))
                    .col(big_integer(Subscriptions::CurrentPeriodEnd))
                    .col(big_integer(Subscriptions::NextChargeDate))
                    .col(string(Subscriptions::DefaultPaymentMethodId))
                    .col(big_integer_null(Subscriptions::TrialEnd))
                    .col(boolean(Subscriptions::CancelAtPeriodEnd))
                    .col(integer(Subscriptions::FailedAttempts))
                    .col(big_integer_null(Subscriptions::FirstFailureAt))
                    .col(text_null(Subscriptions::Metadata))
                    .col(big_integer(Subscriptions::Anchor))
                    .col(integer(Subscriptions::PeriodIndex))
                    .col(string_null(Subscriptions::NextCycle))
                    .col(big_integer_null(Subscriptions::DueAt))
                    .col(big_integer(Subscriptions::CreatedAt))
                    .col(big_integer(Subscriptions::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_subscriptions_account",
            Subscriptions::Table,
            [Subscriptions::AccountId, Subscriptions::Id],
        )
        .await?;
        index(
            manager,
            "idx_subscriptions_due",
            Subscriptions::Table,
            [Subscriptions::DueAt, Subscriptions::Id],
        )
        .await?;
        index(
            manager,
            "idx_subscriptions_plan",
            Subscriptions::Table,
            [Subscriptions::PlanId],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(SubscriptionAddons::Table)
                    .col(string(SubscriptionAddons::SubscriptionId))
                    .col(string(SubscriptionAddons::AddonId))
                    .col(string(SubscriptionAddons::AccountId))
                    .col(big_integer(SubscriptionAddons::AttachedAt))
                    .col(boolean(SubscriptionAddons::DetachAtPeriodEnd))
                    .primary_key(
                        Index::create()
                            .col(SubscriptionAddons::SubscriptionId)
                            .col(SubscriptionAddons::AddonId),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Events::Table)
                    .col(string(Events::Id).primary_key())
                    .col(string(Events::AccountId))
                    .col(string(Events::Type))
                    .col(string_null(Events::SubscriptionId))
                    .col(text(Events::Body))
                    .col(big_integer(Events::CreatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_events_account",
            Events::Table,
            [Events::AccountId, Events::Id],
        )
        .await?;
        index(
            manager,
            "idx_events_subscription",
            Events::Table,
            [Events::SubscriptionId, Events::Id],
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            Events::Table.into_iden(),
            SubscriptionAddons::Table.into_iden(),
            Subscriptions::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
