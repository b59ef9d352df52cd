//! Per-API-key rate limits counted over a sliding 60-second window.
//!
//! A token bucket (governor's GCRA) refills continuously and so lets more than N requests
//! through in some 60-second windows; the contract asks for "at most N in any 60 seconds", so
//! each key keeps the instants of its accepted requests of the last minute and a request is
//! accepted only while fewer than N remain.
//!
//! Where the instants live depends on how many nodes there can be. On SQLite (one node) they
//! stay in this process ([`LocalWindows`]), memory bounded by the limit per active key, and a
//! request costs no database write. On PostgreSQL every node counts against one window per
//! key in the database (`store::rate_windows`: one upsert per request, exact up to 200 a
//! minute, at 300 ms resolution above), so the limits hold however requests are spread over
//! the nodes.

use super::error::ApiError;
use crate::store::Store;
use crate::store::rate_windows::{Take, Window};
use dashmap::DashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const WINDOW: Duration = Duration::from_secs(60);

/// [`WINDOW`] in milliseconds, as the database counts.
pub const WINDOW_MS: i64 = WINDOW.as_millis() as i64;

/// Every this many checks, keys whose window has emptied are dropped, so that short-lived keys
/// (one per checkout session) do not accumulate for the life of the process (or, on
/// PostgreSQL, in the database).
const SWEEP_EVERY: u64 = 4096;

/// Rows of emptied windows deleted per statement of a database sweep.
const SWEEP_BATCH: u64 = 1000;

/// The rate limiter of every route: in this process on SQLite, in the database on PostgreSQL.
pub struct RateLimiter {
    local: LocalWindows,
    shared: Option<Store>,
    takes: AtomicU64,
}

impl RateLimiter {
    pub fn new(store: &Store) -> Self {
        Self {
            local: LocalWindows::default(),
            shared: store.shares_state().then(|| store.clone()),
            takes: AtomicU64::new(0),
        }
    }

    /// Counts one request under `key` if fewer than `limit` were accepted in the last
    /// [`WINDOW`]; otherwise 429 `rate_limit` with the whole seconds until a slot frees. A
    /// limit of 0 means unlimited (and costs nothing).
    pub async fn take(&self, key: &str, limit: u64) -> Result<(), ApiError> {
        if limit == 0 {
            return Ok(());
        }
        let Some(store) = &self.shared else {
            return self
                .local
                .check(key, limit, Instant::now())
                .map_err(|retry_after_secs| ApiError::RateLimited { retry_after_secs });
        };
        if self.takes.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            tokio::spawn(sweep(store.clone()));
        }
        let window = Window {
            key,
            limit,
            length_ms: WINDOW_MS,
            at_ms: None,
        };
        match store.take_rate_slot(window).await? {
            Take::Taken { .. } => Ok(()),
            Take::Refused { wait_ms } => Err(ApiError::RateLimited {
                retry_after_secs: whole_seconds(wait_ms),
            }),
        }
    }
}

/// Deletes the rows of windows that emptied; off the request's path. A failure only delays it
/// to the next sweep.
async fn sweep(store: Store) {
    loop {
        match store.purge_rate_windows(WINDOW_MS, None, SWEEP_BATCH).await {
            Ok(deleted) if deleted == SWEEP_BATCH => continue,
            Ok(_) => return,
            Err(err) => {
                tracing::warn!(error = %err, "could not purge emptied rate windows");
                return;
            }
        }
    }
}

/// Milliseconds as whole seconds, rounded up (at least 1): what `Retry-After` says.
pub fn whole_seconds(wait_ms: i64) -> u64 {
    u64::try_from(wait_ms.max(1)).unwrap_or(1).div_ceil(1000)
}

/// Sliding windows in this process's memory: the instants of each key's accepted requests.
#[derive(Default)]
pub struct LocalWindows {
    windows: DashMap<String, VecDeque<Instant>>,
    checks: AtomicU64,
}

impl LocalWindows {
    /// Accepts one request under `key` if fewer than `limit` were accepted in the last window;
    /// otherwise returns how many whole seconds until one slot frees. A limit of 0 means
    /// unlimited.
    pub fn check(&self, key: &str, limit: u64, now: Instant) -> Result<(), u64> {
        if limit == 0 {
            return Ok(());
        }
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.windows.retain(|_, window| {
                window
                    .back()
                    .is_some_and(|&at| now.saturating_duration_since(at) < WINDOW)
            });
        }
        let mut window = self.windows.entry(key.to_owned()).or_default();
        forget_older_than_window(&mut window, now);
        if (window.len() as u64) < limit {
            window.push_back(now);
            return Ok(());
        }
        Err(retry_after(&window, now))
    }
}

fn forget_older_than_window(window: &mut VecDeque<Instant>, now: Instant) {
    while window
        .front()
        .is_some_and(|&at| now.saturating_duration_since(at) >= WINDOW)
    {
        window.pop_front();
    }
}

/// Whole seconds (rounded up) until the oldest instant of a full window leaves it.
fn retry_after(window: &VecDeque<Instant>, now: Instant) -> u64 {
    let oldest = window.front().copied().unwrap_or(now);
    let wait = WINDOW.saturating_sub(now.saturating_duration_since(oldest));
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_limit_requests_in_any_window() {
        let limiter = LocalWindows::default();
        let start = Instant::now();
        for i in 0..3 {
            assert!(
                limiter
                    .check("k", 3, start + Duration::from_secs(i))
                    .is_ok()
            );
        }
        // The 4th within the same minute waits until the first leaves the window.
        assert_eq!(
            limiter.check("k", 3, start + Duration::from_secs(30)),
            Err(30)
        );
        assert!(
            limiter
                .check("k", 3, start + Duration::from_secs(60))
                .is_ok()
        );
        assert!(limiter.check("other", 3, start).is_ok());
    }

    #[test]
    fn keys_whose_window_emptied_are_swept() {
        let limiter = LocalWindows::default();
        let start = Instant::now();
        assert!(limiter.check("old", 5, start).is_ok());
        let later = start + WINDOW + Duration::from_secs(1);
        for _ in 0..SWEEP_EVERY {
            assert!(limiter.check("busy", 0, later).is_ok());
            let _ = limiter.check("busy", u64::MAX, later);
        }
        assert!(!limiter.windows.contains_key("old"));
        assert!(limiter.windows.contains_key("busy"));
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_never_zero() {
        let table = [
            (1, 1),
            (999, 1),
            (1000, 1),
            (1001, 2),
            (59_999, 60),
            (60_000, 60),
        ];
        for (wait_ms, seconds) in table {
            assert_eq!(whole_seconds(wait_ms), seconds, "{wait_ms} ms");
        }
        assert_eq!(whole_seconds(0), 1);
        assert_eq!(whole_seconds(-5), 1);
    }

    #[test]
    fn zero_means_unlimited() {
        let limiter = LocalWindows::default();
        let now = Instant::now();
        assert!((0..1000).all(|_| limiter.check("k", 0, now).is_ok()));
    }
}
