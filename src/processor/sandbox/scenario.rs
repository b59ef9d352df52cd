//! The sandbox's test scenarios: what every transaction (and refund) on a payment source comes
//! to, chosen by the card number or the Nequi phone number it was made from.
//!
//! The scenario travels in the ids, never only in memory: a card token ends in its letter, a
//! payment source id is `n * 10 + code` (a Nequi one also carries its phone number in `n`), so
//! that charges on a payment source keep their outcome after the sandbox restarts.
//!
//! | code | made from                            | transactions | refunds  |
//! |------|--------------------------------------|--------------|----------|
//! | 0    | card 4242 4242 4242 4242             | APPROVED     | APPROVED |
//! | 1    | card 4111 1111 1111 1111             | DECLINED     |          |
//! | 2    | any other card                       | ERROR        |          |
//! | 3    | card 4000 0000 0000 5126             | APPROVED     | DECLINED |
//! | 4    | Nequi 3991111111                     | APPROVED     | APPROVED |
//! | 5    | Nequi, any other approved number     | ERROR        |          |
//!
//! A Nequi token for 3992222222 is DECLINED, and no payment source is made from it.

/// The Nequi number whose transactions are approved.
pub(super) const NEQUI_APPROVED: &str = "3991111111";
/// The Nequi number whose token the customer declines.
pub(super) const NEQUI_DECLINED: &str = "3992222222";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scenario {
    CardApproved,
    CardDeclined,
    CardError,
    CardRefundsDeclined,
    NequiApproved,
    NequiError,
}

const ALL: [Scenario; 6] = [
    Scenario::CardApproved,
    Scenario::CardDeclined,
    Scenario::CardError,
    Scenario::CardRefundsDeclined,
    Scenario::NequiApproved,
    Scenario::NequiError,
];

/// A payment source's id carries a Nequi phone number as its nine digits after the leading 3.
const PHONE_SPAN: i64 = 1_000_000_000;
const PHONE_BASE: i64 = 3_000_000_000;

impl Scenario {
    pub(super) fn of_card(number: &str) -> Self {
        match number {
            "4242424242424242" => Scenario::CardApproved,
            "4111111111111111" => Scenario::CardDeclined,
            "4000000000005126" => Scenario::CardRefundsDeclined,
            _ => Scenario::CardError,
        }
    }

    /// The scenario of an approved Nequi token's number.
    pub(super) fn of_nequi(phone_number: &str) -> Self {
        if phone_number == NEQUI_APPROVED {
            Scenario::NequiApproved
        } else {
            Scenario::NequiError
        }
    }

    fn code(self) -> i64 {
        match self {
            Scenario::CardApproved => 0,
            Scenario::CardDeclined => 1,
            Scenario::CardError => 2,
            Scenario::CardRefundsDeclined => 3,
            Scenario::NequiApproved => 4,
            Scenario::NequiError => 5,
        }
    }

    /// The last character of a card token's id.
    pub(super) fn card_letter(self) -> Option<char> {
        match self {
            Scenario::CardApproved => Some('a'),
            Scenario::CardDeclined => Some('d'),
            Scenario::CardError => Some('e'),
            Scenario::CardRefundsDeclined => Some('r'),
            Scenario::NequiApproved | Scenario::NequiError => None,
        }
    }

    pub(super) fn of_card_letter(letter: char) -> Option<Self> {
        ALL.into_iter().find(|s| s.card_letter() == Some(letter))
    }

    pub(super) fn is_nequi(self) -> bool {
        matches!(self, Scenario::NequiApproved | Scenario::NequiError)
    }

    /// `payment_method_type` and the payment source's `type`.
    pub(super) fn method_type(self) -> &'static str {
        if self.is_nequi() { "NEQUI" } else { "CARD" }
    }

    /// The final status of every transaction on a payment source of this scenario.
    pub(super) fn transaction_status(self) -> &'static str {
        match self {
            Scenario::CardApproved | Scenario::CardRefundsDeclined | Scenario::NequiApproved => {
                "APPROVED"
            }
            Scenario::CardDeclined => "DECLINED",
            Scenario::CardError | Scenario::NequiError => "ERROR",
        }
    }

    /// Why a transaction was not approved, as the processor words it.
    pub(super) fn status_message(self) -> Option<&'static str> {
        match self.transaction_status() {
            "DECLINED" => Some("Transacción rechazada por el banco (sandbox)"),
            "ERROR" if self.is_nequi() => Some("Error procesando el pago Nequi (sandbox)"),
            "ERROR" => Some("Error procesando la tarjeta (sandbox)"),
            _ => None,
        }
    }

    /// The final status of every refund of a transaction on a payment source of this scenario.
    pub(super) fn refund_status(self) -> &'static str {
        if self == Scenario::CardRefundsDeclined {
            "DECLINED"
        } else {
            "APPROVED"
        }
    }

    /// The last four digits a card payment source shows (the test card's own for the
    /// scenarios of one card, 0000 for "any other card").
    pub(super) fn last_four(self) -> &'static str {
        match self {
            Scenario::CardApproved => "4242",
            Scenario::CardDeclined => "1111",
            Scenario::CardRefundsDeclined => "5126",
            _ => "0000",
        }
    }
}

/// Whether `phone` is a Colombian mobile number as Nequi takes it: ten digits, the first a 3.
pub(super) fn is_nequi_number(phone: &str) -> bool {
    phone.len() == 10 && phone.starts_with('3') && phone.bytes().all(|b| b.is_ascii_digit())
}

/// What a payment source's id says: its scenario, and a Nequi source's phone number.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SourceId {
    pub(super) scenario: Scenario,
    pub(super) phone_number: Option<String>,
}

impl SourceId {
    /// The id of the `serial`th payment source; `None` when it does not fit (a Nequi id takes
    /// nine more digits than a card's) or the phone number does not go with the scenario.
    pub(super) fn id(&self, serial: u64) -> Option<i64> {
        let serial = i64::try_from(serial).ok()?;
        let n = match (self.scenario.is_nequi(), self.phone_number.as_deref()) {
            (false, None) => serial,
            (true, Some(phone)) if is_nequi_number(phone) => {
                let digits = phone.parse::<i64>().ok()? - PHONE_BASE;
                serial.checked_mul(PHONE_SPAN)?.checked_add(digits)?
            }
            _ => return None,
        };
        n.checked_mul(10)?.checked_add(self.scenario.code())
    }

    pub(super) fn decode(id: i64) -> Option<Self> {
        if id <= 0 {
            return None;
        }
        let code = id % 10;
        let scenario = ALL.into_iter().find(|s| s.code() == code)?;
        let phone_number = scenario
            .is_nequi()
            .then(|| (PHONE_BASE + (id / 10) % PHONE_SPAN).to_string());
        Some(Self {
            scenario,
            phone_number,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(scenario: Scenario, phone_number: Option<&str>) -> SourceId {
        SourceId {
            scenario,
            phone_number: phone_number.map(str::to_owned),
        }
    }

    #[test]
    fn a_payment_source_id_gives_back_its_scenario_and_phone_number() {
        for scenario in ALL.into_iter().filter(|s| !s.is_nequi()) {
            let id = source(scenario, None).id(7).expect("fits");
            assert_eq!(id, 70 + scenario.code(), "cards keep n * 10 + code");
            assert_eq!(SourceId::decode(id), Some(source(scenario, None)));
        }
        for (phone, scenario) in [
            (NEQUI_APPROVED, Scenario::NequiApproved),
            ("3000000000", Scenario::NequiError),
            ("3999999999", Scenario::NequiError),
        ] {
            let id = source(scenario, Some(phone)).id(12).expect("fits");
            assert_eq!(id % 10, scenario.code());
            assert_eq!(SourceId::decode(id), Some(source(scenario, Some(phone))));
        }
    }

    #[test]
    fn ids_that_do_not_fit_or_mismatch_are_refused() {
        assert_eq!(source(Scenario::CardApproved, None).id(u64::MAX), None);
        let nequi = source(Scenario::NequiApproved, Some(NEQUI_APPROVED));
        assert_eq!(nequi.id(1 << 40), None);
        assert_eq!(source(Scenario::NequiError, None).id(1), None);
        assert_eq!(source(Scenario::NequiError, Some("2991111111")).id(1), None);
        assert_eq!(
            source(Scenario::CardApproved, Some(NEQUI_APPROVED)).id(1),
            None
        );
        assert_eq!(SourceId::decode(0), None);
        assert_eq!(SourceId::decode(-14), None);
        assert_eq!(SourceId::decode(16), None, "no scenario has code 6");
    }

    #[test]
    fn a_card_token_letter_names_one_card_scenario() {
        for scenario in ALL {
            match scenario.card_letter() {
                Some(letter) => assert_eq!(Scenario::of_card_letter(letter), Some(scenario)),
                None => assert!(scenario.is_nequi()),
            }
        }
    }

    #[test]
    fn nequi_numbers_are_ten_digits_starting_with_3() {
        assert!(is_nequi_number("3991111111"));
        for wrong in ["2991111111", "399111111", "39911111111", "399111111a", ""] {
            assert!(!is_nequi_number(wrong), "{wrong}");
        }
    }
}
