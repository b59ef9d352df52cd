//! Instants, billing cycles and period arithmetic.
//!
//! Instants are `chrono::DateTime<Utc>` in the domain and milliseconds since the Unix epoch in
//! storage; the wire shows RFC 3339 in UTC with `Z`.

use chrono::{DateTime, Months, SecondsFormat, TimeZone, Utc};

pub type Instant = DateTime<Utc>;

/// Milliseconds since the epoch: the storage form of an instant.
pub fn to_millis(instant: Instant) -> i64 {
    instant.timestamp_millis()
}

/// The instant of a stored millisecond count (out-of-range values clamp to the epoch).
pub fn from_millis(millis: i64) -> Instant {
    Utc.timestamp_millis_opt(millis)
        .single()
        .unwrap_or_default()
}

/// RFC 3339, UTC, `Z`, with fractional seconds only when there are some.
pub fn rfc3339(instant: Instant) -> String {
    instant.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

super::vocabulary! {
    /// A billing cycle.
    pub enum Cycle {
        Monthly => "monthly",
        Annual => "annual",
    }
}

impl Cycle {
    fn months(self) -> u32 {
        match self {
            Cycle::Monthly => 1,
            Cycle::Annual => 12,
        }
    }
}

/// The end of the `n`th period after `anchor`: always computed from the anchor, never chained
/// from the previous end, so a month-end anchor never drifts (Jan 31 → Feb 28 → Mar 31) and a
/// Feb 29 anchor lands on Feb 28 in common years.
pub fn period_boundary(anchor: Instant, cycle: Cycle, n: u32) -> Instant {
    anchor
        .checked_add_months(Months::new(cycle.months().saturating_mul(n)))
        .unwrap_or(anchor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Datelike;

    fn at(y: i32, m: u32, d: u32) -> Instant {
        Utc.with_ymd_and_hms(y, m, d, 12, 0, 0)
            .single()
            .expect("valid date")
    }

    #[test]
    fn monthly_periods_anchored_on_the_31st_come_back_to_the_31st() {
        let anchor = at(2027, 1, 31);
        assert_eq!(period_boundary(anchor, Cycle::Monthly, 1), at(2027, 2, 28));
        assert_eq!(period_boundary(anchor, Cycle::Monthly, 2), at(2027, 3, 31));
        assert_eq!(period_boundary(anchor, Cycle::Monthly, 3), at(2027, 4, 30));
    }

    #[test]
    fn leap_day_anchor_lands_on_feb_28_in_common_years() {
        let anchor = at(2028, 2, 29);
        assert_eq!(period_boundary(anchor, Cycle::Annual, 1), at(2029, 2, 28));
        assert_eq!(period_boundary(anchor, Cycle::Annual, 4), at(2032, 2, 29));
    }

    proptest::proptest! {
        /// Every boundary falls on the anchor's day of month, or on the month's last day when
        /// the month is shorter: periods never drift, however many of them pass.
        #[test]
        fn period_ends_never_drift(day in 1u32..=31, month in 1u32..=12, n in 0u32..240) {
            let Some(anchor) = Utc.with_ymd_and_hms(2027, month, 1, 9, 30, 0).single()
                .and_then(|first| first.checked_add_days(chrono::Days::new(u64::from(day - 1))))
                .filter(|date| date.month() == month) else { return Ok(()); };
            let boundary = period_boundary(anchor, Cycle::Monthly, n);
            let last_day = (28..=31).rev().find(|d| boundary.with_day(*d).is_some()).unwrap_or(28);
            proptest::prop_assert_eq!(boundary.day(), day.min(last_day));
            proptest::prop_assert_eq!(boundary.time(), anchor.time());
            let months = (boundary.year() - anchor.year()) * 12 + boundary.month() as i32 - anchor.month() as i32;
            proptest::prop_assert_eq!(months, n as i32);
        }
    }

    #[test]
    fn wire_format_is_utc_with_z() {
        assert_eq!(rfc3339(at(2027, 1, 31)), "2027-01-31T12:00:00Z");
        assert_eq!(
            rfc3339(from_millis(to_millis(at(2027, 1, 31)) + 5)),
            "2027-01-31T12:00:00.005Z"
        );
    }
}
