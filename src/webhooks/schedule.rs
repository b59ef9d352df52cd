//! When a failed delivery is tried again (CONTRACT §9): 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and
//! 10 h after the attempts that failed, each stretched by up to 10 % of jitter so that the
//! retries of many deliveries that failed together do not arrive together. After the eighth
//! attempt fails the delivery is `failed`.

use std::time::Duration;

pub const RETRY_DELAYS: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// An attempt times out after this long.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// The wait after the `attempts_made`-th failed attempt (1-based), or `None` when that was the
/// last one. `jitter` in [0, 1) picks a point in the 10 % jitter band.
pub fn retry_delay(attempts_made: u32, jitter: f64) -> Option<Duration> {
    let base = *RETRY_DELAYS.get(usize::try_from(attempts_made).ok()?.checked_sub(1)?)?;
    let extra_ms = (base.as_millis() as f64 * 0.1 * jitter.clamp(0.0, 1.0)) as u64;
    Some(base + Duration::from_millis(extra_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_the_contracts_and_ends_after_eight_attempts() {
        let waits: Vec<u64> = (1..=7)
            .map(|n| retry_delay(n, 0.0).map(|d| d.as_secs()).unwrap_or(0))
            .collect();
        assert_eq!(waits, [5, 300, 1800, 7200, 18_000, 36_000, 36_000]);
        assert_eq!(retry_delay(8, 0.0), None);
        assert_eq!(retry_delay(0, 0.0), None);
    }

    #[test]
    fn jitter_stretches_by_at_most_a_tenth() {
        assert_eq!(retry_delay(1, 0.5), Some(Duration::from_millis(5_250)));
        assert!(retry_delay(2, 0.999_999).unwrap_or_default() < Duration::from_secs(330));
    }
}
