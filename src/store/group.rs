//! Group commit on SQLite: the writes of many units of work share one database transaction.
//!
//! SQLite has a single writer, and a commit costs about as much for one row as for a thousand
//! (the WAL frames of every page touched, and one round trip to the connection's thread for
//! each of BEGIN and COMMIT). So a burst of renewals commits together: each unit (a
//! `StoreTxn`) runs inside a `SAVEPOINT` of the open group transaction and holds the group's
//! lock from `begin` until it releases its savepoint, so units never interleave; its `commit`
//! then waits until the whole group is committed. A unit dropped without `commit` rolls back
//! to its savepoint and leaves the other units intact.
//!
//! Who commits: each unit that finishes queues (FIFO, behind every unit already waiting to
//! begin) for the lock; the first to get it while the group is still open commits it for
//! everyone. Under load a group therefore holds every unit that arrived while the previous
//! commit ran; a lone unit commits at once. The commit runs in its own task, so a caller that
//! stops waiting (a dropped request) cannot leave a group open.
//!
//! A unit's `commit` returns only once the group is durable: nothing acts on a write (a
//! processor call, a reply, a webhook) before it is committed, and a unit's rows, its events
//! and their deliveries included, are always in the same group (the outbox guarantee).
//! PostgreSQL, whose writers run concurrently, does not group: each unit is its own
//! transaction.

use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr, TransactionTrait};
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};

/// The open group transaction and the units waiting for its commit.
#[derive(Default)]
struct Group {
    txn: Option<DatabaseTransaction>,
    waiters: Vec<oneshot::Sender<Result<(), String>>>,
    /// Units in the open group, for the `db_group_commit_units` histogram.
    units: usize,
}

/// The writer of a SQLite database, shared by every `StoreTxn` of a `Store`.
#[derive(Clone)]
pub(crate) struct GroupCommit {
    writer: DatabaseConnection,
    group: Arc<Mutex<Group>>,
}

/// A unit's place in the open group: the lock, held until the unit's savepoint is released.
/// Dropped without `commit` (after the savepoint rolled back), it closes the group if no
/// other unit is in it, so an idle group never keeps SQLite's write lock.
pub(crate) struct Membership {
    guard: Option<OwnedMutexGuard<Group>>,
    group: Arc<Mutex<Group>>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        if self.guard.take().is_some() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(commit_if_open(Arc::clone(&self.group)));
            }
        }
    }
}

impl GroupCommit {
    pub(crate) fn new(writer: DatabaseConnection) -> Self {
        Self {
            writer,
            group: Arc::new(Mutex::new(Group::default())),
        }
    }

    /// Joins the open group (opening one if none is), inside a savepoint of its own.
    pub(crate) async fn begin(&self) -> Result<(DatabaseTransaction, Membership), DbErr> {
        let mut guard = Arc::clone(&self.group).lock_owned().await;
        let outer = match guard.txn.take() {
            Some(outer) => outer,
            None => self.writer.begin().await?,
        };
        let savepoint = outer.begin().await;
        guard.txn = Some(outer);
        guard.units += 1;
        Ok((
            savepoint?,
            Membership {
                guard: Some(guard),
                group: Arc::clone(&self.group),
            },
        ))
    }
}

impl Membership {
    /// Releases the unit's savepoint, lets the next unit in, and waits until the group that
    /// holds this unit is committed.
    pub(crate) async fn commit(mut self, savepoint: DatabaseTransaction) -> Result<(), DbErr> {
        // An error here drops `self` with the lock still held: the unit rolls back.
        savepoint.commit().await?;
        let Some(mut guard) = self.guard.take() else {
            return Err(DbErr::Custom("unit already finished".into()));
        };
        let (done, verdict) = oneshot::channel();
        guard.waiters.push(done);
        drop(guard);
        tokio::spawn(commit_if_open(Arc::clone(&self.group)));
        match verdict.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(DbErr::Custom(format!("group commit failed: {message}"))),
            Err(_) => Err(DbErr::Custom("group commit abandoned".into())),
        }
    }
}

/// Commits the open group, if another finisher has not done it already. Whoever holds the lock
/// here knows that no unit is in progress: each has either released its savepoint (and waits
/// for this commit) or rolled back.
async fn commit_if_open(group: Arc<Mutex<Group>>) {
    let mut guard = group.lock().await;
    let Some(txn) = guard.txn.take() else {
        return;
    };
    metrics::histogram!("db_group_commit_units").record(guard.units as f64);
    guard.units = 0;
    let verdict = txn.commit().await.map_err(|err| err.to_string());
    if let Err(message) = &verdict {
        tracing::error!(error = %message, "group commit failed");
    }
    for waiter in guard.waiters.drain(..) {
        let _ = waiter.send(verdict.clone());
    }
}
