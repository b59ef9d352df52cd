//! Monthly recurring revenue (CONTRACT §16), as pure rules: what a subscription's MRR is, how a
//! change of it is classified as a movement of the ledger, and the Colombian calendar month a
//! summary covers. The store computes the inputs (the period's lines, split as an invoice
//! splits them) and writes the movements; nothing here does I/O.
//!
//! Rounding rule (the only one, written once, held by the property tests below):
//! - **Per month.** A subscription billed monthly has its period's taxable base as its MRR; one
//!   billed annually has round half away from zero of (its period's base / 12), rounded once
//!   on the sum of its lines, never line by line. So |12 × MRR − annual base| ≤ 6, and a
//!   negated base gives the negated MRR.

use super::discount::Discount;
use super::money::div_round_half_away;
use super::subscription::Status;
use super::time::Cycle;
use crate::ids::PlanId;

super::vocabulary! {
    /// What a movement of the MRR ledger is (`mrr_movements.type`).
    pub enum MovementType {
        /// From 0 to more, the first time.
        New => "new",
        /// Up, from more than 0.
        Expansion => "expansion",
        /// Down, to 0 by a pause or to more than 0.
        Contraction => "contraction",
        /// Down to 0 by a cancellation.
        Churn => "churn",
        /// From 0 to more, after it had been more before (a resumption).
        Reactivation => "reactivation",
    }
}

super::vocabulary! {
    /// Why a movement happened (`mrr_movements.reason`).
    pub enum MovementReason {
        Started => "started",
        PlanChange => "plan_change",
        Quantity => "quantity",
        Discount => "discount",
        Paused => "paused",
        Resumed => "resumed",
        Voluntary => "voluntary",
        FailedPayment => "failed_payment",
    }
}

/// Whether a subscription in `status` counts its recurring amount: `active` and `past_due` in
/// full, every other status 0 (CONTRACT §16).
pub fn counts(status: Status) -> bool {
    matches!(status, Status::Active | Status::PastDue)
}

/// The MRR of a period whose lines' taxable bases add up to `period_base`, billed at `cycle`:
/// the base itself for a monthly period, round half away from zero of base / 12 for an annual
/// one (the rounding rule above).
pub fn monthly(period_base: i64, cycle: Cycle) -> i64 {
    match cycle {
        Cycle::Monthly => period_base,
        Cycle::Annual => {
            let month = div_round_half_away(i128::from(period_base), 12);
            i64::try_from(month).unwrap_or(period_base / 12)
        }
    }
}

/// A subscription's MRR: 0 unless its `status` counts, else `monthly` of its period's base.
pub fn mrr(status: Status, period_base: i64, cycle: Cycle) -> i64 {
    if counts(status) {
        monthly(period_base, cycle)
    } else {
        0
    }
}

/// What a classification looks at of a subscription, before or after a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MrrFacts {
    pub status: Status,
    pub plan_id: PlanId,
    /// The cycle the current period is billed at.
    pub cycle: Cycle,
    /// The quantity the current period is billed at.
    pub quantity: i64,
    pub discount: Option<Discount>,
    /// Failed charges of the current period (`failed_attempts`): a cancellation with any is
    /// dunning's, for want of payment.
    pub failed_attempts: i32,
}

/// A movement's type and reason.
pub type Classified = (MovementType, MovementReason);

/// The movement a change of MRR from `before_mrr` (with the subscription as `before`, `None`
/// for a new subscription) to `after_mrr` (as `after`) is; `None` when the MRR did not change.
/// `had_movement`: whether the subscription's MRR ever moved before (0 → more is `new` the
/// first time, `reactivation` afterwards).
pub fn classify(
    before: Option<&MrrFacts>,
    after: &MrrFacts,
    (before_mrr, after_mrr): (i64, i64),
    had_movement: bool,
) -> Option<Classified> {
    use MovementReason as R;
    use MovementType as T;
    if before_mrr == after_mrr {
        return None;
    }
    let paused =
        |status: Status| matches!(status, Status::Paused | Status::PausedInsufficientBalance);
    if before_mrr == 0 {
        if !had_movement {
            return Some((T::New, R::Started));
        }
        let reason = match before {
            Some(before) if paused(before.status) => R::Resumed,
            Some(before) if !counts(before.status) => R::Resumed,
            Some(before) => field_reason(before, after),
            None => R::Started,
        };
        return Some((T::Reactivation, reason));
    }
    if after_mrr == 0 {
        return Some(match after.status {
            Status::Canceled if after.failed_attempts > 0 => (T::Churn, R::FailedPayment),
            Status::Canceled => (T::Churn, R::Voluntary),
            status if !counts(status) => (T::Contraction, R::Paused),
            _ => (
                T::Contraction,
                before.map_or(R::PlanChange, |before| field_reason(before, after)),
            ),
        });
    }
    let reason = before.map_or(R::PlanChange, |before| field_reason(before, after));
    let kind = if after_mrr > before_mrr {
        T::Expansion
    } else {
        T::Contraction
    };
    Some((kind, reason))
}

/// Which change made a counted MRR move, in the contract's priority: the plan (or its cycle),
/// the quantity, the discount. Anything else (an add-on attached or leaving, a tax code changed
/// in the catalog) is a change of what is subscribed to: `plan_change`.
fn field_reason(before: &MrrFacts, after: &MrrFacts) -> MovementReason {
    if before.plan_id != after.plan_id || before.cycle != after.cycle {
        MovementReason::PlanChange
    } else if before.quantity != after.quantity {
        MovementReason::Quantity
    } else if before.discount != after.discount {
        MovementReason::Discount
    } else {
        MovementReason::PlanChange
    }
}

/// The instants (ms, UTC) at which the Colombian calendar month `year`-`month` starts and the
/// next one starts (America/Bogota is UTC−5 all year: no daylight saving); `None` for a month
/// outside 1–12 or a year chrono cannot hold.
pub fn colombian_month(year: i32, month: u32) -> Option<(i64, i64)> {
    let start = month_start_ms(year, month)?;
    let (next_year, next_month) = if month == 12 {
        (year.checked_add(1)?, 1)
    } else {
        (year, month + 1)
    };
    Some((start, month_start_ms(next_year, next_month)?))
}

fn month_start_ms(year: i32, month: u32) -> Option<i64> {
    use chrono::TimeZone;
    let date = chrono::NaiveDate::from_ymd_opt(year, month, 1)?;
    let local = super::dian::COLOMBIA
        .from_local_datetime(&date.and_time(chrono::NaiveTime::MIN))
        .single()?;
    Some(local.timestamp_millis())
}

/// A `YYYY-MM` month as the summary's query gives it: four digits, a dash, 01 to 12.
pub fn parse_month(raw: &str) -> Option<(i32, u32)> {
    let (year, month) = raw.split_once('-')?;
    if year.len() != 4 || month.len() != 2 {
        return None;
    }
    if !year
        .bytes()
        .chain(month.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let month: u32 = month.parse().ok()?;
    if !(1..=12).contains(&month) {
        return None;
    }
    Some((year.parse().ok()?, month))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts(status: Status) -> MrrFacts {
        MrrFacts {
            status,
            plan_id: PlanId::given("plan_a"),
            cycle: Cycle::Monthly,
            quantity: 1,
            discount: None,
            failed_attempts: 0,
        }
    }

    #[test]
    fn an_annual_period_counts_a_twelfth_rounded_once() {
        assert_eq!(monthly(1_200_000, Cycle::Annual), 100_000);
        // 1 000 006 / 12 = 83 333.83…: rounded up; 1 000 002 / 12 = 83 333.5: away from zero.
        assert_eq!(monthly(1_000_006, Cycle::Annual), 83_334);
        assert_eq!(monthly(1_000_002, Cycle::Annual), 83_334);
        assert_eq!(monthly(1_000_001, Cycle::Annual), 83_333);
        assert_eq!(monthly(-1_000_002, Cycle::Annual), -83_334);
        assert_eq!(monthly(84_034, Cycle::Monthly), 84_034);
    }

    #[test]
    fn only_active_and_past_due_count() {
        for status in Status::ALL {
            let expected = matches!(status, Status::Active | Status::PastDue);
            assert_eq!(counts(*status), expected, "{status}");
            assert_eq!(mrr(*status, 1_000, Cycle::Monthly) > 0, expected);
        }
    }

    #[test]
    fn the_first_rise_from_nothing_is_new_and_a_later_one_a_reactivation() {
        let active = facts(Status::Active);
        assert_eq!(
            classify(None, &active, (0, 100), false),
            Some((MovementType::New, MovementReason::Started))
        );
        let paused = facts(Status::Paused);
        assert_eq!(
            classify(Some(&paused), &active, (0, 100), true),
            Some((MovementType::Reactivation, MovementReason::Resumed))
        );
        assert_eq!(classify(Some(&active), &active, (100, 100), true), None);
    }

    #[test]
    fn a_pause_contracts_and_a_cancellation_churns_by_its_cause() {
        let active = facts(Status::Active);
        for status in [Status::Paused, Status::PausedInsufficientBalance] {
            assert_eq!(
                classify(Some(&active), &facts(status), (100, 0), true),
                Some((MovementType::Contraction, MovementReason::Paused))
            );
        }
        assert_eq!(
            classify(Some(&active), &facts(Status::Canceled), (100, 0), true),
            Some((MovementType::Churn, MovementReason::Voluntary))
        );
        let unpaid = MrrFacts {
            failed_attempts: 4,
            ..facts(Status::Canceled)
        };
        assert_eq!(
            classify(Some(&active), &unpaid, (100, 0), true),
            Some((MovementType::Churn, MovementReason::FailedPayment))
        );
    }

    #[test]
    fn a_counted_change_names_the_plan_then_the_quantity_then_the_discount() {
        let before = facts(Status::Active);
        let more = MrrFacts {
            quantity: 3,
            ..before.clone()
        };
        assert_eq!(
            classify(Some(&before), &more, (100, 300), true),
            Some((MovementType::Expansion, MovementReason::Quantity))
        );
        let annual = MrrFacts {
            cycle: Cycle::Annual,
            ..more.clone()
        };
        assert_eq!(
            classify(Some(&before), &annual, (100, 90), true),
            Some((MovementType::Contraction, MovementReason::PlanChange))
        );
    }

    #[test]
    fn colombian_months_start_at_five_in_the_morning_utc() {
        let (start, end) = colombian_month(2026, 12).expect("month");
        assert_eq!(start, 1_796_101_200_000); // 2026-12-01T05:00:00Z
        assert_eq!(end, 1_798_779_600_000); // 2027-01-01T05:00:00Z
        assert_eq!(colombian_month(2026, 13), None);
    }

    #[test]
    fn a_month_is_four_digits_a_dash_and_two() {
        assert_eq!(parse_month("2026-02"), Some((2026, 2)));
        for bad in [
            "2026-2",
            "2026-13",
            "2026-00",
            "26-02",
            "2026/02",
            "2026-02-01",
            "+026-02",
        ] {
            assert_eq!(parse_month(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn twelve_months_stay_within_six_cents_of_the_year(annual in -10_000_000_000i64..10_000_000_000) {
            let month = monthly(annual, Cycle::Annual);
            prop_assert!((12 * month - annual).abs() <= 6);
        }

        #[test]
        fn the_rounding_is_symmetric(annual in -10_000_000_000i64..10_000_000_000) {
            prop_assert_eq!(monthly(-annual, Cycle::Annual), -monthly(annual, Cycle::Annual));
        }

        #[test]
        fn a_change_is_a_movement_exactly_when_the_mrr_moved(
            before in 0i64..1_000_000, after in 0i64..1_000_000, had in any::<bool>(),
        ) {
            let facts = facts(Status::Active);
            let moved = classify(Some(&facts), &facts, (before, after), had);
            prop_assert_eq!(moved.is_some(), before != after);
            if let Some((kind, _)) = moved {
                let up = matches!(kind, MovementType::New | MovementType::Expansion | MovementType::Reactivation);
                prop_assert_eq!(up, after > before);
            }
        }
    }
}
