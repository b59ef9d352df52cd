//! Why a charge was declined, and what dunning makes of it (issue 47, CONTRACT §15's guidance).
//! The processor reports a DECLINED transaction with a `status_message` in its own words;
//! `Decline::read` turns that message into a reason code kept on the charge
//! (`charge_attempts.decline_code`), and `Decline::is_hard` says whether the same card may be
//! tried again:
//!
//! - **hard**: stolen, lost, invalid card, closed account, expired. Trying again cannot
//!   succeed (an expired card stays expired; the networks class it with the cards never to be
//!   retried), and repeating an attempt on a card reported stolen or lost is what the networks
//!   fine. The subscription is not retried on that card; the customer is asked for a new one.
//! - **soft**: insufficient funds, do not honor, "try again later", a generic decline, the
//!   network's reattempt limit, and any message this service does not recognise: the money may
//!   be there tomorrow, so the schedule's retries run.
//!
//! Not here: the reattempt limits themselves (`domain::reattempts`), and what the sandbox says
//! for each test card (`processor::sandbox::scenario`).

crate::domain::vocabulary! {
    /// The reason code of a declined charge.
    pub enum Decline {
        InsufficientFunds => "insufficient_funds",
        ExpiredCard => "expired_card",
        StolenCard => "stolen_card",
        LostCard => "lost_card",
        InvalidCard => "invalid_card",
        DoNotHonor => "do_not_honor",
        ClosedAccount => "closed_account",
        TryAgainLater => "try_again_later",
        /// The card network's reattempt limit stopped the attempt before it was sent
        /// (`domain::reattempts`): no processor saw it.
        NetworkLimit => "network_limit",
        /// A decline whose message says no more than "declined", or one not recognised.
        Generic => "generic_decline",
    }
}

/// Words of a processor's message, lowercased and without accents, and the reason each names.
/// Read in order: the first that appears in the message wins, so the specific come first.
const MESSAGE_WORDS: [(&str, Decline); 17] = [
    ("robada", Decline::StolenCard),
    ("stolen", Decline::StolenCard),
    ("perdida", Decline::LostCard),
    ("lost", Decline::LostCard),
    ("cuenta cerrada", Decline::ClosedAccount),
    ("closed account", Decline::ClosedAccount),
    ("account closed", Decline::ClosedAccount),
    ("vencida", Decline::ExpiredCard),
    ("expirada", Decline::ExpiredCard),
    ("expired", Decline::ExpiredCard),
    ("tarjeta invalida", Decline::InvalidCard),
    ("invalid card", Decline::InvalidCard),
    ("fondos insuficientes", Decline::InsufficientFunds),
    ("insufficient funds", Decline::InsufficientFunds),
    ("no honrar", Decline::DoNotHonor),
    ("do not honor", Decline::DoNotHonor),
    ("intente mas tarde", Decline::TryAgainLater),
];

impl Decline {
    /// The reason a processor's `status_message` gives for a decline; a message it does not
    /// recognise (or none) is a generic decline, which is soft.
    pub fn read(message: Option<&str>) -> Self {
        let Some(message) = message else {
            return Decline::Generic;
        };
        let folded = fold(message);
        MESSAGE_WORDS
            .iter()
            .find(|(words, _)| folded.contains(words))
            .map_or(Decline::Generic, |(_, reason)| *reason)
    }

    /// Whether trying the same card again cannot succeed: it is not retried.
    pub fn is_hard(self) -> bool {
        match self {
            Decline::StolenCard
            | Decline::LostCard
            | Decline::InvalidCard
            | Decline::ClosedAccount
            | Decline::ExpiredCard => true,
            Decline::InsufficientFunds
            | Decline::DoNotHonor
            | Decline::TryAgainLater
            | Decline::NetworkLimit
            | Decline::Generic => false,
        }
    }
}

/// `message` lowercased, its Spanish accents dropped and its runs of spaces made one.
fn fold(message: &str) -> String {
    let mut folded = String::with_capacity(message.len());
    for c in message.chars().flat_map(char::to_lowercase) {
        let c = match c {
            'á' => 'a',
            'é' => 'e',
            'í' => 'i',
            'ó' => 'o',
            'ú' | 'ü' => 'u',
            c if c.is_whitespace() => ' ',
            c => c,
        };
        if c == ' ' && folded.ends_with(' ') {
            continue;
        }
        folded.push(c);
    }
    folded
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_sandboxs_and_wompis_words_name_their_reasons() {
        for (message, reason) in [
            ("Fondos insuficientes", Decline::InsufficientFunds),
            ("Tarjeta vencida", Decline::ExpiredCard),
            ("Tarjeta reportada como robada", Decline::StolenCard),
            ("Tarjeta reportada como PERDIDA", Decline::LostCard),
            ("Tarjeta inválida", Decline::InvalidCard),
            ("Transacción rechazada: no honrar", Decline::DoNotHonor),
            ("Cuenta  cerrada", Decline::ClosedAccount),
            ("Rechazada, intente más tarde", Decline::TryAgainLater),
            ("Insufficient funds", Decline::InsufficientFunds),
            ("Do not honor", Decline::DoNotHonor),
            (
                "Transacción rechazada por el banco (sandbox)",
                Decline::Generic,
            ),
        ] {
            assert_eq!(Decline::read(Some(message)), reason, "{message}");
        }
        assert_eq!(Decline::read(None), Decline::Generic);
    }

    #[test]
    fn stolen_lost_invalid_closed_and_expired_are_hard_the_rest_soft() {
        let hard: Vec<Decline> = Decline::ALL
            .iter()
            .copied()
            .filter(|d| d.is_hard())
            .collect();
        assert_eq!(
            hard,
            [
                Decline::ExpiredCard,
                Decline::StolenCard,
                Decline::LostCard,
                Decline::InvalidCard,
                Decline::ClosedAccount
            ]
        );
    }

    proptest! {
        /// A message that names none of the known reasons is a generic, soft decline: an
        /// unknown processor message never stops the retries.
        #[test]
        fn an_unrecognised_message_is_a_soft_generic_decline(message in "[0-9 .,:()-]{0,40}") {
            prop_assert_eq!(Decline::read(Some(&message)), Decline::Generic);
            prop_assert!(!Decline::read(Some(&message)).is_hard());
        }

        /// Whatever surrounds them, a reason's words name it (case and accents aside).
        #[test]
        fn a_reasons_words_name_it_wherever_they_stand(before in "[0-9 ]{0,10}",
            after in "[0-9 ]{0,10}", index in 0usize..MESSAGE_WORDS.len(), upper: bool) {
            let (words, reason) = MESSAGE_WORDS[index];
            let words = if upper { words.to_uppercase() } else { words.to_owned() };
            let message = format!("{before}{words}{after}");
            prop_assert_eq!(Decline::read(Some(&message)), reason);
        }

        /// The code kept on the charge reads back as the reason.
        #[test]
        fn a_code_reads_back(index in 0usize..Decline::ALL.len()) {
            let reason = Decline::ALL[index];
            prop_assert_eq!(Decline::parse(reason.as_str()), Some(reason));
        }
    }
}
