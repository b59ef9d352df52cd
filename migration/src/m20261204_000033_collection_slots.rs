//! Why: Ley 2300's "one collection message a day per customer, through one channel a week"
//! was decided by reading the notices already sent, so two notices to one customer attempted
//! at once (two declines due at the same allowed instant, two workers) both read none and
//! both went out (`billing chaos --notices` found it). A slot per customer and Colombian day,
//! and per customer and week with its channel, taken by an insert the primary key lets only
//! one notice win, decides it in the database, on every node.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &["CREATE TABLE collection_slots (\
                 account_id TEXT NOT NULL REFERENCES accounts (id), \
                 customer_id TEXT NOT NULL, \
                 period TEXT NOT NULL, \
                 channel TEXT NOT NULL CHECK (channel IN ('email', 'whatsapp')), \
                 notice_id TEXT NOT NULL, \
                 taken_at BIGINT NOT NULL, \
                 PRIMARY KEY (account_id, customer_id, period))"],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(manager, &["DROP TABLE collection_slots"]).await
    }
}
