//! Charging a payment method: reserve the fee, post the transaction, learn its outcome, apply
//! it once.
//!
//! What the processor says comes back as a `ProcessorOutcome` four ways: the create answer, a
//! recheck (the reconciler, the checkout page's wait), and any number of `transaction.updated`
//! events. Only a final status the processor reported, or a post it refused for certain,
//! settles a charge; an unknown outcome leaves it pending with its fee reserved, and schedules
//! the next question about its reference (`Store::schedule_recheck`, with backoff). Every
//! settlement ends in `settle_charge`, whose conditional update lets exactly one report apply
//! the money. `actors::outcomes` routes every outcome to the charge's owner: a subscription's
//! actor, `checkout_settlement::settle` (which also completes or reopens the session), or `settle` here
//! for any other charge. This module does not know checkouts or actors.

use crate::accounts::{fee_schedule, processor_base_url};
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::money::CURRENCY;
use crate::ids::{ChargeAttemptId, CustomerId, PaymentMethodId, SubscriptionId};
use crate::processor::client::{
    NewTransaction, ProcessorClient, ProcessorCredentials, ProcessorError, SourceKind, Transaction,
};
use crate::processor::outcome::ProcessorOutcome;
use crate::store::accounts::Account;
use crate::store::batch::TransactionNote;
use crate::store::catalog::Customer;
use crate::store::charges::conflicts::Report;
use crate::store::charges::{
    BeginChargeError, ChargeAttempt, NewCharge, PaymentMethod, ProcessorEvent, Settled,
};
use crate::store::{Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// What to charge.
#[derive(Clone, Debug)]
pub struct ChargeRequest {
    pub subscription_id: Option<SubscriptionId>,
    pub customer_id: CustomerId,
    pub payment_method_id: PaymentMethodId,
    pub amount_cents: i64,
    pub purpose: ChargePurpose,
    pub period_start: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ChargeError {
    #[error("the balance does not cover the projected fee")]
    InsufficientBalance,
    #[error("unknown payment method or customer")]
    UnknownPaymentMethod,
    #[error("the period already has a pending or approved charge")]
    PeriodTaken,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Who pays a charge, as the processor knows them.
struct Payer {
    payment_source_id: i64,
    kind: SourceKind,
    email: String,
}

impl Payer {
    fn of(method: &PaymentMethod, customer: &Customer) -> Self {
        Payer {
            payment_source_id: method.processor_payment_source_id,
            kind: SourceKind::from_stored(&method.kind),
            email: customer.email.clone(),
        }
    }
}

/// The default first wait before asking again about an unknown outcome (see
/// `domain::recheck`).
pub const DEFAULT_RECHECK_BASE: Duration = Duration::from_secs(5);

/// How long a post whose answer was lost may still reach the processor (`Config`).
pub const DEFAULT_IN_FLIGHT_BOUND: Duration = Duration::from_secs(3_600);

/// The recheck reason of a charge the processor has and has not finished.
const STILL_PENDING: &str = "pending at the processor";

#[derive(Clone)]
pub struct Charger {
    store: Store,
    client: ProcessorClient,
    public_url: String,
    recheck_base: Duration,
    /// `Config::in_flight_bound_ms`.
    in_flight_bound: Duration,
    /// The charges whose post this process is sending now (`post`): a recheck of one of them
    /// would find nothing yet under its reference and post it a second time beside it.
    posting: Arc<dashmap::DashSet<ChargeAttemptId>>,
}

/// A charge of `Charger::posting`, for as long as its post is under way.
struct Posting<'a> {
    set: &'a dashmap::DashSet<ChargeAttemptId>,
    id: ChargeAttemptId,
}

impl Drop for Posting<'_> {
    fn drop(&mut self) {
        self.set.remove(&self.id);
    }
}

impl Charger {
    pub fn new(store: Store, client: ProcessorClient, public_url: String) -> Self {
        Self {
            store,
            client,
            public_url,
            recheck_base: DEFAULT_RECHECK_BASE,
            in_flight_bound: DEFAULT_IN_FLIGHT_BOUND,
            posting: Arc::default(),
        }
    }

    /// Whether this process is posting `charge_id`'s transaction right now.
    pub fn is_posting(&self, charge_id: &ChargeAttemptId) -> bool {
        self.posting.contains(charge_id)
    }

    /// How long after a charge was last written a post of it, by this node or another, may
    /// still be under way: the processor call's timeout, twice over for the time between the
    /// charge's write and its post being sent (a busy node, a slow connect). A pending charge
    /// written more recently may be out at the processor right now, its lookup finding
    /// nothing yet: it is not rechecked before (`actors::scheduler`).
    pub fn posting_bound(&self) -> Duration {
        self.client.timeout() * 2
    }

    /// The backoff base of rechecks (`Config::processor_recheck_base_ms`).
    pub fn with_recheck_base(mut self, base: Duration) -> Self {
        self.recheck_base = base;
        self
    }

    pub fn recheck_base(&self) -> Duration {
        self.recheck_base
    }

    /// How long a post of ours whose answer was lost may still reach the processor
    /// (`Config::in_flight_bound_ms`).
    pub fn with_in_flight_bound(mut self, bound: Duration) -> Self {
        self.in_flight_bound = bound;
        self
    }

    pub fn in_flight_bound(&self) -> Duration {
        self.in_flight_bound
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn client(&self) -> &ProcessorClient {
        &self.client
    }

    pub fn credentials(&self, account: &Account) -> Result<ProcessorCredentials, ProcessorError> {
        ProcessorCredentials::new(
            processor_base_url(account, &self.public_url),
            account.processor_public_key.clone(),
            account.processor_private_key.clone(),
            account.processor_integrity_secret.clone(),
        )
    }

    /// Reserves the fee, records the attempt and posts the transaction. The attempt comes back
    /// pending (also when the outcome is unknown), or final when the processor answered with a
    /// final status at once or refused the post.
    pub async fn charge(
        &self,
        account: &Account,
        request: ChargeRequest,
    ) -> Result<ChargeAttempt, ChargeError> {
        let account_id = &account.id;
        // Both must exist before any money moves.
        if self
            .store
            .payment_method(account_id, &request.payment_method_id)
            .await?
            .is_none()
            || self
                .store
                .customer(account_id, &request.customer_id)
                .await?
                .is_none()
        {
            return Err(ChargeError::UnknownPaymentMethod);
        }
        let fee = fee_schedule(account).fee_for(request.amount_cents);
        let now_ms = chrono::Utc::now().timestamp_millis();
        let charge = self
            .store
            .begin_charge(NewCharge {
                account: account_id.clone(),
                subscription_id: request.subscription_id,
                customer_id: request.customer_id,
                payment_method_id: request.payment_method_id,
                amount_cents: request.amount_cents,
                fee_cents: fee,
                purpose: request.purpose,
                period_start: request.period_start,
                pending_change: None,
                now_ms,
                lines: Vec::new(),
            })
            .await
            .map_err(|err| match err {
                BeginChargeError::InsufficientBalance => ChargeError::InsufficientBalance,
                BeginChargeError::PeriodTaken => ChargeError::PeriodTaken,
                BeginChargeError::Store(err) => ChargeError::Store(err),
            })?;
        let outcome = self.submit(account, &charge).await;
        Ok(self
            .settle(&charge, &outcome, None)
            .await?
            .map_or(charge, |s| s.charge))
    }

    /// Posts the transaction of a recorded attempt and says what came of it. An unknown
    /// outcome is never a decline: the attempt stays pending and its next question to the
    /// processor is scheduled. A pending one keeps the processor's transaction id on the
    /// charge's row (batched with the other posts answering at once, `store::batch`), where
    /// every node reads it and every settlement is decided against it: a later report naming
    /// another transaction moves no money, whichever node receives it and whatever copy of
    /// the charge that node keeps. Its event, or a recheck once it is stale, brings the
    /// outcome.
    pub async fn submit(&self, account: &Account, charge: &ChargeAttempt) -> ProcessorOutcome {
        self.submit_with(account, charge, None).await
    }

    /// `submit`, with the charge's payment method and customer already read (a renewal's
    /// prefetched snapshot); read here when absent or not the charge's.
    pub async fn submit_with(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
        payer: Option<&(PaymentMethod, Customer)>,
    ) -> ProcessorOutcome {
        let payer = payer
            .filter(|(method, customer)| {
                method.id == charge.payment_method_id && customer.id == charge.customer_id
            })
            .map(|(method, customer)| Payer::of(method, customer));
        let outcome = self.post(account, charge, payer).await;
        match &outcome {
            ProcessorOutcome::Unknown(reason) => self.not_settled(charge, reason).await,
            ProcessorOutcome::Pending(tx) => {
                let note = TransactionNote {
                    charge_id: charge.id.clone(),
                    transaction_id: tx.id.clone(),
                    raw_status: tx.status.clone(),
                    now_ms: chrono::Utc::now().timestamp_millis(),
                };
                // Not written, the charge is still settled once: only a report naming another
                // transaction before a recheck noted this one would go unchallenged.
                if let Err(err) = self.store.note_processor_transaction(note).await {
                    tracing::warn!(charge = %charge.id, error = %err, "noting the pending transaction failed");
                }
            }
            _ => {}
        }
        outcome
    }

    /// One post of the charge's transaction under its reference.
    async fn post(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
        payer: Option<Payer>,
    ) -> ProcessorOutcome {
        let payer = match payer {
            Some(payer) => Ok(Some(payer)),
            None => self.payer(account, charge).await,
        };
        let payer = match payer {
            Ok(Some(source)) => source,
            Ok(None) => {
                return ProcessorOutcome::Refused("payment method or customer not found".into());
            }
            // Our database failing says nothing about the charge: ask again later.
            Err(err) => return ProcessorOutcome::Unknown(format!("reading the payer: {err}")),
        };
        let credentials = match self.credentials(account) {
            Ok(credentials) => credentials,
            Err(err) => return ProcessorOutcome::of_post_error(&err),
        };
        let transaction = NewTransaction {
            amount_in_cents: charge.amount_cents,
            currency: CURRENCY.to_owned(),
            reference: charge.reference.clone(),
            payment_source_id: payer.payment_source_id,
            source_kind: payer.kind,
            customer_email: payer.email,
            recurrent: charge.purpose.is_recurrent(),
        };
        let started = std::time::Instant::now();
        self.posting.insert(charge.id.clone());
        let _posting = Posting {
            set: &self.posting,
            id: charge.id.clone(),
        };
        let outcome = self
            .client
            .create_transaction(&credentials, &transaction)
            .await;
        metrics::histogram!("processor_request_seconds").record(started.elapsed().as_secs_f64());
        if let ProcessorOutcome::Refused(reason) = &outcome {
            tracing::error!(charge = %charge.id, %reason, "the processor refused the transaction");
        }
        outcome
    }

    /// The payment source and e-mail to charge. A checkout's charge is made before its
    /// customer and payment method exist: the session's attempt holds them until it completes.
    async fn payer(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
    ) -> Result<Option<Payer>, StoreError> {
        let account_id = &account.id;
        let method = self
            .store
            .payment_method(account_id, &charge.payment_method_id)
            .await?;
        let customer = self.store.customer(account_id, &charge.customer_id).await?;
        if let (Some(method), Some(customer)) = (method, customer) {
            return Ok(Some(Payer::of(&method, &customer)));
        }
        Ok(self
            .store
            .checkout_session_for_charge(&charge.id)
            .await?
            .and_then(|s| {
                Some(Payer {
                    payment_source_id: s.attempt_payment_source_id?,
                    kind: SourceKind::from_stored(
                        s.attempt_source_kind.as_deref().unwrap_or("card"),
                    ),
                    email: s.attempt_email?,
                })
            }))
    }

    /// Asks the processor about a charge: by its transaction id when known, else by reference.
    pub async fn ask(&self, account: &Account, charge: &ChargeAttempt) -> ProcessorOutcome {
        let credentials = match self.credentials(account) {
            Ok(credentials) => credentials,
            Err(err) => return ProcessorOutcome::Unknown(err.to_string()),
        };
        self.client
            .lookup(
                &credentials,
                charge.processor_transaction_id.as_deref(),
                &charge.reference,
            )
            .await
    }

    /// The question the reconciler and the checkout page ask about a pending charge: what does
    /// the processor have under its reference? When it never saw it, the same reference is
    /// posted again (the processor refuses a second transaction under one reference, so this
    /// cannot charge twice). A final outcome is returned for the caller to apply through the
    /// charge's owner; anything else schedules the next question.
    ///
    /// A definite refusal of that second post is not a final outcome: an earlier post under
    /// the same reference (the one whose answer was lost, held up on its way) may still reach
    /// the processor and charge the card after the lookup found nothing, so the charge stays
    /// pending and is asked about by reference again (and posted again while the processor
    /// still shows nothing). A refused re-post settles the charge as ERROR only once no post
    /// of ours whose answer we never got can still reach the processor (`refused_repost`).
    pub async fn recheck(&self, account: &Account, charge: &ChargeAttempt) -> ProcessorOutcome {
        let mut outcome = self.ask(account, charge).await;
        let mut charge = std::borrow::Cow::Borrowed(charge);
        if matches!(outcome, ProcessorOutcome::Unseen) {
            if let Some(known) = charge.processor_transaction_id.clone() {
                // The processor holds neither the transaction it named (asked by id, it knows
                // none) nor any under the reference: the noted id names nothing there (a
                // sandbox that lost its ledger in a restart), and the post made now names the
                // charge's transaction.
                if let Err(err) = self
                    .store
                    .forget_processor_transaction(&charge.id, &known)
                    .await
                {
                    tracing::warn!(charge = %charge.id, error = %err, "forgetting a transaction the processor does not hold failed");
                    return ProcessorOutcome::Unknown(format!(
                        "forgetting transaction {known}: {err}"
                    ));
                }
                charge.to_mut().processor_transaction_id = None;
            }
            let charge = charge.as_ref();
            tracing::info!(charge = %charge.id, "the processor never saw the charge; posting it again under its reference");
            outcome = match self.post(account, charge, None).await {
                ProcessorOutcome::Refused(why) => self.refused_repost(charge, why).await,
                ProcessorOutcome::Unknown(why) => {
                    let now_ms = chrono::Utc::now().timestamp_millis();
                    if let Err(err) = self.store.note_unanswered_post(&charge.id, now_ms).await {
                        tracing::warn!(charge = %charge.id, error = %err, "noting an unanswered post failed");
                    }
                    ProcessorOutcome::Unknown(why)
                }
                other => other,
            };
        }
        let charge: &ChargeAttempt = &charge;
        if let Some(why) = outcome.transaction().and_then(|tx| mismatch(charge, tx)) {
            let tx = outcome.transaction().cloned();
            self.flag(charge, tx.as_ref(), &why).await;
            outcome = ProcessorOutcome::Unknown(why);
        }
        match &outcome {
            ProcessorOutcome::Pending(tx) => {
                let now_ms = chrono::Utc::now().timestamp_millis();
                if let Err(err) = self
                    .store
                    .record_processor_transaction(&charge.id, &tx.id, &tx.status, now_ms)
                    .await
                {
                    tracing::warn!(charge = %charge.id, error = %err, "noting the pending transaction failed");
                }
                self.not_settled(charge, STILL_PENDING).await;
            }
            ProcessorOutcome::Unknown(reason) => self.not_settled(charge, reason).await,
            ProcessorOutcome::Unseen => self.not_settled(charge, "not found").await,
            _ => {}
        }
        outcome
    }

    /// A re-post of a charge the processor never saw, refused for certain. While a post of ours
    /// whose answer we never got may still be on its way (`in_flight_bound` since the last one)
    /// the refusal says nothing: that post may still charge the card. Once none can be, the
    /// processor has nothing under the reference and refuses to take it: a final refusal,
    /// settled as the first post's refusal would have been.
    async fn refused_repost(&self, charge: &ChargeAttempt, why: String) -> ProcessorOutcome {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let bound = i64::try_from(self.in_flight_bound.as_millis()).unwrap_or(i64::MAX);
        match self.store.quiet_since(&charge.id).await {
            Ok(Some(since)) if now_ms.saturating_sub(since) >= bound => {
                tracing::warn!(charge = %charge.id, %why, "the processor never saw the charge and refuses it again; no post of ours can still reach it: refused");
                ProcessorOutcome::Refused(why)
            }
            Ok(_) => ProcessorOutcome::Unknown(format!(
                "posting again was refused ({why}); an earlier post under this reference may still exist"
            )),
            Err(err) => ProcessorOutcome::Unknown(format!(
                "posting again was refused ({why}); reading when the last post went out failed: {err}"
            )),
        }
    }

    /// A charge whose outcome is not known yet: it stays pending, fee reserved, and is asked
    /// about again after the next wait of the backoff.
    async fn not_settled(&self, charge: &ChargeAttempt, reason: &str) {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let unknown = reason != STILL_PENDING;
        if unknown {
            metrics::counter!("processor_unknown_outcomes_total").increment(1);
        }
        match self
            .store
            .schedule_recheck(charge, reason, self.recheck_base, now_ms)
            .await
        {
            Ok(attempt) if unknown => {
                tracing::warn!(charge = %charge.id, attempt, %reason, "processor outcome unknown; the charge stays pending and will be asked about again");
            }
            Ok(attempt) => {
                tracing::info!(charge = %charge.id, attempt, "still pending at the processor; asked about again later");
            }
            // Without its row the charge is still asked about once it is stale.
            Err(err) => {
                tracing::warn!(charge = %charge.id, error = %err, "scheduling the recheck failed")
            }
        }
    }

    /// Keeps a processor answer that does not fit its charge for operators.
    async fn flag(&self, charge: &ChargeAttempt, tx: Option<&Transaction>, why: &str) {
        let report = Report {
            kind: "mismatch",
            reported_status: tx.map(|tx| tx.status.clone()),
            transaction_id: tx.map(|tx| tx.id.clone()),
            amount_cents: tx.map(|tx| tx.amount_in_cents),
            currency: tx.and_then(|tx| tx.currency.clone()),
            event_checksum: None,
            detail: why.to_owned(),
        };
        if let Err(err) = self.store.record_conflict(charge, report).await {
            tracing::error!(charge = %charge.id, error = %err, "recording a conflict failed");
        }
    }

    /// Applies `outcome` to a charge that belongs to neither a subscription nor a checkout
    /// (those have owners that move more than money: `actors::outcomes` routes to them),
    /// recording the processor `event` that reported it, when there is one, in the same
    /// transaction: a final outcome settles the charge once; a pending one notes its
    /// transaction (for any charge).
    pub async fn settle(
        &self,
        charge: &ChargeAttempt,
        outcome: &ProcessorOutcome,
        event: Option<ProcessorEvent>,
    ) -> Result<Option<Settled>, StoreError> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let Some(settlement) = outcome.settlement() else {
            if let Some(tx) = outcome.transaction() {
                self.store
                    .record_processor_transaction(&charge.id, &tx.id, &tx.status, now_ms)
                    .await?;
            }
            if let Some(event) = event {
                self.store.record_processor_event(event).await?;
            }
            return Ok(None);
        };
        debug_assert!(
            charge.purpose != ChargePurpose::Checkout,
            "a checkout's outcome is settled through actors::outcomes"
        );
        let txn = self.store.begin().await?;
        let recorded = match event {
            Some(event) => txn.record_processor_event(event).await?,
            None => false,
        };
        let settled = txn
            .settle_charge(
                &charge.id,
                settlement.raw_status,
                settlement.message,
                settlement.transaction_id,
                now_ms,
            )
            .await?;
        if recorded || settled.as_ref().is_some_and(|s| s.newly || s.conflict) {
            txn.commit().await?;
        }
        Ok(settled)
    }

    /// Asks the processor about a charge of no subscription and applies a final answer (no
    /// re-post: that is `recheck`'s).
    pub async fn poll(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
    ) -> Result<Option<Settled>, ChargeError> {
        let outcome = self.ask(account, charge).await;
        Ok(self.settle(charge, &outcome, None).await?)
    }
}

/// Why a transaction the processor reported is not `charge`'s (CONTRACT §7): another amount,
/// another currency, or another transaction than the one we know. None when it is.
pub fn mismatch(charge: &ChargeAttempt, tx: &Transaction) -> Option<String> {
    if tx.amount_in_cents != charge.amount_cents {
        return Some(format!(
            "the processor reported {} cents for a charge of {} cents",
            tx.amount_in_cents, charge.amount_cents
        ));
    }
    if let Some(currency) = tx.currency.as_deref().filter(|c| *c != CURRENCY) {
        return Some(format!(
            "the processor reported currency {currency} for a charge in {CURRENCY}"
        ));
    }
    if let Some(known) = charge
        .processor_transaction_id
        .as_deref()
        .filter(|known| *known != tx.id)
    {
        return Some(format!(
            "the processor reported transaction {} for a charge whose transaction is {known}",
            tx.id
        ));
    }
    None
}
