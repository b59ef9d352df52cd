//! The sharded supervision tree and the per-kind registries that make it inspectable.
//!
//! A `Root` supervisor links `SHARDS` shard supervisors; every live actor of every kind is
//! linked to the shard `hash(id) % SHARDS`. Both supervisor levels override ractor's default
//! (stop the supervisor when a child stops): a failed child is counted and forgotten, and the
//! next message to its id respawns it from the database. Sharding spreads supervision events
//! and spawns over several mailboxes and locks, so a million-actor burst does not queue behind
//! one supervisor.
//!
//! A kind of actor (`subscription`, and next `webhook_endpoint`) is a [`KindRegistry`]:
//! registered once with [`Tree::register`], it spawns actors on demand (one per id), keeps the
//! bookkeeping `/admin/actors` shows (state, mailbox length, restarts, next due time) and counts
//! per shard. This module does not know any kind's messages.

use dashmap::DashMap;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, Message, SupervisionEvent};
use serde::Serialize;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// How many shard supervisors the root has.
pub const SHARDS: usize = 8;

/// How long a spawn waits for a stopping actor of the same id to let go of its name. The old
/// actor may be finishing a long message (a command waiting for the processor) when its shard
/// moved away and back: as long as a caller waits for an actor's reply (`CALL_TIMEOUT`).
const SPAWN_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The shard of an id: a stable hash (SipHash with fixed keys), so it is the same in every run.
pub fn shard_of(id: &str) -> usize {
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    id.hash(&mut hasher);
    (hasher.finish() % SHARDS as u64) as usize
}

/// What a live actor is doing, kept by the actor and read by introspection.
#[derive(Debug, Default)]
pub struct ActorStats {
    handling: AtomicBool,
    queued: AtomicU64,
    /// The next instant (ms, in the account's clock) the actor's timer fires; 0 = none.
    next_due_ms: AtomicI64,
    /// Work the actor started that is still out (a webhook endpoint's attempts on the wire).
    in_flight: AtomicU64,
}

impl ActorStats {
    /// Called by a sender before it sends a message.
    pub fn enqueued(&self) {
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    /// Called by the actor when it starts handling a counted message.
    pub fn begin(&self) {
        self.handling.store(true, Ordering::Relaxed);
        let _ = self
            .queued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Messages sent and not yet begun.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    pub fn end(&self) {
        self.handling.store(false, Ordering::Relaxed);
    }

    pub fn set_in_flight(&self, count: usize) {
        self.in_flight.store(count as u64, Ordering::Relaxed);
    }

    /// Whether the actor is handling a message, has messages waiting, or work out.
    pub fn busy(&self) -> bool {
        self.handling.load(Ordering::Relaxed)
            || self.queued.load(Ordering::Relaxed) > 0
            || self.in_flight.load(Ordering::Relaxed) > 0
    }

    pub fn set_next_due(&self, due_ms: Option<i64>) {
        self.next_due_ms
            .store(due_ms.unwrap_or(0), Ordering::Relaxed);
    }
}

/// One live actor as `/admin/actors` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ActorInfo {
    pub kind: &'static str,
    pub id: String,
    pub shard: usize,
    /// `idle` or `handling`.
    pub state: &'static str,
    pub mailbox_len: u64,
    /// Failures of this id since the process started (each one a respawn on demand).
    pub restarts: u64,
    /// Milliseconds since the epoch in the account's clock, if a timer is set.
    pub next_due_ms: Option<i64>,
}

/// Counts of one kind.
#[derive(Clone, Debug, Serialize)]
pub struct KindCounts {
    pub kind: &'static str,
    pub live: u64,
    pub restarts: u64,
    pub mailbox_backlog: u64,
    /// Live actors per shard, index = shard.
    pub per_shard: Vec<u64>,
}

/// What the tree needs from a kind's registry, whatever its message type.
pub trait KindView: Send + Sync {
    fn kind(&self) -> &'static str;
    fn counts(&self) -> KindCounts;
    /// Live actors with an id greater than `after`, sorted by id, at most `limit`.
    fn page(&self, after: Option<&str>, limit: usize) -> Vec<ActorInfo>;
    /// Forgets the actor named `name` if it is this kind's and still `id`; true if it was.
    fn forget(&self, name: &str, id: ActorId, failed: bool) -> bool;
}

struct Live<M: Message> {
    actor: ActorRef<M>,
    stats: Arc<ActorStats>,
    shard: usize,
}

/// The live actors of one kind: at most one per id, spawned on demand under its shard.
pub struct KindRegistry<M: Message> {
    kind: &'static str,
    live: DashMap<String, Live<M>>,
    /// Failures per id; only ids that failed have an entry.
    failures: DashMap<String, u64>,
    restarts: AtomicU64,
    per_shard: Vec<AtomicU64>,
    /// One spawn lock per shard keeps spawning to one actor per id without one global lock.
    spawn_locks: Vec<tokio::sync::Mutex<()>>,
    shards: Vec<ActorCell>,
}

impl<M: Message> KindRegistry<M> {
    /// The live actor of `id` with its stats, if it has one.
    pub fn get(&self, id: &str) -> Option<(ActorRef<M>, Arc<ActorStats>)> {
        self.live
            .get(id)
            .map(|live| (live.actor.clone(), Arc::clone(&live.stats)))
    }

    /// The live actor of `id`, spawned by `make` (given the stats the actor must keep) and
    /// linked to the id's shard when it has none.
    ///
    /// An actor leaves this registry when it decides to stop (after a charge's outcome, when
    /// idle, when its shard moved), but keeps its name in ractor's registry until its last
    /// message has been handled and its stop processed. A spawn meanwhile finds the name taken
    /// (`ActorAlreadyRegistered`): it waits for that actor to end and spawns again, for at most
    /// `SPAWN_WAIT`. The name is what keeps two actors of one id from ever running at once, so
    /// the new actor is never spawned beside the old one under another name.
    pub async fn get_or_spawn<A>(
        &self,
        id: &str,
        make: impl Fn(Arc<ActorStats>) -> (A, A::Arguments),
    ) -> Result<(ActorRef<M>, Arc<ActorStats>), ractor::SpawnErr>
    where
        A: Actor<Msg = M>,
    {
        let deadline = tokio::time::Instant::now() + SPAWN_WAIT;
        loop {
            if let Some(found) = self.get(id) {
                return Ok(found);
            }
            let shard = shard_of(id);
            let guard = self.spawn_locks[shard].lock().await;
            if let Some(found) = self.get(id) {
                return Ok(found);
            }
            let stats = Arc::new(ActorStats::default());
            let (actor, arguments) = make(Arc::clone(&stats));
            let spawned = Actor::spawn_linked(
                Some(id.to_owned()),
                actor,
                arguments,
                self.shards[shard].clone(),
            )
            .await;
            let actor = match spawned {
                Ok((actor, _)) => actor,
                Err(ractor::SpawnErr::ActorAlreadyRegistered(_))
                    if tokio::time::Instant::now() < deadline =>
                {
                    // The other ids of this shard need not wait for this one.
                    drop(guard);
                    self.wait_for_name(id, deadline).await;
                    continue;
                }
                Err(err) => return Err(err),
            };
            self.live.insert(
                id.to_owned(),
                Live {
                    actor: actor.clone(),
                    stats: Arc::clone(&stats),
                    shard,
                },
            );
            self.per_shard[shard].fetch_add(1, Ordering::Relaxed);
            metrics::gauge!("actors_live", "kind" => self.kind).increment(1.0);
            return Ok((actor, stats));
        }
    }

    /// Waits (until `deadline`) for the actor registered in ractor under the name `id` to
    /// end; returns at once if none is registered any more.
    async fn wait_for_name(&self, id: &str, deadline: tokio::time::Instant) {
        let Some(old) = ractor::registry::where_is(id) else {
            // It let go between the spawn and this look: spawn again now.
            tokio::task::yield_now().await;
            return;
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if old.wait(Some(left)).await.is_err() {
            tracing::warn!(
                kind = self.kind,
                id,
                "an actor kept its name past the spawn's bound"
            );
        }
    }

    /// Whether any live actor whose id matches is busy (`ActorStats::busy`).
    pub fn any_busy(&self, matches: impl Fn(&str) -> bool) -> bool {
        self.live
            .iter()
            .any(|live| matches(live.key()) && live.stats.busy())
    }

    /// Stops every live actor whose id matches (their shard moved to another node). A message
    /// in a stopped actor's mailbox is dropped unanswered: its sender respawns or forwards.
    pub fn stop_matching(&self, matches: impl Fn(&str) -> bool) {
        let ids: Vec<String> = self
            .live
            .iter()
            .filter(|live| matches(live.key()))
            .map(|live| live.key().clone())
            .collect();
        for id in ids {
            if let Some((actor, _)) = self.get(&id) {
                self.forget(&id, actor.get_id(), false);
                actor.stop(None);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }
}

impl<M: Message> KindView for KindRegistry<M> {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn counts(&self) -> KindCounts {
        let mailbox_backlog = self
            .live
            .iter()
            .map(|live| live.stats.queued.load(Ordering::Relaxed))
            .sum();
        KindCounts {
            kind: self.kind,
            live: self.live.len() as u64,
            restarts: self.restarts(),
            mailbox_backlog,
            per_shard: self
                .per_shard
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect(),
        }
    }

    fn page(&self, after: Option<&str>, limit: usize) -> Vec<ActorInfo> {
        let mut ids: Vec<String> = self
            .live
            .iter()
            .filter(|live| after.is_none_or(|after| live.key().as_str() > after))
            .map(|live| live.key().clone())
            .collect();
        ids.sort_unstable();
        ids.truncate(limit);
        ids.into_iter()
            .filter_map(|id| {
                let live = self.live.get(&id)?;
                let due = live.stats.next_due_ms.load(Ordering::Relaxed);
                Some(ActorInfo {
                    kind: self.kind,
                    shard: live.shard,
                    state: if live.stats.handling.load(Ordering::Relaxed) {
                        "handling"
                    } else {
                        "idle"
                    },
                    mailbox_len: live.stats.queued.load(Ordering::Relaxed),
                    restarts: self.failures.get(&id).map_or(0, |n| *n),
                    next_due_ms: (due != 0).then_some(due),
                    id,
                })
            })
            .collect()
    }

    fn forget(&self, name: &str, id: ActorId, failed: bool) -> bool {
        let Some((_, live)) = self
            .live
            .remove_if(name, |_, live| live.actor.get_id() == id)
        else {
            return false;
        };
        self.per_shard[live.shard].fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("actors_live", "kind" => self.kind).decrement(1.0);
        if failed {
            self.restarts.fetch_add(1, Ordering::Relaxed);
            *self.failures.entry(name.to_owned()).or_default() += 1;
            metrics::counter!("actor_restarts_total", "kind" => self.kind).increment(1);
        }
        true
    }
}

/// The kinds registered in the tree, shared with every shard supervisor.
#[derive(Default)]
struct Kinds(RwLock<Vec<Arc<dyn KindView>>>);

impl Kinds {
    fn all(&self) -> Vec<Arc<dyn KindView>> {
        self.0.read().map(|kinds| kinds.clone()).unwrap_or_default()
    }

    fn forget(&self, cell: &ActorCell, failed: bool) {
        let Some(name) = cell.get_name() else { return };
        for kind in self.all() {
            if kind.forget(&name, cell.get_id(), failed) {
                return;
            }
        }
    }
}

/// The root and its shards.
#[derive(Clone)]
pub struct Tree {
    root: ActorRef<()>,
    shards: Vec<ActorCell>,
    kinds: Arc<Kinds>,
}

/// The whole tree as counts.
#[derive(Clone, Debug, Serialize)]
pub struct TreeCounts {
    pub root: String,
    pub shards: usize,
    pub kinds: Vec<KindCounts>,
}

impl Tree {
    pub async fn start() -> Result<Self, ractor::SpawnErr> {
        let kinds = Arc::new(Kinds::default());
        let (root, _) = Actor::spawn(None, Root, ()).await?;
        let mut shards = Vec::with_capacity(SHARDS);
        for index in 0..SHARDS {
            let (shard, _) =
                Actor::spawn_linked(None, Shard { index }, Arc::clone(&kinds), root.get_cell())
                    .await?;
            shards.push(shard.get_cell());
        }
        Ok(Self {
            root,
            shards,
            kinds,
        })
    }

    /// Adds a kind of actor to the tree; its actors are supervised by the shards and listed by
    /// `/admin/actors`.
    pub fn register<M: Message>(&self, kind: &'static str) -> Arc<KindRegistry<M>> {
        let registry = Arc::new(KindRegistry {
            kind,
            live: DashMap::new(),
            failures: DashMap::new(),
            restarts: AtomicU64::new(0),
            per_shard: (0..SHARDS).map(|_| AtomicU64::new(0)).collect(),
            spawn_locks: (0..SHARDS).map(|_| tokio::sync::Mutex::new(())).collect(),
            shards: self.shards.clone(),
        });
        metrics::gauge!("actors_live", "kind" => kind).increment(0.0);
        if let Ok(mut kinds) = self.kinds.0.write() {
            kinds.push(Arc::clone(&registry) as Arc<dyn KindView>);
        }
        registry
    }

    /// Stops every actor, the shards and the root, and waits for the root to end.
    pub async fn stop(&self) {
        let _ = self.root.stop_children_and_wait(None, None).await;
        self.root.stop(None);
    }

    pub fn counts(&self) -> TreeCounts {
        TreeCounts {
            root: format!("root ({})", self.root.get_id()),
            shards: self.shards.len(),
            kinds: self.kinds.all().iter().map(|kind| kind.counts()).collect(),
        }
    }

    /// One page of live actors, of one kind or of all (ordered by kind, then id). The cursor
    /// is `kind:id` of the last actor of the previous page.
    pub fn page(&self, kind: Option<&str>, cursor: Option<&str>, limit: usize) -> Vec<ActorInfo> {
        let (after_kind, after_id) = match cursor.and_then(|c| c.split_once(':')) {
            Some((k, i)) => (Some(k), Some(i)),
            None => (None, None),
        };
        let mut kinds = self.kinds.all();
        kinds.sort_by_key(|k| k.kind());
        let mut out = Vec::new();
        for view in kinds {
            if kind.is_some_and(|kind| kind != view.kind()) {
                continue;
            }
            if after_kind.is_some_and(|after| view.kind() < after) {
                continue;
            }
            let after = if after_kind == Some(view.kind()) {
                after_id
            } else {
                None
            };
            out.extend(view.page(after, limit - out.len()));
            if out.len() >= limit {
                break;
            }
        }
        out
    }
}

struct Root;

impl Actor for Root {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    /// Overrides ractor's default: a shard that stopped is logged, never a reason for the root
    /// to stop (shards handle no messages, so this does not happen in practice).
    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        event: SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            tracing::error!(shard = ?cell.get_id(), error = %err, "a shard supervisor failed");
        }
        Ok(())
    }
}

struct Shard {
    index: usize,
}

impl Actor for Shard {
    type Msg = ();
    type State = Arc<Kinds>;
    type Arguments = Arc<Kinds>;

    async fn pre_start(
        &self,
        _: ActorRef<()>,
        kinds: Arc<Kinds>,
    ) -> Result<Arc<Kinds>, ActorProcessingErr> {
        Ok(kinds)
    }

    /// Overrides ractor's default, which stops the supervisor when any child stops: one
    /// actor's failure is counted and forgotten and touches no other actor. The next message
    /// to that id respawns it from the database.
    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        event: SupervisionEvent,
        kinds: &mut Arc<Kinds>,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::warn!(shard = self.index, actor = ?cell.get_name(), error = %err, "actor failed; it restarts from the database on its next message");
                kinds.forget(&cell, true);
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => kinds.forget(&cell, false),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
