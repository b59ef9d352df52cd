//! Failed authentications counted by every node together (PostgreSQL).
//!
//! An address's failures are one window in the database (`store::rate_windows`, key
//! `auth:<address>`, exact at this limit). A failure is counted after its credential was
//! examined, by the one statement that takes a slot of the window or refuses it when the
//! window is full: concurrent failures at any number of nodes are serialized by the window's
//! row, so exactly `limit` failures of an address are answered 401 in any 60 seconds. Valid
//! credentials never touch the window: a request that authenticates costs no database work
//! here, whoever else fails from its address.
//!
//! A node that learns that an address's window is full (a refused take) remembers until when,
//! and answers the address's further failures 429 from memory, without writing to the
//! database, until a slot frees. What it remembers is never later than the database's answer
//! (the instant is taken before the statement runs), so a failure is never refused from memory
//! while the window has room.

use crate::http::error::ApiError;
use crate::http::rate_limit::{WINDOW_MS, whole_seconds};
use crate::store::Store;
use crate::store::rate_windows::{Take, Window};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every this many refusals learned, addresses whose window has room again are forgotten, so
/// that limits of many addresses do not accumulate for the life of the process.
const SWEEP_EVERY: u64 = 4096;

pub(super) struct SharedFailures {
    store: Store,
    limit: u64,
    /// Until when each address's window is full, as last learned.
    limited_until: DashMap<String, Instant>,
    learned: AtomicU64,
}

impl SharedFailures {
    pub(super) fn new(store: Store, limit: u64) -> Self {
        Self {
            store,
            limit,
            limited_until: DashMap::new(),
            learned: AtomicU64::new(0),
        }
    }

    /// Counts one failure of the address `key` (`Ok`: counted), or 429 with the whole seconds
    /// until its window has room: from memory when this node learned it is full, else as the
    /// database's take answers. `now` is taken before the statement runs.
    pub(super) async fn failed(&self, key: &str, now: Instant) -> Result<(), ApiError> {
        if let Some(retry_after_secs) = self.limited_for(key, now) {
            return Err(ApiError::TooManyFailedAuthentications { retry_after_secs });
        }
        let window_key = format!("auth:{key}");
        let window = Window {
            key: &window_key,
            limit: self.limit,
            length_ms: WINDOW_MS,
            at_ms: None,
        };
        match self.store.take_rate_slot(window).await? {
            Take::Taken { .. } => Ok(()),
            Take::Refused { wait_ms } => {
                self.learn(key, now, wait_ms);
                Err(ApiError::TooManyFailedAuthentications {
                    retry_after_secs: whole_seconds(wait_ms),
                })
            }
        }
    }

    /// The whole seconds until `key`'s window has room, as last learned; `None` when it has
    /// (or this node never learned otherwise).
    fn limited_for(&self, key: &str, now: Instant) -> Option<u64> {
        let until = *self.limited_until.get(key)?;
        let wait = until.saturating_duration_since(now);
        if wait.is_zero() {
            self.limited_until.remove_if(key, |_, until| *until <= now);
            return None;
        }
        Some(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
    }

    fn learn(&self, key: &str, now: Instant, wait_ms: i64) {
        if self.learned.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.limited_until.retain(|_, until| *until > now);
        }
        let until = now + Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
        self.limited_until.insert(key.to_owned(), until);
    }
}
