//! Per-API-key rate limits counted over a sliding 60-second window.
//!
//! A token bucket (governor's GCRA) refills continuously and so lets more than N requests
//! through in some 60-second windows; the contract asks for "at most N in any 60 seconds", so
//! each key keeps the instants of its accepted requests of the last minute and a request is
//! accepted only while fewer than N remain. Memory is bounded by the limit per active key.

use super::auth::Caller;
use super::error::ApiError;
use super::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use dashmap::DashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const WINDOW: Duration = Duration::from_secs(60);

/// Every this many checks, keys whose window has emptied are dropped, so that short-lived keys
/// (one per checkout session) do not accumulate for the life of the process.
const SWEEP_EVERY: u64 = 4096;

#[derive(Default)]
pub struct RateLimiter {
    windows: DashMap<String, VecDeque<Instant>>,
    checks: AtomicU64,
}

impl RateLimiter {
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

    /// Whether `key` is at its limit now, without counting anything and without keeping
    /// anything for a key never counted: `Err` holds the whole seconds until a slot frees.
    pub fn at_limit(&self, key: &str, limit: u64, now: Instant) -> Result<(), u64> {
        if limit == 0 {
            return Ok(());
        }
        let Some(mut window) = self.windows.get_mut(key) else {
            return Ok(());
        };
        forget_older_than_window(&mut window, now);
        if (window.len() as u64) < limit {
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

/// The global limit over the whole `/v1` API.
pub async fn limit_api(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(caller) = request.extensions().get::<Caller>() {
        let limit = u64::try_from(caller.0.rate_limit_per_minute).unwrap_or(0);
        state
            .limiter
            .check(&caller.0.id, limit, Instant::now())
            .map_err(|retry_after_secs| ApiError::RateLimited { retry_after_secs })?;
    }
    Ok(next.run(request).await)
}

/// The extra limit of the checkout status route.
pub async fn limit_status_route(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(caller) = request.extensions().get::<Caller>() {
        let limit = u64::try_from(caller.0.status_rate_limit_per_minute).unwrap_or(0);
        state
            .limiter
            .check(&format!("{}:status", caller.0.id), limit, Instant::now())
            .map_err(|retry_after_secs| ApiError::RateLimited { retry_after_secs })?;
    }
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_limit_requests_in_any_window() {
        let limiter = RateLimiter::default();
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
        let limiter = RateLimiter::default();
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
    fn zero_means_unlimited() {
        let limiter = RateLimiter::default();
        let now = Instant::now();
        assert!((0..1000).all(|_| limiter.check("k", 0, now).is_ok()));
    }
}
