//! Issue 13: processor events that contradict their charge move no money and are never
//! dropped silently (CONTRACT §7): an event whose amount, currency or transaction id are not
//! the charge's, and a final status that contradicts the recorded outcome, are kept, flagged
//! (`GET /admin/charge-conflicts`), counted in `charge_outcome_conflicts_total`, and answered
//! 200.

use crate::common::proxied_shop::{APPROVED_CARD, DECLINED_CARD, FEE, PLAN_MONTHLY, Shop, TOP_UP};
use crate::common::{ADMIN_TOKEN, TestApp, eventually, read};
use crate::idempotency::serve_sandbox;
use billing::domain::charge_status::ChargeStatus;
use billing::ids::AccountId;
use billing::processor::client::ProcessorClient;
use billing::processor::sandbox::{AdminAuth, SandboxConfig};
use billing::processor::signature::event_checksum;
use harness::chaos::proxy::{Fault, Proxy};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    an_event_that_contradicts_the_recorded_outcome_is_kept_flagged_and_counted,
    an_event_whose_amount_currency_or_transaction_differ_moves_no_money,
    after_a_pending_event_a_final_one_naming_another_transaction_moves_no_money,
    the_posts_pending_answer_is_kept_and_a_final_event_naming_another_transaction_moves_no_money,
);

/// Posts a `transaction.updated` event signed with the shop's events secret; its checksum.
pub(crate) async fn send_event(
    app: &TestApp,
    shop: &Shop,
    transaction: Value,
    timestamp: i64,
) -> String {
    let mut event = json!({
        "event": "transaction.updated",
        "data": {"transaction": transaction},
        "environment": "test",
        "signature": {"properties": ["transaction.id", "transaction.status", "transaction.amount_in_cents"]},
        "timestamp": timestamp,
    });
    let checksum = event_checksum(&event, &shop.events_secret).expect("checksum");
    event["signature"]["checksum"] = json!(checksum);
    let (status, body) = read(
        app.client
            .post(app.url(&format!("/webhooks/processor/{}", shop.account_id)))
            .json(&event)
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    checksum
}

/// This shop's conflicts, newest first.
pub(crate) async fn conflicts(app: &TestApp, shop: &Shop) -> Vec<Value> {
    let (status, page) = read(
        app.admin(Method::GET, "/admin/charge-conflicts?limit=100")
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter(|c| c["account_id"] == shop.account_id.as_str())
        .cloned()
        .collect()
}

async fn metric(app: &TestApp, line_start: &str) -> f64 {
    let text = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("text");
    text.lines()
        .find(|line| line.starts_with(line_start))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

async fn an_event_that_contradicts_the_recorded_outcome_is_kept_flagged_and_counted(app: TestApp) {
    let shop = Shop::open(&app, DECLINED_CARD).await;
    let id = shop.subscribe(&app).await;
    eventually(Duration::from_secs(20), || async {
        shop.subscription(&app, &id).await["status"] == "past_due"
    })
    .await;
    let reference = shop.posted_references()[0].clone();
    let declined = shop.charge(&reference).await;
    assert_eq!(declined.status, ChargeStatus::Declined);
    let account = AccountId::parse(&shop.account_id).expect("an account's id");
    let events_before = shop
        .store
        .count_processor_events(&account)
        .await
        .expect("db");
    let counted_before = metric(&app, "charge_outcome_conflicts_total{kind=\"outcome\"}").await;

    // The processor now says APPROVED for the transaction it declined.
    let transaction = json!({"id": declined.processor_transaction_id, "status": "APPROVED",
        "amount_in_cents": PLAN_MONTHLY, "currency": "COP", "reference": reference});
    let checksum = send_event(&app, &shop, transaction, 1_700_000_000).await;

    assert_eq!(
        shop.charge(&reference).await.status,
        ChargeStatus::Declined,
        "nothing applied"
    );
    assert_eq!(shop.subscription(&app, &id).await["status"], "past_due");
    assert_eq!(shop.balance(&app).await, (TOP_UP, 0), "no fee taken");
    assert_eq!(
        shop.store
            .count_processor_events(&account)
            .await
            .expect("db"),
        events_before + 1,
        "the event is kept"
    );
    let flagged = conflicts(&app, &shop).await;
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    let conflict = &flagged[0];
    assert_eq!(conflict["kind"], "outcome");
    assert_eq!(conflict["charge_id"], reference.as_str());
    assert_eq!(conflict["recorded_status"], "declined");
    assert_eq!(conflict["reported_status"], "APPROVED");
    assert_eq!(conflict["event_checksum"], checksum.as_str());
    assert!(
        metric(&app, "charge_outcome_conflicts_total{kind=\"outcome\"}").await > counted_before,
        "counted"
    );
    let types = shop.event_types(&app, &id).await;
    assert!(!types.contains(&"charge.approved".to_owned()), "{types:?}");
}

async fn an_event_whose_amount_currency_or_transaction_differ_moves_no_money(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    // Recorded, fee reserved, never posted (the reconciler waits 30 s before asking).
    let charge = shop.unposted_charge(None).await;
    shop.store
        .record_processor_transaction(
            &charge.id,
            "7-7-7",
            "PENDING",
            chrono::Utc::now().timestamp_millis(),
        )
        .await
        .expect("db");
    let approved = |id: &str, amount: i64, currency: &str| {
        json!({"id": id, "status": "APPROVED", "amount_in_cents": amount, "currency": currency,
            "reference": charge.reference})
    };
    send_event(&app, &shop, approved("7-7-7", PLAN_MONTHLY - 1, "COP"), 1).await;
    send_event(&app, &shop, approved("7-7-7", PLAN_MONTHLY, "USD"), 2).await;
    send_event(&app, &shop, approved("8-8-8", PLAN_MONTHLY, "COP"), 3).await;
    assert_eq!(
        shop.charge(charge.id.as_str()).await.status,
        ChargeStatus::Pending,
        "no money moved"
    );
    assert_eq!(
        shop.balance(&app).await,
        (TOP_UP - FEE, FEE),
        "the fee is still only reserved"
    );
    let flagged = conflicts(&app, &shop).await;
    assert_eq!(flagged.len(), 3, "{flagged:?}");
    assert!(
        flagged
            .iter()
            .all(|c| c["kind"] == "mismatch" && c["recorded_status"] == "pending")
    );
    assert!(flagged.iter().all(|c| c["event_checksum"].is_string()));

    // The event that is the charge's settles it, once.
    send_event(&app, &shop, approved("7-7-7", PLAN_MONTHLY, "COP"), 4).await;
    assert_eq!(
        shop.charge(charge.id.as_str()).await.status,
        ChargeStatus::Approved
    );
    assert_eq!(shop.balance(&app).await, (TOP_UP - FEE, 0));
}

/// The gap `Runtime::charge_touched` closes, over HTTP: the ingress takes a final event's
/// period charge from the charges out at the processor (as it began, no transaction id), so a
/// PENDING event that notes the processor's transaction id must send it back to the database,
/// where a final event naming another transaction is caught as a mismatch.
async fn after_a_pending_event_a_final_one_naming_another_transaction_moves_no_money(app: TestApp) {
    // A real processor that keeps a transaction PENDING for a while; its events reach our
    // ingress through a gate held shut until the end (re-sent every 200 ms meanwhile).
    let config = SandboxConfig {
        settle_delay: Duration::from_secs(5),
        event_retry_delays: vec![Duration::from_millis(200); 300],
        ..SandboxConfig::default()
    };
    let (_sandbox, sandbox) = serve_sandbox(config, AdminAuth::from_token(ADMIN_TOKEN)).await;
    let gate = Proxy::start(&app.base).await.expect("gate");
    let shop = Shop::open_at(&app, APPROVED_CARD, &sandbox, &gate.base).await;
    let ingress = format!("/webhooks/processor/{}", shop.account_id);
    gate.always("POST", &ingress, Fault::Answer(503, json!({})));

    // The trial's end charges the first period through the subscription's actor, which keeps
    // the charge, as it began, out at the processor until its outcome is applied.
    let body = json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
        "payment_method_id": shop.method, "trial_days": 1});
    let sub = shop
        .call(&app, Method::POST, "/v1/subscriptions", body)
        .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    // The advance answers once the charges it started have settled: sent by a client of its
    // own (no timeout), it is awaited at the end.
    let advance = reqwest::Client::new()
        .post(app.url("/v1/test-helpers/clock/advance"))
        .bearer_auth(&shop.key)
        .json(&json!({"seconds": 86_400 + 1}))
        .send();
    let advance = tokio::spawn(advance);
    eventually(Duration::from_secs(20), || async {
        shop.posted_references().len() == 1
    })
    .await;
    let reference = shop.posted_references()[0].clone();
    eventually(Duration::from_secs(10), || async {
        shop.at_processor(&reference).await.is_some()
    })
    .await;
    let real = ProcessorClient::new()
        .expect("client")
        .find_transaction_by_reference(&shop.direct, &reference)
        .await
        .expect("lookup")
        .expect("the processor holds the charge");
    assert_eq!(shop.charge(&reference).await.status, ChargeStatus::Pending);
    assert_eq!(shop.balance(&app).await, (TOP_UP - FEE, FEE), "reserved");

    // The processor's PENDING answer names its transaction: noted on the charge.
    let transaction = |id: &str, status: &str| {
        json!({"id": id, "status": status, "amount_in_cents": PLAN_MONTHLY, "currency": "COP",
            "reference": reference})
    };
    send_event(&app, &shop, transaction(&real.id, "PENDING"), 1).await;
    assert_eq!(
        shop.charge(&reference)
            .await
            .processor_transaction_id
            .as_deref(),
        Some(real.id.as_str()),
        "the pending transaction is noted"
    );

    // A final event about the same reference, amount and currency, but another transaction.
    let other = format!("{}-other", real.id);
    let checksum = send_event(&app, &shop, transaction(&other, "APPROVED"), 2).await;
    assert_eq!(
        shop.charge(&reference).await.status,
        ChargeStatus::Pending,
        "the event naming another transaction was applied"
    );
    assert_eq!(
        shop.balance(&app).await,
        (TOP_UP - FEE, FEE),
        "the fee is still only reserved"
    );
    let flagged = conflicts(&app, &shop).await;
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0]["kind"], "mismatch");
    assert_eq!(flagged[0]["charge_id"], reference.as_str());
    assert_eq!(flagged[0]["recorded_status"], "pending");
    assert_eq!(flagged[0]["event_checksum"], checksum.as_str());
    let types = shop.event_types(&app, &id).await;
    assert!(!types.contains(&"charge.approved".to_owned()), "{types:?}");

    // The processor's own event, let through, settles the charge once.
    gate.clear();
    eventually(Duration::from_secs(30), || async {
        shop.charge(&reference).await.status == ChargeStatus::Approved
    })
    .await;
    let settled = shop.charge(&reference).await;
    assert_eq!(
        settled.processor_transaction_id.as_deref(),
        Some(real.id.as_str())
    );
    assert_eq!(
        shop.balance(&app).await,
        (TOP_UP - FEE, 0),
        "the fee taken once"
    );
    let types = shop.event_types(&app, &id).await;
    let approved = types.iter().filter(|t| *t == "charge.approved").count();
    assert_eq!(approved, 1, "{types:?}");
    assert_eq!(
        conflicts(&app, &shop).await.len(),
        1,
        "nothing more flagged"
    );
    let advanced = advance.await.expect("task").expect("advance");
    assert_eq!(
        advanced.status(),
        200,
        "the clock's advance answers once settled"
    );
}

/// Issue 32, item 2: the processor's own answer to the post (PENDING, naming its transaction)
/// is kept on the charge's row when the post answers, where every node reads it, and a final
/// event naming another transaction is decided against that row, not against the copy of the
/// charge the ingress takes from the charges out at the processor: flagged, no money moved.
async fn the_posts_pending_answer_is_kept_and_a_final_event_naming_another_transaction_moves_no_money(
    app: TestApp,
) {
    let config = SandboxConfig {
        settle_delay: Duration::from_secs(5),
        event_retry_delays: vec![Duration::from_millis(200); 300],
        ..SandboxConfig::default()
    };
    let (_sandbox, sandbox) = serve_sandbox(config, AdminAuth::from_token(ADMIN_TOKEN)).await;
    let gate = Proxy::start(&app.base).await.expect("gate");
    let shop = Shop::open_at(&app, APPROVED_CARD, &sandbox, &gate.base).await;
    let ingress = format!("/webhooks/processor/{}", shop.account_id);
    gate.always("POST", &ingress, Fault::Answer(503, json!({})));

    let body = json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
        "payment_method_id": shop.method, "trial_days": 1});
    let sub = shop
        .call(&app, Method::POST, "/v1/subscriptions", body)
        .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let advance = reqwest::Client::new()
        .post(app.url("/v1/test-helpers/clock/advance"))
        .bearer_auth(&shop.key)
        .json(&json!({"seconds": 86_400 + 1}))
        .send();
    let advance = tokio::spawn(advance);
    eventually(Duration::from_secs(20), || async {
        shop.posted_references().len() == 1
    })
    .await;
    let reference = shop.posted_references()[0].clone();
    eventually(Duration::from_secs(10), || async {
        shop.at_processor(&reference).await.is_some()
    })
    .await;
    let real = ProcessorClient::new()
        .expect("client")
        .find_transaction_by_reference(&shop.direct, &reference)
        .await
        .expect("lookup")
        .expect("the processor holds the charge");
    // No event has come (the gate is shut): the post's own answer is on the row.
    eventually(Duration::from_secs(5), || async {
        shop.charge(&reference)
            .await
            .processor_transaction_id
            .as_deref()
            == Some(real.id.as_str())
    })
    .await;
    assert_eq!(shop.charge(&reference).await.status, ChargeStatus::Pending);

    let transaction = |id: &str, status: &str| {
        json!({"id": id, "status": status, "amount_in_cents": PLAN_MONTHLY, "currency": "COP",
            "reference": reference})
    };
    let other = format!("{}-other", real.id);
    send_event(&app, &shop, transaction(&other, "APPROVED"), 2).await;
    assert_eq!(
        shop.charge(&reference).await.status,
        ChargeStatus::Pending,
        "the event naming another transaction was applied"
    );
    assert_eq!(
        shop.balance(&app).await,
        (TOP_UP - FEE, FEE),
        "only reserved"
    );
    let flagged = conflicts(&app, &shop).await;
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0]["kind"], "mismatch");
    assert_eq!(flagged[0]["charge_id"], reference.as_str());

    gate.clear();
    eventually(Duration::from_secs(30), || async {
        shop.charge(&reference).await.status == ChargeStatus::Approved
    })
    .await;
    let settled = shop.charge(&reference).await;
    assert_eq!(
        settled.processor_transaction_id.as_deref(),
        Some(real.id.as_str())
    );
    assert_eq!(
        shop.balance(&app).await,
        (TOP_UP - FEE, 0),
        "the fee taken once"
    );
    let types = shop.event_types(&app, &id).await;
    let approved = types.iter().filter(|t| *t == "charge.approved").count();
    assert_eq!(approved, 1, "{types:?}");
    let advanced = advance.await.expect("task").expect("advance");
    assert_eq!(advanced.status(), 200);
    crate::common::assert_invariants(&app).await;
}

/// Issue 32, item 2, across two nodes: the subscription's owner (A) keeps its period charge, as
/// it began, among the charges out at the processor; B receives the PENDING event and notes
/// the processor's transaction on the row; a final event naming another transaction then
/// reaches A, whose copy knows no transaction. It is decided against the row: flagged, no money
/// moved; the processor's own event then settles the charge once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_nodes_a_final_event_naming_another_transaction_than_the_noted_one_moves_no_money() {
    let Some(url) = crate::common::database_url(crate::common::Backend::Postgres).await else {
        return;
    };
    let a = crate::common::spawn_on_with(url.clone(), short_leases).await;
    let b = crate::common::spawn_on_with(url.clone(), short_leases).await;
    // Half each, disjoint: the shards stay where they are for the rest of the test.
    eventually(Duration::from_secs(30), || async {
        let (held_a, held_b) = (owned(&a).await, owned(&b).await);
        held_a.len() == 128 && held_b.len() == 128 && held_a.iter().all(|s| !held_b.contains(s))
    })
    .await;
    let config = SandboxConfig {
        settle_delay: Duration::from_secs(5),
        event_retry_delays: vec![Duration::from_millis(200); 300],
        ..SandboxConfig::default()
    };
    let (_sandbox, sandbox) = serve_sandbox(config, AdminAuth::from_token(ADMIN_TOKEN)).await;
    let gate = Proxy::start(&a.base).await.expect("gate");
    let shop = Shop::open_at(&a, APPROVED_CARD, &sandbox, &gate.base).await;
    let ingress = format!("/webhooks/processor/{}", shop.account_id);
    gate.always("POST", &ingress, Fault::Answer(503, json!({})));

    // Made through A, the subscription is in one of A's shards: A charges it.
    let body = json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
        "payment_method_id": shop.method, "trial_days": 1});
    let sub = shop.call(&a, Method::POST, "/v1/subscriptions", body).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    assert!(
        owned(&a)
            .await
            .contains(&billing::store::ownership::shard_of(&id))
    );
    let advance = reqwest::Client::new()
        .post(a.url("/v1/test-helpers/clock/advance"))
        .bearer_auth(&shop.key)
        .json(&json!({"seconds": 86_400 + 1}))
        .send();
    let advance = tokio::spawn(advance);
    eventually(Duration::from_secs(20), || async {
        shop.posted_references().len() == 1
    })
    .await;
    let reference = shop.posted_references()[0].clone();
    eventually(Duration::from_secs(10), || async {
        shop.at_processor(&reference).await.is_some()
    })
    .await;
    let real = ProcessorClient::new()
        .expect("client")
        .find_transaction_by_reference(&shop.direct, &reference)
        .await
        .expect("lookup")
        .expect("the processor holds the charge");
    let transaction = |id: &str, status: &str| {
        json!({"id": id, "status": status, "amount_in_cents": PLAN_MONTHLY, "currency": "COP",
            "reference": reference})
    };
    // B notes the pending transaction.
    send_event(&b, &shop, transaction(&real.id, "PENDING"), 1).await;
    assert_eq!(
        shop.charge(&reference)
            .await
            .processor_transaction_id
            .as_deref(),
        Some(real.id.as_str())
    );
    // A gets a final event about another transaction of the same reference and amount.
    let other = format!("{}-other", real.id);
    send_event(&a, &shop, transaction(&other, "APPROVED"), 2).await;
    assert_eq!(
        shop.charge(&reference).await.status,
        ChargeStatus::Pending,
        "settled on the owner's copy of the charge"
    );
    assert_eq!(shop.balance(&a).await, (TOP_UP - FEE, FEE), "only reserved");
    let flagged = conflicts(&a, &shop).await;
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0]["kind"], "mismatch");

    gate.clear();
    eventually(Duration::from_secs(30), || async {
        shop.charge(&reference).await.status == ChargeStatus::Approved
    })
    .await;
    let settled = shop.charge(&reference).await;
    assert_eq!(
        settled.processor_transaction_id.as_deref(),
        Some(real.id.as_str())
    );
    assert_eq!(
        shop.balance(&a).await,
        (TOP_UP - FEE, 0),
        "the fee taken once"
    );
    let types = shop.event_types(&a, &id).await;
    assert_eq!(
        types.iter().filter(|t| *t == "charge.approved").count(),
        1,
        "{types:?}"
    );
    let advanced = advance.await.expect("task").expect("advance");
    assert_eq!(advanced.status(), 200);
}

fn short_leases(config: &mut billing::config::Config) {
    config.lease_ttl_ms = 2_000;
    config.lease_renew_ms = 200;
}

/// The shards `node` holds.
async fn owned(node: &TestApp) -> Vec<u16> {
    let (status, body) = read(
        node.admin(Method::GET, "/admin/cluster")
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["shards_owned"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| s.as_u64().expect("shard") as u16)
        .collect()
}
