//! What one exchange with the processor told us about a charge's transaction: the one type
//! every path (the create answer, a lookup, the reconciler, the checkout page's poll) speaks.
//!
//! CONTRACT §7: only a final status the processor reported settles a charge. Anything that
//! leaves us not knowing whether the processor has the transaction is `Unknown`, never a
//! decline: a timeout, a connection error, a 5xx, 429, 408, 409, "reference already used"
//! without a transaction to show for it, an answer we could not read, a lookup that failed.
//!
//! A refused post is `Refused` (settled as ERROR) only when the answer says definitely "no,
//! and nothing was created": a 4xx other than 408, 409, 425 and 429. That includes 400/422
//! (the processor validated the request and refused it: an invalid payment source, a bad
//! signature) and 401/403/404 (our keys are refused or revoked, or the URL is wrong: not the
//! customer's fault, but nothing was charged, and keeping the charge pending would hold its
//! fee and block the subscription and the checkout for as long as the keys stay wrong; as
//! ERROR it goes through dunning, whose later retries succeed once the operator fixes the
//! keys, and it is logged at error level). 408/409/425/429 mean "not now", and a 5xx may come
//! after the processor acted.

use super::client::{ProcessorError, Transaction};

/// What the processor keeps a status of: a transaction, or a refund (`refunds::Refund`).
pub trait Reported {
    /// The processor's id of it.
    fn id(&self) -> &str;
    /// PENDING, APPROVED, DECLINED, VOIDED, ERROR.
    fn status(&self) -> &str;
    fn status_message(&self) -> Option<&str>;
}

impl Reported for Transaction {
    fn id(&self) -> &str {
        &self.id
    }
    fn status(&self) -> &str {
        &self.status
    }
    fn status_message(&self) -> Option<&str> {
        self.status_message.as_deref()
    }
}

/// What one exchange told us about a transaction (`T = Transaction`) or a refund.
#[derive(Clone, Debug)]
pub enum ProcessorOutcome<T = Transaction> {
    /// The processor reported APPROVED.
    Approved(T),
    /// The processor reported a final status other than APPROVED: DECLINED, VOIDED or ERROR
    /// (the raw status is the record's).
    Declined(T),
    /// The processor has it and it is not final yet.
    Pending(T),
    /// The post was refused for certain and nothing was created (see the module doc): the
    /// charge settles as ERROR with this reason.
    Refused(String),
    /// A lookup succeeded and found no transaction under the reference: the processor never
    /// saw it, and the same reference may be posted again.
    Unseen,
    /// We do not know whether the processor has the transaction: ask again later.
    Unknown(String),
}

/// What settles a charge (or a refund): the raw final status, the processor's message, the
/// processor's id of the transaction (or refund).
#[derive(Clone, Copy, Debug)]
pub struct Settlement<'a> {
    pub raw_status: &'a str,
    pub message: Option<&'a str>,
    pub transaction_id: Option<&'a str>,
}

impl ProcessorOutcome<Transaction> {
    /// A transaction the processor showed us, by its status.
    pub fn of_transaction(tx: Transaction) -> Self {
        Self::of_record(tx)
    }

    /// The transaction the processor showed, if it showed one.
    pub fn transaction(&self) -> Option<&Transaction> {
        self.record()
    }
}

impl<T: Reported> ProcessorOutcome<T> {
    /// A record the processor showed us, by its status. A status we do not know is not
    /// final: the charge (or refund) waits for one we do.
    pub fn of_record(record: T) -> Self {
        match record.status() {
            "APPROVED" => Self::Approved(record),
            "DECLINED" | "VOIDED" | "ERROR" => Self::Declined(record),
            _ => Self::Pending(record),
        }
    }

    /// A post that failed: refused for certain, or unknown.
    pub fn of_post_error(err: &ProcessorError) -> Self {
        match err {
            ProcessorError::Rejected { status, .. } if definite_refusal(*status) => {
                Self::Refused(err.to_string())
            }
            // Our own keys are inconsistent: nothing was sent.
            ProcessorError::EnvironmentMismatch => Self::Refused(err.to_string()),
            _ => Self::Unknown(err.to_string()),
        }
    }

    /// The record the processor showed, if it showed one.
    pub fn record(&self) -> Option<&T> {
        match self {
            Self::Approved(record) | Self::Declined(record) | Self::Pending(record) => Some(record),
            _ => None,
        }
    }

    /// What to settle the charge (or refund) with, when this outcome is final.
    pub fn settlement(&self) -> Option<Settlement<'_>> {
        match self {
            Self::Approved(record) | Self::Declined(record) => Some(Settlement {
                raw_status: record.status(),
                message: record.status_message(),
                transaction_id: Some(record.id()),
            }),
            Self::Refused(reason) => Some(Settlement {
                raw_status: "ERROR",
                message: Some(reason),
                transaction_id: None,
            }),
            _ => None,
        }
    }

    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Approved(_) => "approved",
            Self::Declined(_) => "declined",
            Self::Pending(_) => "pending",
            Self::Refused(_) => "refused",
            Self::Unseen => "unseen",
            Self::Unknown(_) => "unknown",
        }
    }
}

/// Whether a 4xx answer to a post means "no, and nothing was created" (see the module doc).
pub fn definite_refusal(status: u16) -> bool {
    (400..500).contains(&status) && !matches!(status, 408 | 409 | 425 | 429)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(status: u16) -> ProcessorError {
        ProcessorError::Rejected {
            status,
            message: "no".into(),
        }
    }

    fn tx(status: &str) -> Transaction {
        Transaction {
            id: "1-1-1".into(),
            status: status.into(),
            reference: "ch_1".into(),
            amount_in_cents: 100,
            currency: Some("COP".into()),
            status_message: None,
        }
    }

    #[test]
    fn only_a_final_status_is_final() {
        assert!(matches!(
            ProcessorOutcome::of_transaction(tx("APPROVED")),
            ProcessorOutcome::Approved(_)
        ));
        for status in ["DECLINED", "VOIDED", "ERROR"] {
            let outcome = ProcessorOutcome::of_transaction(tx(status));
            assert!(matches!(outcome, ProcessorOutcome::Declined(_)), "{status}");
            assert_eq!(outcome.settlement().map(|s| s.raw_status), Some(status));
        }
        for status in ["PENDING", "SOMETHING_NEW"] {
            let outcome = ProcessorOutcome::of_transaction(tx(status));
            assert!(matches!(outcome, ProcessorOutcome::Pending(_)), "{status}");
            assert!(outcome.settlement().is_none());
        }
    }

    #[test]
    fn not_now_answers_and_server_errors_are_unknown() {
        for status in [408, 409, 425, 429, 500, 502, 503, 504] {
            let outcome = ProcessorOutcome::<Transaction>::of_post_error(&rejected(status));
            assert!(matches!(outcome, ProcessorOutcome::Unknown(_)), "{status}");
            assert!(outcome.settlement().is_none(), "{status}");
        }
        let unreadable = ProcessorError::Decode("eof".into());
        assert!(matches!(
            ProcessorOutcome::<Transaction>::of_post_error(&unreadable),
            ProcessorOutcome::Unknown(_)
        ));
    }

    #[test]
    fn a_definite_refusal_settles_as_error_with_the_processors_message() {
        for status in [400, 401, 403, 404, 422] {
            let outcome = ProcessorOutcome::<Transaction>::of_post_error(&rejected(status));
            let settlement = outcome.settlement().expect("final");
            assert_eq!(settlement.raw_status, "ERROR");
            assert!(settlement.message.is_some_and(|m| m.contains("no")));
            assert_eq!(settlement.transaction_id, None);
        }
    }

    #[test]
    fn unseen_and_unknown_settle_nothing() {
        assert!(
            ProcessorOutcome::<Transaction>::Unseen
                .settlement()
                .is_none()
        );
        assert!(
            ProcessorOutcome::<Transaction>::Unknown("t".into())
                .settlement()
                .is_none()
        );
    }
}
