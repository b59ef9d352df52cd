//! The subscription actor against a real database: events within the payload limit, a stale
//! prefetched snapshot, an outcome settling on the row as it is, charges out at the processor.

use super::*;
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::ChargeStatus;
use crate::domain::event_type::EventType;
use crate::http::extract::METADATA_MAX_BYTES;
use crate::ids::{AccountId, ChargeAttemptId, SubscriptionId};
use crate::webhooks::MAX_PAYLOAD_BYTES;
use serde_json::json;

#[test]
fn a_charge_event_with_the_largest_metadata_fits_the_payload_limit() {
    // The largest metadata a request may store: a compact object of exactly 60 KB.
    let filler = "x".repeat(METADATA_MAX_BYTES - r#"{"k":""}"#.len());
    let metadata = json!({"k": filler}).to_string();
    assert_eq!(metadata.len(), METADATA_MAX_BYTES);
    let id = SubscriptionId::parse("sub_01a20748d4787232924bab375e9b2bba").expect("an id");
    let sub = Subscription {
        id: id.clone(),
        account_id: AccountId::parse("acct_01a20748d4787232924bab375e9b2bba").expect("an id"),
        customer_id: crate::ids::CustomerId::parse("cus_01a20748d4787232924bab375e9b2bba")
            .expect("an id"),
        plan_id: crate::ids::PlanId::parse("plan_01a20748d4787232924bab375e9b2bba").expect("an id"),
        cycle: Cycle::Monthly,
        status: Status::Active,
        current_period_start: 0,
        current_period_end: 0,
        next_charge_date: 0,
        default_payment_method_id: crate::ids::PaymentMethodId::parse(
            "pm_01a20748d4787232924bab375e9b2bba",
        )
        .expect("an id"),
        trial_end: None,
        cancel_at_period_end: false,
        failed_attempts: 0,
        first_failure_at: None,
        metadata: Some(metadata),
        anchor: 0,
        period_index: 0,
        next_cycle: None,
        period_cycle: Cycle::Monthly,
        version: 0,
        due_at: None,
        created_at: 0,
        updated_at: 0,
        quantity: 1,
        period_quantity: 1,
        discount: None,
        mrr_cents: 0,
        period_discount: None,
    };
    let charge = ChargeAttempt {
        id: ChargeAttemptId::parse("ch_01a20748d4787232924bab375e9b2bba").expect("an id"),
        account_id: sub.account_id.clone(),
        subscription_id: Some(id),
        customer_id: sub.customer_id.clone(),
        payment_method_id: sub.default_payment_method_id.clone(),
        amount_cents: i64::MAX,
        fee_cents: 0,
        reference: "ch_01a20748d4787232924bab375e9b2bba".into(),
        processor_transaction_id: None,
        status: ChargeStatus::Approved,
        processor_status: Some("APPROVED".into()),
        processor_message: None,
        purpose: ChargePurpose::Renewal,
        period_start: None,
        created_at: 0,
        updated_at: 0,
        finalized_at: None,
        pending_change: None,
        refunded_cents: 0,
        refunding_cents: 0,
        decline_code: None,
        invoice_lines: None,
    };
    let event = subscription_event(
        &sub,
        EventType::SubscriptionPlanChanged,
        Some((&charge, "APPROVED")),
        i64::from(i32::MAX) * 1000,
    );
    assert!(
        event.body.len() <= MAX_PAYLOAD_BYTES,
        "{} bytes",
        event.body.len()
    );
}

/// The actors' runtime on `store`, its processor unreachable (every post an unknown
/// outcome, the charge left pending), actors stopping after `idle`.
async fn runtime(
    store: &crate::store::Store,
    idle: std::time::Duration,
) -> (
    Runtime,
    tokio::sync::mpsc::UnboundedReceiver<crate::actors::Arm>,
) {
    let config = crate::config::Config::new("sqlite://unused.db");
    let charger = crate::charges::Charger::new(
        store.clone(),
        crate::processor::client::ProcessorClient::new().expect("client"),
        "http://127.0.0.1:9".into(),
    );
    Runtime::start(
        store.clone(),
        charger,
        idle,
        crate::webhooks::send::Clients::new(&config).expect("clients"),
        None,
    )
    .await
    .expect("runtime")
}

/// A renewal's reads prefetched for its batch, then the subscription changes (here its plan,
/// as an action would) before its actor gets the timer: the stale snapshot's unit is refused
/// by the conditional save with nothing written, and the renewal runs again on fresh reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_snapshot_writes_nothing_and_the_renewal_reads_again() {
    use crate::store::entities::charge_attempt;
    use crate::store::prefetch::fixture::{ADDON, PLAN_B, shop};
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

    let now = chrono::Utc::now().timestamp_millis();
    let shop = shop(now).await;
    let store = shop.store.clone();
    let id = shop.sub.id.clone();
    let snapshot = store
        .due_snapshots(std::slice::from_ref(&id))
        .await
        .expect("snapshots")
        .remove(&id)
        .expect("snapshot");
    let mut changed = shop.sub.clone();
    changed.plan_id = shop.plan_b.clone();
    let txn = store.begin().await.expect("begin");
    txn.save_subscription(changed).await.expect("save");
    txn.commit().await.expect("commit");

    let (runtime, _arms) = runtime(&store, std::time::Duration::from_secs(5)).await;
    runtime
        .due_prefetched(Arc::new(snapshot))
        .await
        .expect("renewal");

    let charges = charge_attempt::Entity::find()
        .filter(charge_attempt::Column::SubscriptionId.eq(&id))
        .all(store.conn())
        .await
        .expect("charges");
    assert_eq!(charges.len(), 1, "one charge: {charges:?}");
    assert_eq!(
        charges[0].amount_cents,
        PLAN_B + ADDON,
        "priced on fresh reads"
    );
    let balance = store
        .balance(&shop.account)
        .await
        .expect("balance")
        .expect("account");
    assert_eq!(
        balance.reserved_cents, charges[0].fee_cents,
        "one fee reserved"
    );
    assert_eq!(balance.available_cents, 1_000_000 - charges[0].fee_cents);
    runtime.stop().await;
    shop.remove();
}

/// A renewal whose charge began and is out at the processor (unreachable: its outcome
/// unknown, the charge pending), its actor keeping the row it saved: the shop, the runtime
/// (idle far beyond the test: an actor that stops does so because its work is done), the
/// instant, the charge's id.
async fn renewal_out() -> (
    crate::store::prefetch::fixture::Shop,
    Runtime,
    i64,
    ChargeAttemptId,
) {
    let now = chrono::Utc::now().timestamp_millis();
    let shop = crate::store::prefetch::fixture::shop(now).await;
    let (runtime, _arms) = runtime(&shop.store, std::time::Duration::from_secs(600)).await;
    runtime.due(&shop.sub.id).await.expect("renewal");
    let charge_id = runtime
        .in_flight()
        .began_charge(&shop.sub.id)
        .expect("the row kept for the charge's outcome");
    (shop, runtime, now, charge_id)
}

/// A renewal's charge begins (the processor unreachable: its outcome unknown, the charge
/// pending) and its actor keeps the row it saved; then the row changes outside the actor.
/// The outcome that arrives next settles on the row as it is now: the batch's conditional
/// save refuses the kept one and the outcome is applied alone on a fresh read, keeping the
/// change. Then the actor stops: its renewal's work is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_settles_on_the_row_as_it_is_not_as_its_charge_began() {
    let (shop, runtime, _, charge_id) = renewal_out().await;
    let (store, id) = (shop.store.clone(), shop.sub.id.clone());
    let began = store
        .subscription_by_id(&id)
        .await
        .expect("read")
        .expect("subscription");
    let charge = store
        .charge_by_id(&charge_id)
        .await
        .expect("read")
        .expect("charge");
    assert_eq!(charge.status, ChargeStatus::Pending);
    assert_eq!(
        runtime.in_flight().charge_out(&charge.reference).as_ref(),
        Some(&charge),
        "the ingress finds the charge out at the processor without reading it"
    );

    let mut changed = began.clone();
    changed.metadata = Some(r#"{"changed":"outside"}"#.into());
    let txn = store.begin().await.expect("begin");
    let changed = txn.save_subscription(changed).await.expect("save");
    txn.commit().await.expect("commit");

    runtime
        .outcome(&id, &charge, "APPROVED", None, Some("tx-outside"), None)
        .await
        .expect("outcome");
    let settled = store
        .charge_by_id(&charge_id)
        .await
        .expect("read")
        .expect("charge");
    assert_eq!(settled.status, ChargeStatus::Approved);
    let now_row = store
        .subscription_by_id(&id)
        .await
        .expect("read")
        .expect("subscription");
    assert_eq!(
        now_row.metadata, changed.metadata,
        "the change made while the charge was out is kept"
    );
    assert_eq!(now_row.version, changed.version + 1, "saved once, after it");
    assert_eq!(now_row.status, Status::Active);
    assert!(
        runtime.in_flight().began_charge(&id).is_none(),
        "the kept row is used once"
    );
    assert!(
        runtime.in_flight().charge_out(&charge.reference).is_none(),
        "an applied outcome's charge is no longer out: its next event is read"
    );
    // The outcome ended the renewal's work: its actor stops (after answering) without
    // waiting to be idle.
    let bound = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while runtime.inner.subscriptions.get(id.as_str()).is_some() {
        assert!(
            std::time::Instant::now() < bound,
            "the actor is still live 10 s after its charge's outcome"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let balance = store
        .balance(&shop.account)
        .await
        .expect("balance")
        .expect("account");
    assert_eq!(balance.reserved_cents, 0, "the fee captured");
    assert_eq!(balance.available_cents, 1_000_000 - charge.fee_cents);
    runtime.stop().await;
    shop.remove();
}

/// The ingress takes an event's charge from the charges out at the processor, as it
/// began. When another writer (a recheck, another node) settled it meanwhile, the event
/// still moves no money twice: its contradicting outcome is kept as a conflict and the
/// fee is captured once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_for_a_charge_out_but_settled_elsewhere_moves_no_money_again() {
    use crate::processor::client::Transaction;
    use crate::processor::outcome::ProcessorOutcome;
    use crate::store::charges::ProcessorEvent;

    let (shop, runtime, now, charge_id) = renewal_out().await;
    let store = shop.store.clone();
    let settled = store
        .settle_charge(&charge_id, "APPROVED", None, Some("tx-elsewhere"), now)
        .await
        .expect("settle")
        .expect("final");
    assert!(settled.newly);
    let out = runtime
        .in_flight()
        .charge_out(charge_id.as_str())
        .expect("still out for this node");
    assert_eq!(out.status, ChargeStatus::Pending, "as it began");

    let tx = Transaction {
        id: "tx-elsewhere".into(),
        status: "DECLINED".into(),
        reference: out.reference.clone(),
        amount_in_cents: out.amount_cents,
        currency: Some("COP".into()),
        status_message: None,
    };
    let event = ProcessorEvent {
        checksum: "c0ffee".into(),
        account_id: out.account_id.clone(),
        event_type: "transaction.updated".into(),
        transaction_id: Some(tx.id.clone()),
        reference: Some(tx.reference.clone()),
        status: Some(tx.status.clone()),
        body: "{}".into(),
        received_at: now,
        processed_at: Some(now),
    };
    let first = runtime
        .apply_processor_outcome(&out, &ProcessorOutcome::of_transaction(tx), Some(event))
        .await
        .expect("applied");
    assert!(first, "the event itself is new");
    let charge = store
        .charge_by_id(&charge_id)
        .await
        .expect("read")
        .expect("charge");
    assert_eq!(
        charge.status,
        ChargeStatus::Approved,
        "the first outcome stands"
    );
    assert_eq!(
        store.count_charge_conflicts().await.expect("count"),
        1,
        "the contradicting event is kept for operators"
    );
    let balance = store
        .balance(&shop.account)
        .await
        .expect("balance")
        .expect("account");
    assert_eq!(balance.reserved_cents, 0, "the fee captured once");
    assert_eq!(balance.available_cents, 1_000_000 - charge.fee_cents);
    assert!(
        runtime.in_flight().charge_out(charge_id.as_str()).is_none(),
        "no longer out once its outcome is known here"
    );
    runtime.stop().await;
    shop.remove();
}

/// A pending answer noted for a charge out (its transaction id, from a `PENDING` event or
/// a recheck) makes the charge as it began stale: the ingress reads the charge again, so
/// a final event naming another transaction is still caught as a mismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noted_pending_answer_sends_the_ingress_back_to_the_database() {
    use crate::processor::client::Transaction;
    use crate::processor::outcome::ProcessorOutcome;

    let (shop, runtime, _, charge_id) = renewal_out().await;
    let out = runtime
        .in_flight()
        .charge_out(charge_id.as_str())
        .expect("out");
    let pending = Transaction {
        id: "tx-noted".into(),
        status: "PENDING".into(),
        reference: out.reference.clone(),
        amount_in_cents: out.amount_cents,
        currency: Some("COP".into()),
        status_message: None,
    };
    runtime
        .apply_processor_outcome(&out, &ProcessorOutcome::of_transaction(pending), None)
        .await
        .expect("noted");
    let stored = shop
        .store
        .charge_by_id(&charge_id)
        .await
        .expect("read")
        .expect("charge");
    assert_eq!(stored.processor_transaction_id.as_deref(), Some("tx-noted"));
    assert_eq!(stored.status, ChargeStatus::Pending);
    assert!(
        runtime.in_flight().charge_out(charge_id.as_str()).is_none(),
        "the charge as it began no longer stands for the stored one"
    );
    runtime.stop().await;
    shop.remove();
}
