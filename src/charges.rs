//! Charging a payment method: reserve the fee, post the transaction, apply the outcome once.
//!
//! The outcome of a transaction can reach us four ways: the create response, a poll, and any
//! number of `transaction.updated` events. All of them end in `Store::settle_charge`, whose
//! conditional update lets exactly one of them apply the money. A checkout's charge settles
//! through `checkout::settle`, which also completes or reopens its session.

use crate::accounts::{fee_schedule, processor_base_url};
use crate::checkout::{CHECKOUT_PURPOSE, settle as settle_checkout};
use crate::domain::money::CURRENCY;
use crate::ids::AccountId;
use crate::processor::client::{
    NewTransaction, ProcessorClient, ProcessorCredentials, ProcessorError, Transaction,
};
use crate::store::accounts::Account;
use crate::store::charges::{BeginChargeError, ChargeAttempt, NewCharge, ProcessorEvent, Settled};
use crate::store::{Store, StoreError};

/// What to charge.
#[derive(Clone, Debug)]
pub struct ChargeRequest {
    pub subscription_id: Option<String>,
    pub customer_id: String,
    pub payment_method_id: String,
    pub amount_cents: i64,
    pub purpose: &'static str,
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

#[derive(Clone)]
pub struct Charger {
    store: Store,
    client: ProcessorClient,
    public_url: String,
}

impl Charger {
    pub fn new(store: Store, client: ProcessorClient, public_url: String) -> Self {
        Self {
            store,
            client,
            public_url,
        }
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
    /// pending, or final when the processor answered with a final status at once. A processor
    /// that cannot be reached leaves it pending: `poll` finds out later, by reference.
    pub async fn charge(
        &self,
        account: &Account,
        request: ChargeRequest,
    ) -> Result<ChargeAttempt, ChargeError> {
        let account_id = AccountId::from_stored(account.id.clone());
        // Both must exist before any money moves.
        if self
            .store
            .payment_method(&account_id, &request.payment_method_id)
            .await?
            .is_none()
            || self
                .store
                .customer(&account_id, &request.customer_id)
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
                account: account_id,
                subscription_id: request.subscription_id,
                customer_id: request.customer_id,
                payment_method_id: request.payment_method_id,
                amount_cents: request.amount_cents,
                fee_cents: fee,
                purpose: request.purpose,
                period_start: request.period_start,
                pending_change: None,
                now_ms,
            })
            .await
            .map_err(|err| match err {
                BeginChargeError::InsufficientBalance => ChargeError::InsufficientBalance,
                BeginChargeError::PeriodTaken => ChargeError::PeriodTaken,
                BeginChargeError::Store(err) => ChargeError::Store(err),
            })?;
        match self.submit(account, &charge).await {
            Ok(Some(tx)) => Ok(self.apply(&charge, &tx).await?.map_or(charge, |s| s.charge)),
            Ok(None) => Ok(charge),
            Err(err) => self.fail(&charge, &err).await,
        }
    }

    /// Posts the transaction of a recorded attempt. `Ok(None)`: the processor could not be
    /// reached and the attempt stays pending (a poll finds out later, by reference); `Err`:
    /// the processor refused it, which is final.
    pub async fn submit(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
    ) -> Result<Option<Transaction>, ProcessorError> {
        let account_id = AccountId::from_stored(account.id.clone());
        let lookup = async {
            let method = self
                .store
                .payment_method(&account_id, &charge.payment_method_id)
                .await
                .ok()??;
            let customer = self
                .store
                .customer(&account_id, &charge.customer_id)
                .await
                .ok()??;
            Some((method, customer))
        };
        // A checkout's charge is made before its customer and payment method exist: the
        // session's attempt holds the payment source and e-mail until it completes.
        let source = match lookup.await {
            Some((method, customer)) => Some((method.processor_payment_source_id, customer.email)),
            None => self
                .store
                .checkout_session_for_charge(&charge.id)
                .await
                .ok()
                .flatten()
                .and_then(|s| Some((s.attempt_payment_source_id?, s.attempt_email?))),
        };
        let Some((payment_source_id, customer_email)) = source else {
            return Err(ProcessorError::Rejected {
                status: 404,
                message: "payment method or customer not found".into(),
            });
        };
        let credentials = self.credentials(account)?;
        let transaction = NewTransaction {
            amount_in_cents: charge.amount_cents,
            currency: CURRENCY.to_owned(),
            reference: charge.reference.clone(),
            payment_source_id,
            customer_email,
        };
        let started = std::time::Instant::now();
        let result = self
            .client
            .create_transaction(&credentials, &transaction)
            .await;
        metrics::histogram!("processor_request_seconds").record(started.elapsed().as_secs_f64());
        match result {
            Ok(tx) => Ok(Some(tx)),
            Err(ProcessorError::Rejected { status, message }) if status < 500 => {
                Err(ProcessorError::Rejected { status, message })
            }
            Err(err) => {
                tracing::warn!(charge = %charge.id, error = %err, "processor unreachable; the charge stays pending");
                Ok(None)
            }
        }
    }

    /// A charge the processor refused outright: final ERROR, reservation released.
    async fn fail(
        &self,
        charge: &ChargeAttempt,
        err: &ProcessorError,
    ) -> Result<ChargeAttempt, ChargeError> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let message = err.to_string();
        let settled = self
            .store
            .settle_charge(&charge.id, "ERROR", Some(&message), None, now_ms)
            .await?;
        Ok(settled.map_or_else(|| charge.clone(), |s| s.charge))
    }

    /// Records what the processor said about `charge`'s transaction, settling it when final.
    pub async fn apply(
        &self,
        charge: &ChargeAttempt,
        tx: &Transaction,
    ) -> Result<Option<Settled>, StoreError> {
        self.apply_event(charge, tx, None).await
    }

    /// `apply`, also recording the processor `event` that said it (the ingress's): in the
    /// settling transaction when the status is final, so the event's row exists exactly when
    /// its outcome was applied.
    pub async fn apply_event(
        &self,
        charge: &ChargeAttempt,
        tx: &Transaction,
        event: Option<ProcessorEvent>,
    ) -> Result<Option<Settled>, StoreError> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        if !tx.is_final() {
            self.store
                .record_processor_transaction(&charge.id, &tx.id, &tx.status, now_ms)
                .await?;
            if let Some(event) = event {
                self.store.record_processor_event(event).await?;
            }
            return Ok(None);
        }
        if charge.purpose == CHECKOUT_PURPOSE {
            // Settling a checkout's charge also completes (or reopens) its session.
            return settle_checkout(
                &self.store,
                &charge.id,
                &tx.status,
                tx.status_message.as_deref(),
                Some(&tx.id),
                event,
            )
            .await;
        }
        let txn = self.store.begin().await?;
        let recorded = match event {
            Some(event) => txn.record_processor_event(event).await?,
            None => false,
        };
        let settled = txn
            .settle_charge(
                &charge.id,
                &tx.status,
                tx.status_message.as_deref(),
                Some(&tx.id),
                now_ms,
            )
            .await?;
        if recorded || settled.as_ref().is_some_and(|s| s.newly) {
            txn.commit().await?;
        }
        Ok(settled)
    }

    /// Asks the processor about a pending charge (by transaction id, else by reference).
    pub async fn poll(
        &self,
        account: &Account,
        charge: &ChargeAttempt,
    ) -> Result<Option<Settled>, ChargeError> {
        let Ok(credentials) = self.credentials(account) else {
            return Ok(None);
        };
        let found = match &charge.processor_transaction_id {
            Some(id) => self
                .client
                .get_transaction(&credentials, id)
                .await
                .map(Some),
            None => {
                self.client
                    .find_transaction_by_reference(&credentials, &charge.reference)
                    .await
            }
        };
        match found {
            Ok(Some(tx)) => Ok(self.apply(charge, &tx).await?),
            Ok(None) | Err(_) => Ok(None),
        }
    }
}
