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

/// `cents` as pesos with a dot and exactly two decimals, no thousands separator: what an
/// accountant's spreadsheet reads as a number (`1_234_567` → `12345.67`, `5` → `0.05`,
/// `-150` → `-1.50`). Integer arithmetic only; nothing is rounded, since cents are exact.
pub fn pesos(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    format!("{sign}{}.{:02}", cents / 100, cents % 100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pesos_have_a_dot_and_two_decimals() {
        assert_eq!(pesos(1_234_567), "12345.67");
        assert_eq!(pesos(0), "0.00");
        assert_eq!(pesos(5), "0.05");
        assert_eq!(pesos(100), "1.00");
        assert_eq!(pesos(4_990_000), "49900.00");
        assert_eq!(pesos(-150), "-1.50");
        assert_eq!(pesos(i64::MIN), "-92233720368547758.08");
    }

    proptest! {
        /// Reading the text back as a decimal gives the cents again: two decimals, a dot, the
        /// sign only on a negative amount, and no other character.
        #[test]
        fn pesos_read_back_as_the_cents(cents in proptest::num::i64::ANY) {
            let text = pesos(cents);
            let (units, decimals) = text.split_once('.').expect("a dot");
            prop_assert_eq!(decimals.len(), 2);
            prop_assert!(decimals.bytes().all(|b| b.is_ascii_digit()));
            let digits = units.strip_prefix('-').unwrap_or(units);
            prop_assert_eq!(units.starts_with('-'), cents < 0);
            prop_assert!(!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
            let read: i128 = digits.parse::<i128>().expect("units") * 100
                + decimals.parse::<i128>().expect("cents");
            let read = if cents < 0 { -read } else { read };
            prop_assert_eq!(read, i128::from(cents));
        }
    }

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
