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

use super::{Held, Ownership, SHARDS};
use crate::store::Store;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

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
    ) -> anyhow::Result<Arc<Self>> {
        let leases = Arc::new(Self {
            store,
            ownership,
            url,
            timing,
            changes,
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
            let mut extra: Vec<(u16, Held)> = held;
            extra.sort_by_key(|(shard, _)| std::cmp::Reverse(*shard));
            for (shard, held) in extra
                .into_iter()
                .take((self.ownership.entries().len() - share).min(RELEASE_PER_PASS))
            {
                self.give_back(shard, held.epoch).await?;
            }
        } else if held.len() < share {
            let wanted = (share - held.len()) as u64;
            for shard in self
                .store
                .free_shards(self.node(), &self.url, wanted)
                .await?
            {
                let sent = Instant::now();
                match self
                    .store
                    .acquire_shard(self.node(), &self.url, shard, self.ttl_ms())
                    .await
                {
                    Ok(Some(epoch)) => {
                        self.ownership.hold(
                            shard,
                            Held {
                                epoch,
                                until: self.timing.trusted_until(sent),
                            },
                        );
                        let _ = self.changes.send(Change::Gained(shard));
                    }
                    // Taken by another node meanwhile.
                    Ok(None) => {}
                    // The previous owner's writes still hold the fence lock (a paused node
                    // until the database ends its transaction): tried again next pass.
                    Err(err) => {
                        tracing::debug!(shard, error = %err, "shard takeover postponed");
                    }
                }
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

    /// Stops this node's work on `shard` (no new write passes the fence from here on), then
    /// releases its lease.
    async fn give_back(&self, shard: u16, epoch: i64) -> anyhow::Result<()> {
        self.ownership.lose(shard);
        let _ = self.changes.send(Change::Lost(shard));
        self.store.release_shard(self.node(), shard, epoch).await?;
        Ok(())
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
        for (shard, held) in self.ownership.entries() {
            if let Err(err) = self.give_back(shard, held.epoch).await {
                tracing::warn!(shard, error = %err, "could not give a shard back; it moves when its lease expires");
            }
        }
        if let Err(err) = self.store.node_gone(self.node()).await {
            tracing::warn!(error = %err, "could not remove this node's row");
        }
    }
}
