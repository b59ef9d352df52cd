//! Issue 32: what nodes answer when their state moves between them, on two nodes started in
//! this process on one PostgreSQL schema.
//!
//! A node that missed a broadcast of the test clock neither shows the clock behind nor moves
//! it backwards: the advance is added to the database's offset, and the clock is read there.

use crate::common::{Backend, TestApp, database_url, read, spawn_on_with};
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};

fn nodes_config(config: &mut billing::config::Config) {
    config.lease_ttl_ms = 2_000;
    config.lease_renew_ms = 200;
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
