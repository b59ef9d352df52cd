//! Subscription rules that need no I/O: statuses, which actions each allows, proration, the
//! dunning schedule.

use super::money::div_round_half_away;

super::vocabulary! {
    /// A subscription's status (`subscriptions.status`).
    pub enum Status {
        Trialing => "trialing",
        Active => "active",
        PastDue => "past_due",
        Paused => "paused",
        PausedInsufficientBalance => "paused_insufficient_balance",
        Canceled => "canceled",
    }
}

impl Status {
    /// cancel with `at_period_end` true: only while the period runs normally (CONTRACT §5).
    pub fn can_cancel_at_period_end(self) -> bool {
        matches!(self, Status::Active | Status::Trialing)
    }

    pub fn can_pause(self) -> bool {
        !matches!(self, Status::Canceled | Status::Paused)
    }

    pub fn can_change_plan(self) -> bool {
        matches!(self, Status::Active | Status::Trialing)
    }

    pub fn can_charge_now(self) -> bool {
        matches!(self, Status::Active | Status::Trialing | Status::PastDue)
    }
}

/// The prorated difference between two per-period amounts for the part of the period left:
/// round half away from zero of (new − old) × seconds left / period seconds. Positive for an
/// upgrade, negative for a downgrade, 0 once the period is over.
pub fn prorate(
    old_amount: i64,
    new_amount: i64,
    period_start_ms: i64,
    period_end_ms: i64,
    now_ms: i64,
) -> i64 {
    let length = (period_end_ms - period_start_ms).div_euclid(1000);
    if length <= 0 {
        return 0;
    }
    let left = (period_end_ms - now_ms).div_euclid(1000).clamp(0, length);
    let amount = div_round_half_away(
        i128::from(new_amount - old_amount) * i128::from(left),
        i128::from(length),
    );
    i64::try_from(amount).unwrap_or(0)
}

/// Dunning: retry `days[i]` days after the first failure; `None` once retries are exhausted.
pub fn retry_at(first_failure_ms: i64, failed_attempts: u32, retry_days: &[i64]) -> Option<i64> {
    let index = usize::try_from(failed_attempts).ok()?.checked_sub(1)?;
    retry_days
        .get(index)
        .map(|days| first_failure_ms + days * 86_400_000)
}

/// When a subscription whose first failure was at `first_failure_ms` is canceled if no retry
/// is paid: the schedule's last retry day (`None` with no retry days: the first failure
/// cancels). A hard decline, which is not retried, is canceled on this same date.
pub fn cancel_at(first_failure_ms: i64, retry_days: &[i64]) -> Option<i64> {
    retry_days
        .last()
        .map(|days| first_failure_ms + days * 86_400_000)
}

/// Parses the account's "1,3,5,7" retry setting.
pub fn parse_retry_days(raw: &str) -> Vec<i64> {
    raw.split(',')
        .filter_map(|part| part.trim().parse().ok())
        .filter(|d: &i64| *d > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DAY: i64 = 86_400_000;

    #[test]
    fn upgrade_half_way_charges_half_the_difference() {
        assert_eq!(prorate(10_000, 30_000, 0, 30 * DAY, 15 * DAY), 10_000);
    }

    #[test]
    fn downgrade_is_negative_and_nothing_is_left_after_the_period() {
        assert_eq!(prorate(30_000, 10_000, 0, 30 * DAY, 15 * DAY), -10_000);
        assert_eq!(prorate(10_000, 30_000, 0, 30 * DAY, 31 * DAY), 0);
    }

    #[test]
    fn a_third_of_a_cent_rounds_half_away_from_zero() {
        // 1 cent × 1/2 = 0.5 → 1; −1 cent × 1/2 → −1.
        assert_eq!(prorate(0, 1, 0, 2000, 1000), 1);
        assert_eq!(prorate(1, 0, 0, 2000, 1000), -1);
    }

    #[test]
    fn dunning_retries_on_days_1_3_5_7_then_gives_up() {
        let days = parse_retry_days("1,3,5,7");
        assert_eq!(retry_at(0, 1, &days), Some(DAY));
        assert_eq!(retry_at(0, 4, &days), Some(7 * DAY));
        assert_eq!(retry_at(0, 5, &days), None);
    }

    proptest! {
        #[test]
        fn proration_is_bounded_by_the_difference(old in 0i64..10_000_000, new in 0i64..10_000_000,
            len in 1i64..400, at in 0i64..400) {
            let end = len * DAY;
            let amount = prorate(old, new, 0, end, at * DAY);
            prop_assert!(amount.abs() <= (new - old).abs());
            prop_assert_eq!(amount.signum() * (new - old).signum() >= 0, true);
        }

        #[test]
        fn proration_is_antisymmetric(old in 0i64..10_000_000, new in 0i64..10_000_000, at in 0i64..30) {
            prop_assert_eq!(prorate(old, new, 0, 30 * DAY, at * DAY), -prorate(new, old, 0, 30 * DAY, at * DAY));
        }
    }
}
