//! Database migrations of `billing`, one file per migration, applied in order by
//! `billing migrate` and at every `billing serve` start.
//!
//! Conventions every migration keeps (see ARCHITECTURE.md):
//! - identifiers are prefixed strings (`sub_…`), primary keys of their table;
//! - instants are BIGINT milliseconds since the Unix epoch, so that due-time indexes are plain
//!   integer indexes and SQLite and PostgreSQL compare them identically;
//! - money is BIGINT cents of COP; JSON documents (metadata) are TEXT kept byte for byte.

pub use sea_orm_migration::prelude::*;

/// Runs `statements` in order, as a migration's `up` or `down` that is plain SQL.
async fn run_all(manager: &SchemaManager<'_>, statements: &[&str]) -> Result<(), DbErr> {
    for statement in statements {
        manager
            .get_connection()
            .execute_unprepared(statement)
            .await?;
    }
    Ok(())
}

mod m20261122_000001_foundation;
mod m20261122_000002_processor;
mod m20261122_000003_subscriptions;
mod m20261123_000004_webhooks;
mod m20261123_000005_checkout;
mod m20261123_000006_ops;
mod m20261123_000007_account_due;
mod m20261123_000008_due_claims;
mod m20261124_000009_money_invariants;
mod m20261124_000010_processor_outcomes;
mod m20261124_000011_idempotency_purge;
mod m20261124_000012_cluster;
mod m20261124_000013_shared_state;
mod m20261124_000014_refunds_and_nequi;
mod m20261126_000015_refund_posting;
pub mod m20261126_000016_closed_vocabularies;
pub mod m20261126_000017_invoices;
mod m20261126_000018_credit_notes;
mod m20261127_000019_portal;
mod m20261128_000020_coupons;
mod m20261129_000021_dian;
mod m20261130_000022_dian_ends;
mod m20261130_000023_seller_as_issued;
mod m20261201_000024_first_purchases;
mod m20261201_000025_quiet_posts;
mod m20261202_000027_notices;
mod m20261202_000028_card_expiry;
mod m20261203_000029_declines;
mod m20261203_000030_whatsapp_statuses;
mod m20261204_000031_documents_by_issue;
mod m20261204_000032_mrr;
mod m20261204_000033_collection_slots;
mod m20261205_000034_console;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_foundation::Migration),
            Box::new(m20261122_000002_processor::Migration),
            Box::new(m20261122_000003_subscriptions::Migration),
            Box::new(m20261123_000004_webhooks::Migration),
            Box::new(m20261123_000005_checkout::Migration),
            Box::new(m20261123_000006_ops::Migration),
            Box::new(m20261123_000007_account_due::Migration),
            Box::new(m20261123_000008_due_claims::Migration),
            Box::new(m20261124_000009_money_invariants::Migration),
            Box::new(m20261124_000011_idempotency_purge::Migration),
            Box::new(m20261124_000010_processor_outcomes::Migration),
            Box::new(m20261124_000012_cluster::Migration),
            Box::new(m20261124_000013_shared_state::Migration),
            Box::new(m20261124_000014_refunds_and_nequi::Migration),
            Box::new(m20261126_000015_refund_posting::Migration),
            Box::new(m20261126_000016_closed_vocabularies::Migration),
            Box::new(m20261126_000017_invoices::Migration),
            Box::new(m20261126_000018_credit_notes::Migration),
            Box::new(m20261127_000019_portal::Migration),
            Box::new(m20261128_000020_coupons::Migration),
            Box::new(m20261129_000021_dian::Migration),
            Box::new(m20261130_000022_dian_ends::Migration),
            Box::new(m20261130_000023_seller_as_issued::Migration),
            Box::new(m20261201_000024_first_purchases::Migration),
            Box::new(m20261201_000025_quiet_posts::Migration),
            Box::new(m20261202_000027_notices::Migration),
            Box::new(m20261202_000028_card_expiry::Migration),
            Box::new(m20261203_000029_declines::Migration),
            Box::new(m20261203_000030_whatsapp_statuses::Migration),
            Box::new(m20261204_000031_documents_by_issue::Migration),
            Box::new(m20261204_000032_mrr::Migration),
            Box::new(m20261204_000033_collection_slots::Migration),
            Box::new(m20261205_000034_console::Migration),
        ]
    }
}
