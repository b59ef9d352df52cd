//! A processor event that passed its checksum, applied: deduplicated by its checksum (a repeat
//! changes nothing), then a `transaction.updated` goes to its charge's owner through
//! `apply_processor_outcome`. An event whose amount, currency or transaction id are not its
//! charge's, or whose final status contradicts the recorded one, is kept and flagged
//! (`charge_conflicts`) and moves no money; an event about no known charge is kept for audit.

use super::{ActionError, Runtime};
use crate::charges::mismatch;
use crate::processor::client::Transaction;
use crate::processor::outcome::ProcessorOutcome;
use crate::store::accounts::Account;
use crate::store::charges::conflicts::{Report, contradicts};
use crate::store::charges::{ChargeAttempt, ProcessorEvent};

impl Runtime {
    /// Applies the authenticated event (`checksum`, `event_type`, its `transaction`, the raw
    /// `body` kept with its record) of `account`; true unless it had been received before.
    /// The event's row is written in the transaction that applies it (see `store::charges`): a
    /// stored checksum means its outcome is already applied.
    pub async fn receive_processor_event(
        &self,
        account: &Account,
        checksum: String,
        event_type: String,
        transaction: Option<Transaction>,
        body: &[u8],
    ) -> Result<bool, ActionError> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let account_id = &account.id;
        let out = transaction
            .as_ref()
            .filter(|tx| tx.is_final() && event_type == "transaction.updated")
            .and_then(|tx| self.in_flight().charge_out(&tx.reference))
            .filter(|charge| charge.account_id == account.id);
        let (seen, charge) = match (&transaction, event_type.as_str()) {
            // A final outcome of a period charge this node has out at the processor: its outcome
            // is not applied yet, so neither is this event (a repeat racing the first is applied
            // once by the settlement's condition). One read fewer for every renewal.
            (Some(_), "transaction.updated") if out.is_some() => (false, out),
            (Some(tx), "transaction.updated") => {
                self.store()
                    .event_seen_and_charge(&checksum, account_id, &tx.reference)
                    .await?
            }
            _ => (self.store().processor_event_seen(&checksum).await?, None),
        };
        if seen {
            return Ok(false);
        }
        let row = ProcessorEvent {
            checksum,
            account_id: account.id.clone(),
            event_type: event_type.clone(),
            transaction_id: transaction.as_ref().map(|t| t.id.clone()),
            reference: transaction.as_ref().map(|t| t.reference.clone()),
            status: transaction.as_ref().map(|t| t.status.clone()),
            body: String::from_utf8_lossy(body).into_owned(),
            received_at: now_ms,
            processed_at: Some(now_ms),
        };
        if let (Some(tx), "transaction.updated") = (&transaction, event_type.as_str()) {
            let Some(charge) = charge else {
                tracing::info!(transaction = %tx.id, "processor event for no known charge; kept for audit");
                let first_delivery = self.store().record_processor_event(row).await?;
                return Ok(first_delivery);
            };
            // An event that is not about this charge's money (CONTRACT §7), or that contradicts
            // its recorded final outcome, moves nothing: it is kept, flagged for operators, and
            // answered 200 so that the processor does not send it again and again.
            if let Some(report) = conflict(&charge, tx, &row.checksum) {
                let first_delivery = self
                    .store()
                    .flag_processor_event(row, &charge, report)
                    .await?;
                return Ok(first_delivery);
            }
            let outcome = ProcessorOutcome::of_transaction(tx.clone());
            return self
                .apply_processor_outcome(&charge, &outcome, Some(row))
                .await;
        }
        Ok(self.store().record_processor_event(row).await?)
    }
}

/// Why an event must move no money: its amount, currency or transaction are not the charge's,
/// or its final status contradicts the one recorded (a race that slips past this check is
/// caught by `settle_charge`, which keeps the conflict too).
fn conflict(charge: &ChargeAttempt, tx: &Transaction, checksum: &str) -> Option<Report> {
    let (kind, detail) = match mismatch(charge, tx) {
        Some(why) => ("mismatch", why),
        None if tx.is_final() && contradicts(charge.status, &tx.status) => (
            "outcome",
            format!(
                "the processor reported {} for a charge recorded {}",
                tx.status, charge.status
            ),
        ),
        None => return None,
    };
    Some(Report {
        kind,
        reported_status: Some(tx.status.clone()),
        transaction_id: Some(tx.id.clone()),
        amount_cents: Some(tx.amount_in_cents),
        currency: tx.currency.clone(),
        event_checksum: Some(checksum.to_owned()),
        detail,
    })
}
