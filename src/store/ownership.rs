//! Which shards this node holds. Work is split into [`SHARDS`] shards; a
//! subscription's and a webhook endpoint's shard is [`shard_of`] its id. Each shard is held by
//! one node at a time under a lease (`cluster::lease`: acquired, renewed and handed over through the
//! `shard_leases` table, with an epoch that every takeover moves forward), and this process's
//! view of what it holds is its [`Ownership`]: the store fences every write of a subscription
//! or a delivery with it (`store::cluster`), the runtime spawns actors and loads timers only for
//! held shards, and a message for another node's shard is forwarded to that node
//! (`actors::forward`).
//!
//! SQLite is one process's file: its `Ownership` is `single_node`, every shard held forever,
//! with no lease, no fence and no forwarding.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// How many shards the work is split into. Fixed: an id's shard never changes.
pub const SHARDS: u16 = 256;

/// The shard of an id: its last byte. Ids end in the random bits of a UUIDv7 (`ids`), so
/// shards are uniform, and the rule is simple enough for SQL to apply too
/// (`store::cluster::shard_suffixes`). An id that does not end in two hex digits (none of
/// ours) falls back to a hash.
pub fn shard_of(id: &str) -> u16 {
    let tail = id.get(id.len().saturating_sub(2)..).unwrap_or("");
    match u8::from_str_radix(tail, 16) {
        Ok(byte) if tail.len() == 2 && tail.bytes().all(|b| !b.is_ascii_uppercase()) => {
            u16::from(byte)
        }
        _ => {
            // FNV-1a: stable across processes and versions, unlike std's hasher.
            let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            (hash % u64::from(SHARDS)) as u16
        }
    }
}

/// A shard this node holds: the epoch it was granted and the instant (this process's monotonic
/// clock) until which the lease can be trusted without renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub epoch: i64,
    pub until: Instant,
}

/// What this node holds. Cheap to read on every write and every message.
pub struct Ownership {
    node: String,
    single: bool,
    held: RwLock<Vec<Option<Held>>>,
    /// Shards being handed over: their writes in flight may still finish (the lease is still
    /// this node's), but nothing new starts (`owns` is false).
    draining: Vec<AtomicBool>,
    /// Bumped on every gain, so that the scheduler rescans (a gained shard's timers may lie
    /// before its marks) and the reconciler asks about the gained shards' pending charges.
    gains: tokio::sync::watch::Sender<u64>,
    /// The shards gained since the reconciler last took them (`take_gained`): on a gain it
    /// asks about their pending charges only, not those of every shard held, whose rechecks
    /// keep their own schedule.
    gained: std::sync::Mutex<Vec<u16>>,
    /// Wakes the lease loop before its next pass (another node gave its shards back).
    nudge: tokio::sync::Notify,
}

impl Ownership {
    /// One process owning everything (SQLite): every shard, forever, epoch 0.
    pub fn single_node() -> Self {
        Self::new("single".to_owned(), true)
    }

    /// A node of a cluster, holding nothing until its lease loop acquires shards.
    pub fn clustered(node: String) -> Self {
        Self::new(node, false)
    }

    fn new(node: String, single: bool) -> Self {
        Self {
            node,
            single,
            held: RwLock::new(vec![None; usize::from(SHARDS)]),
            draining: (0..SHARDS).map(|_| AtomicBool::new(false)).collect(),
            gains: tokio::sync::watch::channel(0).0,
            gained: std::sync::Mutex::new(Vec::new()),
            nudge: tokio::sync::Notify::new(),
        }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether this is a single process with no cluster (SQLite).
    pub fn is_single(&self) -> bool {
        self.single
    }

    /// The epoch under which this node holds `shard`, if it holds it and its lease can still be
    /// trusted now.
    pub fn epoch(&self, shard: u16) -> Option<i64> {
        if self.single {
            return Some(0);
        }
        let held = self.held.read().ok()?;
        let entry = (*held.get(usize::from(shard))?)?;
        (entry.until > Instant::now()).then_some(entry.epoch)
    }

    /// Whether this node may start work on the subscription or endpoint `id` now: it holds
    /// the shard and is not handing it over.
    pub fn owns(&self, id: &str) -> bool {
        let shard = shard_of(id);
        !self.is_draining(shard) && self.epoch(shard).is_some()
    }

    fn is_draining(&self, shard: u16) -> bool {
        self.draining[usize::from(shard)].load(Ordering::Acquire)
    }

    /// Stops new work on `shards`, which this node is about to give back; what is in flight
    /// may still write until the shards are lost.
    pub(crate) fn drain(&self, shards: &[u16]) {
        for shard in shards {
            self.draining[usize::from(*shard)].store(true, Ordering::Release);
        }
    }

    /// The shards this node holds and works on now (leases still trusted, not handed over).
    pub fn held_shards(&self) -> Vec<u16> {
        if self.single {
            return (0..SHARDS).collect();
        }
        let now = Instant::now();
        self.held.read().map_or_else(
            |_| Vec::new(),
            |held| {
                held.iter()
                    .enumerate()
                    .filter(|(shard, h)| {
                        h.is_some_and(|h| h.until > now) && !self.is_draining(*shard as u16)
                    })
                    .map(|(shard, _)| shard as u16)
                    .collect()
            },
        )
    }

    /// Every shard with an entry and its entry, trusted or not (the lease loop renews them).
    pub(crate) fn entries(&self) -> Vec<(u16, Held)> {
        self.held.read().map_or_else(
            |_| Vec::new(),
            |held| {
                held.iter()
                    .enumerate()
                    .filter_map(|(shard, h)| h.map(|h| (shard as u16, h)))
                    .collect()
            },
        )
    }

    /// Records a shard gained (or renewed, with a later `until`). The lease loop's (tests
    /// drive it by hand).
    pub fn hold(&self, shard: u16, held: Held) {
        let gained = match self.held.write() {
            Ok(mut all) => {
                let slot = &mut all[usize::from(shard)];
                let gained = slot.is_none_or(|old| old.epoch != held.epoch);
                *slot = Some(held);
                gained
            }
            Err(_) => false,
        };
        if gained {
            if let Ok(mut list) = self.gained.lock()
                && !list.contains(&shard)
            {
                list.push(shard);
            }
            self.gains.send_modify(|n| *n += 1);
            metrics::gauge!("cluster_shards_held").increment(1.0);
        }
    }

    /// Forgets a shard (released, lost, or found taken by a fenced write).
    pub(crate) fn lose(&self, shard: u16) -> bool {
        let lost = self
            .held
            .write()
            .map(|mut all| all[usize::from(shard)].take().is_some())
            .unwrap_or(false);
        self.draining[usize::from(shard)].store(false, Ordering::Release);
        if lost {
            metrics::gauge!("cluster_shards_held").decrement(1.0);
        }
        lost
    }

    /// A fresh subscription id in a shard this node holds, when it holds any: the new
    /// subscription's actor is then local, and its first charge is not forwarded (Orleans
    /// places new grains the same way). Ids stay uniform over the shards this node holds.
    pub fn local_subscription_id(&self) -> crate::ids::SubscriptionId {
        let mut id = crate::ids::SubscriptionId::generate();
        if self.single {
            return id;
        }
        // Holding k of 256 shards, 64 tries miss only when k is tiny: (1 - k/256)^64.
        for _ in 0..64 {
            if self.epoch(shard_of(id.as_str())).is_some() {
                break;
            }
            id = crate::ids::SubscriptionId::generate();
        }
        id
    }

    /// Asks the lease loop for a pass now.
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// Completes when a pass is asked for.
    pub(crate) async fn nudged(&self) {
        self.nudge.notified().await;
    }

    /// The shards gained since the last call, each once.
    pub fn take_gained(&self) -> Vec<u16> {
        self.gained
            .lock()
            .map(|mut list| std::mem::take(&mut *list))
            .unwrap_or_default()
    }

    /// A receiver that changes whenever a shard is gained.
    pub fn gains(&self) -> tokio::sync::watch::Receiver<u64> {
        self.gains.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_ids_shard_is_its_last_byte_and_spreads_over_every_shard() {
        assert_eq!(shard_of("sub_0193aa00000000000000000000000aff"), 255);
        assert_eq!(shard_of("we_0193aa000000000000000000000000"), 0);
        let mut seen = vec![0u32; usize::from(SHARDS)];
        for _ in 0..20_000 {
            seen[usize::from(shard_of(crate::ids::SubscriptionId::generate().as_str()))] += 1;
        }
        // 20,000 ids over 256 shards: about 78 each; none empty, none more than twice that.
        assert!(seen.iter().all(|&n| n > 0 && n < 160), "{seen:?}");
        // Not ours, but stable and in range.
        assert_eq!(shard_of("x"), shard_of("x"));
        assert!(shard_of("not-hex-zz") < SHARDS);
    }

    /// N7: a gain names the shards gained, so that the reconciler asks about their charges
    /// only; a renewal of a lease (same epoch) is no gain.
    #[test]
    fn the_gained_shards_are_taken_once_and_a_renewal_is_no_gain() {
        let ownership = Ownership::clustered("node_a".into());
        let lease = |epoch| Held {
            epoch,
            until: Instant::now() + Duration::from_secs(60),
        };
        ownership.hold(7, lease(1));
        ownership.hold(9, lease(1));
        ownership.hold(7, lease(1));
        assert_eq!(ownership.take_gained(), vec![7, 9]);
        assert_eq!(ownership.take_gained(), Vec::<u16>::new());
        ownership.hold(9, lease(1));
        assert_eq!(ownership.take_gained(), Vec::<u16>::new());
        ownership.hold(9, lease(2));
        assert_eq!(ownership.take_gained(), vec![9]);
    }

    #[test]
    fn a_lease_is_trusted_only_until_its_deadline_and_a_single_node_holds_everything() {
        let ownership = Ownership::clustered("node_a".into());
        assert_eq!(ownership.epoch(7), None);
        ownership.hold(
            7,
            Held {
                epoch: 3,
                until: Instant::now() + Duration::from_secs(60),
            },
        );
        ownership.hold(
            8,
            Held {
                epoch: 4,
                until: Instant::now() - Duration::from_millis(1),
            },
        );
        assert_eq!(ownership.epoch(7), Some(3));
        assert_eq!(ownership.epoch(8), None, "an expired lease is not trusted");
        assert_eq!(ownership.held_shards(), vec![7]);
        assert!(ownership.lose(7));
        assert_eq!(ownership.epoch(7), None);
        let single = Ownership::single_node();
        assert_eq!(single.epoch(200), Some(0));
        assert_eq!(single.held_shards().len(), usize::from(SHARDS));
    }
}
