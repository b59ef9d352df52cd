//! Failed authentications counted by every node together (PostgreSQL).
//!
//! An address's failures are one window in the database (`store::rate_windows`, key
//! `auth:<address>`, exact at this limit). Reading it before every credential would put a
//! database read in front of every API call, so a node reads it only where a failure is
//! likely:
//! - A node remembers the addresses it has seen fail in the last minute (suspects). A
//!   suspect's credential is examined only once a slot of the shared window is reserved for
//!   it: a full window answers 429 with nothing examined, and the slot of a credential that
//!   turns out valid is given back. Across nodes, suspects' examinations are exact.
//! - An address this node has not seen fail is examined at once (its requests touch no
//!   database for this), and a failure is then recorded in the shared window. If failures at
//!   other nodes had already filled it, that one examination was beyond the limit.
//! - A node that learns that an address's window is full (a refused reservation, or a failure
//!   that filled it) answers the address 429 until a slot frees, from memory, whatever
//!   credential comes (a valid cached key included), as one node does.
//!
//! The bound: a node examines beyond the limit only an address it has not seen fail in the
//! last 60 seconds, which then is its suspect for 60 seconds; so each node does so at most once
//! per address in any 60 seconds, and at most `limit` + (number of nodes) failures of an address
//! are examined in any 60 seconds. With a single node, exactly `limit` (it sees every failure).
//! A node that has not learned of a limit still serves a valid cached key from that address,
//! until the address fails there.

use crate::api::error::ApiError;
use crate::api::rate_limit::{WINDOW, WINDOW_MS, whole_seconds};
use crate::store::Store;
use crate::store::rate_windows::{Take, Window};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every this many failures, addresses neither suspect nor limited are forgotten, so that
/// failures from many addresses do not accumulate for the life of the process.
const SWEEP_EVERY: u64 = 4096;

pub(super) struct SharedFailures {
    store: Store,
    limit: u64,
    known: DashMap<String, Known>,
    failures: AtomicU64,
}

/// What this node knows of an address.
struct Known {
    /// Its latest failure at this node: a suspect for a window after it.
    last_failure: Instant,
    /// Until when the shared window is full, as last learned.
    limited_until: Option<Instant>,
}

impl SharedFailures {
    pub(super) fn new(store: Store, limit: u64) -> Self {
        Self {
            store,
            limit,
            known: DashMap::new(),
            failures: AtomicU64::new(0),
        }
    }

    /// From memory: `Err` with the whole seconds until the address's window, as last learned,
    /// has room.
    pub(super) fn admit(&self, key: &str, now: Instant) -> Result<(), u64> {
        let Some(until) = self.known.get(key).and_then(|known| known.limited_until) else {
            return Ok(());
        };
        let wait = until.saturating_duration_since(now);
        if wait.is_zero() {
            return Ok(());
        }
        Err(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
    }

    /// A slot of the shared window for a suspect's examination (`Some(instant)` to give back
    /// if the credential is valid); `None` for an address not suspect here.
    pub(super) async fn reserve(&self, key: &str, now: Instant) -> Result<Option<i64>, ApiError> {
        let suspect = self
            .known
            .get(key)
            .is_some_and(|known| now.saturating_duration_since(known.last_failure) < WINDOW);
        if !suspect {
            return Ok(None);
        }
        let window_key = window_key(key);
        match self.store.take_rate_slot(self.window(&window_key)).await? {
            Take::Taken { at_ms } => Ok(Some(at_ms)),
            Take::Refused { wait_ms } => {
                self.learn(key, now, wait_ms);
                Err(ApiError::TooManyFailedAuthentications {
                    retry_after_secs: whole_seconds(wait_ms),
                })
            }
        }
    }

    /// The slot of an examination that was no failure, back. A failure to give it back only
    /// leaves one failure too many counted for a minute.
    pub(super) async fn release(&self, key: &str, reservation: Option<i64>) {
        let Some(at_ms) = reservation else {
            return;
        };
        if let Err(err) = self
            .store
            .give_back_rate_slot(&window_key(key), at_ms)
            .await
        {
            tracing::warn!(error = %err, "could not give back a failed-authentication slot");
        }
    }

    /// Counts a failure (in its reserved slot, or in a new one), and learns whether the
    /// address is now limited. The address is a suspect from here on, before the database is
    /// asked: if the database cannot be reached, this node examines nothing more of it.
    pub(super) async fn failed(&self, key: &str, reservation: Option<i64>) -> Result<(), ApiError> {
        let now = Instant::now();
        self.sweep_now_and_then(now);
        self.known
            .entry(key.to_owned())
            .and_modify(|known| known.last_failure = now)
            .or_insert(Known {
                last_failure: now,
                limited_until: None,
            });
        let window_key = window_key(key);
        let window = self.window(&window_key);
        if reservation.is_none()
            && let Take::Refused { wait_ms } = self.store.take_rate_slot(window).await?
        {
            // Beyond the limit: failures elsewhere had filled the window.
            self.learn(key, now, wait_ms);
            return Ok(());
        }
        if let Some(wait_ms) = self.store.rate_window_full_for(window).await? {
            self.learn(key, now, wait_ms);
        }
        Ok(())
    }

    fn window<'a>(&self, window_key: &'a str) -> Window<'a> {
        Window {
            key: window_key,
            limit: self.limit,
            length_ms: WINDOW_MS,
            at_ms: None,
        }
    }

    fn learn(&self, key: &str, now: Instant, wait_ms: i64) {
        let until = now + Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
        self.known
            .entry(key.to_owned())
            .and_modify(|known| known.limited_until = Some(until))
            .or_insert(Known {
                last_failure: now,
                limited_until: Some(until),
            });
    }

    fn sweep_now_and_then(&self, now: Instant) {
        if self.failures.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY != SWEEP_EVERY - 1 {
            return;
        }
        self.known.retain(|_, known| {
            now.saturating_duration_since(known.last_failure) < WINDOW
                || known.limited_until.is_some_and(|until| until > now)
        });
    }
}

/// The database's key of an address's window.
fn window_key(key: &str) -> String {
    format!("auth:{key}")
}
