//! Group commit on SQLite: the writes of many units of work share one database transaction.
//!
//! SQLite has a single writer, and a commit costs about as much for one row as for a thousand
//! (the WAL frames of every page touched, and one round trip to the connection's thread for
//! each of BEGIN and COMMIT). So a burst of renewals commits together: each unit (a
//! `StoreTxn`) runs inside a `SAVEPOINT` of the open group transaction and holds the group's
//! lock from `begin` until it releases its savepoint, so units never interleave; its `commit`
//! then waits until the whole group is committed. A unit dropped without `commit` rolls back
//! to its savepoint and leaves the other units intact. The unit that opens a group needs no
//! savepoint: no other unit is in the group until it finishes, so it works in the group's
//! transaction itself, and dropped, it rolls the whole of it back (two round trips fewer for
//! the lone unit, which under a burst of batched renewals is most of them).
//!
//! Who commits: the unit that finishes while no other unit waits to begin (or when the group
//! holds `MAX_GROUP` units) spawns the commit, which queues (FIFO) for the lock behind any unit
//! that arrived meanwhile. A unit that finishes while others wait leaves the commit to them, so
//! under load a group holds every unit of the burst up to `MAX_GROUP`, and a lone unit commits
//! at once. A waiting unit that gives up (its caller was dropped) or fails to begin spawns the
//! commit itself, so a group is never left open. The commit runs in its own task, so a caller
//! that stops waiting (a dropped request) cannot leave a group open either.
//!
//! (Measured: when every finishing unit spawned a commit, its commit queued right behind the
//! next unit and a burst committed 2.65 units a group on average.)
//!
//! A unit's `commit` returns only once the group is durable: nothing acts on a write (a
//! processor call, a reply, a webhook) before it is committed, and a unit's rows, its events
//! and their deliveries included, are always in the same group (the outbox guarantee).
//! PostgreSQL, whose writers run concurrently, does not group: each unit is its own
//! transaction.

use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr, TransactionTrait};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};

/// The most units one group holds before it commits even though more wait: it bounds how long
/// the first unit of a group waits for its commit (a few hundred milliseconds under load).
const MAX_GROUP: usize = 256;

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
    /// Units waiting for the lock to begin.
    waiting: Arc<AtomicUsize>,
}

/// A unit counted in `waiting` until it gets the lock. Dropped before that (its caller gave
/// up), it commits the open group in case a finished unit left the commit to it.
struct Ticket {
    waiting: Arc<AtomicUsize>,
    group: Arc<Mutex<Group>>,
    admitted: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if !self.admitted {
            spawn_commit(&self.group);
        }
    }
}

fn spawn_commit(group: &Arc<Mutex<Group>>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(commit_if_open(Arc::clone(group)));
    }
}

/// A unit's place in the open group: the lock, held until the unit's savepoint is released.
/// Dropped without `commit` (after the savepoint rolled back), it closes the group if no
/// other unit is in it, so an idle group never keeps SQLite's write lock.
pub(crate) struct Membership {
    guard: Option<OwnedMutexGuard<Group>>,
    group: Arc<Mutex<Group>>,
    waiting: Arc<AtomicUsize>,
    /// The unit opened the group and works in its transaction itself, without a savepoint:
    /// until it finishes no other unit is in the group, so rolling back the group's
    /// transaction rolls back only this unit (two round trips fewer for a lone unit).
    opened: bool,
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            if self.opened {
                // The unit dropped the group's transaction (rolled back) before its membership:
                // no group is open any more.
                guard.units = 0;
            } else {
                spawn_commit(&self.group);
            }
        }
    }
}

impl GroupCommit {
    pub(crate) fn new(writer: DatabaseConnection) -> Self {
        Self {
            writer,
            group: Arc::new(Mutex::new(Group::default())),
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Joins the open group inside a savepoint of its own, or opens one and works in its
    /// transaction (see `Membership::opened`).
    pub(crate) async fn begin(&self) -> Result<(DatabaseTransaction, Membership), DbErr> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut ticket = Ticket {
            waiting: Arc::clone(&self.waiting),
            group: Arc::clone(&self.group),
            admitted: false,
        };
        let mut guard = Arc::clone(&self.group).lock_owned().await;
        ticket.admitted = true;
        drop(ticket);
        if guard.txn.is_none() {
            // The first unit of a group works in the group's transaction; it hands it back to
            // the group when it finishes (`commit`).
            let txn = self.writer.begin().await?;
            guard.units = 1;
            let membership = Membership {
                guard: Some(guard),
                group: Arc::clone(&self.group),
                waiting: Arc::clone(&self.waiting),
                opened: true,
            };
            return Ok((txn, membership));
        }
        guard.units += 1;
        // From here a failure drops the membership, which closes the group if it is idle.
        let membership = Membership {
            guard: Some(guard),
            group: Arc::clone(&self.group),
            waiting: Arc::clone(&self.waiting),
            opened: false,
        };
        let outer = membership.guard.as_ref().and_then(|g| g.txn.as_ref());
        let Some(outer) = outer else {
            return Err(DbErr::Custom("no open group".into()));
        };
        let savepoint = outer.begin().await?;
        Ok((savepoint, membership))
    }
}

impl Membership {
    /// Releases the unit's savepoint, lets the next unit in, and waits until the group that
    /// holds this unit is committed.
    pub(crate) async fn commit(mut self, txn: DatabaseTransaction) -> Result<(), DbErr> {
        // RELEASE fails only when the connection itself does, and then so does the group's
        // COMMIT: every unit in the group gets the error.
        let opened = if self.opened {
            Some(txn)
        } else {
            txn.commit().await?;
            None
        };
        let Some(mut guard) = self.guard.take() else {
            return Err(DbErr::Custom("unit already finished".into()));
        };
        if let Some(txn) = opened {
            guard.txn = Some(txn);
        }
        let (done, verdict) = oneshot::channel();
        guard.waiters.push(done);
        // A unit waiting to begin will join this group and commit it (or leave it to the next
        // one): checked under the lock, so that unit cannot have begun already.
        let last = self.waiting.load(Ordering::SeqCst) == 0 || guard.units >= MAX_GROUP;
        drop(guard);
        if last {
            spawn_commit(&self.group);
        }
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

/// The writer's own thread: a single-threaded runtime that runs SQLite's units of work (see
/// `Store::unit`) from `begin` to `commit`.
///
/// Each statement is a round trip to the connection's thread; the answer wakes the task that
/// waits for it. On the service's runtime that task queues behind every other ready task (HTTP,
/// actors, the processor), about a tenth of a millisecond per statement under load, while the
/// unit holds the single writer. On a thread of its own the wake-up is immediate, so a unit
/// holds the writer for the time SQLite takes and little more.
#[derive(Clone)]
pub(crate) struct WriteLane {
    handle: tokio::runtime::Handle,
    /// Ends the thread when the last `Store` clone is gone.
    _stop: Arc<oneshot::Sender<()>>,
}

impl WriteLane {
    pub(crate) fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("billing-writer".into())
            .spawn(move || {
                // The sender is never used, only dropped: either outcome means stop. Units
                // still running are dropped with the runtime, which rolls each one back.
                let _ = runtime.block_on(stopped);
            })?;
        Ok(Self {
            handle,
            _stop: Arc::new(stop),
        })
    }

    /// Starts `work` on the writer's thread, without waiting for it.
    pub(crate) fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        self.handle.spawn(work);
    }

    /// Runs `work` to completion on the writer's thread, even if the caller stops waiting.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, DbErr> {
        match self.handle.spawn(work).await {
            Ok(value) => Ok(value),
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => Err(DbErr::Custom("the writer thread stopped".into())),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::domain::event_type::EventType;
    use crate::ids::{AccountId, EventId};
    use crate::store::accounts::NewAccount;
    use crate::store::subscriptions::Event;
    use crate::store::txn::StoreTxn;
    use crate::store::{PageRequest, Store};

    pub(crate) fn account(id: &AccountId) -> NewAccount {
        NewAccount {
            id: id.clone(),
            name: "Group".into(),
            sandbox: true,
            api_key_hash: "hash".into(),
            processor_base_url: None,
            processor_public_key: "pub_test_x".into(),
            processor_private_key: "prv_test_x".into(),
            processor_events_secret: "test_events_x".into(),
            processor_integrity_secret: "test_integrity_x".into(),
            fee_percent_bps: 150,
            fee_fixed_cents: 0,
            rate_limit_per_minute: 100,
            status_rate_limit_per_minute: 20,
            dunning_retry_days: "1,3,5,7".into(),
            created_at: 0,
        }
    }

    /// A fresh SQLite database with one account: its file, its URL, a store on it, the
    /// account's id.
    async fn database() -> (std::path::PathBuf, String, Store, AccountId) {
        let path = std::env::temp_dir().join(format!("group-{}.db", uuid::Uuid::new_v4().simple()));
        let url = format!("sqlite://{}", path.display());
        let store = Store::connect(&url).await.expect("connect");
        store.migrate().await.expect("migrate");
        let id = AccountId::generate();
        store.create_account(account(&id)).await.expect("account");
        (path, url, store, id)
    }

    fn remove(path: &std::path::Path) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_units_are_durable_when_commit_returns_and_an_abandoned_one_leaves_no_trace()
    {
        let (path, url, store, id) = database().await;

        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..200 {
            let (store, id) = (store.clone(), id.clone());
            tasks.spawn(async move {
                if i % 10 == 0 {
                    // Writes, then gives up: only its savepoint rolls back, not the group.
                    let txn = store.begin().await.expect("begin");
                    txn.insert_event(Event {
                        id: EventId::generate(),
                        account_id: id.clone(),
                        event_type: EventType::SubscriptionCreated,
                        subscription_id: None,
                        body: "{}".into(),
                        created_at: 0,
                    })
                    .await
                    .expect("insert");
                    drop(txn);
                } else {
                    store.top_up(&id, 100, 0).await.expect("top up");
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("task");
        }

        // A second store (its own connections) sees exactly what the units committed.
        let fresh = Store::connect(&url).await.expect("connect");
        let balance = fresh.balance(&id).await.expect("balance").expect("account");
        assert_eq!(balance.available_cents, 180 * 100);
        let mut ledger = 0;
        let mut page = PageRequest {
            limit: 100,
            cursor: None,
        };
        loop {
            let rows = fresh
                .list_balance_transactions(&id, &page)
                .await
                .expect("ledger");
            ledger += rows.items.len();
            if !rows.has_more {
                break;
            }
            page.cursor = rows.items.last().map(|row| row.id.to_string());
        }
        assert_eq!(ledger, 180);
        let events = fresh
            .list_events(
                &id,
                None,
                None,
                &PageRequest {
                    limit: 10,
                    cursor: None,
                },
            )
            .await
            .expect("events");
        assert!(events.items.is_empty(), "abandoned units left events");
        drop((store, fresh));
        remove(&path);
    }

    fn event(id: &AccountId, body: &str) -> Event {
        Event {
            id: EventId::generate(),
            account_id: id.clone(),
            event_type: EventType::SubscriptionCreated,
            subscription_id: None,
            body: body.into(),
            created_at: 0,
        }
    }

    /// A unit begun on `store` that wrote one event with `body`, not yet committed.
    async fn unit_writing(store: &Store, id: &AccountId, body: &str) -> StoreTxn {
        let unit = store.begin().await.expect("begin");
        unit.insert_event(event(id, body)).await.expect("insert");
        unit
    }

    async fn bodies(store: &Store, id: &AccountId) -> Vec<String> {
        let page = PageRequest {
            limit: 10,
            cursor: None,
        };
        let mut bodies: Vec<String> = store
            .list_events(id, None, None, &page)
            .await
            .expect("events")
            .items
            .into_iter()
            .map(|event| event.body)
            .collect();
        bodies.sort();
        bodies
    }

    /// The unit that opens a group works in the group's transaction, without a savepoint.
    /// Dropped, it leaves nothing and the next unit opens a fresh group; committed while
    /// another unit waits, that unit joins in a savepoint, and dropping it leaves the first
    /// unit's writes to be committed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_unit_that_opens_a_group_rolls_back_alone_and_commits_with_the_next() {
        let (path, url, store, id) = database().await;

        drop(unit_writing(&store, &id, "dropped").await);
        let next = unit_writing(&store, &id, "kept").await;
        next.commit().await.expect("commit");
        assert_eq!(bodies(&store, &id).await, vec!["kept".to_owned()]);

        let opener = unit_writing(&store, &id, "opener").await;
        let (joined, join) = tokio::sync::oneshot::channel();
        let waiting = {
            let (store, id) = (store.clone(), id.clone());
            tokio::spawn(async move {
                let _ = joined.send(());
                drop(unit_writing(&store, &id, "second").await);
            })
        };
        join.await.expect("spawned");
        // The second unit waits for the lock the opener holds (bounded wait).
        let bound = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while store
            .group
            .as_ref()
            .is_some_and(|g| g.waiting.load(std::sync::atomic::Ordering::SeqCst) == 0)
        {
            assert!(
                std::time::Instant::now() < bound,
                "the second unit never waited"
            );
            tokio::task::yield_now().await;
        }
        opener.commit().await.expect("commit");
        waiting.await.expect("second unit");
        let fresh = Store::connect(&url).await.expect("connect");
        assert_eq!(
            bodies(&fresh, &id).await,
            vec!["kept".to_owned(), "opener".to_owned()]
        );
        drop((store, fresh));
        remove(&path);
    }
}
