//! The one clock: real time plus each account's test-clock offset (CONTRACT §10).
//!
//! The offset lives in the database (`accounts.clock_offset_ms`) and only grows: an advance
//! adds to the database's value in one statement (`Store::advance_clock_offset`), never writes
//! a value computed from a node's copy. A node keeps a copy per account, and trusts it for good
//! on a single node (it alone moves the clocks) but for at most `CLUSTER_FRESHNESS` in a
//! cluster, where another node may move a clock and its broadcast may never arrive. A copy only
//! ever moves forward: a late broadcast or a slow read cannot put an older offset back. The test
//! clock's own endpoints read the database every time (`fresh_now_ms`), so that a client never
//! sees the clock go backwards from one node to the next.

use crate::ids::AccountId;
use crate::store::{Store, StoreError, StoreResult};
use dashmap::DashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a node of a cluster trusts its copy of an offset without reading it again.
const CLUSTER_FRESHNESS: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct Clock {
    offsets: Arc<DashMap<AccountId, Known>>,
    store: Store,
    /// How long a copy is trusted; `None`: for good (a single node).
    fresh_for: Option<Duration>,
}

/// An offset as this node last learned it, and when.
#[derive(Clone, Copy)]
struct Known {
    offset_ms: i64,
    learned: Instant,
}

impl Clock {
    pub fn new(store: Store) -> Self {
        let fresh_for = (!store.ownership().is_single()).then_some(CLUSTER_FRESHNESS);
        Self {
            offsets: Arc::new(DashMap::new()),
            store,
            fresh_for,
        }
    }

    /// The account's current instant in milliseconds.
    pub async fn now_ms(&self, account: &AccountId) -> StoreResult<i64> {
        let offset = match self.trusted(account) {
            Some(offset) => offset,
            None => self.read(account).await?,
        };
        Ok(chrono::Utc::now().timestamp_millis() + offset)
    }

    /// The account's current instant, its offset read from the database now.
    pub async fn fresh_now_ms(&self, account: &AccountId) -> StoreResult<i64> {
        let offset = self.read(account).await?;
        Ok(chrono::Utc::now().timestamp_millis() + offset)
    }

    /// Takes `offset_ms` as the account's offset if it is later than this node's copy
    /// (another node moved the clock and said so).
    pub fn set_offset(&self, account: &AccountId, offset_ms: i64) {
        self.learn(account, offset_ms);
    }

    /// Forgets every cached offset (this node took shards over: it may have missed a move
    /// while it was cut off), so the next reads come from the database.
    pub fn forget_all(&self) {
        self.offsets.clear();
    }

    /// Moves the account's clock `millis` forward from the offset the database holds; returns
    /// the new instant and the new offset.
    pub async fn advance(&self, account: &AccountId, millis: i64) -> StoreResult<(i64, i64)> {
        let offset = self
            .store
            .advance_clock_offset(account, millis)
            .await?
            .ok_or_else(|| StoreError::invariant(format!("no account {account}")))?;
        let offset = self.learn(account, offset);
        Ok((chrono::Utc::now().timestamp_millis() + offset, offset))
    }

    /// This node's copy of the account's offset, while it may be trusted.
    fn trusted(&self, account: &AccountId) -> Option<i64> {
        let copy = *self.offsets.get(account)?;
        self.fresh_for
            .is_none_or(|fresh_for| copy.learned.elapsed() < fresh_for)
            .then_some(copy.offset_ms)
    }

    /// Reads the account's offset from the database and keeps it.
    async fn read(&self, account: &AccountId) -> StoreResult<i64> {
        let offset = self.store.clock_offset(account).await?.unwrap_or(0);
        Ok(self.learn(account, offset))
    }

    /// Keeps `offset_ms` for the account unless this node knows a later one; returns the
    /// offset kept. Offsets only grow, so the larger one is the newer.
    fn learn(&self, account: &AccountId, offset_ms: i64) -> i64 {
        let learned = Instant::now();
        let mut copy = self
            .offsets
            .entry(account.clone())
            .or_insert(Known { offset_ms, learned });
        copy.offset_ms = copy.offset_ms.max(offset_ms);
        copy.learned = learned;
        copy.offset_ms
    }
}
