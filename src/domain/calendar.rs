//! Colombian calendar dates and months as the API takes them (`YYYY-MM-DD`, `YYYY-MM`,
//! CONTRACT §16) and the instants they cover. Colombia is UTC−5 all year (no daylight saving
//! time), so a Colombian day is the half-open span [its 00:00 −05:00, the next day's 00:00
//! −05:00): an invoice issued at 23:30 on the last day of a range is in it, one at 00:10 the
//! next day is not. Instants are milliseconds, as stored.
//!
//! Parsing is strict (zero-padded, exactly as written above) so that what the OpenAPI
//! document's pattern admits and what the server reads are the same set.

use super::dian::COLOMBIA;
use chrono::{DateTime, Days, Months, NaiveDate, TimeZone, Utc};

/// `YYYY-MM-DD`, zero-padded, a date that exists (no `2026-02-30`).
pub fn parse_date(text: &str) -> Option<NaiveDate> {
    let bytes = text.as_bytes();
    let shaped = bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
    if !shaped {
        return None;
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

/// `YYYY-MM`, zero-padded: the month's first day.
pub fn parse_month(text: &str) -> Option<NaiveDate> {
    if text.len() != 7 {
        return None;
    }
    parse_date(&format!("{text}-01"))
}

/// The instant a Colombian day begins (its 00:00 at −05:00), in milliseconds.
pub fn day_start_ms(date: NaiveDate) -> i64 {
    let midnight = date.and_hms_opt(0, 0, 0).unwrap_or_default();
    COLOMBIA
        .from_local_datetime(&midnight)
        .single()
        .map_or(0, |at| at.timestamp_millis())
}

/// How many days `first..=last` holds (0 when `last` is before `first`).
pub fn days_inclusive(first: NaiveDate, last: NaiveDate) -> i64 {
    (last - first).num_days().max(-1) + 1
}

/// A half-open span of instants `[start_ms, end_ms)`: what a range of Colombian days covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
}

impl Window {
    /// From the start of Colombian day `first` to the end of `last`, both included.
    pub fn days(first: NaiveDate, last: NaiveDate) -> Self {
        let after = last.checked_add_days(Days::new(1)).unwrap_or(last);
        Self {
            start_ms: day_start_ms(first),
            end_ms: day_start_ms(after),
        }
    }

    /// The Colombian calendar month that begins on `first_day`.
    pub fn month(first_day: NaiveDate) -> Self {
        let next = first_day
            .checked_add_months(Months::new(1))
            .unwrap_or(first_day);
        Self {
            start_ms: day_start_ms(first_day),
            end_ms: day_start_ms(next),
        }
    }

    pub fn contains(&self, ms: i64) -> bool {
        self.start_ms <= ms && ms < self.end_ms
    }
}

/// An instant as Colombian local time with its offset, to the second:
/// `2026-11-30T23:30:00-05:00`.
pub fn local_time(ms: i64) -> String {
    let at: DateTime<Utc> = Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
    at.with_timezone(&COLOMBIA)
        .format("%Y-%m-%dT%H:%M:%S-05:00")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).expect("a date")
    }

    fn utc_ms(y: i32, m: u32, d: u32, h: u32, min: u32) -> i64 {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0)
            .single()
            .expect("an instant")
            .timestamp_millis()
    }

    #[test]
    fn dates_are_read_exactly_as_written() {
        assert_eq!(parse_date("2026-11-30"), Some(date(2026, 11, 30)));
        assert_eq!(parse_date("2028-02-29"), Some(date(2028, 2, 29)));
        for wrong in [
            "2026-11-31",
            "2027-02-29",
            "2026-1-05",
            "2026-01-5",
            "26-01-05",
            "2026/01/05",
            "2026-01-05T00:00:00Z",
            " 2026-01-05",
            "2026-13-01",
            "+202-01-05",
            "",
        ] {
            assert_eq!(parse_date(wrong), None, "{wrong}");
        }
        assert_eq!(parse_month("2026-11"), Some(date(2026, 11, 1)));
        for wrong in ["2026-1", "2026-13", "2026-11-01", "202611", "2026-00"] {
            assert_eq!(parse_month(wrong), None, "{wrong}");
        }
    }

    #[test]
    fn a_colombian_day_runs_from_five_in_the_morning_utc() {
        let window = Window::days(date(2026, 11, 1), date(2026, 11, 30));
        assert_eq!(window.start_ms, utc_ms(2026, 11, 1, 5, 0));
        assert_eq!(window.end_ms, utc_ms(2026, 12, 1, 5, 0));
        // 23:30 in Bogotá on the 30th is 04:30 UTC on 1 December: still in.
        assert!(window.contains(utc_ms(2026, 12, 1, 4, 30)));
        // 00:10 in Bogotá on 1 December: out.
        assert!(!window.contains(utc_ms(2026, 12, 1, 5, 10)));
        assert!(!window.contains(utc_ms(2026, 11, 1, 4, 59)));
        assert_eq!(Window::month(date(2026, 11, 1)), window);
        assert_eq!(
            Window::month(date(2026, 12, 1)).end_ms,
            utc_ms(2027, 1, 1, 5, 0)
        );
    }

    #[test]
    fn instants_are_written_in_colombian_time() {
        assert_eq!(
            local_time(utc_ms(2026, 12, 1, 4, 30)),
            "2026-11-30T23:30:00-05:00"
        );
        assert_eq!(
            local_time(utc_ms(2026, 12, 1, 5, 10) + 999),
            "2026-12-01T00:10:00-05:00"
        );
    }

    #[test]
    fn ranges_count_their_days() {
        assert_eq!(days_inclusive(date(2026, 1, 1), date(2026, 1, 1)), 1);
        assert_eq!(days_inclusive(date(2026, 1, 1), date(2026, 12, 31)), 365);
        assert_eq!(days_inclusive(date(2028, 1, 1), date(2028, 12, 31)), 366);
        assert_eq!(days_inclusive(date(2026, 1, 2), date(2026, 1, 1)), 0);
    }
}
