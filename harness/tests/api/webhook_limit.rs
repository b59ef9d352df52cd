//! Issue 14, "unbounded growth per tenant": at most 16 webhook endpoints per account. The 17th
//! create answers 400 `invalid_request` and writes nothing; disabled endpoints count (they can
//! be enabled again), deleted ones do not; and concurrent creates cannot overshoot the limit
//! (the store counts inside the insert's transaction, behind a lock on the account).

use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    the_seventeenth_endpoint_is_refused_and_disabled_ones_count,
    a_burst_of_concurrent_creates_stops_at_the_limit,
);

const LIMIT: usize = 16;

/// A receiver URL on loopback (sandbox accounts on a loopback server may use one); nothing is
/// sent to it, since these tests emit no events.
fn url(n: usize) -> String {
    format!("http://127.0.0.1:9/hooks/{n}")
}

async fn create(app: &TestApp, n: usize) -> (u16, Value) {
    read(
        app.post(
            "/v1/webhook-endpoints",
            json!({"url": url(n), "events": ["*"]}),
        )
        .await,
    )
    .await
}

async fn endpoint_ids(app: &TestApp) -> Vec<String> {
    let (status, page) = read(app.get("/v1/webhook-endpoints?limit=100").await).await;
    assert_eq!(status, 200, "{page}");
    page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect()
}

fn assert_limit_error(status: u16, body: &Value) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request", "{body}");
    assert!(body["error"]["param"].is_null(), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("16")),
        "{body}"
    );
}

async fn the_seventeenth_endpoint_is_refused_and_disabled_ones_count(app: TestApp) {
    let mut ids = Vec::new();
    for n in 0..LIMIT {
        let (status, body) = create(&app, n).await;
        assert_eq!(status, 201, "endpoint {n}: {body}");
        ids.push(body["id"].as_str().expect("id").to_owned());
    }
    let (status, body) = create(&app, LIMIT).await;
    assert_limit_error(status, &body);
    assert_eq!(
        endpoint_ids(&app).await.len(),
        LIMIT,
        "the refused create wrote nothing"
    );

    // A disabled endpoint keeps its place: it can be enabled again at any time.
    let (status, body) = read(
        app.request(Method::PATCH, &format!("/v1/webhook-endpoints/{}", ids[0]))
            .json(&json!({"active": false}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = create(&app, LIMIT).await;
    assert_limit_error(status, &body);

    // A deleted one frees its place.
    let (status, body) = read(
        app.request(Method::DELETE, &format!("/v1/webhook-endpoints/{}", ids[1]))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = create(&app, LIMIT).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(endpoint_ids(&app).await.len(), LIMIT);
    let (status, body) = create(&app, LIMIT + 1).await;
    assert_limit_error(status, &body);
}

async fn a_burst_of_concurrent_creates_stops_at_the_limit(app: TestApp) {
    const BURST: usize = 24;
    let answers = futures::future::join_all((0..BURST).map(|n| create(&app, n))).await;
    let created = answers.iter().filter(|(status, _)| *status == 201).count();
    for (status, body) in answers.iter().filter(|(status, _)| *status != 201) {
        assert_limit_error(*status, body);
    }
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(created, LIMIT, "{statuses:?}");
    assert_eq!(endpoint_ids(&app).await.len(), LIMIT);
}
