//! A charge attempt's status (`charge_attempts.status`, closed in the database by migration
//! 000016): `pending` until the processor's final answer settles it once, to one of the four
//! final statuses the processor reports in capitals; and a refund's.

super::vocabulary! {
    /// A charge attempt's status.
    pub enum ChargeStatus {
        Pending => "pending",
        Approved => "approved",
        Declined => "declined",
        Voided => "voided",
        Error => "error",
    }
}

super::vocabulary! {
    /// A refund's status (`refunds.status`): `pending` until the processor's final answer.
    pub enum RefundStatus {
        Pending => "pending",
        Approved => "approved",
        Declined => "declined",
    }
}

impl ChargeStatus {
    /// The final status a processor's raw status settles a charge to (`APPROVED` is
    /// `approved`, …); `None` for `PENDING` and anything else.
    pub fn from_processor(raw: &str) -> Option<Self> {
        match raw {
            "APPROVED" => Some(ChargeStatus::Approved),
            "DECLINED" => Some(ChargeStatus::Declined),
            "VOIDED" => Some(ChargeStatus::Voided),
            "ERROR" => Some(ChargeStatus::Error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_status_reads_back_and_only_final_answers_settle() {
        for &status in ChargeStatus::ALL {
            assert_eq!(ChargeStatus::parse(status.as_str()), Some(status));
            let raw = status.as_str().to_uppercase();
            let settles = ChargeStatus::from_processor(&raw);
            assert_eq!(
                settles,
                (status != ChargeStatus::Pending).then_some(status),
                "{raw}"
            );
        }
        assert_eq!(ChargeStatus::parse("Approved"), None);
        assert_eq!(ChargeStatus::from_processor("approved"), None);
    }
}
