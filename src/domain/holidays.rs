//! Colombia's public holidays (días festivos), computed, not listed: Ley 51 de 1983 ("Ley
//! Emiliani") keeps six on their date, moves seven fixed-date ones and three of the Easter-based
//! ones to the following Monday when they fall on another day, and leaves Maundy Thursday and
//! Good Friday where Easter puts them. Easter is the Gregorian computus (the anonymous
//! algorithm, Meeus/Jones/Butcher). What the notices need of it: Ley 2300 de 2023 forbids
//! collection messages on these days (`domain::collection_hours`).

use chrono::{Datelike, Duration, NaiveDate, Weekday};

/// The holidays that stay on their date: New Year, Labour Day, the Independence (20 July),
/// the Battle of Boyacá (7 August), the Immaculate Conception (8 December), Christmas.
const ON_THEIR_DATE: [(u32, u32); 6] = [(1, 1), (5, 1), (7, 20), (8, 7), (12, 8), (12, 25)];

/// The fixed-date holidays moved to the next Monday: Epiphany (6 January), Saint Joseph
/// (19 March), Saints Peter and Paul (29 June), the Assumption (15 August), Columbus Day
/// (12 October), All Saints (1 November), the Independence of Cartagena (11 November).
const MOVED_TO_MONDAY: [(u32, u32); 7] = [
    (1, 6),
    (3, 19),
    (6, 29),
    (8, 15),
    (10, 12),
    (11, 1),
    (11, 11),
];

/// Days from Easter Sunday of the Easter-based holidays: Maundy Thursday and Good Friday where
/// they fall; Ascension (Thursday, +39), Corpus Christi (Thursday, +60) and the Sacred Heart
/// (Friday, +68), each moved to the next Monday.
const EASTER_FIXED: [i64; 2] = [-3, -2];
const EASTER_MOVED: [i64; 3] = [39, 60, 68];

/// Easter Sunday of `year` in the Gregorian calendar.
pub fn easter(year: i32) -> NaiveDate {
    let a = year % 19;
    let b = year / 100;
    let c = year % 100;
    let d = b / 4;
    let e = b % 4;
    let f = (b + 8) / 25;
    let g = (b - f + 1) / 3;
    let h = (19 * a + b - d - g + 15) % 30;
    let i = c / 4;
    let k = c % 4;
    let l = (32 + 2 * e + 2 * i - h - k) % 7;
    let m = (a + 11 * h + 22 * l) / 451;
    let month = (h + l - 7 * m + 114) / 31;
    let day = (h + l - 7 * m + 114) % 31 + 1;
    NaiveDate::from_ymd_opt(year, month as u32, day as u32).unwrap_or(NaiveDate::MIN)
}

/// The day itself when it is a Monday, else the Monday after it.
fn next_monday(date: NaiveDate) -> NaiveDate {
    let ahead = (7 - date.weekday().num_days_from_monday()) % 7;
    date + Duration::days(i64::from(ahead))
}

/// Every public holiday of `year`, in order, each date once (two holidays can fall on one
/// Monday, as Saints Peter and Paul and the Sacred Heart did on 30 June 2025).
pub fn holidays(year: i32) -> Vec<NaiveDate> {
    let date = |(month, day): (u32, u32)| NaiveDate::from_ymd_opt(year, month, day);
    let sunday = easter(year);
    let mut days: Vec<NaiveDate> = ON_THEIR_DATE
        .into_iter()
        .filter_map(date)
        .chain(
            MOVED_TO_MONDAY
                .into_iter()
                .filter_map(date)
                .map(next_monday),
        )
        .chain(EASTER_FIXED.iter().map(|&n| sunday + Duration::days(n)))
        .chain(
            EASTER_MOVED
                .iter()
                .map(|&n| next_monday(sunday + Duration::days(n))),
        )
        .collect();
    days.sort_unstable();
    days.dedup();
    days
}

/// Whether `date` is a Colombian public holiday.
pub fn is_holiday(date: NaiveDate) -> bool {
    holidays(date.year()).contains(&date)
}

/// Whether `date` is a Sunday or a public holiday: a day with no collection message at all.
pub fn is_rest_day(date: NaiveDate) -> bool {
    date.weekday() == Weekday::Sun || is_holiday(date)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dates(year: i32, list: &[(u32, u32)]) -> Vec<NaiveDate> {
        list.iter()
            .map(|&(m, d)| NaiveDate::from_ymd_opt(year, m, d).expect("a date"))
            .collect()
    }

    #[test]
    fn easter_falls_where_the_calendars_print_it() {
        for (year, month, day) in [
            (2000, 4, 23),
            (2008, 3, 23),
            (2019, 4, 21),
            (2024, 3, 31),
            (2025, 4, 20),
            (2026, 4, 5),
            (2027, 3, 28),
            (2038, 4, 25),
        ] {
            assert_eq!(
                easter(year),
                NaiveDate::from_ymd_opt(year, month, day).expect("a date"),
                "{year}"
            );
        }
    }

    /// The calendars the Colombian press published for each year (18 holidays; in 2025 two of
    /// them share 30 June, so 17 dates).
    #[test]
    fn the_holidays_are_the_published_ones() {
        let published = [
            (
                2024,
                vec![
                    (1, 1),
                    (1, 8),
                    (3, 25),
                    (3, 28),
                    (3, 29),
                    (5, 1),
                    (5, 13),
                    (6, 3),
                    (6, 10),
                    (7, 1),
                    (7, 20),
                    (8, 7),
                    (8, 19),
                    (10, 14),
                    (11, 4),
                    (11, 11),
                    (12, 8),
                    (12, 25),
                ],
            ),
            (
                2025,
                vec![
                    (1, 1),
                    (1, 6),
                    (3, 24),
                    (4, 17),
                    (4, 18),
                    (5, 1),
                    (6, 2),
                    (6, 23),
                    (6, 30),
                    (7, 20),
                    (8, 7),
                    (8, 18),
                    (10, 13),
                    (11, 3),
                    (11, 17),
                    (12, 8),
                    (12, 25),
                ],
            ),
            (
                2026,
                vec![
                    (1, 1),
                    (1, 12),
                    (3, 23),
                    (4, 2),
                    (4, 3),
                    (5, 1),
                    (5, 18),
                    (6, 8),
                    (6, 15),
                    (6, 29),
                    (7, 20),
                    (8, 7),
                    (8, 17),
                    (10, 12),
                    (11, 2),
                    (11, 16),
                    (12, 8),
                    (12, 25),
                ],
            ),
        ];
        for (year, list) in published {
            assert_eq!(holidays(year), dates(year, &list), "{year}");
        }
    }

    #[test]
    fn every_moved_holiday_is_a_monday_and_there_are_seventeen_or_eighteen_a_year() {
        for year in 1984..2100 {
            let all = holidays(year);
            assert!((17..=18).contains(&all.len()), "{year}: {}", all.len());
            let sunday = easter(year);
            for &day in &all {
                let easter_fixed = [sunday - Duration::days(3), sunday - Duration::days(2)];
                let on_date = ON_THEIR_DATE
                    .iter()
                    .any(|&(m, d)| day.month() == m && day.day() == d);
                if !on_date && !easter_fixed.contains(&day) {
                    assert_eq!(day.weekday(), Weekday::Mon, "{day}");
                }
            }
        }
    }

    #[test]
    fn sundays_and_holidays_are_rest_days() {
        let day = |m, d| NaiveDate::from_ymd_opt(2026, m, d).expect("a date");
        assert!(is_rest_day(day(11, 29)), "a Sunday");
        assert!(is_rest_day(day(11, 16)), "Independence of Cartagena, moved");
        assert!(
            !is_rest_day(day(11, 11)),
            "its own date is a working Wednesday"
        );
        assert!(!is_rest_day(day(11, 28)), "a Saturday");
    }
}
