//! Why: the scheduler loads each account's soon-due timers in pages ordered by `(due_at, id)`.
//! With only `(account_id, id)` and `(due_at, id)` to choose from, SQLite took the account's
//! index and sorted all of the account's subscriptions for every page: a million due at one
//! instant in one account meant a thousand full sorts, and no renewal started for minutes.
//! `(account_id, due_at, id)` answers a page as one range of the index, already in order
//! (the page's keyset is a row-value comparison, `(due_at, id) > (?, ?)`).

use crate::m20261122_000001_foundation::index;
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum Subscriptions {
    Table,
    AccountId,
    DueAt,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        index(
            manager,
            "idx_subscriptions_account_due",
            Subscriptions::Table,
            [
                Subscriptions::AccountId,
                Subscriptions::DueAt,
                Subscriptions::Id,
            ],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_subscriptions_account_due")
                    .table(Subscriptions::Table)
                    .to_owned(),
            )
            .await
    }
}
