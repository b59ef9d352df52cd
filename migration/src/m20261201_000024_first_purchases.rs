//! Why: a `first_time_only` promotion code is for a customer's first purchase, and of a
//! customer's concurrent first purchases at most one may get it (CONTRACT §14; issue 46, R7).
//! Reading "no approved or pending charge, no other subscription" cannot hold that alone: two
//! purchases in flight both read nothing. Each redemption of such a code claims the customer
//! here, in the redeeming transaction; the primary key lets one claim per customer live.
//! `customer_key` is the payer's e-mail in lower case (a checkout's customer does not exist
//! until the payment is approved), or `id:` and the customer's id when no e-mail is known.
//! `charge_id` is the checkout payment that claimed it: a declined one gives the claim back.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 2] = [
    "CREATE TABLE first_purchases (
        account_id TEXT NOT NULL,
        customer_key TEXT NOT NULL,
        charge_id TEXT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (account_id, customer_key)
    )",
    "CREATE INDEX first_purchases_by_charge ON first_purchases (charge_id)",
];

const DOWN: [&str; 1] = ["DROP TABLE first_purchases"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(manager, &DOWN).await
    }
}
