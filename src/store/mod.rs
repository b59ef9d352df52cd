//! Durable state. The only module that names `sea_orm` (architecture invariant): everything
//! else calls the tenant-scoped functions here, so a query that forgets the account cannot be
//! written outside this module.
//!
//! One code path serves SQLite (default, WAL) and PostgreSQL; the URL chooses.

pub mod accounts;
pub mod admin;
pub mod asked_notices;
pub mod balance;
pub mod batch;
pub mod catalog;
pub mod charges;
pub mod checkout;
pub mod cluster;
pub mod console;
pub mod coupons;
pub mod credit_notes;
mod dashboard_sessions;
pub mod dian;
pub mod entities;
mod fanout;
pub mod first_purchases;
mod group;
pub mod idempotency;
mod invoice_rows;
pub mod invoices;
pub mod issued;
pub mod mrr;
mod nodelay;
pub mod notice_sink;
pub mod notices;
pub mod outbox;
pub mod ownership;
pub mod portal;
pub mod prefetch;
pub mod rate_windows;
pub mod rechecks;
pub mod refunds;
pub mod reminders;
pub mod revenue;
mod scoped;
mod secret;
mod series;
pub mod settled;
mod sqlite_lock;
pub mod subscriptions;
pub mod txn;
pub mod webhooks;

use migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Select, SqlErr,
};
use std::time::Duration;

/// A storage failure; its cause is kept for the log line of the request that met it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error")]
    Db(#[from] DbErr),
    /// A conditional write found the row changed since it was read (another writer won).
    #[error("{0} changed since it was read")]
    Conflict(String),
    /// This node no longer holds the shard (`store::cluster`): another node took it over, and
    /// the write changed nothing.
    #[error("shard {0} is no longer held by this node")]
    Fenced(u16),
}

impl StoreError {
    /// A broken invariant found inside a unit of work (which then rolls back).
    pub fn invariant(message: String) -> Self {
        StoreError::Db(DbErr::Custom(message))
    }

    /// Whether PostgreSQL aborted the transaction to break a deadlock (SQLSTATE 40P01): it
    /// committed nothing and may be run again.
    pub fn is_deadlock(&self) -> bool {
        use sea_orm::RuntimeErr;
        match self {
            StoreError::Db(DbErr::Exec(RuntimeErr::SqlxError(err)))
            | StoreError::Db(DbErr::Query(RuntimeErr::SqlxError(err))) => err
                .as_database_error()
                .and_then(|db| db.code())
                .is_some_and(|code| code == "40P01"),
            _ => false,
        }
    }

    /// Whether the failure is a unique-constraint violation (a concurrent duplicate).
    pub fn is_unique_violation(&self) -> bool {
        match self {
            StoreError::Db(err) => {
                matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
            }
            StoreError::Conflict(_) | StoreError::Fenced(_) => false,
        }
    }
}

pub use scoped::Scoped;
pub use secret::Secret;

/// The database's clock in milliseconds since the Unix epoch (PostgreSQL), as SQL: the one
/// clock every node shares (shard leases, rate windows).
macro_rules! db_now_ms {
    () => {
        "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    };
}
pub(crate) use db_now_ms;
pub(crate) const DB_NOW_MS: &str = db_now_ms!();
pub use sqlite_lock::{SqliteLock, SqliteLockError, lock_sqlite_file};

pub type StoreResult<T> = Result<T, StoreError>;

/// The handle to the database, cheap to clone.
#[derive(Clone)]
pub struct Store {
    /// Reads (and, on PostgreSQL, writes too: the same pool).
    db: DatabaseConnection,
    /// Writes. On SQLite a pool of one connection: SQLite admits one writer at a time, and
    /// writers queueing here wait in order instead of meeting `SQLITE_BUSY` and SQLite's
    /// busy handler, which sleeps in steps of milliseconds while the lock is held.
    writer: DatabaseConnection,
    /// On SQLite, the group commit that every `StoreTxn` joins (see `group`).
    group: Option<group::GroupCommit>,
    /// On SQLite, the writer's own thread, where `unit` runs its work.
    lane: Option<group::WriteLane>,
    signal: webhooks::DeliverySignal,
    /// Charges waited for in this process, woken when they settle (`settled`).
    settled: settled::SettledSignal,
    /// On PostgreSQL, the lease loop's own small pool (`cluster`).
    coordination: Option<DatabaseConnection>,
    /// What this node holds: every write of a subscription or a delivery is fenced with it.
    /// A single node (SQLite, and stores made outside `run`) holds everything.
    ownership: std::sync::Arc<crate::store::ownership::Ownership>,
    /// Renewals' writes waiting for their step's next batch (`batch`).
    batches: batch::Batches,
    /// On PostgreSQL, the thread and the connections that write those batches.
    batch_writer: Option<(group::WriteLane, DatabaseConnection)>,
    /// Whether approved charges are invoiced: always, but in a benchmark's baseline.
    issuing: Issuing,
}

/// Whether a store issues invoices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Issuing {
    /// Every approved charge invoiced, every approved refund credited (CONTRACT §11).
    #[default]
    Issued,
    /// No invoice issued: only the renewal benchmark's baseline
    /// (`Config::benchmark_without_invoices`), so that what invoicing costs a burst is measured
    /// in one run. `audit` reports every approved charge of such a store as uninvoiced.
    SkippedForBenchmark,
}

impl Store {
    /// Connects to `url` (`sqlite://path?mode=rwc` or `postgres://…`).
    pub async fn connect(url: &str) -> StoreResult<Self> {
        Self::connect_with_pool(url, None).await
    }

    /// `connect`, with at most `pool` connections in the main pool (`Config::database_pool_size`;
    /// 8 on SQLite and 16 on PostgreSQL when `None`).
    pub async fn connect_with_pool(url: &str, pool: Option<u32>) -> StoreResult<Self> {
        let is_sqlite = url.starts_with("sqlite:");
        let size = pool.unwrap_or(if is_sqlite { 8 } else { 16 }).max(1);
        let db = Database::connect(options(url, size)).await?;
        let writer = if is_sqlite {
            Database::connect(options_caching(url, 1, BATCH_STATEMENTS)).await?
        } else {
            db.clone()
        };
        let coordination = if is_sqlite {
            None
        } else {
            Some(Database::connect(options(url, 2)).await?)
        };
        // PostgreSQL's batch writer: a thread and connections of its own (`batch`). Connected
        // on that thread, so that their sockets wake it, not the service's busy runtime.
        let batch_writer = if is_sqlite {
            None
        } else {
            let lane = group::WriteLane::start().map_err(|err| DbErr::Custom(err.to_string()))?;
            let db = lane
                .run(Database::connect(options_caching(url, 2, BATCH_STATEMENTS)))
                .await??;
            Some((lane, db))
        };
        Ok(Self {
            coordination,
            ownership: std::sync::Arc::new(crate::store::ownership::Ownership::single_node()),
            group: is_sqlite.then(|| group::GroupCommit::new(writer.clone())),
            lane: if is_sqlite {
                Some(group::WriteLane::start().map_err(|err| DbErr::Custom(err.to_string()))?)
            } else {
                None
            },
            db,
            writer,
            signal: webhooks::DeliverySignal::default(),
            settled: settled::SettledSignal::default(),
            batches: batch::Batches::default(),
            batch_writer,
            issuing: Issuing::Issued,
        })
    }

    /// Charges waited for in this process (`settled`).
    pub fn settled(&self) -> &settled::SettledSignal {
        &self.settled
    }

    /// This store, issuing invoices or not.
    pub fn issuing(mut self, issuing: Issuing) -> Self {
        self.issuing = issuing;
        self
    }

    /// This store with its writes fenced by `ownership` (a node of a cluster).
    pub fn with_ownership(
        mut self,
        ownership: std::sync::Arc<crate::store::ownership::Ownership>,
    ) -> Self {
        self.ownership = ownership;
        self
    }

    /// What this node holds.
    pub fn ownership(&self) -> &std::sync::Arc<crate::store::ownership::Ownership> {
        &self.ownership
    }

    /// Applies every pending migration. On PostgreSQL, under an advisory lock of the schema
    /// (sea-orm-migration takes none): nodes starting together on an empty database would
    /// otherwise all create the same tables, and all but one fail. The others wait, then find
    /// nothing left to apply.
    pub async fn migrate(&self) -> StoreResult<()> {
        if !self.shares_state() {
            Migrator::up(&self.writer, None).await?;
            return Ok(());
        }
        // A connection of its own, out of the pool: the lock belongs to its session, so a
        // migration that fails or is abandoned (its future dropped) closes the connection and
        // frees the lock, instead of returning a locked session to the pool.
        let mut conn = self
            .writer
            .get_postgres_connection_pool()
            .acquire()
            .await
            .map_err(migration_lock_error)?
            .detach();
        sea_orm::sqlx::query(MIGRATION_LOCK)
            .execute(&mut conn)
            .await
            .map_err(migration_lock_error)?;
        let migrated = Migrator::up(&self.writer, None).await;
        let unlocked = sea_orm::sqlx::query(MIGRATION_UNLOCK)
            .execute(&mut conn)
            .await
            .map_err(migration_lock_error);
        let _ = sea_orm::sqlx::Connection::close(conn).await;
        migrated?;
        unlocked?;
        Ok(())
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> StoreResult<()> {
        self.db.ping().await?;
        Ok(())
    }

    /// The connection for reads.
    pub(crate) fn conn(&self) -> &DatabaseConnection {
        &self.db
    }

    /// The connection for single-statement writes outside a `StoreTxn` (on SQLite they queue
    /// for the one writer connection between two group commits).
    pub(crate) fn writer(&self) -> &DatabaseConnection {
        &self.writer
    }

    /// The raw connections (reads, writes), for the harness crate alone: its benchmark
    /// fixtures seed whole tables and its invariant checker reads across accounts. No module
    /// of the service calls them (`tests/tidy.rs`); the service goes through the tenant-scoped
    /// functions of this module.
    pub fn raw_connections(&self) -> (&DatabaseConnection, &DatabaseConnection) {
        (&self.db, &self.writer)
    }
}

/// The advisory lock of migrations: one per schema (`current_schema()`, what the URL's
/// `search_path` selects), so that databases of several schemas (tests make one per test) do
/// not wait for each other. The first key says "billing migrations".
const MIGRATION_LOCK: &str = "SELECT pg_advisory_lock(741852, hashtext(current_schema()))";
const MIGRATION_UNLOCK: &str = "SELECT pg_advisory_unlock(741852, hashtext(current_schema()))";

fn migration_lock_error(err: sea_orm::sqlx::Error) -> StoreError {
    StoreError::Db(DbErr::Custom(format!("migration lock: {err}")))
}

/// Prepared statements a batch connection (SQLite's writer, PostgreSQL's batch writer) keeps:
/// a batch's statements differ by kind and by row count (1 to 256), and each shape kept is
/// parsed and planned once a connection instead of once a batch. On SQLite a step's statements
/// run joined as one text, a large program at 256 rows: kept for every batch size, 4,096 of
/// them held most of a burst's peak memory. Batches are sized in powers of two
/// (`batch::queue`), so a step has nine shapes and 512 keep them all (benches/README.md, "The
/// primitive limit, made honest, and the statements a burst keeps").
const BATCH_STATEMENTS: usize = 512;

fn options(url: &str, max_connections: u32) -> ConnectOptions {
    // sqlx's default.
    options_caching(url, max_connections, 100)
}

fn options_caching(url: &str, max_connections: u32, statements: usize) -> ConnectOptions {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .sqlx_logging(false)
        .acquire_timeout(Duration::from_secs(30))
        // sqlx pings a connection on every acquire by default: a round trip to SQLite's
        // connection thread or to PostgreSQL before every read and every transaction. Only
        // a connection idle for a while is worth the question (a server restarted, a proxy
        // that dropped it); a busy one answers for itself with its next statement.
        .test_before_acquire_if_idle_for(Duration::from_secs(1))
        .max_connections(max_connections)
        .map_sqlx_sqlite_opts(move |opts| {
            use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
            // WAL lets readers run beside the single writer; NORMAL sync is durable
            // against process crashes, which is what restart safety needs.
            opts.statement_cache_capacity(statements)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true)
                // Every unit but a group's first runs in a savepoint of its group (`group`),
                // and SQLite copies each page a savepoint first changes to a sub-journal: in
                // memory, not a temp file written page by page (a tenth of a renewal burst's
                // kernel time).
                .pragma("temp_store", "memory")
        })
        .map_sqlx_postgres_opts(move |opts| {
            // A transaction left open by a paused or partitioned node would hold its shard's
            // fence lock (`store::cluster`) and stall the takeover: the server ends it.
            opts.options([("idle_in_transaction_session_timeout", "5000")])
                .statement_cache_capacity(statements)
        });
    if url.starts_with("postgres") {
        options.after_connect(|_| {
            Box::pin(async {
                nodelay::set_on_open_sockets();
                Ok(())
            })
        });
    }
    options
}

/// A page request: at most `limit` rows older than `cursor` (ids sort by creation time).
#[derive(Clone, Debug)]
pub struct PageRequest {
    pub limit: u64,
    pub cursor: Option<String>,
}

/// One page of rows, newest first.
#[derive(Clone, Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_more: bool,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            has_more: self.has_more,
        }
    }
}

/// Runs `select` as one page ordered by `id` descending. One extra row is read to learn
/// whether another page exists.
pub(crate) async fn fetch_page<E, C>(
    conn: &C,
    select: Select<E>,
    id: E::Column,
    page: &PageRequest,
) -> StoreResult<Page<E::Model>>
where
    E: EntityTrait,
    C: ConnectionTrait,
{
    use sea_orm::ColumnTrait;
    let mut select = select.order_by_desc(id).limit(page.limit + 1);
    if let Some(cursor) = &page.cursor {
        select = select.filter(id.lt(cursor.clone()));
    }
    let mut items = select.all(conn).await?;
    let has_more = items.len() as u64 > page.limit;
    items.truncate(page.limit as usize);
    Ok(Page { items, has_more })
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectionTrait, Statement};

    /// `.cargo/config.toml` builds SQLite with the planner stability guarantee. Without it every
    /// statement with `LIMIT ?` is compiled again on each execution (see that file).
    #[tokio::test]
    async fn sqlite_is_built_with_the_query_planner_stability_guarantee() {
        let store = super::Store::connect("sqlite::memory:")
            .await
            .expect("connect");
        let rows = store
            .conn()
            .query_all_raw(Statement::from_string(
                store.conn().get_database_backend(),
                "PRAGMA compile_options",
            ))
            .await
            .expect("compile options");
        let options: Vec<String> = rows
            .iter()
            .map(|row| row.try_get_by_index::<String>(0).expect("option"))
            .collect();
        assert!(
            options.iter().any(|option| option == "ENABLE_QPSG"),
            "SQLite was built without ENABLE_QPSG: {options:?}"
        );
    }
}

#[cfg(test)]
mod vocabularies {
    //! The values the database admits (migration 000016) are exactly those the service writes.
    use crate::domain::charge_purpose::ChargePurpose;
    use crate::domain::charge_status::{ChargeStatus, RefundStatus};
    use crate::domain::subscription::Status;
    use crate::domain::time::Cycle;
    use migration::m20261126_000016_closed_vocabularies::VOCABULARIES;

    fn closed(table: &str, column: &str) -> Vec<&'static str> {
        VOCABULARIES
            .iter()
            .find(|(t, c, _)| *t == table && *c == column)
            .map(|(_, _, values)| values.to_vec())
            .unwrap_or_default()
    }

    /// The words of a vocabulary, in its declaration order.
    fn words<T: Copy>(all: &[T], word: fn(T) -> &'static str) -> Vec<&'static str> {
        all.iter().map(|value| word(*value)).collect()
    }

    #[test]
    fn the_database_admits_exactly_the_services_values() {
        assert_eq!(
            closed("subscriptions", "status"),
            words(Status::ALL, Status::as_str)
        );
        let cycles = words(Cycle::ALL, Cycle::as_str);
        assert_eq!(closed("subscriptions", "cycle"), cycles);
        assert_eq!(closed("subscriptions", "period_cycle"), cycles);
        assert_eq!(
            closed("charge_attempts", "status"),
            words(ChargeStatus::ALL, ChargeStatus::as_str)
        );
        assert_eq!(
            closed("charge_attempts", "purpose"),
            words(ChargePurpose::ALL, ChargePurpose::as_str)
        );
        assert_eq!(
            closed("refunds", "status"),
            words(RefundStatus::ALL, RefundStatus::as_str)
        );
    }
}
