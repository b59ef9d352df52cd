//! The invariants the database itself enforces, without any actor in front of it, and the
//! checker's queries finding a breach written behind the service's back.

use billing::domain::charge_purpose::ChargePurpose;
use billing::domain::subscription::Status;
use billing::domain::time::Cycle;
use billing::ids::{AccountId, CustomerId, PaymentMethodId, SubscriptionId};
use billing::store::accounts::NewAccount;
use billing::store::charges::{BeginChargeError, NewCharge};
use billing::store::{Store, StoreError};
use billing::subscribe::{NewSubscription, Start, build};

async fn store_with_account() -> (Store, AccountId) {
    let path = std::env::temp_dir().join(format!("inv-{}.db", uuid::Uuid::new_v4().simple()));
    let store = Store::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let id = AccountId::generate();
    store
        .create_account(NewAccount {
            id: id.clone(),
            name: "Invariants".into(),
            sandbox: true,
            api_key_hash: "hash".into(),
            processor_base_url: None,
            processor_public_key: "pub_test_x".into(),
            processor_private_key: "prv_test_x".into(),
            processor_events_secret: "test_events_x".into(),
            processor_integrity_secret: "test_integrity_x".into(),
            fee_percent_bps: 150,
            fee_fixed_cents: 0,
            rate_limit_per_minute: 100,
            status_rate_limit_per_minute: 20,
            dunning_retry_days: "1,3,5,7".into(),
            created_at: 0,
        })
        .await
        .expect("account");
    store.top_up(&id, 1_000_000, 0).await.expect("top up");
    (store, id)
}

/// The one subscription these charges are of (no row: the charges' table does not ask).
fn sub_1() -> SubscriptionId {
    SubscriptionId::parse("sub_1").expect("an id")
}

fn charge(account: &AccountId, subscription: &SubscriptionId, period_start: i64) -> NewCharge {
    NewCharge {
        account: account.clone(),
        subscription_id: Some(subscription.clone()),
        customer_id: CustomerId::generate(),
        payment_method_id: PaymentMethodId::generate(),
        amount_cents: 100_000,
        fee_cents: 1_500,
        purpose: ChargePurpose::Renewal,
        period_start: Some(period_start),
        pending_change: None,
        now_ms: 0,
        lines: Vec::new(),
    }
}

#[tokio::test]
async fn a_period_takes_one_live_charge_whoever_asks() {
    let (store, account) = store_with_account().await;
    let first = store
        .begin_charge(charge(&account, &sub_1(), 1_000))
        .await
        .expect("first");
    let second = store.begin_charge(charge(&account, &sub_1(), 1_000)).await;
    assert!(
        matches!(second, Err(BeginChargeError::PeriodTaken)),
        "{second:?}"
    );
    // The refused charge's fee reservation rolled back with it.
    let balance = store.balance(&account).await.expect("db").expect("account");
    assert_eq!(balance.reserved_cents, first.fee_cents);
    // Declined, the period may be charged again (a retry); another period always may.
    store
        .settle_charge(&first.id, "DECLINED", None, None, 0)
        .await
        .expect("settle");
    store
        .begin_charge(charge(&account, &sub_1(), 1_000))
        .await
        .expect("retry");
    store
        .begin_charge(charge(&account, &sub_1(), 2_000))
        .await
        .expect("next period");
}

#[tokio::test]
async fn a_subscription_write_from_a_stale_read_is_refused() {
    let (store, account) = store_with_account().await;
    let sub = build(
        NewSubscription {
            id: billing::ids::SubscriptionId::generate(),
            account_id: account.clone(),
            customer_id: CustomerId::generate(),
            plan_id: billing::ids::PlanId::generate(),
            cycle: Cycle::Monthly,
            payment_method_id: PaymentMethodId::generate(),
            metadata: None,
            start: Start::Paid,
            quantity: 1,
            discount: None,
        },
        0,
    );
    let txn = store.begin().await.expect("begin");
    txn.insert_subscription(sub.clone()).await.expect("insert");
    txn.commit().await.expect("commit");
    let txn = store.begin().await.expect("begin");
    let mut written = txn.save_subscription(sub.clone()).await.expect("save");
    txn.commit().await.expect("commit");
    assert_eq!(written.version, sub.version + 1);
    // A second writer that read before the first wrote loses, and nothing is overwritten.
    let mut stale = sub.clone();
    stale.status = Status::Canceled;
    let txn = store.begin().await.expect("begin");
    let lost = txn.save_subscription(stale).await;
    assert!(matches!(lost, Err(StoreError::Conflict(_))), "{lost:?}");
    drop(txn);
    written.status = Status::Paused;
    let txn = store.begin().await.expect("begin");
    txn.save_subscription(written)
        .await
        .expect("save at the current version");
    txn.commit().await.expect("commit");
    let stored = store
        .subscription_by_id(&sub.id)
        .await
        .expect("db")
        .expect("row");
    assert_eq!(stored.status, Status::Paused);
}

/// A refund can never take a charge beyond its amount, nor run beside another refund of
/// the same charge, whatever writes the rows; and the auditor sees a refunded amount no
/// refund explains.
#[tokio::test]
async fn a_charge_is_never_refunded_beyond_its_amount_nor_twice_at_once() {
    use billing::store::refunds::{BeginRefundError, NewRefund};
    use sea_orm::ConnectionTrait;
    let (store, account) = store_with_account().await;
    let charge = store
        .begin_charge(charge(&account, &sub_1(), 1_000))
        .await
        .expect("charge");
    store
        .settle_charge(&charge.id, "APPROVED", None, Some("tx-1"), 0)
        .await
        .expect("settle");
    let over = crate::Raw(&store)
        .conn()
        .execute_unprepared(&format!(
            "UPDATE charge_attempts SET refunded_cents = 60000, refunding_cents = 50000 \
             WHERE id = '{}'",
            charge.id
        ))
        .await;
    assert!(
        over.is_err(),
        "the CHECK refuses refunded + refunding > amount"
    );
    let refund = |amount| NewRefund {
        account: account.clone(),
        charge_id: charge.id.clone(),
        amount_cents: Some(amount),
        reason: None,
        now_ms: 0,
        recheck_at_ms: 0,
    };
    let (first, _) = store.begin_refund(refund(10_000)).await.expect("first");
    let second = store.begin_refund(refund(10_000)).await;
    assert!(
        matches!(second, Err(BeginRefundError::InFlight)),
        "{second:?}"
    );
    let beside = crate::Raw(&store)
        .conn()
        .execute_unprepared(&format!(
            "INSERT INTO refunds (id, account_id, charge_id, amount_cents, status, attempts, \
             created_at, updated_at) VALUES ('re_beside', '{}', '{}', 5, 'pending', 0, 0, 0)",
            account.as_str(),
            charge.id
        ))
        .await;
    assert!(
        beside.is_err(),
        "refunds_one_in_flight refuses a second pending refund"
    );
    assert!(
        crate::Raw(&store).audit(0).await.expect("audit").is_empty(),
        "a refund in flight is accounted for"
    );
    crate::Raw(&store)
        .conn()
        .execute_unprepared(&format!(
            "UPDATE charge_attempts SET refunded_cents = 5 WHERE id = '{}'",
            charge.id
        ))
        .await
        .expect("drift");
    let breaches = crate::Raw(&store).audit(0).await.expect("audit");
    assert!(
        breaches
            .iter()
            .any(|b| b.invariant.contains("refund") && b.detail.contains(charge.id.as_str())),
        "{breaches:?} (refund {})",
        first.id
    );
}
