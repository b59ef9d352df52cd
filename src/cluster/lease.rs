//! The lease loop: every `renew` this node renews its heartbeat and its leases, forgets the
//! shards it lost, gives back what it holds beyond its fair share and takes free shards up to
//! it. The fair share is 256 / live nodes (the first `256 % n` nodes by id take one more), so
//! shards spread evenly and move when a node joins or leaves.
//!
//! A lease is trusted until `sent + ttl * 9/10` on this process's monotonic clock, `sent` being
//! the instant before the renewal (or takeover) was sent: the database set the expiry from its
//! own now, which came later, so this node stops trusting a lease before any other node may
//! take it, whatever the two clocks say. A node paused longer than that (SIGSTOP, a long GC-like
//! stall) finds its leases untrusted when it resumes, and its first write is fenced anyway.

use crate::store::Store;
use crate::store::ownership::{Held, Ownership, SHARDS};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// How long a planned handover waits for the work in flight on its shards (a webhook attempt
/// on the wire, an actor's message) to finish and record itself, at most: recorded by this
/// node, it is not done again by the next owner.
const DRAIN_BOUND: Duration = Duration::from_secs(1);

/// What the lease loop asks of the runtime before giving shards back.
pub trait Drain: Send + Sync {
    /// Completes once nothing of `shards` is in flight on this node, or after `bound`.
    fn drain<'a>(
        &'a self,
        shards: &'a [u16],
        bound: Duration,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// Shards given back per pass when this node holds more than its share, so that a joining node
/// takes load over a few passes instead of all at once.
const RELEASE_PER_PASS: usize = 64;

/// What changed in this node's holdings, for the runtime (which stops a lost shard's actors
/// and rescans a gained shard's timers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Gained(u16),
    Lost(u16),
}

/// Timing of the leases (`Config::lease_ttl_ms`, `Config::lease_renew_ms`).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ttl: Duration,
    pub renew: Duration,
}

impl Timing {
    fn trusted_until(&self, sent: Instant) -> Instant {
        sent + self.ttl.mul_f64(0.9)
    }
}

/// The running lease loop of this node.
pub struct Leases {
    store: Store,
    ownership: Arc<Ownership>,
    url: String,
    timing: Timing,
    changes: UnboundedSender<Change>,
    drain: Arc<dyn Drain>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Leases {
    /// Announces the node, takes its first shards, and starts the loop.
    pub async fn start(
        store: Store,
        ownership: Arc<Ownership>,
        url: String,
        timing: Timing,
        changes: UnboundedSender<Change>,
        drain: Arc<dyn Drain>,
    ) -> anyhow::Result<Arc<Self>> {
        let leases = Arc::new(Self {
            store,
            ownership,
            url,
            timing,
            changes,
            drain,
            task: std::sync::Mutex::new(None),
        });
        leases.pass().await?;
        let looping = Arc::clone(&leases);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(looping.timing.renew) => {}
                    _ = looping.ownership.nudged() => {}
                }
                if let Err(err) = looping.pass().await {
                    tracing::warn!(error = %err, "lease pass failed; leases not renewed are trusted until their deadline");
                }
            }
        });
        if let Ok(mut slot) = leases.task.lock() {
            *slot = Some(task);
        }
        Ok(leases)
    }

    fn node(&self) -> &str {
        self.ownership.node()
    }

    fn ttl_ms(&self) -> i64 {
        self.timing.ttl.as_millis() as i64
    }

    /// One pass: heartbeat, renew, forget what was lost, then balance.
    async fn pass(&self) -> anyhow::Result<()> {
        let sent = Instant::now();
        self.store
            .node_heartbeat(self.node(), &self.url, self.ttl_ms())
            .await?;
        let renewed = self.store.renew_leases(self.node(), self.ttl_ms()).await?;
        let until = self.timing.trusted_until(sent);
        let mine = self.ownership.entries();
        for (shard, held) in &mine {
            match renewed.iter().find(|(s, _)| s == shard) {
                Some((_, epoch)) if *epoch == held.epoch => {
                    self.ownership.hold(
                        *shard,
                        Held {
                            epoch: *epoch,
                            until,
                        },
                    );
                }
                _ => self.lost(*shard),
            }
        }
        // A lease the database gives this node that it does not know of (a takeover whose
        // answer was lost): given back, since its epoch was never trusted here.
        for (shard, epoch) in &renewed {
            if !mine.iter().any(|(s, h)| s == shard && h.epoch == *epoch) {
                self.store
                    .release_shard(self.node(), *shard, *epoch)
                    .await?;
            }
        }
        self.balance().await
    }

    /// Gives back shards beyond the fair share, or takes free ones up to it.
    async fn balance(&self) -> anyhow::Result<()> {
        // A node that had this node's URL is dead (this node answers there now): not counted.
        let nodes: Vec<_> = self
            .store
            .live_nodes()
            .await?
            .into_iter()
            .filter(|n| n.id == self.node() || n.url != self.url)
            .collect();
        let count = nodes.len().max(1);
        let index = nodes
            .iter()
            .position(|n| n.id == self.node())
            .unwrap_or(count - 1);
        let share = usize::from(SHARDS) / count + usize::from(index < usize::from(SHARDS) % count);
        let held = self.ownership.entries();
        if held.len() > share {
            let count = (held.len() - share).min(RELEASE_PER_PASS);
            let mut extra: Vec<(u16, Held)> = held;
            extra.sort_by_key(|(shard, _)| std::cmp::Reverse(*shard));
            extra.truncate(count);
            self.give_back(extra).await?;
        } else if held.len() < share {
            let wanted = (share - held.len()) as u64;
            let free = self
                .store
                .free_shards(self.node(), &self.url, wanted)
                .await?;
            let sent = Instant::now();
            // Shards whose previous owner's writes still hold their fence lock are not taken
            // now; the next pass tries again.
            for (shard, epoch) in self
                .store
                .acquire_shards(self.node(), &self.url, &free, self.ttl_ms())
                .await?
            {
                self.ownership.hold(
                    shard,
                    Held {
                        epoch,
                        until: self.timing.trusted_until(sent),
                    },
                );
                let _ = self.changes.send(Change::Gained(shard));
            }
        }
        Ok(())
    }

    fn lost(&self, shard: u16) {
        if self.ownership.lose(shard) {
            tracing::info!(shard, "shard lost to another node");
        }
        let _ = self.changes.send(Change::Lost(shard));
    }

    /// Hands `shards` over: no new work starts on them, the work in flight finishes and
    /// records itself (bounded by `DRAIN_BOUND`), then this node forgets them (no write of
    /// its passes the fence from here on) and releases their leases.
    async fn give_back(&self, shards: Vec<(u16, Held)>) -> anyhow::Result<()> {
        let numbers: Vec<u16> = shards.iter().map(|(shard, _)| *shard).collect();
        self.ownership.drain(&numbers);
        self.drain.drain(&numbers, DRAIN_BOUND).await;
        let mut failed = None;
        for (shard, held) in shards {
            self.ownership.lose(shard);
            let _ = self.changes.send(Change::Lost(shard));
            if let Err(err) = self
                .store
                .release_shard(self.node(), shard, held.epoch)
                .await
            {
                // It moves when its lease expires.
                failed = Some(err);
            }
        }
        failed.map_or(Ok(()), |err| Err(err.into()))
    }

    /// Graceful shutdown: marks the node leaving, gives back every shard at once (the other
    /// nodes take them on their next pass), and removes the node's row.
    pub async fn leave(&self) {
        if let Some(task) = self.task.lock().ok().and_then(|mut t| t.take()) {
            task.abort();
        }
        if let Err(err) = self.store.node_leaving(self.node()).await {
            tracing::warn!(error = %err, "could not mark this node as leaving");
        }
        if let Err(err) = self.give_back(self.ownership.entries()).await {
            tracing::warn!(error = %err, "could not give every shard back; the rest move when their leases expire");
        }
        if let Err(err) = self.store.node_gone(self.node()).await {
            tracing::warn!(error = %err, "could not remove this node's row");
        }
    }
}
