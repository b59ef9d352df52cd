//! What a charge is for (`charge_attempts.purpose`), and what that tells the processor.
//!
//! Wompi's `recurrent` flag marks a credential-on-file charge of a fixed periodic amount the
//! merchant makes on its schedule. Ours: the charges the schedule makes at the subscription's
//! periodic amount are recurrent — the first charge after a trial or at a `start_date`, each
//! period's charge (a direct create's first period is charged as one, at once) and each dunning
//! retry. Charges made on demand are
//! not: the checkout's payment (the customer is there, typing the card), `charge-now`, and the
//! prorations of a plan change or an add-on (variable one-off amounts).

/// The charge of the first period after a trial, or at a `start_date`.
pub const FIRST: &str = "first";
/// A period's charge at its renewal.
pub const RENEWAL: &str = "renewal";
/// A dunning retry of a failed period charge.
pub const RETRY: &str = "retry";
/// `POST /v1/subscriptions/{id}/charge-now`.
pub const MANUAL: &str = "manual";
/// An upgrade's prorated difference.
pub const PRORATION: &str = "proration";
/// An add-on attached with proration.
pub const ADDON_PRORATION: &str = "addon_proration";
pub use super::checkout::CHECKOUT_PURPOSE as CHECKOUT;

/// Whether a charge of this purpose is sent to the processor as `recurrent`.
pub fn is_recurrent(purpose: &str) -> bool {
    matches!(purpose, FIRST | RENEWAL | RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_schedules_periodic_charges_are_recurrent() {
        for purpose in [FIRST, RENEWAL, RETRY] {
            assert!(is_recurrent(purpose), "{purpose}");
        }
        for purpose in [MANUAL, PRORATION, ADDON_PRORATION, CHECKOUT] {
            assert!(!is_recurrent(purpose), "{purpose}");
        }
    }
}
