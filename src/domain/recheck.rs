//! When to ask the processor again about a charge whose outcome is not known yet.
//!
//! CONTRACT §7: an unknown outcome (timeout, connection error, 5xx, 429, 408, 409, a lookup
//! that failed) is resolved only by asking the processor about the charge's reference, the
//! first time within 30 s, then with backoff. The waits are multiples of one base (5 s by
//! default: 5 s, 15 s, 30 s, 1 min, 2 min, then every 5 min), so tests can run the same
//! schedule faster. The cap keeps a charge that stays unknown for hours (a processor outage)
//! asked about every 5 minutes, not every few seconds, and not only once a day.

use std::time::Duration;

/// The waits before the 1st, 2nd, … recheck, in multiples of the base; the last repeats.
const STEPS: [u32; 6] = [1, 3, 6, 12, 24, 60];

/// How long after a charge was posted, without an event, it is asked about (the event that
/// should have come was lost): 30 s at the default base.
pub fn stale_after(base: Duration) -> Duration {
    base * 6
}

/// The wait before recheck number `attempt` (1 = the first recheck after the outcome was
/// found unknown).
pub fn recheck_delay(base: Duration, attempt: u32) -> Duration {
    let step = attempt.saturating_sub(1) as usize;
    base * STEPS[step.min(STEPS.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_secs(5);

    #[test]
    fn the_first_recheck_comes_within_thirty_seconds() {
        assert_eq!(recheck_delay(BASE, 1), Duration::from_secs(5));
        assert!(recheck_delay(BASE, 1) <= Duration::from_secs(30));
    }

    #[test]
    fn waits_grow_then_stay_at_five_minutes() {
        let waits: Vec<u64> = (1..=8).map(|n| recheck_delay(BASE, n).as_secs()).collect();
        assert_eq!(waits, [5, 15, 30, 60, 120, 300, 300, 300]);
        assert_eq!(recheck_delay(BASE, u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn an_attempt_of_zero_waits_like_the_first() {
        assert_eq!(recheck_delay(BASE, 0), BASE);
    }

    #[test]
    fn a_lost_event_is_asked_about_after_thirty_seconds() {
        assert_eq!(stale_after(BASE), Duration::from_secs(30));
    }
}
