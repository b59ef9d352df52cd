//! `harness`: what runs the service from outside, compiled apart from it. Reading order:
//!
//! - [`operator`]: commands that talk to a running server (`billing actors`).
//! - [`bench`]: the renewal-burst benchmark (`billing bench renewals`, `billing bench fence`).
//! - [`audit`]: the invariant checker: the database's money invariants and the processor's
//!   side, after test scenarios and fault runs.
//! - [`chaos`]: the fault-injection harness that runs the real server through processor,
//!   network, client and crash faults (`billing chaos`, `billing chaos cluster`).
//!
//! The `billing` command itself is `src/main.rs`; the end-to-end suite (`tests/api`) starts
//! it as a process and drives the library in-process.

pub mod audit;
pub mod bench;
pub mod chaos;
pub mod operator;

use billing::store::Store;
use sea_orm::{DatabaseConnection, DatabaseTransaction, TransactionTrait};

/// A store's raw connections (`Store::raw_connections`), for the fixtures and read-backs that
/// work on whole tables: seeding a benchmark, reading a fault run back, checking invariants.
#[derive(Clone, Copy)]
pub struct Raw<'a>(pub &'a Store);

impl Raw<'_> {
    /// The reading connection.
    pub(crate) fn conn(&self) -> &DatabaseConnection {
        self.0.raw_connections().0
    }

    /// The writing connection (on SQLite the one writer).
    pub(crate) fn writer(&self) -> &DatabaseConnection {
        self.0.raw_connections().1
    }

    /// A transaction on the writing connection.
    pub(crate) async fn begin(&self) -> Result<DatabaseTransaction, sea_orm::DbErr> {
        self.writer().begin().await
    }
}
