//! The end of a checkout payment, whichever path learns the outcome first (the ingress, the
//! reconciler, or the page's own request asking the processor): one transaction settles the
//! charge's money and either completes the session, creating the Customer, PaymentMethod and
//! Subscription with `subscription.created` and `charge.approved`, or releases the session's
//! payment lock so the customer can try another card. `settle_charge`'s conditional update
//! lets exactly one caller do this, however many times the outcome arrives.

use crate::domain::charge_status::ChargeStatus;
use crate::domain::event_type::EventType;
use crate::domain::time::Cycle;
use crate::events::subscription_event;
use crate::ids::ChargeAttemptId;
use crate::store::accounts::Account;
use crate::store::catalog::Customer;
use crate::store::charges::{ChargeAttempt, PaymentMethod, ProcessorEvent, Settled};
use crate::store::checkout::CheckoutSession;
use crate::store::txn::StoreTxn;
use crate::store::{Store, StoreResult};
use crate::subscribe::{self, NewSubscription, Start};

/// Applies a checkout charge's final outcome once (see the module doc), recording the
/// processor `event` that reported it in the same transaction.
pub async fn settle(
    store: &Store,
    charge_id: &ChargeAttemptId,
    raw_status: &str,
    message: Option<&str>,
    transaction_id: Option<&str>,
    event: Option<ProcessorEvent>,
) -> StoreResult<Option<Settled>> {
    let real_now = chrono::Utc::now().timestamp_millis();
    let txn = store.begin().await?;
    let recorded = match event {
        Some(event) => txn.record_processor_event(event).await?,
        None => false,
    };
    let settled = txn
        .settle_charge(charge_id, raw_status, message, transaction_id, real_now)
        .await?;
    let settled = match settled {
        Some(settled) if settled.newly => settled,
        other => {
            // An outcome applied before keeps only the event's record and the conflict it
            // raised, if it contradicted the recorded one.
            if recorded || other.as_ref().is_some_and(|s| s.conflict) {
                txn.commit().await?;
            }
            return Ok(other);
        }
    };
    let session = txn.checkout_session_for_charge(charge_id).await?;
    // Through the transaction, not the pool: this unit holds a connection already, and on a
    // small PostgreSQL pool concurrent settlements each waiting for a second one would wait
    // for ever.
    let account = txn.account(&settled.charge.account_id).await?;
    if let (Some(session), Some(account)) = (session, account) {
        // The account's clock: real time plus its test offset, as `actors::clock` keeps it.
        let now = real_now + account.clock_offset_ms;
        if settled.charge.is(ChargeStatus::Approved) {
            finish(&txn, &account, &session, &settled.charge, raw_status, now).await?;
        } else {
            let reason = message.unwrap_or(raw_status);
            // The redemption the attempt counted is given back with it.
            if let Some(discount) = session.attempt_discount() {
                txn.unredeem(&discount).await?;
                txn.release_first_purchase(&account.id, charge_id).await?;
            }
            txn.release_checkout_session(&session.id, charge_id, reason, now)
                .await?;
        }
    }
    txn.commit().await?;
    // Whoever waits for this payment in this process (`checkout::payment`) answers now.
    store.settled().announce(charge_id);
    Ok(Some(settled))
}

/// Creates what the approved payment bought, inside the settling transaction.
async fn finish(
    txn: &StoreTxn,
    account: &Account,
    session: &CheckoutSession,
    charge: &ChargeAttempt,
    raw_status: &str,
    now: i64,
) -> StoreResult<()> {
    let real_now = chrono::Utc::now().timestamp_millis();
    let customer_id = charge.customer_id.clone();
    if session.customer_id.is_none() {
        txn.insert_customer(Customer {
            id: customer_id.clone(),
            account_id: account.id.clone(),
            email: session.attempt_email.clone().unwrap_or_default(),
            name: session.attempt_name.clone().unwrap_or_default(),
            metadata: None,
            created_at: real_now,
            tax_id_type: None,
            tax_id_number: None,
            legal_name: None,
            address: None,
            phone: None,
            whatsapp_opt_in: false,
        })
        .await?;
    }
    txn.insert_payment_method(PaymentMethod {
        id: charge.payment_method_id.clone(),
        account_id: account.id.clone(),
        customer_id: customer_id.clone(),
        processor_payment_source_id: session.attempt_payment_source_id.unwrap_or_default(),
        brand: session.attempt_brand.clone(),
        last4: session.attempt_last4.clone(),
        expires_at: session.attempt_expires_at,
        kind: session
            .attempt_source_kind
            .clone()
            .unwrap_or_else(|| "card".to_owned()),
        created_at: real_now,
    })
    .await?;
    let sub = subscribe::build(
        NewSubscription {
            id: txn.ownership().local_subscription_id(),
            account_id: account.id.clone(),
            customer_id,
            plan_id: session.plan_id.clone(),
            cycle: Cycle::parse(&session.cycle).unwrap_or(Cycle::Monthly),
            payment_method_id: charge.payment_method_id.clone(),
            metadata: session.metadata.clone(),
            start: Start::Paid,
            quantity: session.quantity,
            // The first period, which this charge paid, took part in it.
            discount: session
                .attempt_discount()
                .and_then(|d| d.after_period_paid(charge.created_at)),
        },
        now,
    );
    subscribe::insert(txn, &sub, now).await?;
    txn.attach_charge_to_subscription(&charge.id, &sub.id, sub.current_period_start)
        .await?;
    txn.insert_event(subscription_event(
        &sub,
        EventType::ChargeApproved,
        Some((charge, raw_status)),
        now,
    ))
    .await?;
    txn.complete_checkout_session(&session.id, &charge.id, &sub.id, now)
        .await?;
    // Its invoice, now that the customer and the subscription exist (`store::invoices`).
    txn.issue_invoice(&charge.id).await?;
    Ok(())
}
