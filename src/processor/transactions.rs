//! Transactions at the processor: posting one under our reference, and asking about it. The
//! answers come back as a `ProcessorOutcome` (see `outcome` for what each HTTP answer means).
//!
//! Creating a transaction never double-charges: the reference is unique per ChargeAttempt and
//! the processor refuses a second transaction under it. The client posts once and says what
//! came of it; an ambiguous answer is looked up by reference at once (most blips resolve
//! there), and what is still unknown is left to the caller, who asks again later with backoff
//! (`charges`, the reconciler). It never retries a post on its own.

use super::client::{
    NewTransaction, ProcessorClient, ProcessorCredentials, ProcessorError, SourceKind, Transaction,
    decode,
};
use super::outcome::ProcessorOutcome;
use super::signature::integrity_signature;
use serde_json::json;

impl ProcessorClient {
    /// Posts the transaction for `tx.reference` once and says what came of it. "Reference
    /// already used" is the transaction made before (looked up); an answer that leaves it open
    /// whether the processor acted (a timeout, a 5xx, 408, 409, an unreadable body) is looked
    /// up by reference at once, and stays `Unknown` when that does not settle it. A 429 is not
    /// looked up: the processor asked us to slow down.
    pub async fn create_transaction(
        &self,
        creds: &ProcessorCredentials,
        tx: &NewTransaction,
    ) -> ProcessorOutcome {
        let mut body = json!({
            "amount_in_cents": tx.amount_in_cents,
            "currency": tx.currency,
            "signature": integrity_signature(&tx.reference, tx.amount_in_cents, &tx.currency, &creds.integrity_secret),
            "customer_email": tx.customer_email,
            "reference": tx.reference,
            "payment_source_id": tx.payment_source_id,
            "recurrent": tx.recurrent,
        });
        if tx.source_kind == SourceKind::Card {
            body["payment_method"] = json!({"installments": 1});
        }
        let request = self
            .http
            .post(format!("{}/transactions", creds.base_url))
            .bearer_auth(&creds.private_key)
            .json(&body);
        let err = match self.send(request).await {
            Ok(data) => {
                return match decode::<Transaction>(data) {
                    Ok(created) => ProcessorOutcome::of_transaction(created),
                    Err(err) => self.look_after(creds, &tx.reference, &err).await,
                };
            }
            Err(err) => err,
        };
        match &err {
            ProcessorError::Rejected {
                status: 422,
                message,
            } if message.contains("reference") => {
                match self.lookup(creds, None, &tx.reference).await {
                    ProcessorOutcome::Unseen => ProcessorOutcome::Unknown(format!(
                        "{err}, yet a lookup of the reference found nothing"
                    )),
                    found => found,
                }
            }
            ProcessorError::Rejected { status: 429, .. } => ProcessorOutcome::of_post_error(&err),
            _ => match ProcessorOutcome::of_post_error(&err) {
                ProcessorOutcome::Unknown(_) => self.look_after(creds, &tx.reference, &err).await,
                refused => refused,
            },
        }
    }

    /// After an ambiguous answer to a post: what a lookup by reference shows, else unknown.
    async fn look_after(
        &self,
        creds: &ProcessorCredentials,
        reference: &str,
        err: &ProcessorError,
    ) -> ProcessorOutcome {
        match self.lookup(creds, None, reference).await {
            ProcessorOutcome::Unseen => {
                ProcessorOutcome::Unknown(format!("{err}; the reference is not there yet"))
            }
            ProcessorOutcome::Unknown(why) => {
                ProcessorOutcome::Unknown(format!("{err}; then the lookup failed: {why}"))
            }
            found => found,
        }
    }

    /// Asks the processor about a transaction: by its id when we know it, else (or when the
    /// processor does not know the id) by our reference. `Unseen` only when a lookup by
    /// reference succeeded and found nothing; any failure is `Unknown`, never `Unseen`.
    pub async fn lookup(
        &self,
        creds: &ProcessorCredentials,
        transaction_id: Option<&str>,
        reference: &str,
    ) -> ProcessorOutcome {
        if let Some(id) = transaction_id {
            match self.get_transaction(creds, id).await {
                Ok(tx) => return ProcessorOutcome::of_transaction(tx),
                // A processor that lost the transaction (the sandbox after a restart) is asked
                // by reference, which tells whether it never saw it.
                Err(ProcessorError::Rejected { status: 404, .. }) => {}
                Err(err) => return ProcessorOutcome::Unknown(format!("lookup by id: {err}")),
            }
        }
        match self.find_transaction_by_reference(creds, reference).await {
            Ok(Some(tx)) => ProcessorOutcome::of_transaction(tx),
            Ok(None) => ProcessorOutcome::Unseen,
            Err(err) => ProcessorOutcome::Unknown(format!("lookup by reference: {err}")),
        }
    }

    pub async fn get_transaction(
        &self,
        creds: &ProcessorCredentials,
        id: &str,
    ) -> Result<Transaction, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/transactions/{id}", creds.base_url))
            .bearer_auth(&creds.private_key);
        decode(self.send(request).await?)
    }

    pub async fn find_transaction_by_reference(
        &self,
        creds: &ProcessorCredentials,
        reference: &str,
    ) -> Result<Option<Transaction>, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/transactions", creds.base_url))
            .query(&[("reference", reference)])
            .bearer_auth(&creds.private_key);
        let data = self.send(request).await?;
        let list: Vec<Transaction> = decode(data)?;
        Ok(list.into_iter().find(|tx| tx.reference == reference))
    }
}
