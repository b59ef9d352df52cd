//! Why: on PostgreSQL several processes may share one database, and each due timer must be
//! fired by one of them. The scheduler claims the rows it loads (`FOR UPDATE SKIP LOCKED`, so
//! two loaders never wait on each other or take the same row) and marks them with a lease,
//! `claimed_until` (wall-clock milliseconds): until then no other process loads the row. A row
//! whose timer was not handled (its process died) is claimable again when the lease ends.
//! SQLite, whose file belongs to one process, leaves the column empty.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum Subscriptions {
    Table,
    ClaimedUntil,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Subscriptions::Table)
                    .add_column(
                        ColumnDef::new(Subscriptions::ClaimedUntil)
                            .big_integer()
                            .null(),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Subscriptions::Table)
                    .drop_column(Subscriptions::ClaimedUntil)
                    .to_owned(),
            )
            .await
    }
}
