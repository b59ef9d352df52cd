//! Deliveries survive a crash: the real `billing` process is killed while its deliveries are
//! pending (the receiver was failing), restarted on the same database, and every event then
//! arrives.

use crate::common::receiver::{Receiver, Reply};
use crate::common::{Backend, database_url, eventually};
use crate::crash::{ProcessShop, call, free_port, start};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

async fn pending_deliveries_arrive_after_a_restart(backend: Backend) {
    let Some(url) = database_url(backend).await else {
        return;
    };
    let port = free_port();
    let mut server = start(&url, port).await;
    let base = server.base.clone();
    let client = reqwest::Client::new();
    let post = reqwest::Method::POST;
    let shop = ProcessShop::open(&client, &url, &base, 10_000_000).await;
    let key = shop.key.clone();
    let receiver = Receiver::start(&[], Reply::Status(503)).await;
    let endpoint = call(
        &client,
        post.clone(),
        format!("{base}/v1/webhook-endpoints"),
        &key,
        json!({"url": receiver.url, "events": ["*"]}),
    )
    .await;
    let endpoint = endpoint["id"].as_str().expect("id").to_owned();
    for i in 0..3 {
        shop.subscribe(i, json!({"n": i})).await;
    }
    // Every subscription's first charge settled: subscription.created and charge.approved each.
    let events = eventually_events(&client, &base, &key, 6).await;
    // Each delivery has failed once and waits for its retry when the process dies.
    eventually(Duration::from_secs(20), || async {
        let ids: BTreeSet<String> = receiver.received().iter().map(event_id).collect();
        ids.len() == events.len()
    })
    .await;
    server.child.kill().await.expect("kill");
    receiver.answer_from_now(Reply::Status(200));
    let before = receiver.count();

    let server = start(&url, port).await;
    eventually(Duration::from_secs(30), || async {
        let delivered: BTreeSet<String> =
            receiver.received()[before..].iter().map(event_id).collect();
        delivered == events
    })
    .await;
    let log = call(
        &client,
        reqwest::Method::GET,
        format!(
            "{}/v1/webhook-endpoints/{endpoint}/deliveries?limit=100",
            server.base
        ),
        &key,
        Value::Null,
    )
    .await;
    let log = log["data"].as_array().expect("data");
    assert_eq!(
        log.len(),
        events.len(),
        "one delivery per event, none lost, none added"
    );
    eventually(Duration::from_secs(10), || async {
        let log = call(
            &client,
            reqwest::Method::GET,
            format!(
                "{}/v1/webhook-endpoints/{endpoint}/deliveries?limit=100",
                server.base
            ),
            &key,
            Value::Null,
        )
        .await;
        log["data"]
            .as_array()
            .expect("data")
            .iter()
            .all(|d| d["status"] == "delivered")
    })
    .await;
}

fn event_id(received: &crate::common::receiver::Received) -> String {
    let body: Value = serde_json::from_slice(&received.body).expect("json");
    body["id"].as_str().expect("id").to_owned()
}

async fn eventually_events(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    n: usize,
) -> BTreeSet<String> {
    let read = || async {
        let page = call(
            client,
            reqwest::Method::GET,
            format!("{base}/v1/events?limit=100"),
            key,
            Value::Null,
        )
        .await;
        page["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|e| e["id"].as_str().expect("id").to_owned())
            .collect::<BTreeSet<String>>()
    };
    eventually(Duration::from_secs(20), || async {
        read().await.len() >= n
    })
    .await;
    read().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_pending_deliveries_arrive_after_a_restart() {
    pending_deliveries_arrive_after_a_restart(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pending_deliveries_arrive_after_a_restart() {
    pending_deliveries_arrive_after_a_restart(Backend::Postgres).await;
}
