//! Why: an unknown processor outcome (a timeout, a 5xx, a 429, a lost answer) must never settle
//! a charge; the charge stays pending and the processor is asked again about its reference,
//! with backoff (CONTRACT §7). `charge_rechecks` holds, per charge whose outcome is unknown,
//! how many times it was asked and when to ask next, in a table of its own so that the
//! charge_attempts row (written on the hot renewal path) keeps its shape.
//!
//! `charge_conflicts` is what operators see of a processor that contradicts itself or us: a
//! final outcome that contradicts the one recorded (APPROVED for a charge recorded declined,
//! VOIDED for one recorded approved), or an event whose amount, currency or transaction id are
//! not its charge's. Such a report moves no money; it is kept here, and its event (when it came
//! as one) stays in processor_events.

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum ChargeRechecks {
    Table,
    ChargeId,
    AccountId,
    Attempts,
    RecheckAt,
    LastReason,
    UpdatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum ChargeConflicts {
    Table,
    Id,
    AccountId,
    ChargeId,
    Kind,
    RecordedStatus,
    ReportedStatus,
    TransactionId,
    AmountCents,
    Currency,
    EventChecksum,
    Detail,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ChargeRechecks::Table)
                    .col(string(ChargeRechecks::ChargeId).primary_key())
                    .col(string(ChargeRechecks::AccountId))
                    .col(integer(ChargeRechecks::Attempts))
                    .col(big_integer(ChargeRechecks::RecheckAt))
                    .col(text_null(ChargeRechecks::LastReason))
                    .col(big_integer(ChargeRechecks::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_charge_rechecks_due",
            ChargeRechecks::Table,
            [ChargeRechecks::RecheckAt],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(ChargeConflicts::Table)
                    .col(string(ChargeConflicts::Id).primary_key())
                    .col(string(ChargeConflicts::AccountId))
                    .col(string(ChargeConflicts::ChargeId))
                    .col(string(ChargeConflicts::Kind))
                    .col(string(ChargeConflicts::RecordedStatus))
                    .col(string_null(ChargeConflicts::ReportedStatus))
                    .col(string_null(ChargeConflicts::TransactionId))
                    .col(big_integer_null(ChargeConflicts::AmountCents))
                    .col(string_null(ChargeConflicts::Currency))
                    .col(string_null(ChargeConflicts::EventChecksum))
                    .col(text(ChargeConflicts::Detail))
                    .col(big_integer(ChargeConflicts::CreatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_charge_conflicts_charge",
            ChargeConflicts::Table,
            [ChargeConflicts::ChargeId],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            ChargeConflicts::Table.into_iden(),
            ChargeRechecks::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
