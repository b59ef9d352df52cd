//! When a collection message may reach a customer (Ley 2300 de 2023, article 3): Monday to
//! Friday from 07:00 to 19:00 and Saturday from 08:00 to 15:00, Colombian time, never on a
//! Sunday or a public holiday (`domain::holidays`). A window's end is exclusive: at 19:00 the
//! next allowed instant is the following morning. Colombia keeps UTC−5 all year.
//!
//! The law's other limits (one message a day per customer, one channel a week) depend on
//! what was sent, so the notices' store applies them; this is the calendar only.

use super::dian::COLOMBIA;
use super::holidays::is_rest_day;
use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveTime, TimeZone, Utc, Weekday};

/// The hours of `date` (Colombian) in which a collection message may be sent, if any.
pub fn window(date: NaiveDate) -> Option<(NaiveTime, NaiveTime)> {
    if is_rest_day(date) {
        return None;
    }
    let hour = |h| NaiveTime::from_hms_opt(h, 0, 0);
    match date.weekday() {
        Weekday::Sun => None,
        Weekday::Sat => Some((hour(8)?, hour(15)?)),
        _ => Some((hour(7)?, hour(19)?)),
    }
}

/// Whether a collection message may be sent at `at`.
pub fn allowed(at: DateTime<Utc>) -> bool {
    next_allowed(at) == at
}

/// The first instant at or after `at` at which a collection message may be sent.
pub fn next_allowed(at: DateTime<Utc>) -> DateTime<Utc> {
    let local = at.with_timezone(&COLOMBIA);
    let mut date = local.date_naive();
    // Rest days come at most five in a row (a Saturday afternoon, a Sunday, a holiday
    // Monday...); a fortnight is far more than any calendar needs.
    for _ in 0..14 {
        if let Some((opens, closes)) = window(date) {
            let open = at_local(date, opens);
            let close = at_local(date, closes);
            if at < open {
                return open;
            }
            if at < close {
                return at;
            }
        }
        date += Duration::days(1);
    }
    at
}

/// The start (00:00, Colombian) of the Colombian day `at` falls on: "one a day" counts from it.
pub fn colombian_day_start(at: DateTime<Utc>) -> DateTime<Utc> {
    let date = at.with_timezone(&COLOMBIA).date_naive();
    at_local(date, NaiveTime::MIN)
}

/// The start of `at`'s Colombian calendar week: its Monday's midnight (Ley 2300's "one
/// channel a week").
pub fn colombian_week_start(at: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::Datelike;
    let date = at.with_timezone(&COLOMBIA).date_naive();
    let monday = date - chrono::Duration::days(i64::from(date.weekday().num_days_from_monday()));
    at_local(monday, NaiveTime::MIN)
}

fn at_local(date: NaiveDate, time: NaiveTime) -> DateTime<Utc> {
    COLOMBIA
        .from_local_datetime(&date.and_time(time))
        .single()
        .map_or(DateTime::<Utc>::MIN_UTC, |local| local.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A Colombian wall-clock instant of 2026.
    fn co(month: u32, day: u32, hour: u32, minute: u32) -> DateTime<Utc> {
        COLOMBIA
            .with_ymd_and_hms(2026, month, day, hour, minute, 0)
            .single()
            .expect("an instant")
            .with_timezone(&Utc)
    }

    #[test]
    fn weekdays_saturdays_sundays_and_holidays() {
        let table = [
            // (asked at, next allowed): Friday 27 November 2026
            (co(11, 27, 6, 59), co(11, 27, 7, 0)),
            (co(11, 27, 7, 0), co(11, 27, 7, 0)),
            (co(11, 27, 18, 59), co(11, 27, 18, 59)),
            // Friday evening → Saturday 08:00
            (co(11, 27, 19, 0), co(11, 28, 8, 0)),
            (co(11, 28, 14, 59), co(11, 28, 14, 59)),
            // Saturday after 15:00 → Monday 07:00 (Sunday skipped)
            (co(11, 28, 15, 0), co(11, 30, 7, 0)),
            (co(11, 29, 12, 0), co(11, 30, 7, 0)),
            // Saturday 14 November, then Sunday, then Monday 16 (Cartagena) → Tuesday 17
            (co(11, 14, 16, 0), co(11, 17, 7, 0)),
            // Holy week: Wednesday evening → Saturday 4 April 08:00
            (co(4, 1, 20, 0), co(4, 4, 8, 0)),
            // Christmas Friday → Saturday 26
            (co(12, 24, 19, 30), co(12, 26, 8, 0)),
        ];
        for (asked, expected) in table {
            assert_eq!(next_allowed(asked), expected, "asked {asked}");
        }
    }

    proptest! {
        /// The answer is never earlier than asked, is itself allowed, falls inside a window
        /// of a working day, and nothing between the two instants was allowed.
        #[test]
        fn the_next_allowed_instant_is_the_first_one(minutes in 0i64..(60 * 24 * 366 * 3)) {
            let start = co(1, 1, 0, 0) + Duration::minutes(minutes);
            let next = next_allowed(start);
            prop_assert!(next >= start);
            prop_assert!(allowed(next));
            let local = next.with_timezone(&COLOMBIA);
            let (opens, closes) = window(local.date_naive()).expect("a working day");
            prop_assert!(local.time() >= opens && local.time() < closes);
            let mut probe = start;
            while probe < next {
                prop_assert!(!allowed(probe), "{probe} was allowed before {next}");
                probe += Duration::minutes(29);
            }
        }
    }

    #[test]
    fn the_colombian_week_starts_on_monday_at_midnight() {
        // Wednesday 2 December 2026, 23:30 in Bogotá (04:30 UTC on Thursday) → Monday 30 Nov.
        assert_eq!(colombian_week_start(co(12, 2, 23, 30)), co(11, 30, 0, 0));
        assert_eq!(colombian_week_start(co(11, 30, 0, 0)), co(11, 30, 0, 0));
        // Sunday is the week's last day, not the next one's first.
        assert_eq!(colombian_week_start(co(12, 6, 23, 59)), co(11, 30, 0, 0));
        assert_eq!(colombian_week_start(co(12, 7, 0, 0)), co(12, 7, 0, 0));
    }
}
