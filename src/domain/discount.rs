//! What a coupon takes off a charge (CONTRACT §14), line by line, in integer cents:
//!
//! - **Percent off** takes `round half away from zero (amount × bps / 10 000)` off each line
//!   it applies to (so 100 % takes the whole line, and a line never goes below zero).
//! - **Amount off** comes off the period's total, never below zero: the lines it applies to
//!   share it in proportion to their amounts (largest remainder first, ties to the earlier
//!   line, as a refund spreads over an invoice's lines: `tax::spread`), so the discounts add up
//!   to exactly `min(amount off, what it applies to)` and none exceeds its line.
//! - A line's charged amount is its amount minus its discount; IVA is then split from that
//!   (the invoice's bases are the discounted ones), and the fee is taken on the total charged.
//!
//! How long a discount lasts is counted in billed periods: `once` the next period charge,
//! `repeating` that many, `forever` all.

use super::money::div_round_half_away;
use super::tax::spread;
use crate::ids::{AddonId, CouponId, PlanId, PromotionCodeId};
use serde::{Deserialize, Serialize};

/// The money terms of a coupon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Off {
    /// Basis points of each line, 1 to 10 000.
    Percent(i64),
    /// Cents off the period's total, at least 1.
    Amount(i64),
}

crate::domain::vocabulary! {
    /// How many period charges a discount applies to.
    pub enum Duration {
        Once => "once",
        Repeating => "repeating",
        Forever => "forever",
    }
}

impl Duration {
    /// The periods a new discount has left: `None` for `forever` (never runs out).
    pub fn periods(self, duration_in_periods: Option<i64>) -> Option<i64> {
        match self {
            Duration::Once => Some(1),
            Duration::Repeating => Some(duration_in_periods.unwrap_or(1).max(1)),
            Duration::Forever => None,
        }
    }
}

/// The plans and add-ons a coupon is limited to; a line of any other takes nothing off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliesTo {
    #[serde(default)]
    pub plan_ids: Vec<PlanId>,
    #[serde(default)]
    pub addon_ids: Vec<AddonId>,
}

impl AppliesTo {
    /// Whether a line of this plan or add-on is discounted.
    pub fn covers(&self, plan_id: Option<&PlanId>, addon_id: Option<&AddonId>) -> bool {
        plan_id.is_some_and(|id| self.plan_ids.contains(id))
            || addon_id.is_some_and(|id| self.addon_ids.contains(id))
    }
}

/// A subscription's discount: the coupon's terms as redeemed (they never change after a
/// coupon's creation, so the subscription keeps them and a renewal reads nothing more), and
/// how many period charges it still takes part of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discount {
    pub coupon_id: CouponId,
    pub promotion_code_id: Option<PromotionCodeId>,
    /// When it was set: period charges begun from then on are discounted.
    pub start: i64,
    /// `None` for `forever`.
    pub periods_left: Option<i64>,
    pub off: Off,
    /// `None`: every line.
    pub applies_to: Option<AppliesTo>,
}

impl Discount {
    /// Whether a line of this plan or add-on is discounted.
    pub fn covers(&self, plan_id: Option<&PlanId>, addon_id: Option<&AddonId>) -> bool {
        self.applies_to
            .as_ref()
            .is_none_or(|to| to.covers(plan_id, addon_id))
    }

    /// The discount after a period charge begun at `charge_began` was paid: one period fewer
    /// (`None` once it has run out), unless it started after that charge began (it did not
    /// take part in it).
    pub fn after_period_paid(self, charge_began: i64) -> Option<Self> {
        if self.start > charge_began {
            return Some(self);
        }
        after_a_period(self.periods_left).map(|periods_left| Self {
            periods_left,
            ..self
        })
    }

    /// The discount of each line of `amounts` (cents), `covered` saying which lines it may
    /// apply to; a proration takes only a percent off (CONTRACT §14).
    pub fn of_lines(&self, amounts: &[i64], covered: &[bool], proration: bool) -> Vec<i64> {
        if proration && matches!(self.off, Off::Amount(_)) {
            return vec![0; amounts.len()];
        }
        discounts(amounts, covered, self.off).unwrap_or_else(|| vec![0; amounts.len()])
    }
}

/// What is left of a discount after it was applied to one period charge: `None` once it has
/// run out (the subscription's `discount` is null again), the same for `forever`.
pub fn after_a_period(periods_left: Option<i64>) -> Option<Option<i64>> {
    match periods_left {
        None => Some(None),
        Some(left) if left > 1 => Some(Some(left - 1)),
        Some(_) => None,
    }
}

/// The discount of each line of `amounts` (cents, each ≥ 0) under `off`, applying only to
/// the lines whose `applies` is true; 0 for the others. `None` for terms out of range or a
/// negative line.
pub fn discounts(amounts: &[i64], applies: &[bool], off: Off) -> Option<Vec<i64>> {
    if amounts.len() != applies.len() || amounts.iter().any(|&a| a < 0) {
        return None;
    }
    match off {
        Off::Percent(bps) if (1..=10_000).contains(&bps) => Some(
            amounts
                .iter()
                .zip(applies)
                .map(|(&amount, &on)| {
                    if !on {
                        return 0;
                    }
                    let off = div_round_half_away(i128::from(amount) * i128::from(bps), 10_000);
                    i64::try_from(off).map_or(amount, |off| off.min(amount))
                })
                .collect(),
        ),
        Off::Amount(cents) if cents >= 1 => {
            let eligible: Vec<i64> = amounts
                .iter()
                .zip(applies)
                .map(|(&amount, &on)| if on { amount } else { 0 })
                .collect();
            let total: i64 = eligible.iter().sum();
            spread(cents.min(total), &eligible)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn percent_off_rounds_each_line_half_away_from_zero() {
        // 15 % of 4,990,001 cents is 748,500.15 → 748,500; of 333 is 49.95 → 50.
        assert_eq!(
            discounts(&[4_990_001, 333], &[true, true], Off::Percent(1_500)),
            Some(vec![748_500, 50])
        );
        assert_eq!(
            discounts(&[1_000, 1_000], &[true, false], Off::Percent(10_000)),
            Some(vec![1_000, 0])
        );
    }

    #[test]
    fn amount_off_never_takes_a_period_below_zero() {
        assert_eq!(
            discounts(&[3_000, 1_000], &[true, true], Off::Amount(10_000)),
            Some(vec![3_000, 1_000])
        );
        // 1,000 over 2,000 and 1,000 (the add-on excluded): in proportion, exact.
        assert_eq!(
            discounts(
                &[2_000, 1_000, 500],
                &[true, true, false],
                Off::Amount(1_000)
            ),
            Some(vec![667, 333, 0])
        );
    }

    #[test]
    fn terms_out_of_range_are_refused() {
        assert_eq!(discounts(&[1], &[true], Off::Percent(0)), None);
        assert_eq!(discounts(&[1], &[true], Off::Percent(10_001)), None);
        assert_eq!(discounts(&[1], &[true], Off::Amount(0)), None);
        assert_eq!(discounts(&[-1], &[true], Off::Amount(1)), None);
        assert_eq!(discounts(&[1, 2], &[true], Off::Amount(1)), None);
    }

    fn discount(periods_left: Option<i64>, start: i64) -> Discount {
        Discount {
            coupon_id: CouponId::parse("co_1").expect("a coupon's id"),
            promotion_code_id: None,
            start,
            periods_left,
            off: Off::Amount(1_000),
            applies_to: None,
        }
    }

    #[test]
    fn a_paid_period_counts_only_if_it_began_after_the_discount() {
        assert_eq!(discount(Some(1), 10).after_period_paid(20), None);
        assert_eq!(
            discount(Some(2), 10).after_period_paid(20),
            Some(discount(Some(1), 10))
        );
        assert_eq!(
            discount(Some(1), 30).after_period_paid(20),
            Some(discount(Some(1), 30)),
            "set after the charge began: it did not take part"
        );
        assert_eq!(
            discount(None, 10).after_period_paid(20),
            Some(discount(None, 10))
        );
    }

    #[test]
    fn an_amount_off_takes_nothing_off_a_proration_and_a_percent_does() {
        let amount = discount(None, 0);
        assert_eq!(amount.of_lines(&[5_000], &[true], true), vec![0]);
        assert_eq!(amount.of_lines(&[5_000], &[true], false), vec![1_000]);
        let percent = Discount {
            off: Off::Percent(2_500),
            ..amount
        };
        assert_eq!(percent.of_lines(&[5_000], &[true], true), vec![1_250]);
    }

    #[test]
    fn applies_to_limits_the_lines() {
        let (plan_a, plan_b) = (PlanId::generate(), PlanId::generate());
        let addon_a = AddonId::generate();
        let to = AppliesTo {
            plan_ids: vec![plan_a.clone()],
            addon_ids: vec![],
        };
        assert!(to.covers(Some(&plan_a), None));
        assert!(!to.covers(Some(&plan_b), None));
        assert!(!to.covers(None, Some(&addon_a)));
        let all = discount(None, 0);
        assert!(all.covers(None, Some(&addon_a)));
    }

    #[test]
    fn durations_count_billed_periods() {
        assert_eq!(Duration::Once.periods(None), Some(1));
        assert_eq!(Duration::Repeating.periods(Some(3)), Some(3));
        assert_eq!(Duration::Forever.periods(None), None);
        assert_eq!(after_a_period(Some(3)), Some(Some(2)));
        assert_eq!(after_a_period(Some(1)), None, "run out: no discount");
        assert_eq!(after_a_period(None), Some(None), "forever stays");
    }

    fn lines() -> impl Strategy<Value = (Vec<i64>, Vec<bool>)> {
        proptest::collection::vec((0i64..1_000_000_000, any::<bool>()), 1..8)
            .prop_map(|pairs| pairs.into_iter().unzip())
    }

    proptest! {
        #[test]
        fn a_percent_discount_is_each_lines_rounded_share_and_never_more(
            (amounts, applies) in lines(), bps in 1i64..=10_000,
        ) {
            let off = discounts(&amounts, &applies, Off::Percent(bps)).expect("in range");
            for ((&amount, &on), &d) in amounts.iter().zip(&applies).zip(&off) {
                prop_assert!(d >= 0 && d <= amount);
                if on {
                    // |d − amount × bps / 10 000| ≤ ½, with ties away from zero.
                    let exact2 = 2 * i128::from(amount) * i128::from(bps);
                    let d2 = 2 * i128::from(d) * 10_000;
                    prop_assert!((d2 - exact2).abs() <= 10_000);
                    prop_assert!(d2 - exact2 != -10_000, "a tie rounds up");
                } else {
                    prop_assert_eq!(d, 0);
                }
            }
        }

        #[test]
        fn an_amount_discount_adds_to_what_it_can_take_exactly(
            (amounts, applies) in lines(), cents in 1i64..2_000_000_000,
        ) {
            let off = discounts(&amounts, &applies, Off::Amount(cents)).expect("in range");
            let eligible: i64 = amounts.iter().zip(&applies).filter(|(_, on)| **on).map(|(a, _)| a).sum();
            prop_assert_eq!(off.iter().sum::<i64>(), cents.min(eligible));
            for ((&amount, &on), &d) in amounts.iter().zip(&applies).zip(&off) {
                prop_assert!(d >= 0 && d <= amount);
                if !on { prop_assert_eq!(d, 0); }
            }
        }
    }
}
