//! Money in integer cents of COP and the rounding rule every computed amount uses.
//!
//! Rounding rule (written once, used everywhere): a fraction of cents is rounded half away
//! from zero, computed in exact integer arithmetic (i128), never through floats.

use serde::{Deserialize, Serialize};

/// The only currency the service sells in.
pub const CURRENCY: &str = "COP";

/// `numerator / denominator` rounded half away from zero. `denominator` must be positive.
pub fn div_round_half_away(numerator: i128, denominator: i128) -> i128 {
    debug_assert!(denominator > 0);
    let quotient = numerator / denominator;
    let remainder = numerator % denominator;
    if 2 * remainder.abs() >= denominator {
        quotient + numerator.signum()
    } else {
        quotient
    }
}

/// How an account is charged per approved charge (CONTRACT §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeeSchedule {
    pub percent_bps: i64,
    pub fixed_cents: i64,
}

impl Default for FeeSchedule {
    fn default() -> Self {
        Self {
            percent_bps: 150,
            fixed_cents: 0,
        }
    }
}

impl FeeSchedule {
    /// Fee = percent_bps × amount / 10 000, rounded half away from zero, + fixed_cents.
    pub fn fee_for(&self, amount_cents: i64) -> i64 {
        let percent = div_round_half_away(
            i128::from(self.percent_bps) * i128::from(amount_cents),
            10_000,
        );
        // Amounts are bounded by validation far below i64::MAX / 10_000, so this fits.
        i64::try_from(percent)
            .unwrap_or(i64::MAX)
            .saturating_add(self.fixed_cents)
    }
}

/// `cents` written with `thousands` between groups of three digits and `decimal` before the
/// two digits of cents, in integer arithmetic: 4_990_000 with '.' and ',' is "49.900,00".
pub fn group_cents(cents: i64, thousands: char, decimal: char) -> String {
    let units = (cents / 100).unsigned_abs().to_string();
    let mut grouped = String::with_capacity(units.len() + units.len() / 3 + 4);
    if cents < 0 {
        grouped.push('-');
    }
    for (i, digit) in units.chars().enumerate() {
        if i > 0 && (units.len() - i).is_multiple_of(3) {
            grouped.push(thousands);
        }
        grouped.push(digit);
    }
    grouped.push(decimal);
    grouped.push_str(&format!("{:02}", (cents % 100).unsigned_abs()));
    grouped
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_fee_is_one_and_a_half_percent() {
        assert_eq!(FeeSchedule::default().fee_for(1_000_000), 15_000);
    }

    #[test]
    fn half_a_cent_rounds_away_from_zero() {
        // 150 bps of 100 cents = 1.5 cents → 2.
        assert_eq!(FeeSchedule::default().fee_for(100), 2);
        // 150 bps of 99 cents = 1.485 cents → 1.
        assert_eq!(FeeSchedule::default().fee_for(99), 1);
        assert_eq!(div_round_half_away(-3, 2), -2);
        assert_eq!(div_round_half_away(-1, 3), 0);
    }

    #[test]
    fn fixed_part_is_added_after_rounding() {
        let schedule = FeeSchedule {
            percent_bps: 290,
            fixed_cents: 90_000,
        };
        assert_eq!(schedule.fee_for(5_000_000), 145_000 + 90_000);
    }

    #[test]
    fn cents_are_grouped_without_floats() {
        assert_eq!(group_cents(4_990_000, '.', ','), "49.900,00");
        assert_eq!(group_cents(4_990_000, ',', '.'), "49,900.00");
        assert_eq!(group_cents(5, ',', '.'), "0.05");
        assert_eq!(group_cents(12_345_678_901, '.', ','), "123.456.789,01");
        assert_eq!(group_cents(-150, '.', ','), "-1,50");
    }

    proptest! {
        #[test]
        fn rounding_is_within_half_a_unit(n in -1_000_000_000i128..1_000_000_000, d in 1i128..100_000) {
            let q = div_round_half_away(n, d);
            prop_assert!((q * d - n).abs() * 2 <= d);
        }
    }
}
