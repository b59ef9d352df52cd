//! Issue 15, shared state: two nodes (`spawn_node`) serving one PostgreSQL schema count the same
//! rate limits and failed authentications and share dashboard sessions; nodes that start
//! together on an empty database all migrate; a second server on one SQLite file refuses to
//! start. The windows' passing and their cost bounds are tested on explicit instants in
//! `rate_windows`.

use crate::admin::{csrf_of, dashboard_login, form_body};
use crate::checkout::{new_session, plan};
use crate::common::process::ServerProcess;
use crate::common::{
    ADMIN_TOKEN, Backend, TestApp, database_url, read, spawn_app, spawn_node, spawn_on,
};
use reqwest::Response;
use serde_json::json;
use std::time::{Duration, Instant};

/// Two nodes on one fresh PostgreSQL schema, called as one account; `None` when PostgreSQL is
/// unavailable and not required.
async fn two_nodes() -> Option<(TestApp, TestApp)> {
    let first = spawn_app(Backend::Postgres).await?;
    let second = spawn_node(&first).await;
    Some((first, second))
}

fn retry_after(response: &Response) -> Option<u64> {
    response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// A 429 `rate_limit` whose `Retry-After` is when the first request counted (made no earlier
/// than `started`) leaves its 60-second window.
async fn assert_limited_until_the_first_leaves(response: Response, started: Instant, what: &str) {
    let elapsed = started.elapsed().as_secs();
    let retry_after = retry_after(&response);
    let (status, body) = read(response).await;
    assert_eq!(status, 429, "{what}: {body}");
    assert_eq!(body["error"]["type"], "rate_limit", "{what}");
    let earliest = 60u64.saturating_sub(elapsed + 1).max(1);
    assert!(
        retry_after.is_some_and(|secs| (earliest..=60).contains(&secs)),
        "{what}: Retry-After {retry_after:?} after {elapsed} s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_rate_limit_holds_across_nodes() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let started = Instant::now();
    for i in 0..100 {
        let node = if i % 2 == 0 { &a } else { &b };
        let (status, body) = read(node.get("/v1/account").await).await;
        assert_eq!(status, 200, "request {i}: {body}");
    }
    assert_limited_until_the_first_leaves(a.get("/v1/account").await, started, "101st at a").await;
    assert_limited_until_the_first_leaves(b.get("/v1/account").await, started, "101st at b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkout_status_limit_holds_across_nodes() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let plan = plan(&a, false).await;
    let id = new_session(&a, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let path = format!("/v1/checkout-sessions/{id}/status");
    let started = Instant::now();
    for i in 0..20 {
        let node = if i % 2 == 0 { &a } else { &b };
        assert_eq!(node.get(&path).await.status(), 200, "call {}", i + 1);
    }
    assert_limited_until_the_first_leaves(b.get(&path).await, started, "21st at b").await;
    assert_limited_until_the_first_leaves(a.get(&path).await, started, "21st at a").await;
    // Only the status route has the extra limit.
    let session = b.get(&format!("/v1/checkout-sessions/{id}")).await;
    assert_eq!(session.status(), 200);
}

/// A well-formed key that belongs to no account.
fn unknown_key(i: usize) -> String {
    format!("sk_test_{:0>32}", format!("unknown{i}"))
}

async fn with_key(node: &TestApp, key: &str) -> Response {
    node.client
        .get(node.url("/v1/plans"))
        .bearer_auth(key)
        .send()
        .await
        .expect("send")
}

async fn with_admin_token(node: &TestApp, token: &str) -> Response {
    node.client
        .get(node.url("/admin/actors"))
        .bearer_auth(token)
        .send()
        .await
        .expect("send")
}

async fn assert_status(response: Response, expected: u16, what: &str) {
    let (status, body) = read(response).await;
    assert_eq!(status, expected, "{what}: {body}");
    if expected == 429 {
        assert_eq!(body["error"]["type"], "rate_limit", "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentications_at_either_node_count_together() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    for i in 0..20 {
        let node = if i % 2 == 0 { &a } else { &b };
        assert_status(
            with_key(node, &unknown_key(i)).await,
            401,
            &format!("failure {i}"),
        )
        .await;
    }
    assert_status(with_key(&a, &unknown_key(20)).await, 429, "21st, at a").await;
    assert_status(with_key(&b, &unknown_key(21)).await, 429, "22nd, at b").await;
    assert_status(
        with_admin_token(&b, "wrong").await,
        429,
        "wrong admin token at b",
    )
    .await;
    // Behind a load balancer every tenant shares the address: valid credentials still pass.
    assert_status(with_key(&a, &a.api_key).await, 200, "valid key at a").await;
    assert_status(with_key(&b, &b.api_key).await, 200, "valid key at b").await;
    assert_status(
        with_admin_token(&b, ADMIN_TOKEN).await,
        200,
        "admin token at b",
    )
    .await;
}

/// Every failure is counted in the shared window by one statement that refuses it when the
/// window is full: a node that has seen no failure of an address examines its credential (a
/// valid one must pass) but answers 429 once the other nodes filled the window; the count is
/// exact however the failures spread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_saw_no_failure_refuses_beyond_the_limit_at_once() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    for i in 0..20 {
        assert_status(
            with_key(&a, &unknown_key(i)).await,
            401,
            &format!("failure {i}"),
        )
        .await;
    }
    assert_status(with_key(&a, &a.api_key).await, 200, "valid key at a").await;
    assert_status(
        with_key(&b, &unknown_key(20)).await,
        429,
        "b's first failure",
    )
    .await;
    assert_status(
        with_key(&b, &unknown_key(21)).await,
        429,
        "b's second failure",
    )
    .await;
    assert_status(
        with_admin_token(&b, ADMIN_TOKEN).await,
        200,
        "admin token at b",
    )
    .await;
}

/// Successes never count, on any node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successful_authentications_at_either_node_do_not_count() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    for i in 0..19 {
        let node = if i % 2 == 0 { &a } else { &b };
        assert_status(
            with_key(node, &unknown_key(i)).await,
            401,
            &format!("failure {i}"),
        )
        .await;
    }
    for i in 0..30 {
        for node in [&a, &b] {
            let what = format!("valid admin token {i} at {}", node.base);
            assert_status(with_admin_token(node, ADMIN_TOKEN).await, 200, &what).await;
        }
    }
    assert_status(
        with_key(&b, &unknown_key(19)).await,
        401,
        "20th failure, at b",
    )
    .await;
    assert_status(with_key(&a, &unknown_key(20)).await, 429, "21st, at a").await;
    assert_status(
        with_admin_token(&a, "wrong").await,
        429,
        "wrong admin token at a",
    )
    .await;
    assert_status(
        with_admin_token(&a, ADMIN_TOKEN).await,
        200,
        "admin token at a",
    )
    .await;
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

async fn dashboard(node: &TestApp, client: &reqwest::Client, cookie: &str) -> String {
    let page = client
        .get(node.url("/dashboard"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("send");
    assert_eq!(page.status(), 200);
    page.text().await.expect("text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_login_at_one_node_holds_at_the_other() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let client = no_redirects();
    let unused = a.create_plan("Spare", 1_000, 10_000).await;
    let unused = unused["id"].as_str().expect("id");
    let cookie = dashboard_login(&a, &client).await;
    let page = dashboard(&b, &client, &cookie).await;
    assert!(
        page.contains("id=\"plans\""),
        "b shows the dashboard: {page}"
    );
    assert!(page.contains(unused));
    // The CSRF token b printed is the session's at a too.
    let csrf = csrf_of(&page);
    let deleted = client
        .post(a.url(&format!("/dashboard/plans/{unused}/delete")))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf.as_str())]))
        .send()
        .await
        .expect("send");
    assert_eq!(deleted.status(), 303);
    let (status, _) = read(b.get(&format!("/v1/plans/{unused}")).await).await;
    assert_eq!(status, 404, "the plan is gone");
    // Logging out at b ends the session at a.
    let logout = client
        .post(b.url("/dashboard/logout"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf.as_str())]))
        .send()
        .await
        .expect("send");
    assert_eq!(logout.status(), 303);
    let page = dashboard(&a, &client, &cookie).await;
    assert!(page.contains("Admin token"), "a login form again: {page}");
}

/// Three nodes starting together on an empty database each run every migration; without a
/// lock they race to create the same tables and all but one fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_on_an_empty_database_all_migrate() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let nodes: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let store = billing::store::Store::connect(&url).await?;
                store.migrate().await
            })
        })
        .collect();
    for (i, node) in nodes.into_iter().enumerate() {
        let migrated = node.await.expect("join");
        assert!(migrated.is_ok(), "node {i}: {migrated:?}");
    }
    // And the schema is whole: a server starts on it. (Whole servers starting together:
    // `cluster_nodes::three_nodes_started_together_on_an_empty_database`.)
    spawn_on(url).await.stop().await;
}

/// A second `billing serve` on the SQLite file of a running one exits at once, saying why;
/// the first keeps serving, and once it has stopped the file can be served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_one_sqlite_file_refuses_to_start() {
    let url = database_url(Backend::Sqlite).await.expect("sqlite");
    let first = ServerProcess::start(&url, "warn").await;
    let second = tokio::process::Command::new(env!("CARGO_BIN_EXE_billing"))
        .args(["serve", "--admin-token", ADMIN_TOKEN])
        .args(["--bind", "127.0.0.1:0", "--database-url", &url])
        .env_remove("BILLING_ADMIN_TOKEN")
        .kill_on_drop(true)
        .output();
    let second = tokio::time::timeout(Duration::from_secs(60), second)
        .await
        .expect("the second server exits instead of serving")
        .expect("run billing");
    assert!(!second.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&second.stdout),
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(
        said.contains("already serving the SQLite database"),
        "{said}"
    );
    let path = url.trim_start_matches("sqlite://");
    assert!(said.contains(path), "names the file: {said}");
    let app = first.app();
    let ready = app
        .client
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("send");
    assert_eq!(ready.status(), 200, "the first keeps serving");
    first.stop().await;
    spawn_on(url).await.stop().await;
}
