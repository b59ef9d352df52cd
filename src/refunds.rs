//! Refunding an approved charge: reserve the amount on the charge, post the refund to the
//! processor, learn its outcome, apply it once (`store::refunds`).
//!
//! The processor's answers are read as a charge's are (`ProcessorOutcome<Refund>`): a refusal
//! for certain leaves no trace (the refund is discarded and the API answers 422
//! `processor_error`); a final status settles it; anything else leaves it `pending` and the
//! reconciler asks again with backoff (`recheck_due`). A refund is never posted twice by us: a
//! second post would refund twice. When a post's answer was lost, the refund is looked for
//! among the transaction's refunds (one of ours is in flight per charge at most, so the one
//! with its amount that we do not know yet is it); when the processor still shows none
//! `never_received_after` (2 minutes at the default recheck base, eight times the processor
//! call's timeout) after it was asked for, it never arrived, and the refund ends `declined`
//! with nothing moved.
//!
//! Our service fee is not returned on a refund: the fee paid for processing the charge, which
//! happened (as Stripe keeps its fee on refunds). The balance does not move.

use crate::actors::charge_refunded_event;
use crate::actors::clock::Clock;
use crate::charges::Charger;
use crate::domain::recheck::{recheck_delay, stale_after};
use crate::ids::AccountId;
use crate::processor::client::ProcessorCredentials;
use crate::processor::outcome::{ProcessorOutcome, Settlement};
use crate::processor::refunds::{NewRefund as ProcessorRefund, Refund as ProcessorRefundRecord};
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::refunds::{BeginRefundError, NewRefund, Refund};
use std::time::Duration;

/// How long a request waits for the processor to finish a refund before answering `pending`.
const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// A refund whose post was lost and that the processor still does not show this long after it
/// was asked for never reached it: 2 minutes at the default base of 5 s.
pub fn never_received_after(recheck_base: Duration) -> Duration {
    recheck_base * 24
}
/// Pending refunds asked about per reconciler pass.
const RECHECK_BATCH: u64 = 100;

/// What to refund.
#[derive(Clone, Debug)]
pub struct RefundRequest {
    pub charge_id: String,
    /// None: all that is left.
    pub amount_cents: Option<i64>,
    pub reason: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    #[error(transparent)]
    Begin(#[from] BeginRefundError),
    /// The processor refused it for certain: nothing was refunded, nothing is kept.
    #[error("the processor refused the refund: {0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Refunds and their outcomes, with the charger's processor client and credentials.
#[derive(Clone)]
pub struct Refunds {
    charger: Charger,
    clock: Clock,
}

impl Refunds {
    pub fn new(charger: Charger, clock: Clock) -> Self {
        Self { charger, clock }
    }

    /// Asks the processor for a refund of `request.charge_id` and answers the refund as it
    /// stands after at most `ANSWER_WAIT`: approved, declined or still pending.
    pub async fn refund(
        &self,
        account: &Account,
        request: RefundRequest,
    ) -> Result<Refund, RefundError> {
        let account_id = AccountId::from_stored(account.id.clone());
        let store = self.charger.store();
        let (refund, charge) = store
            .begin_refund(NewRefund {
                account: account_id.clone(),
                charge_id: request.charge_id.clone(),
                amount_cents: request.amount_cents,
                reason: request.reason.clone(),
                now_ms: self.clock.now_ms(&account_id).await?,
                recheck_at_ms: chrono::Utc::now().timestamp_millis()
                    + stale_after(self.charger.recheck_base()).as_millis() as i64,
            })
            .await?;
        let Some(transaction_id) = charge.processor_transaction_id else {
            store.discard_refund(&refund).await?;
            return Err(RefundError::Refused(
                "the charge has no processor transaction to refund".into(),
            ));
        };
        let credentials = match self.charger.credentials(account) {
            Ok(credentials) => credentials,
            Err(err) => {
                store.discard_refund(&refund).await?;
                return Err(RefundError::Refused(err.to_string()));
            }
        };
        let client = self.charger.client();
        let mut outcome = client
            .create_refund(
                &credentials,
                &ProcessorRefund {
                    transaction_id,
                    amount_in_cents: refund.amount_cents,
                    reason: request.reason,
                },
            )
            .await;
        if let ProcessorOutcome::Refused(why) = &outcome {
            store.discard_refund(&refund).await?;
            return Err(RefundError::Refused(why.clone()));
        }
        // A short wait for the processor to finish, asking it directly.
        let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
        let mut pause = Duration::from_millis(100);
        while let ProcessorOutcome::Pending(pending) = &outcome {
            let now = chrono::Utc::now().timestamp_millis();
            store
                .record_processor_refund(&refund.id, &pending.id, &pending.status, now)
                .await?;
            if tokio::time::Instant::now() + pause > deadline {
                break;
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
            outcome = match client.refund(&credentials, &pending.id).await {
                Ok(found) => ProcessorOutcome::of_record(found),
                Err(err) => ProcessorOutcome::Unknown(format!("asking about the refund: {err}")),
            };
        }
        self.apply(account, &refund, &outcome).await?;
        Ok(store
            .refund(&account_id, &refund.id)
            .await?
            .unwrap_or(refund))
    }

    /// Settles `refund` when `outcome` is final, else schedules the next question.
    async fn apply(
        &self,
        account: &Account,
        refund: &Refund,
        outcome: &ProcessorOutcome<ProcessorRefundRecord>,
    ) -> Result<(), StoreError> {
        match outcome.settlement() {
            Some(settlement) => self.settle(account, refund, settlement).await,
            None => {
                let reason = match outcome {
                    ProcessorOutcome::Unknown(why) => why.clone(),
                    other => format!("{} at the processor", other.name()),
                };
                self.ask_later(refund, &reason).await
            }
        }
    }

    /// Applies a final outcome once, with `charge.refunded` in the same transaction when the
    /// refund was approved and the charge is a subscription's.
    async fn settle(
        &self,
        account: &Account,
        refund: &Refund,
        settlement: Settlement<'_>,
    ) -> Result<(), StoreError> {
        let account_id = AccountId::from_stored(account.id.clone());
        let store = self.charger.store();
        let charge = store.charge(&account_id, &refund.charge_id).await?;
        let subscription = match charge.as_ref().and_then(|c| c.subscription_id.as_deref()) {
            Some(id) => store.subscription(&account_id, id).await?,
            None => None,
        };
        let now = self.clock.now_ms(&account_id).await?;
        let txn = store.begin().await?;
        let settled = txn
            .settle_refund(
                &refund.id,
                settlement.raw_status,
                settlement.message,
                settlement.transaction_id,
                now,
            )
            .await?;
        if let (Some(settled), Some(sub)) = (&settled, &subscription)
            && settled.refund.status == "approved"
        {
            txn.insert_event(charge_refunded_event(
                sub,
                &settled.charge,
                &settled.refund,
                settlement.raw_status,
                now,
            ))
            .await?;
        }
        txn.commit().await
    }

    async fn ask_later(&self, refund: &Refund, reason: &str) -> Result<(), StoreError> {
        let attempts = refund.attempts + 1;
        let delay = recheck_delay(self.charger.recheck_base(), attempts as u32);
        let at = chrono::Utc::now().timestamp_millis() + delay.as_millis() as i64;
        self.charger
            .store()
            .schedule_refund_recheck(&refund.id, attempts, at, reason)
            .await
    }

    /// Asks the processor about the pending refunds whose time has come (of the shards this
    /// node holds, by `owns`), and settles those it finished. A failure of one never stops
    /// the others. Returns how many were asked about.
    pub async fn recheck_due(&self, owns: impl Fn(&str) -> bool) -> Result<usize, StoreError> {
        let store = self.charger.store();
        let now = chrono::Utc::now().timestamp_millis();
        let due = store.refunds_due(now, RECHECK_BATCH).await?;
        let mut asked = 0;
        for refund in due.into_iter().filter(|r| owns(&r.id)) {
            asked += 1;
            if let Err(err) = self.recheck(&refund).await {
                tracing::warn!(refund = %refund.id, error = %err, "asking about a refund failed; it stays pending");
                let _ = self.ask_later(&refund, &err.to_string()).await;
            }
        }
        Ok(asked)
    }

    async fn recheck(&self, refund: &Refund) -> Result<(), StoreError> {
        let store = self.charger.store();
        let account_id = AccountId::from_stored(refund.account_id.clone());
        let Some(account) = store.account(&account_id).await? else {
            return Ok(());
        };
        let credentials = match self.charger.credentials(&account) {
            Ok(credentials) => credentials,
            Err(err) => return self.ask_later(refund, &err.to_string()).await,
        };
        let client = self.charger.client();
        let outcome = match &refund.processor_refund_id {
            Some(id) => match client.refund(&credentials, id).await {
                Ok(found) => ProcessorOutcome::of_record(found),
                Err(err) => ProcessorOutcome::Unknown(format!("asking about the refund: {err}")),
            },
            None => self.find_lost(&credentials, refund).await?,
        };
        self.apply(&account, refund, &outcome).await
    }

    /// A refund whose post's answer was lost: ours is the transaction's refund of the same
    /// amount that none of the charge's other refunds is. None after `never_received_after`:
    /// it never arrived, and ends declined.
    async fn find_lost(
        &self,
        credentials: &ProcessorCredentials,
        refund: &Refund,
    ) -> Result<ProcessorOutcome<ProcessorRefundRecord>, StoreError> {
        let store = self.charger.store();
        let account_id = AccountId::from_stored(refund.account_id.clone());
        let Some(transaction_id) = store
            .charge(&account_id, &refund.charge_id)
            .await?
            .and_then(|c| c.processor_transaction_id)
        else {
            return Ok(ProcessorOutcome::Refused(
                "the charge has no transaction".into(),
            ));
        };
        let listed = match self
            .charger
            .client()
            .refunds_of(credentials, &transaction_id)
            .await
        {
            Ok(listed) => listed,
            Err(err) => {
                return Ok(ProcessorOutcome::Unknown(format!(
                    "listing the transaction's refunds: {err}"
                )));
            }
        };
        let known = store.known_processor_refunds(&refund.charge_id).await?;
        if let Some(found) = listed
            .into_iter()
            .find(|r| r.amount_in_cents == refund.amount_cents && !known.contains(&r.id))
        {
            let now = chrono::Utc::now().timestamp_millis();
            store
                .record_processor_refund(&refund.id, &found.id, &found.status, now)
                .await?;
            return Ok(ProcessorOutcome::of_record(found));
        }
        let age = chrono::Utc::now().timestamp_millis() - refund.updated_at;
        if age > never_received_after(self.charger.recheck_base()).as_millis() as i64 {
            return Ok(ProcessorOutcome::Refused(
                "the processor never received this refund; nothing was refunded".into(),
            ));
        }
        Ok(ProcessorOutcome::Unknown(
            "the processor shows no such refund yet".into(),
        ))
    }
}
