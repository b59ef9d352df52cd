//! Refunding an approved charge: reserve the amount on the charge, post the refund to the
//! processor, learn its outcome, apply it once (`store::refunds`).
//!
//! The processor's answers are read as a charge's are (`ProcessorOutcome<Refund>`): a refusal
//! for certain leaves no trace (the refund is discarded and the API answers 422
//! `processor_error`); a final status settles it; anything else leaves it `pending` and the
//! reconciler asks again with backoff (`recheck_due`).
//!
//! A refund is posted once, never again. Wompi offers nothing that would make a second post
//! safe: its transactions carry our `reference` (unique, so a transaction can be posted again
//! under it and looked up by it), but a refund is asked for with only the transaction's id and
//! an amount, with no reference or idempotency key of ours that the processor would hold a
//! second post to; and its void (`POST /transactions/{id}/void`) undoes a whole card
//! transaction of the same day, not a refund. A second post of a refund whose first post's
//! answer was lost could therefore refund twice. So an unknown outcome is resolved only by
//! asking: the refund is looked for among the transaction's refunds (one of ours is in flight
//! per charge at most, so the one with its amount that we do not know yet is it), at the
//! recheck backoff (`domain::recheck`, every 5 minutes at most), for as long as the processor
//! does not show it. Its amount stays reserved meanwhile (no second refund of the charge can
//! begin), because a post held up on its way may still reach the processor and refund: time
//! alone never frees it. Only a refund that was never sent (`posted_at` unset: its request was
//! cut off between recording and posting) is ended `declined` by the reconciler, by a
//! conditional update that the post's own mark races against (`store::refunds`).
//!
//! Our service fee is not returned on a refund: the fee paid for processing the charge, which
//! happened (as Stripe keeps its fee on refunds). The balance does not move.

use crate::charges::Charger;
use crate::clock::Clock;
use crate::domain::charge_status::RefundStatus;
use crate::domain::recheck::{recheck_delay, stale_after};
use crate::events::charge_refunded_event;
use crate::ids::ChargeAttemptId;
use crate::processor::client::ProcessorCredentials;
use crate::processor::outcome::{ProcessorOutcome, Settlement};
use crate::processor::refunds::{NewRefund as ProcessorRefund, Refund as ProcessorRefundRecord};
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::refunds::{BeginRefundError, NewRefund, Refund};
use std::time::Duration;

/// How long a request waits for the processor to finish a refund before answering `pending`.
const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// Pending refunds asked about per reconciler pass.
const RECHECK_BATCH: u64 = 100;

/// Why a posted refund stays pending: the processor does not show it.
const NOT_SHOWN: &str = "the processor shows no such refund yet; its post's outcome is unknown";

/// What an operator's close of a refund came to.
#[derive(Debug)]
pub enum CloseOutcome {
    NotFound,
    /// Closed `declined`, its amount freed.
    Closed(Refund),
    /// Settled already (as it is now).
    NotPending(Refund),
    /// The processor shows it: settled or pending by what it says, not closed.
    ShownByProcessor(Refund),
    /// Posted too recently: a post held up on its way may still reach the processor.
    MayStillArrive {
        until_ms: i64,
    },
    /// The processor could not be asked: nothing closed.
    Unknown(String),
}

/// What to refund.
#[derive(Clone, Debug)]
pub struct RefundRequest {
    pub charge_id: ChargeAttemptId,
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
        let account_id = &account.id;
        let store = self.charger.store();
        let (refund, charge) = store
            .begin_refund(NewRefund {
                account: account_id.clone(),
                charge_id: request.charge_id.clone(),
                amount_cents: request.amount_cents,
                reason: request.reason.clone(),
                now_ms: self.clock.now_ms(account_id).await?,
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
        // Marked sent first: a refund the reconciler closed as never sent meanwhile (this
        // request took longer than its first recheck) is not sent at all.
        let now = chrono::Utc::now().timestamp_millis();
        if !store.mark_refund_posted(&refund.id, now).await? {
            return Ok(store
                .refund(account_id, &refund.id)
                .await?
                .unwrap_or(refund));
        }
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
            .refund(account_id, &refund.id)
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
        let account_id = &account.id;
        let store = self.charger.store();
        let charge = store.charge(account_id, &refund.charge_id).await?;
        let subscription = match charge.as_ref().and_then(|c| c.subscription_id.as_ref()) {
            Some(id) => store.subscription(account_id, id).await?,
            None => None,
        };
        let now = self.clock.now_ms(account_id).await?;
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
            && settled.refund.status == RefundStatus::Approved
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
        for refund in due.into_iter().filter(|r| owns(r.id.as_str())) {
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
        let account_id = &refund.account_id;
        let Some(account) = store.account(account_id).await? else {
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
            None if refund.posted_at.is_none() => {
                // Never sent: nothing can have been refunded. Closed unless its request marks
                // it sent first, in which case it is asked about like any other.
                let now = chrono::Utc::now().timestamp_millis();
                if store.close_unposted_refund(&refund.id, now).await? {
                    tracing::info!(refund = %refund.id, "a refund recorded but never sent is closed declined");
                    return Ok(());
                }
                self.find_lost(&credentials, refund).await?
            }
            None => self.find_lost(&credentials, refund).await?,
        };
        self.apply(&account, refund, &outcome).await
    }

    /// An operator's close of a refund the processor never shows (`POST
    /// /admin/refunds/{id}/close`). The processor is asked once more first: a refund it shows
    /// now is settled by what it says, and one it cannot be asked about stays pending (unknown
    /// is never taken for "never arrived"). Only a refund posted longer than the in-flight bound
    /// ago, which the processor does not show, is closed `declined`, its amount freed.
    pub async fn close_unshown(
        &self,
        id: &crate::ids::RefundId,
        reason: &str,
    ) -> Result<CloseOutcome, StoreError> {
        let store = self.charger.store();
        let Some(refund) = store.refund_by_id(id).await? else {
            return Ok(CloseOutcome::NotFound);
        };
        if refund.status != RefundStatus::Pending {
            return Ok(CloseOutcome::NotPending(refund));
        }
        let now = chrono::Utc::now().timestamp_millis();
        let bound = i64::try_from(self.charger.in_flight_bound().as_millis()).unwrap_or(i64::MAX);
        let Some(posted_at) = refund.posted_at else {
            // Never sent: the reconciler's close, at once.
            store.close_unposted_refund(&refund.id, now).await?;
            return Ok(CloseOutcome::Closed(self.reread(&refund).await?));
        };
        if refund.processor_refund_id.is_some() {
            return Ok(CloseOutcome::ShownByProcessor(refund));
        }
        if now.saturating_sub(posted_at) < bound {
            return Ok(CloseOutcome::MayStillArrive {
                until_ms: posted_at.saturating_add(bound),
            });
        }
        let Some(account) = store.account(&refund.account_id).await? else {
            return Ok(CloseOutcome::NotFound);
        };
        let credentials = match self.charger.credentials(&account) {
            Ok(credentials) => credentials,
            Err(err) => return Ok(CloseOutcome::Unknown(err.to_string())),
        };
        match self.find_lost(&credentials, &refund).await? {
            ProcessorOutcome::Unknown(why) if why == NOT_SHOWN => {}
            ProcessorOutcome::Unknown(why) => return Ok(CloseOutcome::Unknown(why)),
            found => {
                self.apply(&account, &refund, &found).await?;
                return Ok(CloseOutcome::ShownByProcessor(self.reread(&refund).await?));
            }
        }
        match store
            .close_unshown_refund(&refund.id, now - bound, reason, now)
            .await?
        {
            Some(closed) => {
                tracing::warn!(refund = %closed.id, %reason, "an operator closed a refund the processor never showed: declined, its amount freed");
                Ok(CloseOutcome::Closed(closed))
            }
            None => Ok(CloseOutcome::NotPending(self.reread(&refund).await?)),
        }
    }

    async fn reread(&self, refund: &Refund) -> Result<Refund, StoreError> {
        Ok(self
            .charger
            .store()
            .refund(&refund.account_id, &refund.id)
            .await?
            .unwrap_or_else(|| refund.clone()))
    }

    /// A refund whose post's answer was lost: ours is the transaction's refund of the same
    /// amount that none of the charge's other refunds is. While the processor shows none, the
    /// outcome stays unknown (the post may still arrive), however long that lasts.
    async fn find_lost(
        &self,
        credentials: &ProcessorCredentials,
        refund: &Refund,
    ) -> Result<ProcessorOutcome<ProcessorRefundRecord>, StoreError> {
        let store = self.charger.store();
        let account_id = &refund.account_id;
        let Some(transaction_id) = store
            .charge(account_id, &refund.charge_id)
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
        Ok(ProcessorOutcome::Unknown(NOT_SHOWN.into()))
    }
}
