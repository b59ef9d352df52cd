//! The card networks' limits on reattempts (CONTRACT §15's guidance): Visa allows at most 20
//! attempts in 30 days on one card for one amount; Mastercard at most 10 in a day and 35 in 30
//! days on one card, whatever the amount. A retry that would go past a limit is not sent
//! (`actors::subscription::charging`): it is recorded as declined with the reason
//! `network_limit`, and no money moves. The windows are rolling (a day is the last 24 hours),
//! read on the account's clock; what counts is every attempt sent on the card, the first
//! charge and merchant-initiated ones included, and never one a limit stopped.
//!
//! Not here: counting the attempts (`Store::count_sent_attempts`, by the database).

const DAY_MS: i64 = 86_400_000;

/// A card network whose reattempt limits are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    Visa,
    Mastercard,
}

/// One limit: at most `limit` attempts within `span_ms`, on the card (and, with
/// `same_amount`, of the same amount).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub span_ms: i64,
    pub limit: u64,
    pub same_amount: bool,
}

const VISA: [Window; 1] = [Window {
    span_ms: 30 * DAY_MS,
    limit: 20,
    same_amount: true,
}];

const MASTERCARD: [Window; 2] = [
    Window {
        span_ms: DAY_MS,
        limit: 10,
        same_amount: false,
    },
    Window {
        span_ms: 30 * DAY_MS,
        limit: 35,
        same_amount: false,
    },
];

impl Network {
    /// The network of a payment method's `brand` as the processor names it (`VISA`,
    /// `MASTERCARD`); `None` for any other (a Nequi account has no brand), which has no limit
    /// kept here.
    pub fn of_brand(brand: Option<&str>) -> Option<Self> {
        match brand?.trim().to_ascii_uppercase().as_str() {
            "VISA" => Some(Network::Visa),
            "MASTERCARD" | "MASTER CARD" => Some(Network::Mastercard),
            _ => None,
        }
    }

    /// Why a retry was not sent when `sent` attempts already fell in its `window`, as its
    /// charge's message says.
    pub fn refusal(self, window: Window, sent: u64) -> String {
        format!(
            "Not sent: {self:?} allows at most {} attempts in {} day(s) on a card{}, and {sent} \
             were made",
            window.limit,
            window.span_ms / DAY_MS,
            if window.same_amount {
                " for one amount"
            } else {
                ""
            },
        )
    }

    /// The network's limits.
    pub fn windows(self) -> &'static [Window] {
        match self {
            Network::Visa => &VISA,
            Network::Mastercard => &MASTERCARD,
        }
    }
}

impl Window {
    /// Whether one more attempt is allowed when `sent` attempts fell within the window.
    pub fn allows_another(self, sent: u64) -> bool {
        sent < self.limit
    }

    /// The first instant the window ending at `now_ms` takes in.
    pub fn since(self, now_ms: i64) -> i64 {
        now_ms - self.span_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn brands_name_their_networks() {
        assert_eq!(Network::of_brand(Some("VISA")), Some(Network::Visa));
        assert_eq!(Network::of_brand(Some("visa")), Some(Network::Visa));
        assert_eq!(
            Network::of_brand(Some("MASTERCARD")),
            Some(Network::Mastercard)
        );
        assert_eq!(Network::of_brand(Some("AMEX")), None);
        assert_eq!(Network::of_brand(None), None);
    }

    #[test]
    fn visa_allows_the_twentieth_attempt_in_thirty_days_and_not_the_twenty_first() {
        let [window] = VISA;
        assert!(window.same_amount);
        assert!(window.allows_another(19));
        assert!(!window.allows_another(20));
        assert_eq!(window.since(30 * DAY_MS), 0);
    }

    #[test]
    fn mastercard_allows_ten_a_day_and_thirty_five_in_thirty_days_on_the_card() {
        let [day, month] = MASTERCARD;
        assert_eq!((day.limit, month.limit), (10, 35));
        assert!(day.allows_another(9) && !day.allows_another(10));
        assert!(month.allows_another(34) && !month.allows_another(35));
        assert!(!day.same_amount && !month.same_amount);
    }

    proptest! {
        /// Attempts made one by one while another is allowed, from any count already made,
        /// stop exactly at the limit (or where they began, past it): never beyond.
        #[test]
        fn attempts_allowed_one_by_one_stop_at_the_limit(start in 0u64..100, index in 0usize..3) {
            let windows: Vec<Window> = VISA.into_iter().chain(MASTERCARD).collect();
            let window = windows[index];
            let mut sent = start;
            while window.allows_another(sent) {
                sent += 1;
            }
            prop_assert_eq!(sent, start.max(window.limit));
        }
    }
}
