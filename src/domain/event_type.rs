//! The events an integrator can receive (spec "Events", CONTRACT §6, §15 and §17): one closed
//! vocabulary, so that every writer names a type the fan-out's sinks know, and a sink that
//! reacts to events (`store::notice_sink`) matches on all of them.

use super::vocabulary;

vocabulary! {
    /// An event's `type`, as stored in `events.type` and sent in its body.
    pub enum EventType {
        SubscriptionCreated => "subscription.created",
        SubscriptionCanceled => "subscription.canceled",
        SubscriptionPaused => "subscription.paused",
        SubscriptionResumed => "subscription.resumed",
        SubscriptionPastDue => "subscription.past_due",
        SubscriptionPlanChanged => "subscription.plan_changed",
        ChargeApproved => "charge.approved",
        ChargeDeclined => "charge.declined",
        ChargeRefunded => "charge.refunded",
        InvoiceCreated => "invoice.created",
        InvoiceDianAccepted => "invoice.dian_accepted",
        InvoiceDianRejected => "invoice.dian_rejected",
        CreditNoteCreated => "credit_note.created",
        NoticeSent => "notice.sent",
        NoticeFailed => "notice.failed",
        ConsoleAction => "console.action",
    }
}

#[cfg(test)]
mod tests {
    use super::EventType;

    #[test]
    fn every_word_reads_back_as_its_type() {
        for ty in EventType::ALL {
            assert_eq!(EventType::parse(ty.as_str()), Some(*ty));
        }
        assert_eq!(EventType::parse("charge.Approved"), None);
        assert_eq!(EventType::parse("*"), None);
    }
}
