//! Payment methods, charge attempts and the processor's incoming events.
//!
//! Why `reference` is unique: it is what the processor deduplicates on, so one ChargeAttempt
//! can never become two processor transactions. Why processor events are keyed by checksum:
//! the processor may deliver one event many times; the first copy is the one that counts.

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum PaymentMethods {
    Table,
    Id,
    AccountId,
    CustomerId,
    ProcessorPaymentSourceId,
    Brand,
    Last4,
    CreatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum ChargeAttempts {
    Table,
    Id,
    AccountId,
    SubscriptionId,
    CustomerId,
    PaymentMethodId,
    AmountCents,
    FeeCents,
    Reference,
    ProcessorTransactionId,
    /// pending, approved, declined, error, voided.
    Status,
    ProcessorStatus,
    ProcessorMessage,
    /// Why the charge was made: renewal, first, retry, proration, manual, checkout.
    Purpose,
    /// For renewals: the start of the period paid, so one period is never charged twice.
    PeriodStart,
    CreatedAt,
    UpdatedAt,
    FinalizedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum ProcessorEvents {
    Table,
    Checksum,
    AccountId,
    EventType,
    TransactionId,
    Reference,
    Status,
    Body,
    ReceivedAt,
    ProcessedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(PaymentMethods::Table)
                    .col(string(PaymentMethods::Id).primary_key())
                    .col(string(PaymentMethods::AccountId))
                    .col(string(PaymentMethods::CustomerId))
                    .col(big_integer(PaymentMethods::ProcessorPaymentSourceId))
                    .col(string_null(PaymentMethods::Brand))
                    .col(string_null(PaymentMethods::Last4))
                    .col(big_integer(PaymentMethods::CreatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_payment_methods_customer",
            PaymentMethods::Table,
            [
                PaymentMethods::AccountId,
                PaymentMethods::CustomerId,
                PaymentMethods::Id,
            ],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(ChargeAttempts::Table)
                    .col(string(ChargeAttempts::Id).primary_key())
                    .col(string(ChargeAttempts::AccountId))
                    .col(string_null(ChargeAttempts::SubscriptionId))
                    .col(string(ChargeAttempts::CustomerId))
                    .col(string(ChargeAttempts::PaymentMethodId))
                    .col(big_integer(ChargeAttempts::AmountCents))
                    .col(big_integer(ChargeAttempts::FeeCents))
                    .col(string_uniq(ChargeAttempts::Reference))
                    .col(string_null(ChargeAttempts::ProcessorTransactionId))
                    .col(string(ChargeAttempts::Status))
                    .col(string_null(ChargeAttempts::ProcessorStatus))
                    .col(text_null(ChargeAttempts::ProcessorMessage))
                    .col(string(ChargeAttempts::Purpose))
                    .col(big_integer_null(ChargeAttempts::PeriodStart))
                    .col(big_integer(ChargeAttempts::CreatedAt))
                    .col(big_integer(ChargeAttempts::UpdatedAt))
                    .col(big_integer_null(ChargeAttempts::FinalizedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_charge_attempts_subscription",
            ChargeAttempts::Table,
            [
                ChargeAttempts::AccountId,
                ChargeAttempts::SubscriptionId,
                ChargeAttempts::Id,
            ],
        )
        .await?;
        index(
            manager,
            "idx_charge_attempts_transaction",
            ChargeAttempts::Table,
            [ChargeAttempts::ProcessorTransactionId],
        )
        .await?;
        index(
            manager,
            "idx_charge_attempts_status",
            ChargeAttempts::Table,
            [ChargeAttempts::Status],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(ProcessorEvents::Table)
                    .col(string(ProcessorEvents::Checksum).primary_key())
                    .col(string(ProcessorEvents::AccountId))
                    .col(string(ProcessorEvents::EventType))
                    .col(string_null(ProcessorEvents::TransactionId))
                    .col(string_null(ProcessorEvents::Reference))
                    .col(string_null(ProcessorEvents::Status))
                    .col(text(ProcessorEvents::Body))
                    .col(big_integer(ProcessorEvents::ReceivedAt))
                    .col(big_integer_null(ProcessorEvents::ProcessedAt))
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            ProcessorEvents::Table.into_iden(),
            ChargeAttempts::Table.into_iden(),
            PaymentMethods::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
