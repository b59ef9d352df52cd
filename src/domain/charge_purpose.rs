//! What a charge is for (`charge_attempts.purpose`), and what that tells the processor.
//!
//! Wompi's `recurrent` flag marks a credential-on-file charge of a fixed periodic amount the
//! merchant makes on its schedule. Ours: the charges the schedule makes at the subscription's
//! periodic amount are recurrent — the first charge after a trial or at a `start_date`, each
//! period's charge (a direct create's first period is charged as one, at once) and each dunning
//! retry. Charges made on demand are not: the checkout's payment (the customer is there, typing
//! the card), `charge-now`, and the prorations of a plan change or an add-on (variable one-off
//! amounts).

super::vocabulary! {
    /// What a charge is for.
    pub enum ChargePurpose {
        /// The charge of the first period after a trial, or at a `start_date`.
        First => "first",
        /// A period's charge at its renewal.
        Renewal => "renewal",
        /// A dunning retry of a failed period charge.
        Retry => "retry",
        /// `POST /v1/subscriptions/{id}/charge-now`.
        Manual => "manual",
        /// An upgrade's prorated difference.
        Proration => "proration",
        /// An add-on attached with proration.
        AddonProration => "addon_proration",
        /// The hosted checkout's payment, which creates the subscription once approved.
        Checkout => "checkout",
    }
}

impl ChargePurpose {
    /// Whether a charge of this purpose is sent to the processor as `recurrent`.
    pub fn is_recurrent(self) -> bool {
        matches!(
            self,
            ChargePurpose::First | ChargePurpose::Renewal | ChargePurpose::Retry
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_schedules_periodic_charges_are_recurrent() {
        for &purpose in ChargePurpose::ALL {
            let recurrent = matches!(
                purpose,
                ChargePurpose::First | ChargePurpose::Renewal | ChargePurpose::Retry
            );
            assert_eq!(purpose.is_recurrent(), recurrent, "{purpose}");
            assert_eq!(ChargePurpose::parse(purpose.as_str()), Some(purpose));
        }
    }
}
