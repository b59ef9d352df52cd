//! Checkout sessions: what the hosted page sells, to whom, until when, and the one payment
//! attempt in flight.
//!
//! Why `attempt_charge_id`: it is the session-level lock that makes a repeated complete never
//! charge twice. An attempt claims the session with `UPDATE … WHERE status = 'open' AND
//! attempt_charge_id IS NULL` in the same transaction that reserves the fee and records the
//! charge; a second submission finds it set and waits for that charge instead of starting one.
//! A decline clears it (the customer may try another card); an approval completes the session
//! in the same transaction that settles the charge and creates the customer, payment method
//! and subscription. The `attempt_*` columns keep what that flow needs (the processor payment
//! source, the customer's name and e-mail, the ids to give the new rows), so any path that
//! learns the outcome (the ingress, the reconciler, the page's own request) can finish it.
//! Why `amount_cents`: the price is fixed when the session is created, as the page shows it.

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum CheckoutSessions {
    Table,
    Id,
    AccountId,
    PlanId,
    Cycle,
    AmountCents,
    /// An existing customer; NULL when the session creates one from `customer_email`/`_name`.
    CustomerId,
    CustomerEmail,
    CustomerName,
    SuccessUrl,
    CancelUrl,
    Metadata,
    /// open, complete, expired.
    Status,
    /// In the account's clock.
    ExpiresAt,
    SubscriptionId,
    AttemptChargeId,
    AttemptCustomerId,
    AttemptPaymentMethodId,
    AttemptPaymentSourceId,
    AttemptEmail,
    AttemptName,
    AttemptBrand,
    AttemptLast4,
    /// The processor's card token of the attempt: a token is paid with once.
    AttemptCardToken,
    LastError,
    CreatedAt,
    UpdatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(CheckoutSessions::Table)
                    .col(string(CheckoutSessions::Id).primary_key())
                    .col(string(CheckoutSessions::AccountId))
                    .col(string(CheckoutSessions::PlanId))
                    .col(string(CheckoutSessions::Cycle))
                    .col(big_integer(CheckoutSessions::AmountCents))
                    .col(string_null(CheckoutSessions::CustomerId))
                    .col(string_null(CheckoutSessions::CustomerEmail))
                    .col(string_null(CheckoutSessions::CustomerName))
                    .col(text_null(CheckoutSessions::SuccessUrl))
                    .col(text_null(CheckoutSessions::CancelUrl))
                    .col(text_null(CheckoutSessions::Metadata))
                    .col(string(CheckoutSessions::Status))
                    .col(big_integer(CheckoutSessions::ExpiresAt))
                    .col(string_null(CheckoutSessions::SubscriptionId))
                    .col(string_null(CheckoutSessions::AttemptChargeId))
                    .col(string_null(CheckoutSessions::AttemptCustomerId))
                    .col(string_null(CheckoutSessions::AttemptPaymentMethodId))
                    .col(big_integer_null(CheckoutSessions::AttemptPaymentSourceId))
                    .col(string_null(CheckoutSessions::AttemptEmail))
                    .col(string_null(CheckoutSessions::AttemptName))
                    .col(string_null(CheckoutSessions::AttemptBrand))
                    .col(string_null(CheckoutSessions::AttemptLast4))
                    .col(string_null(CheckoutSessions::AttemptCardToken))
                    .col(text_null(CheckoutSessions::LastError))
                    .col(big_integer(CheckoutSessions::CreatedAt))
                    .col(big_integer(CheckoutSessions::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_checkout_sessions_account",
            CheckoutSessions::Table,
            [CheckoutSessions::AccountId, CheckoutSessions::Id],
        )
        .await?;
        index(
            manager,
            "idx_checkout_sessions_attempt_charge",
            CheckoutSessions::Table,
            [CheckoutSessions::AttemptChargeId],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(CheckoutSessions::Table).to_owned())
            .await
    }
}
