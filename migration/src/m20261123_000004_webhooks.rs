//! Webhook endpoints, the delivery outbox and the attempts log.
//!
//! Why deliveries are rows written with the event: an event and one `pending` delivery per
//! subscribed active endpoint commit in the same transaction as the change that caused them,
//! so a delivery cannot be lost between the change and its sending. `next_attempt_at` is in the
//! account's clock (the test clock drives retries) and is indexed per endpoint, because each
//! endpoint's actor asks "what of mine is due?". Attempts are their own rows: the log an
//! integrator reads when a receiver misbehaves.

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum WebhookEndpoints {
    Table,
    Id,
    AccountId,
    Url,
    /// The signing secret: kept in clear because we sign with it; never logged or listed.
    Secret,
    /// JSON array of subscribed event types.
    Events,
    Active,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum WebhookDeliveries {
    Table,
    Id,
    AccountId,
    EndpointId,
    EventId,
    /// pending, delivered, failed.
    Status,
    Attempts,
    /// When the next attempt is due (account clock); NULL once delivered or failed.
    NextAttemptAt,
    LastStatusCode,
    LastError,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum WebhookAttempts {
    Table,
    Id,
    DeliveryId,
    EndpointId,
    AccountId,
    /// Real time of the attempt, milliseconds.
    AttemptedAt,
    StatusCode,
    LatencyMs,
    Error,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(WebhookEndpoints::Table)
                    .col(string(WebhookEndpoints::Id).primary_key())
                    .col(string(WebhookEndpoints::AccountId))
                    .col(text(WebhookEndpoints::Url))
                    .col(string(WebhookEndpoints::Secret))
                    .col(text(WebhookEndpoints::Events))
                    .col(boolean(WebhookEndpoints::Active))
                    .col(big_integer(WebhookEndpoints::CreatedAt))
                    .col(big_integer(WebhookEndpoints::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_webhook_endpoints_account",
            WebhookEndpoints::Table,
            [WebhookEndpoints::AccountId, WebhookEndpoints::Id],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .col(string(WebhookDeliveries::Id).primary_key())
                    .col(string(WebhookDeliveries::AccountId))
                    .col(string(WebhookDeliveries::EndpointId))
                    .col(string(WebhookDeliveries::EventId))
                    .col(string(WebhookDeliveries::Status))
                    .col(integer(WebhookDeliveries::Attempts))
                    .col(big_integer_null(WebhookDeliveries::NextAttemptAt))
                    .col(integer_null(WebhookDeliveries::LastStatusCode))
                    .col(text_null(WebhookDeliveries::LastError))
                    .col(big_integer(WebhookDeliveries::CreatedAt))
                    .col(big_integer(WebhookDeliveries::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_webhook_deliveries_due",
            WebhookDeliveries::Table,
            [
                WebhookDeliveries::EndpointId,
                WebhookDeliveries::NextAttemptAt,
            ],
        )
        .await?;
        index(
            manager,
            "idx_webhook_deliveries_endpoint",
            WebhookDeliveries::Table,
            [WebhookDeliveries::EndpointId, WebhookDeliveries::Id],
        )
        .await?;
        index(
            manager,
            "idx_webhook_deliveries_event",
            WebhookDeliveries::Table,
            [WebhookDeliveries::EventId],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookAttempts::Table)
                    .col(string(WebhookAttempts::Id).primary_key())
                    .col(string(WebhookAttempts::DeliveryId))
                    .col(string(WebhookAttempts::EndpointId))
                    .col(string(WebhookAttempts::AccountId))
                    .col(big_integer(WebhookAttempts::AttemptedAt))
                    .col(integer_null(WebhookAttempts::StatusCode))
                    .col(big_integer(WebhookAttempts::LatencyMs))
                    .col(text_null(WebhookAttempts::Error))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_webhook_attempts_delivery",
            WebhookAttempts::Table,
            [WebhookAttempts::DeliveryId, WebhookAttempts::Id],
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            WebhookAttempts::Table.into_iden(),
            WebhookDeliveries::Table.into_iden(),
            WebhookEndpoints::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
