//! Batches against a real database: all or nothing, each pending charge settled once with its
//! money and events, a refused row written alone.

use super::{PeriodChargeBegin, PeriodChargeSettle};
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::ChargeStatus;
use crate::ids::SubscriptionId;
use crate::store::charges::{BeginChargeError, ChargeAttempt, NewCharge, ProcessorEvent};
use crate::store::prefetch::fixture::{Shop, shop};
use crate::store::subscriptions::Subscription;
use crate::store::webhooks::WebhookEndpoint;

const NOW: i64 = 1_700_000_000_000;

/// `n` more subscriptions like the shop's, each due.
async fn subscriptions(shop: &Shop, n: usize) -> Vec<Subscription> {
    let txn = shop.store.begin().await.expect("begin");
    let mut rows = Vec::new();
    for _ in 0..n {
        let mut row = shop.sub.clone();
        row.id = SubscriptionId::generate();
        txn.insert_subscription(row.clone()).await.expect("insert");
        rows.push(row);
    }
    txn.commit().await.expect("commit");
    // As stored: the insert gave each its MRR.
    let mut stored = Vec::new();
    for row in rows {
        let read = shop.store.subscription_by_id(&row.id).await.expect("read");
        stored.push(read.expect("inserted"));
    }
    stored
}

/// The begin of `sub`'s next period with a fee of `fee`, its row with the timer taken.
fn begin(sub: &Subscription, fee: i64) -> PeriodChargeBegin {
    let mut row = sub.clone();
    row.due_at = None;
    PeriodChargeBegin {
        charge: NewCharge {
            account: sub.account_id.clone(),
            subscription_id: Some(sub.id.clone()),
            customer_id: sub.customer_id.clone(),
            payment_method_id: sub.default_payment_method_id.clone(),
            amount_cents: fee * 10,
            fee_cents: fee,
            purpose: ChargePurpose::Renewal,
            period_start: Some(sub.current_period_end),
            pending_change: None,
            now_ms: NOW,
            lines: Vec::new(),
        },
        row,
        events: Vec::new(),
    }
}

async fn available(shop: &Shop) -> (i64, i64) {
    let balance = shop
        .store
        .balance(&shop.account)
        .await
        .expect("balance")
        .expect("account");
    (balance.available_cents, balance.reserved_cents)
}

#[tokio::test]
async fn a_batch_writes_every_row_in_one_unit_or_nothing_at_all() {
    let shop = shop(NOW).await;
    let subs = subscriptions(&shop, 3).await;
    let (before, _) = available(&shop).await;

    // A row changed since it was read: nothing of the batch is written.
    let mut stale: Vec<_> = subs.iter().map(|s| begin(s, 100)).collect();
    stale[1].row.version += 7;
    assert!(
        shop.store
            .begin_many(&stale)
            .await
            .expect("batch")
            .is_none()
    );
    // A balance short of the batch's fees: nothing either.
    let short: Vec<_> = subs.iter().map(|s| begin(s, before / 2)).collect();
    assert!(
        shop.store
            .begin_many(&short)
            .await
            .expect("batch")
            .is_none()
    );
    // A period that already has a live charge: nothing either.
    let taken = shop
        .store
        .begin_charge(begin(&subs[2], 100).charge)
        .await
        .expect("a live charge of the period");
    let with_taken: Vec<_> = subs.iter().map(|s| begin(s, 100)).collect();
    assert!(
        shop.store
            .begin_many(&with_taken)
            .await
            .expect("batch")
            .is_none()
    );
    assert_eq!(available(&shop).await, (before - 100, 100));
    for sub in &subs {
        let row = shop.store.subscription_by_id(&sub.id).await.expect("read");
        assert_eq!(
            row.as_ref(),
            Some(sub),
            "a refused batch changed {}",
            sub.id
        );
    }

    // Refused nothing: every row, one reservation of the sum.
    let whole: Vec<_> = subs[..2].iter().map(|s| begin(s, 100)).collect();
    let began = shop
        .store
        .begin_many(&whole)
        .await
        .expect("batch")
        .expect("written");
    assert_eq!(available(&shop).await, (before - 300, 300));
    for ((charge, row), sub) in began.iter().zip(&subs) {
        let stored = shop.store.charge_by_id(&charge.id).await.expect("read");
        assert_eq!(stored.as_ref(), Some(charge));
        assert_eq!(charge.subscription_id.as_ref(), Some(&sub.id));
        assert_eq!(charge.status, ChargeStatus::Pending);
        assert_eq!(row.version, sub.version + 1);
        assert_eq!(row.due_at, None);
        let stored = shop.store.subscription_by_id(&sub.id).await.expect("read");
        assert_eq!(stored.as_ref(), Some(row));
    }
    assert_ne!(taken.id, began[0].0.id);
    shop.remove();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_beginning_at_once_are_refused_one_by_one_as_alone() {
    let shop = shop(NOW).await;
    let subs = subscriptions(&shop, 40).await;
    let (before, _) = available(&shop).await;
    // The balance covers 25 of the 40 fees.
    let fee = before / 25;
    let mut tasks = tokio::task::JoinSet::new();
    for sub in &subs {
        let (store, begin) = (shop.store.clone(), begin(sub, fee));
        tasks.spawn(async move { store.begin_period_charge(begin).await });
    }
    let (mut began, mut short) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        match done.expect("task").expect("store") {
            Ok((charge, row)) => {
                began += 1;
                assert_eq!(row.version, 1);
                assert_eq!(charge.fee_cents, fee);
            }
            Err(BeginChargeError::InsufficientBalance) => short += 1,
            Err(other) => panic!("unexpected refusal: {other}"),
        }
    }
    assert_eq!((began, short), (25, 15));
    assert_eq!(
        available(&shop).await,
        (before - 25 * fee, 25 * fee),
        "the reserved fees are exactly those of the charges begun"
    );
    shop.remove();
}

/// Retries on one Visa card all at once, when one more attempt is all its limit allows (19
/// of one amount in 30 days already sent): counted in their own units, exactly one begins,
/// and every other is handed back past the limit with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_on_one_card_at_once_never_pass_its_limit_together() {
    let shop = shop(NOW).await;
    let subs = subscriptions(&shop, 38).await;
    let fee = 100;
    let (earlier, retrying) = subs.split_at(19);
    for sub in earlier {
        let mut first = begin(sub, fee);
        first.charge.now_ms = NOW - 86_400_000;
        let began = shop.store.begin_period_charge(first).await.expect("store");
        began.expect("an earlier attempt");
    }
    let windows = crate::domain::reattempts::Network::Visa.windows();
    let mut tasks = tokio::task::JoinSet::new();
    for sub in retrying {
        let mut retry = begin(sub, fee);
        retry.charge.purpose = ChargePurpose::Retry;
        let store = shop.store.clone();
        tasks.spawn(async move { store.begin_counted_charge(retry, windows).await });
    }
    let (mut began, mut past) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        match done.expect("task").expect("store") {
            Ok(Ok(_)) => began += 1,
            Ok(Err(refused)) => panic!("unexpected refusal: {refused}"),
            Err((overrun, handed_back)) => {
                assert_eq!((overrun.window.limit, overrun.sent), (20, 20));
                assert_eq!(handed_back.charge.purpose, ChargePurpose::Retry);
                past += 1;
            }
        }
    }
    assert_eq!((began, past), (1, 18));
    assert_eq!(
        count(&shop, "charge_attempts", "1 = 1").await,
        20,
        "only the attempt the limit allows was written"
    );
    shop.remove();
}

/// Events carried by begins (a resumption's) exist only with their charges: a refused
/// batch writes none, a batch written whole writes each with its deliveries.
#[tokio::test]
async fn a_begins_events_are_written_with_its_charge_or_not_at_all() {
    let shop = shop(NOW).await;
    let subs = subscriptions(&shop, 3).await;
    let endpoint = WebhookEndpoint {
        id: crate::ids::WebhookEndpointId::parse("we_resumed").expect("an endpoint's id"),
        account_id: shop.account.clone(),
        url: "https://example.com/hook".into(),
        secret: crate::store::Secret::from("whsec_x".to_owned()),
        events: r#"["subscription.resumed"]"#.into(),
        active: true,
        created_at: 0,
        updated_at: 0,
    };
    shop.store
        .insert_webhook_endpoint(endpoint, 10)
        .await
        .expect("endpoint");
    let (before, _) = available(&shop).await;
    let resuming = |sub: &Subscription, fee: i64| {
        let mut begin = begin(sub, fee);
        begin.events = vec![crate::events::subscription_event(
            sub,
            crate::domain::event_type::EventType::SubscriptionResumed,
            None,
            NOW,
        )];
        begin
    };
    let short: Vec<_> = subs.iter().map(|s| resuming(s, before / 2)).collect();
    assert!(
        shop.store
            .begin_many(&short)
            .await
            .expect("batch")
            .is_none()
    );
    assert_eq!(count(&shop, "events", "1 = 1").await, 0);
    assert_eq!(count(&shop, "webhook_deliveries", "1 = 1").await, 0);

    let whole: Vec<_> = subs.iter().map(|s| resuming(s, 100)).collect();
    shop.store
        .begin_many(&whole)
        .await
        .expect("batch")
        .expect("written");
    assert_eq!(available(&shop).await, (before - 300, 300));
    let resumed = "type = 'subscription.resumed'";
    assert_eq!(count(&shop, "events", resumed).await, 3);
    let deliveries = "endpoint_id = 'we_resumed'";
    assert_eq!(count(&shop, "webhook_deliveries", deliveries).await, 3);
    shop.remove();
}

/// The settle of `charge` (pending) with `status`, the subscription's row saved as read.
fn settle(sub: &Subscription, charge: &ChargeAttempt, status: ChargeStatus) -> PeriodChargeSettle {
    let mut settled = charge.clone();
    settled.status = status;
    settled.processor_status = Some(status.as_str().to_uppercase());
    settled.processor_transaction_id = Some(format!("tx-{}", charge.id));
    settled.updated_at = NOW;
    settled.finalized_at = Some(NOW);
    let event_type = crate::domain::event_type::EventType::parse(&format!("charge.{status}"))
        .expect("a charge's event");
    PeriodChargeSettle {
        events: vec![crate::events::subscription_event(
            sub,
            event_type,
            Some((&settled, "X")),
            NOW,
        )],
        event: Some(ProcessorEvent {
            checksum: format!("sum-{}", charge.id),
            account_id: sub.account_id.clone(),
            event_type: "transaction.updated".into(),
            transaction_id: settled.processor_transaction_id.clone(),
            reference: Some(charge.reference.clone()),
            status: settled.processor_status.clone(),
            body: "{}".into(),
            received_at: NOW,
            processed_at: None,
        }),
        charge: settled,
        drop_detached_addons: false,
        row: sub.clone(),
    }
}

/// The number of rows of `table` where `condition` holds.
async fn count(shop: &Shop, table: &str, condition: &str) -> i64 {
    use sea_orm::ConnectionTrait;
    let conn = shop.store.conn();
    let sql = format!("SELECT COUNT(*) AS n FROM {table} WHERE {condition}");
    let row = conn
        .query_one_raw(sea_orm::Statement::from_string(
            conn.get_database_backend(),
            sql,
        ))
        .await
        .expect("count")
        .expect("a row");
    row.try_get::<i64>("", "n").expect("n")
}

#[tokio::test]
async fn a_batch_of_outcomes_settles_each_pending_charge_once_with_its_money_and_events() {
    let shop = shop(NOW).await;
    let subs = subscriptions(&shop, 4).await;
    let endpoint = WebhookEndpoint {
        id: crate::ids::WebhookEndpointId::parse("we_batch").expect("an endpoint's id"),
        account_id: shop.account.clone(),
        url: "https://example.com/hook".into(),
        secret: crate::store::Secret::from("whsec_x".to_owned()),
        events: r#"["charge.approved"]"#.into(),
        active: true,
        created_at: 0,
        updated_at: 0,
    };
    shop.store
        .insert_webhook_endpoint(endpoint, 10)
        .await
        .expect("endpoint");
    let mut charges = Vec::new();
    for (i, sub) in subs.iter().enumerate() {
        let charge = shop
            .store
            .begin_charge(begin(sub, 100 * (i as i64 + 1)).charge)
            .await
            .expect("charge");
        charges.push(charge);
    }
    let (before, reserved) = available(&shop).await;
    assert_eq!(reserved, 100 + 200 + 300 + 400);

    // A row changed since it was read: nothing of the batch is written.
    let mut stale: Vec<_> = (0..3)
        .map(|i| settle(&subs[i], &charges[i], ChargeStatus::Approved))
        .collect();
    stale[2].row.version += 1;
    assert!(
        shop.store
            .settle_many(&stale)
            .await
            .expect("batch")
            .is_none()
    );
    assert_eq!(available(&shop).await, (before, reserved));
    let pending = "status = 'pending'";
    assert_eq!(count(&shop, "charge_attempts", pending).await, 4);

    // The fourth charge is settled alone first: a batch holding it is refused whole, and
    // writes nothing (its outcomes are then applied alone, each as its own unit).
    shop.store
        .settle_charge(&charges[3].id, "DECLINED", None, None, NOW)
        .await
        .expect("settle alone");
    let (before, _) = available(&shop).await;
    let mut batch = vec![
        settle(&subs[0], &charges[0], ChargeStatus::Approved),
        settle(&subs[1], &charges[1], ChargeStatus::Declined),
        settle(&subs[2], &charges[2], ChargeStatus::Approved),
        settle(&subs[3], &charges[3], ChargeStatus::Approved),
    ];
    let refused = shop.store.settle_many(&batch).await.expect("batch");
    assert!(
        refused.is_none(),
        "a charge settled before is not settled again"
    );
    assert_eq!(count(&shop, "charge_attempts", pending).await, 3);
    assert_eq!(available(&shop).await, (before, 100 + 200 + 300));
    assert_eq!(count(&shop, "events", "1 = 1").await, 0);
    assert_eq!(count(&shop, "processor_events", "1 = 1").await, 0);

    // The three still pending, together.
    batch.pop();
    let saved = shop
        .store
        .settle_many(&batch)
        .await
        .expect("batch")
        .expect("written");
    assert_eq!(saved.len(), 3);
    for i in 0..3 {
        let row = &saved[i];
        assert_eq!(row.version, subs[i].version + 1);
        let stored = shop.store.charge_by_id(&charges[i].id).await.expect("read");
        assert_eq!(stored.as_ref(), Some(&batch[i].charge));
    }
    let stored = shop.store.charge_by_id(&charges[3].id).await.expect("read");
    assert_eq!(stored.map(|c| c.status), Some(ChargeStatus::Declined));
    // Fees: 100 and 300 captured, 200 given back; the fourth's went back before.
    assert_eq!(available(&shop).await, (before + 200, 0));
    assert_eq!(
        count(&shop, "balance_transactions", "kind = 'fee'").await,
        2
    );
    // The three charge events, and an `invoice.created` for each approved charge.
    assert_eq!(count(&shop, "events", "type <> 'invoice.created'").await, 3);
    assert_eq!(count(&shop, "events", "type = 'invoice.created'").await, 2);
    // One invoice per approved charge, numbered 1 and 2 in the batch's transaction.
    assert_eq!(count(&shop, "invoices", "1 = 1").await, 2);
    assert_eq!(
        count(
            &shop,
            "invoices",
            "sequence IN (1, 2) AND number IN ('FV-1', 'FV-2')"
        )
        .await,
        2
    );
    assert_eq!(count(&shop, "invoice_series", "next_number = 3").await, 1);
    // One delivery per event the endpoint subscribes to.
    let deliveries = "endpoint_id = 'we_batch'";
    assert_eq!(count(&shop, "webhook_deliveries", deliveries).await, 2);
    assert_eq!(count(&shop, "processor_events", "1 = 1").await, 3);
    assert_eq!(count(&shop, "charge_attempts", pending).await, 0);
    shop.remove();
}

/// The lines of `sub`'s next period at `quantity`, as a renewal prices them.
async fn renewal_lines(shop: &Shop, sub: &Subscription, quantity: i64) -> String {
    let plan = shop
        .store
        .plan(&shop.account, &sub.plan_id)
        .await
        .expect("read")
        .expect("the plan");
    let lines = crate::store::catalog::period_lines(
        &plan,
        [],
        sub.cycle,
        quantity,
        (sub.current_period_end, sub.current_period_end + 1),
        None,
    );
    serde_json::to_string(&lines).expect("lines")
}

#[tokio::test]
async fn a_batch_of_outcomes_writes_a_movement_only_where_the_mrr_moved() {
    let shop = shop(NOW).await;
    let subs = subscriptions(&shop, 3).await;
    let opened = subs[0].mrr_cents;
    assert!(opened > 0, "the insert gave each its MRR: {opened}");
    let mut batch = Vec::new();
    for (i, sub) in subs.iter().enumerate() {
        let quantity = if i == 1 { 2 } else { 1 };
        let mut new = begin(sub, 100).charge;
        new.lines =
            serde_json::from_str(&renewal_lines(&shop, sub, quantity).await).expect("lines");
        let charge = shop.store.begin_charge(new).await.expect("charge");
        let status = if i == 2 {
            ChargeStatus::Declined
        } else {
            ChargeStatus::Approved
        };
        let mut settled = settle(sub, &charge, status);
        match i {
            // A renewal at the same price: nothing moves, nothing is read or written for it.
            0 => {}
            // The period now billed has two seats.
            1 => {
                settled.row.quantity = 2;
                settled.row.period_quantity = 2;
            }
            // Dunning's last retry failed: canceled, unpaid.
            _ => {
                settled.row.status = crate::domain::subscription::Status::Canceled;
                settled.row.failed_attempts = 4;
            }
        }
        batch.push(settled);
    }
    let saved = shop
        .store
        .settle_many(&batch)
        .await
        .expect("batch")
        .expect("written");
    let mrr: Vec<i64> = saved.iter().map(|row| row.mrr_cents).collect();
    // Two seats are one line of twice the amount, split once (not twice the base).
    let plan = shop
        .store
        .plan(&shop.account, &subs[1].plan_id)
        .await
        .expect("read");
    let two = plan.expect("the plan");
    let two = two.tax_code.split(2 * two.monthly_amount_cents).base;
    assert_eq!(mrr, [opened, two, 0]);
    let moved = |id: &SubscriptionId| format!("subscription_id = '{id}' AND type <> 'new'");
    assert_eq!(count(&shop, "mrr_movements", &moved(&subs[0].id)).await, 0);
    let expanded = format!(
        "{} AND type = 'expansion' AND reason = 'quantity' AND mrr_delta_cents = {}",
        moved(&subs[1].id),
        two - opened
    );
    assert_eq!(count(&shop, "mrr_movements", &expanded).await, 1);
    let churned = format!(
        "{} AND type = 'churn' AND reason = 'failed_payment' AND mrr_after_cents = 0",
        moved(&subs[2].id)
    );
    assert_eq!(count(&shop, "mrr_movements", &churned).await, 1);
    for row in &saved {
        let (stored, rule) = shop
            .store
            .mrr_now(&shop.account, &row.id)
            .await
            .expect("read")
            .expect("the row");
        assert_eq!(stored, rule, "{}", row.id);
    }
    shop.remove();
}
