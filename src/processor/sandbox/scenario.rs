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
//! | 6    | a card of `REFUSALS` (below)         | DECLINED     |          |
//!
//! A card of `REFUSALS` is declined for its own reason, worded in the transaction's
//! `status_message` as Wompi words a bank's refusal: its id is `(n * 10 + refusal) * 10 + 6`.
//! 4111 1111 1111 1111 stays the generic decline.
//!
//! A Nequi token for 3992222222 is DECLINED, and no payment source is made from it.

/// The Nequi number whose transactions are approved.
pub(super) const NEQUI_APPROVED: &str = "3991111111";
/// The Nequi number whose token the customer declines.
pub(super) const NEQUI_DECLINED: &str = "3992222222";

/// A test card declined for a reason of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Refusal {
    /// The card's number (Luhn-valid).
    pub(super) number: &'static str,
    /// Why the bank declined it, as the transaction's `status_message` says.
    pub(super) message: &'static str,
    /// The last character of its card token's id.
    letter: char,
}

/// The cards declined for a reason of their own; a refusal's index is its digit in the ids,
/// so a refusal is only ever added at the end.
pub(super) const REFUSALS: [Refusal; 8] = [
    Refusal {
        number: "4000000000009995",
        message: "Fondos insuficientes",
        letter: 'f',
    },
    Refusal {
        number: "4000000000000069",
        message: "Tarjeta vencida",
        letter: 'v',
    },
    Refusal {
        number: "4000000000009979",
        message: "Tarjeta reportada como robada",
        letter: 's',
    },
    Refusal {
        number: "4000000000009987",
        message: "Tarjeta reportada como perdida",
        letter: 'l',
    },
    Refusal {
        number: "4000000000000010",
        message: "Tarjeta inválida",
        letter: 'i',
    },
    Refusal {
        number: "4000000000000002",
        message: "Transacción rechazada por el banco: no honrar",
        letter: 'h',
    },
    Refusal {
        number: "4000000000000036",
        message: "Cuenta cerrada",
        letter: 'c',
    },
    // A Mastercard that declines softly.
    Refusal {
        number: "5105105105105100",
        message: "Transacción rechazada, intente más tarde",
        letter: 'm',
    },
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scenario {
    CardApproved,
    CardDeclined,
    CardError,
    CardRefundsDeclined,
    NequiApproved,
    NequiError,
    /// The index in `REFUSALS` of a card declined for its own reason.
    CardRefused(u8),
}

const ALL: [Scenario; 14] = [
    Scenario::CardApproved,
    Scenario::CardDeclined,
    Scenario::CardError,
    Scenario::CardRefundsDeclined,
    Scenario::NequiApproved,
    Scenario::NequiError,
    Scenario::CardRefused(0),
    Scenario::CardRefused(1),
    Scenario::CardRefused(2),
    Scenario::CardRefused(3),
    Scenario::CardRefused(4),
    Scenario::CardRefused(5),
    Scenario::CardRefused(6),
    Scenario::CardRefused(7),
];

/// The code of every `CardRefused`: its refusal is the digit before it.
const REFUSED_CODE: i64 = 6;

/// A payment source's id carries a Nequi phone number as its nine digits after the leading 3.
const PHONE_SPAN: i64 = 1_000_000_000;
const PHONE_BASE: i64 = 3_000_000_000;

impl Scenario {
    pub(super) fn of_card(number: &str) -> Self {
        match number {
            "4242424242424242" => Scenario::CardApproved,
            "4111111111111111" => Scenario::CardDeclined,
            "4000000000005126" => Scenario::CardRefundsDeclined,
            _ => REFUSALS
                .iter()
                .position(|refusal| refusal.number == number)
                .and_then(|index| u8::try_from(index).ok())
                .map_or(Scenario::CardError, Scenario::CardRefused),
        }
    }

    /// A `CardRefused`'s refusal.
    fn refusal(self) -> Option<&'static Refusal> {
        match self {
            Scenario::CardRefused(index) => REFUSALS.get(usize::from(index)),
            _ => None,
        }
    }

    /// The card's brand, as its number's first digit says (the test cards' numbers).
    pub(super) fn brand(self) -> &'static str {
        match self.refusal() {
            Some(refusal) if refusal.number.starts_with('5') => "MASTERCARD",
            _ => "VISA",
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
            Scenario::CardRefused(_) => REFUSED_CODE,
        }
    }

    /// The last character of a card token's id.
    pub(super) fn card_letter(self) -> Option<char> {
        match self {
            Scenario::CardApproved => Some('a'),
            Scenario::CardDeclined => Some('d'),
            Scenario::CardError => Some('e'),
            Scenario::CardRefundsDeclined => Some('r'),
            Scenario::CardRefused(_) => self.refusal().map(|refusal| refusal.letter),
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
            Scenario::CardDeclined | Scenario::CardRefused(_) => "DECLINED",
            Scenario::CardError | Scenario::NequiError => "ERROR",
        }
    }

    /// Why a transaction was not approved, as the processor words it.
    pub(super) fn status_message(self) -> Option<&'static str> {
        if let Some(refusal) = self.refusal() {
            return Some(refusal.message);
        }
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
            Scenario::CardRefused(_) => self.refusal().map_or("0000", |refusal| {
                &refusal.number[refusal.number.len() - 4..]
            }),
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
            (false, None) => match self.scenario {
                Scenario::CardRefused(index) => {
                    serial.checked_mul(10)?.checked_add(index.into())?
                }
                _ => serial,
            },
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
        let scenario = if code == REFUSED_CODE {
            let index = u8::try_from((id / 10) % 10).ok()?;
            Scenario::CardRefused(index).refusal()?;
            Scenario::CardRefused(index)
        } else {
            ALL.into_iter().find(|s| s.code() == code)?
        };
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
            match scenario {
                Scenario::CardRefused(index) => {
                    assert_eq!(
                        id,
                        700 + i64::from(index) * 10 + 6,
                        "(n * 10 + refusal) * 10 + 6"
                    );
                }
                _ => assert_eq!(id, 70 + scenario.code(), "cards keep n * 10 + code"),
            }
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
        assert_eq!(SourceId::decode(17), None, "no scenario has code 7");
        assert_eq!(SourceId::decode(96), None, "no refusal has index 9");
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
    fn each_refusal_card_declines_with_its_own_reason_and_other_numbers_error() {
        let mut messages = std::collections::BTreeSet::new();
        for refusal in REFUSALS {
            let scenario = Scenario::of_card(refusal.number);
            assert!(
                matches!(scenario, Scenario::CardRefused(_)),
                "{}",
                refusal.number
            );
            assert_eq!(scenario.transaction_status(), "DECLINED");
            assert_eq!(scenario.status_message(), Some(refusal.message));
            assert_eq!(scenario.last_four(), &refusal.number[12..]);
            assert!(
                super::super::protocol::luhn(refusal.number),
                "{}",
                refusal.number
            );
            assert!(messages.insert(refusal.message), "one message per card");
        }
        assert!(
            !messages.contains(Scenario::CardDeclined.status_message().expect("a message")),
            "4111 keeps the generic decline"
        );
        assert_eq!(
            Scenario::of_card("4111111111111111"),
            Scenario::CardDeclined
        );
        assert_eq!(
            Scenario::of_card("4242424242424242"),
            Scenario::CardApproved
        );
        for other in ["4012888888881881", "5555555555554444", "4000000000000028"] {
            assert_eq!(Scenario::of_card(other), Scenario::CardError, "{other}");
            assert_eq!(Scenario::of_card(other).transaction_status(), "ERROR");
        }
        assert_eq!(Scenario::of_card("5105105105105100").brand(), "MASTERCARD");
        assert_eq!(Scenario::of_card("4000000000009979").brand(), "VISA");
    }

    /// What dunning reads of each refusal: the reason its message names.
    #[test]
    fn each_refusal_message_reads_as_its_reason() {
        use crate::domain::decline::Decline;
        let reasons: Vec<Decline> = REFUSALS
            .iter()
            .map(|refusal| Decline::read(Some(refusal.message)))
            .collect();
        assert_eq!(
            reasons,
            [
                Decline::InsufficientFunds,
                Decline::ExpiredCard,
                Decline::StolenCard,
                Decline::LostCard,
                Decline::InvalidCard,
                Decline::DoNotHonor,
                Decline::ClosedAccount,
                Decline::TryAgainLater,
            ]
        );
        assert_eq!(
            Decline::read(Scenario::CardDeclined.status_message()),
            Decline::Generic
        );
    }

    #[test]
    fn nequi_numbers_are_ten_digits_starting_with_3() {
        assert!(is_nequi_number("3991111111"));
        for wrong in ["2991111111", "399111111", "39911111111", "399111111a", ""] {
            assert!(!is_nequi_number(wrong), "{wrong}");
        }
    }
}
