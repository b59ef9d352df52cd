//! A subscription's schedule: its series of periods, the cycle each is billed at, a pending
//! cycle change and the instant it takes effect. Pure arithmetic; the subscription actor only
//! reads it from the row and writes it back.
//!
//! Periods come in series. A series starts at an anchor (creation, a trial's end, a resume, a
//! manual charge, or the end of a period whose cycle changed) and its `n`th boundary is always
//! computed from the anchor (`period_boundary`), so a month-end anchor never drifts. The
//! current period keeps the cycle it was billed at (`period_cycle`) until it ends, whatever the
//! subscription's `cycle` says meanwhile: its length and its prices (prorations) are that
//! cycle's. A cycle change is pending while the two differ, and takes effect at the period's
//! end by starting a new series there. Every restart applies the pending change and clears it,
//! so no later boundary re-anchors the series a second time.

use super::time::{Cycle, from_millis, period_boundary};

/// The period arithmetic of one subscription (instants in milliseconds, account clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Where the current series starts.
    pub anchor: i64,
    /// The current period's index in its series; −1 before the first real period (a trial or
    /// the prepaid time before a `start_date`), whose end is not a cycle boundary.
    pub index: i32,
    /// The cycle the current period is billed at: its length and its prices.
    pub period_cycle: Cycle,
    /// The subscription's cycle: the one every period from the next on is billed at.
    pub cycle: Cycle,
    pub start: i64,
    pub end: i64,
}

impl Schedule {
    /// The schedule of a new subscription whose first real period starts at `now`.
    pub fn starting(now: i64, cycle: Cycle) -> Self {
        let mut schedule = Self {
            anchor: now,
            index: 0,
            period_cycle: cycle,
            cycle,
            start: now,
            end: now,
        };
        schedule.restart(now);
        schedule
    }

    /// A schedule before its first real period: [now, first_start), a trial or prepaid time.
    pub fn before_start(now: i64, first_start: i64, cycle: Cycle) -> Self {
        Self {
            anchor: now,
            index: -1,
            period_cycle: cycle,
            cycle,
            start: now,
            end: first_start,
        }
    }

    /// Whether the current period precedes the first real one (trial, prepaid time).
    pub fn in_pre_period(&self) -> bool {
        self.index < 0
    }

    /// The pending cycle change and the instant it takes effect, if any.
    pub fn pending_cycle(&self) -> Option<(Cycle, i64)> {
        (self.cycle != self.period_cycle).then_some((self.cycle, self.end))
    }

    /// Changes the subscription's cycle. A real period keeps its cycle until it ends; the
    /// pre-period is not billed, so the new cycle applies to the first real period directly.
    /// Changing back to the period's cycle cancels a pending change.
    pub fn change_cycle(&mut self, to: Cycle) {
        self.cycle = to;
        if self.in_pre_period() {
            self.period_cycle = to;
        }
    }

    /// Starts a new series at `at` in the subscription's cycle (a pending change takes effect
    /// and is cleared).
    pub fn restart(&mut self, at: i64) {
        self.anchor = at;
        self.index = 0;
        self.period_cycle = self.cycle;
        self.start = at;
        self.end = period_boundary(from_millis(at), self.cycle, 1).timestamp_millis();
    }

    /// The next period becomes current: it starts where this one ends. A pending cycle change
    /// (or the end of the pre-period) starts a new series there; otherwise it is the next
    /// period of the series.
    pub fn advance(&mut self) {
        if self.in_pre_period() || self.pending_cycle().is_some() {
            self.restart(self.end);
            return;
        }
        self.index += 1;
        self.start = self.end;
        self.end = boundary(self.anchor, self.period_cycle, self.index + 1);
    }
}

fn boundary(anchor: i64, cycle: Cycle, n: i32) -> i64 {
    period_boundary(from_millis(anchor), cycle, u32::try_from(n).unwrap_or(0)).timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use proptest::prelude::*;

    fn at(y: i32, m: u32, d: u32) -> i64 {
        Utc.with_ymd_and_hms(y, m, d, 12, 0, 0)
            .single()
            .expect("valid date")
            .timestamp_millis()
    }

    #[test]
    fn month_end_anchor_keeps_its_day_across_short_months() {
        let mut s = Schedule::starting(at(2027, 1, 31), Cycle::Monthly);
        assert_eq!(s.end, at(2027, 2, 28));
        s.advance();
        assert_eq!((s.start, s.end), (at(2027, 2, 28), at(2027, 3, 31)));
        s.advance();
        assert_eq!((s.start, s.end), (at(2027, 3, 31), at(2027, 4, 30)));
    }

    #[test]
    fn a_cycle_change_keeps_the_current_period_and_applies_at_its_end() {
        let mut s = Schedule::starting(at(2027, 1, 10), Cycle::Monthly);
        s.change_cycle(Cycle::Annual);
        assert_eq!(
            s.period_cycle,
            Cycle::Monthly,
            "the current period keeps its cycle"
        );
        assert_eq!(s.end, at(2027, 2, 10));
        assert_eq!(s.pending_cycle(), Some((Cycle::Annual, at(2027, 2, 10))));
        s.advance();
        assert_eq!((s.start, s.end), (at(2027, 2, 10), at(2028, 2, 10)));
        assert_eq!(s.pending_cycle(), None);
    }

    #[test]
    fn changing_back_cancels_the_pending_change() {
        let mut s = Schedule::starting(at(2027, 1, 31), Cycle::Monthly);
        s.change_cycle(Cycle::Annual);
        s.change_cycle(Cycle::Monthly);
        assert_eq!(s.pending_cycle(), None);
        s.advance();
        s.advance();
        // Still the Jan 31 series: no re-anchoring at Feb 28.
        assert_eq!((s.start, s.end), (at(2027, 3, 31), at(2027, 4, 30)));
    }

    #[test]
    fn a_trial_end_with_a_pending_change_does_not_drift_the_anchor_later() {
        // Trial until Jan 31, cycle changed to monthly from annual during the trial.
        let mut s = Schedule::before_start(at(2027, 1, 17), at(2027, 1, 31), Cycle::Annual);
        s.change_cycle(Cycle::Monthly);
        s.advance();
        assert_eq!((s.start, s.end), (at(2027, 1, 31), at(2027, 2, 28)));
        s.advance();
        assert_eq!((s.start, s.end), (at(2027, 2, 28), at(2027, 3, 31)));
    }

    #[test]
    fn a_restart_applies_and_clears_a_pending_change() {
        let mut s = Schedule::starting(at(2027, 1, 31), Cycle::Monthly);
        s.change_cycle(Cycle::Annual);
        // A charge-now restarts the period series at once.
        s.restart(at(2027, 2, 5));
        assert_eq!(s.period_cycle, Cycle::Annual);
        assert_eq!(s.end, at(2028, 2, 5));
        s.advance();
        assert_eq!((s.start, s.end), (at(2028, 2, 5), at(2029, 2, 5)));
    }

    proptest! {
        /// Whatever sequence of cycle changes, advances and restarts: periods are contiguous,
        /// every period of a series ends on the anchor's boundary, and a period is as long as
        /// its own cycle says.
        #[test]
        fn periods_are_contiguous_and_anchored(ops in proptest::collection::vec(0u8..4, 1..60),
            day in 1u32..29, month in 1u32..13) {
            let mut s = Schedule::starting(at(2027, month, day), Cycle::Monthly);
            let mut clock = s.start;
            for op in ops {
                match op {
                    0 => { let before = s; s.advance(); prop_assert_eq!(s.start, before.end); }
                    1 => s.change_cycle(Cycle::Annual),
                    2 => s.change_cycle(Cycle::Monthly),
                    _ => { clock = (s.start + s.end) / 2; s.restart(clock); }
                }
                prop_assert!(s.start < s.end);
                prop_assert!(s.start >= clock);
                prop_assert_eq!(s.end, boundary(s.anchor, s.period_cycle, s.index + 1));
                prop_assert_eq!(s.start, boundary(s.anchor, s.period_cycle, s.index));
            }
        }
    }
}
