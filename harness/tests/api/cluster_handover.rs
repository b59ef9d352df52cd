//! Issue 32: what a request answers when its subscription's shard moves to another node while
//! it runs (items 1 and 4), on two nodes started in this process on one PostgreSQL schema.
//!
//! A charge-now or an upgrade whose charge began, and was posted, on the old owner is not
//! "nothing was changed" when its outcome's write is fenced there: the outcome goes to the new
//! owner, the answer says what became of the charge, and its Idempotency-Key keeps that answer.
//! The processor is held by a gate in a proxy (`Fault::HoldUntil`) for exactly as long as the
//! shard takes to move.
//!
//! A node that missed a broadcast of the test clock neither shows the clock behind nor moves
//! it backwards: the advance is added to the database's offset, and the clock is read there.

use crate::cluster_nodes::owned;
use crate::common::proxied_shop::{APPROVED_CARD, PLAN_MONTHLY, Shop};
use crate::common::{ADMIN_TOKEN, Backend, TestApp, database_url, eventually, read, spawn_on_with};
use crate::idempotency::serve_sandbox;
use billing::processor::sandbox::{AdminAuth, SandboxConfig};
use billing::store::ownership::shard_of;
use harness::chaos::proxy::{Fault, Gate};
use reqwest::{Method, Response};
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use std::time::Duration;

/// Short leases, so that shards move within a second; a processor call may wait as long as
/// the test holds it.
fn nodes_config(config: &mut billing::config::Config) {
    config.lease_ttl_ms = 2_000;
    config.lease_renew_ms = 200;
    config.processor_timeout_ms = 60_000;
    config.reconcile_interval_ms = 200;
    config.processor_recheck_base_ms = 300;
}

/// A node answering for `shop`'s account, called with the shop's key.
fn as_shop(node: &TestApp, shop: &Shop) -> TestApp {
    let mut app = TestApp::attached(node.base.clone(), node.database_url.clone());
    app.api_key = shop.key.clone();
    app.account_id = shop.account_id.clone();
    app
}

async fn keyed_post(app: &TestApp, path: &str, key: &str, body: Value) -> Response {
    app.request(Method::POST, path)
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .expect("send")
}

/// Node A holds every shard; when B joins, A gives back its 64 highest shards first.
const FIRST_GIVEN_BACK: u16 = 192;

#[tokio::test]
async fn an_action_whose_charge_began_before_its_shard_moved_is_answered_and_kept() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let (_, sandbox) = serve_sandbox(
        SandboxConfig {
            settle_delay: Duration::from_millis(20),
            event_retry_delays: vec![Duration::from_millis(200); 10],
            ..SandboxConfig::default()
        },
        AdminAuth::from_token(ADMIN_TOKEN),
    )
    .await;
    let a = spawn_on_with(url.clone(), nodes_config).await;
    eventually(Duration::from_secs(20), || async {
        owned(&a).await.len() == 256
    })
    .await;
    let shop = Shop::open_at(&a, APPROVED_CARD, &sandbox, &a.base).await;
    let through_a = as_shop(&a, &shop);
    let bigger = json!({"name": "Max", "monthly_amount_cents": 2 * PLAN_MONTHLY,
        "annual_amount_cents": 60_000_000});
    let max_plan = shop.call(&a, Method::POST, "/v1/plans", bigger).await["id"]
        .as_str()
        .expect("plan")
        .to_owned();
    // Two active subscriptions in shards that A gives back as soon as B joins.
    let mut moving = Vec::new();
    for _ in 0..64 {
        let id = shop.subscribe(&a).await;
        if shard_of(&id) >= FIRST_GIVEN_BACK {
            moving.push(id);
        }
        if moving.len() == 2 {
            break;
        }
    }
    let [charged, upgraded] = <[String; 2]>::try_from(moving).expect("two subscriptions");

    // Each action's post is answered 500 after the processor made the transaction, so the
    // client looks it up by reference, and the lookup waits at the gate: the charge began
    // and was posted on A, and its outcome is known only once the gate opens.
    let gate = Gate::new();
    shop.proxy
        .fail("POST", "/transactions", Fault::ForwardThenAnswer(500), 2);
    shop.proxy
        .fail("GET", "/transactions", Fault::HoldUntil(gate.clone()), 2);
    let charge_now = format!("/v1/subscriptions/{charged}/charge-now");
    let change_plan = format!("/v1/subscriptions/{upgraded}/change-plan");
    let upgrade = json!({"plan_id": max_plan, "prorate": true});
    let first_charge = tokio::spawn({
        let (app, path) = (as_shop(&a, &shop), charge_now.clone());
        async move { read(keyed_post(&app, &path, "charge-1", json!({})).await).await }
    });
    let first_upgrade = tokio::spawn({
        let (app, path, body) = (as_shop(&a, &shop), change_plan.clone(), upgrade.clone());
        async move { read(keyed_post(&app, &path, "upgrade-1", body).await).await }
    });
    eventually(Duration::from_secs(20), || async {
        shop.proxy.seen("GET", "/transactions").len() >= 2
    })
    .await;

    // Node B joins and takes both shards over while the lookups wait.
    let b = spawn_on_with(url.clone(), nodes_config).await;
    let shards = [shard_of(&charged), shard_of(&upgraded)];
    eventually(Duration::from_secs(20), || async {
        let (on_a, on_b) = (owned(&a).await, owned(&b).await);
        shards.iter().all(|s| on_b.contains(s) && !on_a.contains(s))
    })
    .await;
    gate.open();

    // The charge happened: it is answered as it settled (through B), not as "nothing was
    // changed", and the upgrade took effect.
    let (status, charge) = first_charge.await.expect("charge-now");
    assert_eq!(status, 200, "charge-now after its shard moved: {charge}");
    assert_eq!(charge["status"], "approved", "{charge}");
    let (status, sub) = first_upgrade.await.expect("change-plan");
    assert_eq!(status, 200, "change-plan after its shard moved: {sub}");
    assert_eq!(sub["plan_id"], json!(max_plan), "{sub}");

    // A retry on the new owner under the same key replays the kept answer and charges nothing.
    let through_b = as_shop(&b, &shop);
    for (path, key, body, first) in [
        (&charge_now, "charge-1", json!({}), &charge),
        (&change_plan, "upgrade-1", upgrade.clone(), &sub),
    ] {
        let retry = keyed_post(&through_b, path, key, body).await;
        assert_eq!(
            retry
                .headers()
                .get("idempotent-replayed")
                .map(|v| v.as_bytes()),
            Some(&b"true"[..]),
            "{path}"
        );
        let (status, replayed) = read(retry).await;
        assert_eq!((status, &replayed), (200, first), "{path}");
    }
    let charge_id = charge["id"].as_str().expect("id");
    let posts = shop.posted_references();
    assert_eq!(
        posts.iter().filter(|r| r.as_str() == charge_id).count(),
        1,
        "{posts:?}"
    );
    let (_, charges) = read(
        through_a
            .get(&format!("/v1/charges?subscription_id={charged}&limit=100"))
            .await,
    )
    .await;
    assert_eq!(
        charges["data"].as_array().map(Vec::len),
        Some(2),
        "the first charge and one charge-now: {charges}"
    );
    shop.proxy.clear();
    crate::common::assert_invariants(&through_a).await;
}

/// Reads `node`'s answer to `GET /v1/test-helpers/clock`, in milliseconds.
async fn clock(node: &TestApp) -> i64 {
    let (status, body) = read(node.get("/v1/test-helpers/clock").await).await;
    assert_eq!(status, 200, "{body}");
    instant(&body)
}

fn instant(body: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(body["now"].as_str().expect("now"))
        .expect("rfc3339")
        .timestamp_millis()
}

async fn advance(node: &TestApp, seconds: i64) -> i64 {
    let (status, body) = read(
        node.post(
            "/v1/test-helpers/clock/advance",
            json!({"seconds": seconds}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    instant(&body)
}

#[tokio::test]
async fn a_node_that_missed_a_clock_broadcast_never_moves_the_clock_backwards() {
    const DAY: i64 = 86_400;
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let a = spawn_on_with(url.clone(), nodes_config).await;
    let b = crate::common::spawn_node(&a).await;
    a.lift_rate_limit().await;
    // B has read the clock, so it holds a copy of the offset (none yet).
    let before = clock(&b).await;
    // A moves the clock ten days while B is not among the nodes it tells (marked leaving, it
    // is skipped by the broadcast): B misses the news.
    let db = Database::connect(url.as_str()).await.expect("connect");
    let leaving = |flag: bool| {
        format!(
            "UPDATE cluster_nodes SET leaving = {flag} WHERE url = '{}'",
            b.base
        )
    };
    db.execute_unprepared(&leaving(true)).await.expect("mark");
    let moved = advance(&a, 10 * DAY).await;
    db.execute_unprepared(&leaving(false))
        .await
        .expect("unmark");
    assert!(moved >= before + 10 * DAY * 1000);

    // B shows the clock where A left it, not where its copy says.
    let seen = clock(&b).await;
    assert!(
        seen >= moved,
        "node B showed the clock {} s behind",
        (moved - seen) / 1000
    );
    // B moves it one more day from there, not from its copy.
    let later = advance(&b, DAY).await;
    assert!(
        later >= moved + DAY * 1000,
        "node B moved the clock back by {} s",
        (moved + DAY * 1000 - later) / 1000
    );
    assert!(clock(&a).await >= later);
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            format!(
                "SELECT clock_offset_ms FROM accounts WHERE id = '{}'",
                a.account_id
            ),
        ))
        .await
        .expect("query")
        .expect("account");
    assert_eq!(
        row.try_get_by_index::<i64>(0).expect("offset"),
        11 * DAY * 1000
    );
}
