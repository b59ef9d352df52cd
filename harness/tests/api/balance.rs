//! CONTRACT §6: the balance and its ledger.

use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::json;

crate::db_tests!(
    top_ups_move_the_balance_and_the_ledger,
    fifty_concurrent_top_ups_all_count,
    bad_top_ups_are_refused
);

async fn top_up(app: &TestApp, amount: i64) -> reqwest::Response {
    app.admin(
        Method::POST,
        &format!("/admin/accounts/{}/balance/top-ups", app.account_id),
    )
    .json(&json!({"amount_cents": amount}))
    .send()
    .await
    .expect("send")
}

async fn top_ups_move_the_balance_and_the_ledger(app: TestApp) {
    let (status, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(status, 200);
    assert_eq!(
        balance,
        json!({"available_cents": 0, "reserved_cents": 0, "currency": "COP"})
    );
    let (status, balance) = read(top_up(&app, 1_000_000).await).await;
    assert_eq!(status, 201);
    assert_eq!(balance["available_cents"], 1_000_000);
    let (_, ledger) = read(app.get("/v1/balance/transactions").await).await;
    assert_eq!(ledger["data"][0]["type"], "top_up");
    assert_eq!(ledger["data"][0]["amount_cents"], 1_000_000);
    assert!(
        ledger["data"][0]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("btx_"))
    );
}

async fn fifty_concurrent_top_ups_all_count(app: TestApp) {
    let requests = (1..=50).map(|i| top_up(&app, i));
    for response in futures::future::join_all(requests).await {
        assert_eq!(response.status(), 201);
    }
    let (_, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(balance["available_cents"], (1..=50).sum::<i64>());
    let (_, ledger) = read(app.get("/v1/balance/transactions?limit=100").await).await;
    assert_eq!(ledger["data"].as_array().map(Vec::len), Some(50));
}

async fn bad_top_ups_are_refused(app: TestApp) {
    for amount in [0, -5] {
        let (status, body) = read(top_up(&app, amount).await).await;
        assert_eq!(
            (status, body["error"]["param"].clone()),
            (400, json!("amount_cents"))
        );
    }
    let missing = app
        .admin(Method::POST, "/admin/accounts/acct_missing/balance/top-ups")
        .json(&json!({"amount_cents": 5}));
    assert_eq!(read(missing.send().await.expect("send")).await.0, 404);
    let (_, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(balance["available_cents"], 0);
}
