//! `StoreTxn`: the one transaction in which a change commits with its charges' money and its
//! events (and their webhook deliveries); `Store::unit` runs one on the writer's thread on
//! SQLite. In a cluster it fences the shards it writes (`fence`, `fence_all`).

use super::{Store, StoreResult};
use crate::ids::WebhookEndpointId;
use sea_orm::{DatabaseTransaction, TransactionTrait};

/// An open transaction; dropped without `commit`, it rolls back.
pub struct StoreTxn {
    /// The transaction, or on SQLite the unit's savepoint in the open group (the group's
    /// transaction itself for the unit that opened it). Declared before `membership` so that
    /// a drop rolls it back before the group lock is let go.
    pub(super) txn: DatabaseTransaction,
    pub(super) membership: Option<super::group::Membership>,
    pub(super) signal: super::webhooks::DeliverySignal,
    /// Endpoints given deliveries in this transaction, announced after it commits.
    pub(super) touched: std::sync::Mutex<Vec<WebhookEndpointId>>,
    pub(super) started: std::time::Instant,
    pub(super) ownership: std::sync::Arc<crate::store::ownership::Ownership>,
    /// The shards whose fence lock this transaction holds (`store::cluster`).
    pub(super) fenced: std::sync::Mutex<Vec<u16>>,
    /// Whether it issues invoices (`Store::issuing`).
    pub(super) issuing: super::Issuing,
}

impl Store {
    /// Runs one unit of work: `work` gets a fresh `StoreTxn` and commits it (dropping it rolls
    /// back). On SQLite the whole unit runs on the writer's own thread (`group::WriteLane`),
    /// which is what the hot paths (a renewal's charge and its outcome) use; on PostgreSQL, whose
    /// writers run side by side, it runs in place. It runs to its end even if the caller stops
    /// waiting, so a unit is never cut off between two statements.
    pub async fn unit<T, E, F, Fut>(&self, work: F) -> Result<T, E>
    where
        F: FnOnce(StoreTxn) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: From<super::StoreError> + Send + 'static,
    {
        use tracing::Instrument;
        let store = self.clone();
        let run = async move { work(store.begin().await?).await }.in_current_span();
        match &self.lane {
            Some(lane) => lane.run(run).await.map_err(super::StoreError::from)?,
            None => run.await,
        }
    }

    pub async fn begin(&self) -> StoreResult<StoreTxn> {
        let started = std::time::Instant::now();
        let (txn, membership) = match &self.group {
            Some(group) => {
                let (txn, membership) = group.begin().await?;
                (txn, Some(membership))
            }
            None => (self.writer().begin().await?, None),
        };
        Ok(self.txn_of(txn, membership, started))
    }

    /// A batch's transaction (`store::batch`): on PostgreSQL on the batch writer's own
    /// connections, elsewhere as `begin`.
    pub(super) async fn begin_batch(&self) -> StoreResult<StoreTxn> {
        match &self.batch_writer {
            Some((_, db)) => {
                let started = std::time::Instant::now();
                Ok(self.txn_of(db.begin().await?, None, started))
            }
            None => self.begin().await,
        }
    }

    fn txn_of(
        &self,
        txn: DatabaseTransaction,
        membership: Option<super::group::Membership>,
        started: std::time::Instant,
    ) -> StoreTxn {
        StoreTxn {
            txn,
            membership,
            signal: self.signal.clone(),
            touched: std::sync::Mutex::new(Vec::new()),
            started,
            ownership: std::sync::Arc::clone(&self.ownership),
            fenced: std::sync::Mutex::new(Vec::new()),
            issuing: self.issuing,
        }
    }
}

impl StoreTxn {
    /// What this node holds (new subscriptions are placed in its shards).
    pub fn ownership(&self) -> &crate::store::ownership::Ownership {
        &self.ownership
    }

    /// The open transaction, for the other store modules' `StoreTxn` methods.
    pub(super) fn conn(&self) -> &DatabaseTransaction {
        &self.txn
    }

    /// In a cluster, fences the shards of the subscriptions `ids` at once for the rest of this
    /// transaction (`cluster::leases_hold`), before a batch writes them; false when this node
    /// no longer holds one of them (nothing is written then: each write alone finds out which,
    /// as `Fenced`). True for a single node.
    pub(super) async fn fence_all<'a>(
        &self,
        ids: impl Iterator<Item = &'a str>,
    ) -> StoreResult<bool> {
        if self.ownership.is_single() {
            return Ok(true);
        }
        let mut held: Vec<(u16, i64)> = Vec::new();
        for shard in ids.map(crate::store::ownership::shard_of) {
            if held.iter().any(|(s, _)| *s == shard) {
                continue;
            }
            let Some(epoch) = self.ownership.epoch(shard) else {
                return Ok(false);
            };
            held.push((shard, epoch));
        }
        if !super::cluster::leases_hold(&self.txn, &held).await? {
            return Ok(false);
        }
        if let Ok(mut fenced) = self.fenced.lock() {
            fenced.extend(held.iter().map(|(shard, _)| *shard));
        }
        Ok(true)
    }

    /// In a cluster, the epoch under which this node holds `shard`, after taking the shard's
    /// fence lock for the rest of this transaction (once per shard); `None` for a single node.
    /// A shard this node does not hold (or no longer trusts) is `Fenced` before any write.
    pub(super) async fn fence(&self, shard: u16) -> StoreResult<Option<i64>> {
        if self.ownership.is_single() {
            return Ok(None);
        }
        let epoch = self.ownership.epoch(shard).ok_or_else(|| {
            metrics::counter!("cluster_fenced_writes_total").increment(1);
            super::StoreError::Fenced(shard)
        })?;
        let first = self
            .fenced
            .lock()
            .map(|mut locked| {
                let first = !locked.contains(&shard);
                if first {
                    locked.push(shard);
                }
                first
            })
            .unwrap_or(true);
        if first {
            super::cluster::lock_shared(&self.txn, shard).await?;
        }
        Ok(Some(epoch))
    }

    /// Notes endpoints given deliveries in this transaction, announced once it commits.
    pub(super) fn touch(&self, endpoint_ids: impl IntoIterator<Item = WebhookEndpointId>) {
        if let Ok(mut touched) = self.touched.lock() {
            touched.extend(endpoint_ids);
        }
    }

    /// Commits, then wakes the endpoints that were given deliveries. `db_transaction_seconds`
    /// records the time from `begin` (waiting for the connection and the writer lock included)
    /// to the end of the commit.
    pub async fn commit(self) -> StoreResult<()> {
        let StoreTxn {
            txn,
            membership,
            signal,
            touched,
            started,
            ..
        } = self;
        let result = match membership {
            Some(membership) => membership.commit(txn).await,
            None => txn.commit().await,
        };
        metrics::histogram!("db_transaction_seconds").record(started.elapsed().as_secs_f64());
        result?;
        let mut touched = touched.into_inner().unwrap_or_default();
        touched.sort();
        touched.dedup();
        signal.announce(touched);
        Ok(())
    }
}
