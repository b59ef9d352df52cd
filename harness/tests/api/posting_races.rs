//! Issue 32, item 3: a charge whose post is still on its way to the processor is not asked
//! about (a lookup would find nothing yet under its reference, and the charge would be posted
//! a second time beside its first post). The processor's calls here may take 5 s, longer than
//! the reconciler's staleness (1.8 s at a recheck base of 300 ms), so a post held up for 3 s is
//! still under way when the reconciler first looks.

use crate::common::proxied_shop::{APPROVED_CARD, FEE, Shop, TOP_UP};
use crate::common::{TestApp, assert_invariants, eventually};
use billing::domain::charge_status::ChargeStatus;
use harness::chaos::proxy::Fault;
use std::time::Duration;

crate::db_tests!(config = crate::posting_races::slow_posts;
    a_charge_being_posted_is_not_asked_about_nor_posted_again_beside_itself,
);

pub(crate) fn slow_posts(config: &mut billing::config::Config) {
    config.processor_timeout_ms = 5_000;
    config.reconcile_interval_ms = 100;
    config.processor_recheck_base_ms = 300;
}

async fn a_charge_being_posted_is_not_asked_about_nor_posted_again_beside_itself(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    // The first post reaches the processor after 3 s, within the client's 5 s.
    shop.proxy.fail(
        "POST",
        "/transactions",
        Fault::DelayThenForward(Duration::from_secs(3)),
        1,
    );
    let id = shop.subscribe(&app).await;
    eventually(Duration::from_secs(30), || async {
        shop.event_types(&app, &id)
            .await
            .contains(&"charge.approved".to_owned())
    })
    .await;
    let references = shop.posted_references();
    assert_eq!(
        references.len(),
        1,
        "posted once, not again while its first post was under way: {references:?}"
    );
    assert!(
        shop.proxy.seen("GET", "/transactions").is_empty(),
        "not asked about while it was being posted"
    );
    assert_eq!(
        shop.charge(&references[0]).await.status,
        ChargeStatus::Approved
    );
    assert_eq!(shop.balance(&app).await, (TOP_UP - FEE, 0));
    assert_invariants(&app).await;
}

/// The same on a shard gained: node B hands its shards to A on a graceful stop, and A's
/// reconciler asks about the pending charges of every shard it holds. A charge A is posting
/// right then (its post held up for 4 s on its way to the processor) is not among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_gained_does_not_recheck_the_charges_being_posted() {
    use crate::common::{Backend, database_url, spawn_on_with};
    use reqwest::Method;
    use serde_json::json;

    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let a = spawn_on_with(url.clone(), cluster_node).await;
    let b = spawn_on_with(url.clone(), cluster_node).await;
    eventually(Duration::from_secs(30), || async {
        let (held_a, held_b) = (owned(&a).await, owned(&b).await);
        held_a.len() == 128 && held_b.len() == 128
    })
    .await;
    let shop = Shop::open(&a, APPROVED_CARD).await;
    shop.proxy.fail(
        "POST",
        "/transactions",
        Fault::DelayThenForward(Duration::from_secs(4)),
        1,
    );
    // Made through A: in one of A's shards, its first charge posted by A (the request waits
    // for the post).
    let body = json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
        "payment_method_id": shop.method});
    let (client, url, key) = (
        a.client.clone(),
        a.url("/v1/subscriptions"),
        shop.key.clone(),
    );
    let created = tokio::spawn(async move {
        client
            .request(Method::POST, url)
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
    });
    eventually(Duration::from_secs(10), || async {
        shop.posted_references().len() == 1
    })
    .await;
    // B leaves while the post is on its way: A gains B's shards.
    b.stop().await;
    eventually(Duration::from_secs(20), || async {
        owned(&a).await.len() == 256
    })
    .await;
    let created = created.await.expect("task").expect("create");
    assert_eq!(created.status(), 201);
    let reference = shop.posted_references()[0].clone();
    eventually(Duration::from_secs(30), || async {
        shop.charge(&reference).await.status == ChargeStatus::Approved
    })
    .await;
    let references = shop.posted_references();
    assert_eq!(
        references.len(),
        1,
        "posted once, not again on the shard gain while its first post was under way"
    );
    assert!(
        shop.proxy.seen("GET", "/transactions").is_empty(),
        "not asked about while it was being posted"
    );
}

fn cluster_node(config: &mut billing::config::Config) {
    config.lease_ttl_ms = 2_000;
    config.lease_renew_ms = 200;
    config.processor_timeout_ms = 10_000;
}

/// The shards `node` holds.
async fn owned(node: &TestApp) -> Vec<u16> {
    let (status, body) = crate::common::read(
        node.admin(reqwest::Method::GET, "/admin/cluster")
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
