//! The one clock: real time plus each account's test-clock offset (CONTRACT §10).

use crate::ids::AccountId;
use crate::store::{Store, StoreResult};
use dashmap::DashMap;
use std::sync::Arc;

#[derive(Clone)]
pub struct Clock {
    offsets: Arc<DashMap<String, i64>>,
    store: Store,
}

impl Clock {
    pub fn new(store: Store) -> Self {
        Self {
            offsets: Arc::new(DashMap::new()),
            store,
        }
    }

    /// The account's current instant in milliseconds.
    pub async fn now_ms(&self, account: &AccountId) -> StoreResult<i64> {
        let offset = match self.offsets.get(account.as_str()) {
            Some(offset) => *offset,
            None => {
                let offset = self
                    .store
                    .account(account)
                    .await?
                    .map_or(0, |a| a.clock_offset_ms);
                self.offsets.insert(account.as_str().to_owned(), offset);
                offset
            }
        };
        Ok(chrono::Utc::now().timestamp_millis() + offset)
    }

    /// Takes `offset_ms` as the account's offset (another node moved the clock).
    pub fn set_offset(&self, account: &str, offset_ms: i64) {
        self.offsets.insert(account.to_owned(), offset_ms);
    }

    /// Forgets every cached offset (this node took shards over: it may have missed a move
    /// while it was cut off), so the next reads come from the database.
    pub fn forget_all(&self) {
        self.offsets.clear();
    }

    /// Moves the account's clock forward; returns the new instant.
    pub async fn advance(&self, account: &AccountId, millis: i64) -> StoreResult<i64> {
        let current = self.now_ms(account).await? - chrono::Utc::now().timestamp_millis();
        let offset = current + millis;
        self.store.set_clock_offset(account, offset).await?;
        self.offsets.insert(account.as_str().to_owned(), offset);
        Ok(chrono::Utc::now().timestamp_millis() + offset)
    }

    /// The account's offset as this node has it.
    pub async fn offset_ms(&self, account: &AccountId) -> StoreResult<i64> {
        Ok(self.now_ms(account).await? - chrono::Utc::now().timestamp_millis())
    }
}
