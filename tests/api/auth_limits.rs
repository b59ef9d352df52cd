//! Issue 14, point 4: failed authentication is limited per client address (20 in any 60 s,
//! then 429 `rate_limit` with `Retry-After` for every credential from that address, a valid
//! one included), and a key that is not well formed is refused without a database read. The
//! window's passing is tested on explicit instants in `api::auth_failures`.

use crate::common::process::ServerProcess;
use crate::common::{ADMIN_TOKEN, Backend, TestApp, database_url, read};
use reqwest::{Method, Response};
use serde_json::json;

crate::db_tests!(
    after_twenty_bad_keys_even_a_valid_key_is_answered_429,
    after_twenty_wrong_admin_tokens_even_the_right_one_is_answered_429,
    failed_dashboard_logins_count_against_the_same_address,
    wrong_tokens_at_the_sandbox_administration_count_too,
    successful_authentications_do_not_count,
);

/// A well-formed key that belongs to no account (it costs a database read).
fn unknown_key(i: usize) -> String {
    format!("sk_test_{:0>32}", format!("unknown{i}"))
}

async fn with_key(app: &TestApp, key: &str) -> Response {
    app.client
        .get(app.url("/v1/plans"))
        .bearer_auth(key)
        .send()
        .await
        .expect("send")
}

async fn with_admin_token(app: &TestApp, token: &str) -> Response {
    app.client
        .get(app.url("/admin/actors"))
        .bearer_auth(token)
        .send()
        .await
        .expect("send")
}

async fn dashboard_login(app: &TestApp, token: &str) -> Response {
    app.client
        .post(app.url("/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("token", token)]).expect("form"))
        .send()
        .await
        .expect("send")
}

/// A 429 in the contract's shape, with a `Retry-After` within the window.
async fn assert_limited(response: Response, what: &str) {
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (status, body) = read(response).await;
    assert_eq!(status, 429, "{what}: {body}");
    assert_eq!(body["error"]["type"], "rate_limit", "{what}");
    assert!(
        retry_after.is_some_and(|secs| (1..=60).contains(&secs)),
        "{what}: Retry-After {retry_after:?}"
    );
}

async fn after_twenty_bad_keys_even_a_valid_key_is_answered_429(app: TestApp) {
    for i in 0..20 {
        // Well-formed unknown keys and malformed ones count alike.
        let key = if i % 2 == 0 {
            unknown_key(i)
        } else {
            format!("sk_live_short{i}")
        };
        let (status, body) = read(with_key(&app, &key).await).await;
        assert_eq!(status, 401, "attempt {i}: {body}");
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    assert_limited(with_key(&app, &unknown_key(99)).await, "21st bad key").await;
    // Were a valid key answered 200 here, a guesser would learn which guess was right.
    assert_limited(with_key(&app, &app.api_key).await, "valid key").await;
    assert_limited(with_admin_token(&app, ADMIN_TOKEN).await, "admin token").await;
    let no_key = app
        .client
        .get(app.url("/v1/plans"))
        .send()
        .await
        .expect("send");
    assert_limited(no_key, "no key").await;
    // What needs no credential still answers.
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("send");
    assert_eq!(health.status(), 200);
}

async fn after_twenty_wrong_admin_tokens_even_the_right_one_is_answered_429(app: TestApp) {
    for i in 0..20 {
        let (status, body) = read(with_admin_token(&app, &format!("wrong-{i}")).await).await;
        assert_eq!(status, 401, "attempt {i}: {body}");
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    assert_limited(with_admin_token(&app, "wrong-21").await, "21st wrong token").await;
    assert_limited(with_admin_token(&app, ADMIN_TOKEN).await, "right token").await;
    let create = app
        .admin(Method::POST, "/admin/accounts")
        .json(&json!({"name": "x", "sandbox": true}))
        .send()
        .await
        .expect("send");
    assert_limited(create, "right token, POST").await;
    assert_limited(dashboard_login(&app, ADMIN_TOKEN).await, "dashboard login").await;
    assert_limited(with_key(&app, &app.api_key).await, "valid key").await;
}

async fn sandbox_admin(app: &TestApp, token: &str) -> Response {
    app.client
        .post(app.url("/sandbox/processor/v1/_sandbox/merchants"))
        .bearer_auth(token)
        .json(&json!({}))
        .send()
        .await
        .expect("send")
}

/// The in-process sandbox's administration takes the admin token: guessing it there is
/// limited like anywhere else, or it would be the way around the limit.
async fn wrong_tokens_at_the_sandbox_administration_count_too(app: TestApp) {
    for i in 0..20 {
        let response = sandbox_admin(&app, &format!("wrong-{i}")).await;
        assert_eq!(response.status(), 401, "attempt {i}");
    }
    assert_limited(
        sandbox_admin(&app, ADMIN_TOKEN).await,
        "right token, sandbox",
    )
    .await;
    assert_limited(
        with_admin_token(&app, ADMIN_TOKEN).await,
        "right token, admin",
    )
    .await;
}

async fn failed_dashboard_logins_count_against_the_same_address(app: TestApp) {
    for i in 0..10 {
        let response = dashboard_login(&app, &format!("wrong-{i}")).await;
        assert_eq!(response.status(), 401, "login {i}");
    }
    for i in 0..10 {
        assert_eq!(
            with_admin_token(&app, &format!("wrong-{i}")).await.status(),
            401
        );
    }
    assert_limited(dashboard_login(&app, ADMIN_TOKEN).await, "right token").await;
    assert_limited(with_admin_token(&app, ADMIN_TOKEN).await, "admin API").await;
}

async fn successful_authentications_do_not_count(app: TestApp) {
    for i in 0..19 {
        assert_eq!(with_key(&app, &unknown_key(i)).await.status(), 401);
    }
    for _ in 0..30 {
        assert_eq!(with_key(&app, &app.api_key).await.status(), 200);
        assert_eq!(with_admin_token(&app, ADMIN_TOKEN).await.status(), 200);
    }
    assert_eq!(with_key(&app, &unknown_key(19)).await.status(), 401);
    assert_limited(with_key(&app, &unknown_key(20)).await, "21st failure").await;
}

/// `api_key_lookups_total` of the server's own metrics.
async fn key_lookups(server: &ServerProcess) -> u64 {
    let text = reqwest::get(format!("{}/metrics", server.base))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|line| line.strip_prefix("api_key_lookups_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no api_key_lookups_total in {text}"))
}

/// In a process of its own, so that no other test's lookups move the counter.
async fn a_key_that_is_not_well_formed_costs_no_database_read(backend: Backend) {
    let Some(url) = database_url(backend).await else {
        return;
    };
    let server = ServerProcess::start(&url, "warn").await;
    let app = server.app();
    let before = key_lookups(&server).await;
    let valid_looking = unknown_key(0);
    let malformed = [
        "sk_test_nope".to_owned(),
        format!("{valid_looking}X"),
        valid_looking[..valid_looking.len() - 1].to_owned(),
        valid_looking.replacen('0', "-", 1),
        valid_looking.replacen("sk_test_", "sk_prod_", 1),
        valid_looking.replacen('0', "é", 1),
        "sk_live_".to_owned(),
        "Bearer".to_owned(),
    ];
    for key in &malformed {
        let (status, body) = read(with_key(&app, key).await).await;
        assert_eq!(status, 401, "{key}: {body}");
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    assert_eq!(
        key_lookups(&server).await,
        before,
        "no lookup for a malformed key"
    );
    // The counter does count: a well-formed key is looked up.
    assert_eq!(with_key(&app, &valid_looking).await.status(), 401);
    assert_eq!(key_lookups(&server).await, before + 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_key_that_is_not_well_formed_costs_no_database_read() {
    a_key_that_is_not_well_formed_costs_no_database_read(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_key_that_is_not_well_formed_costs_no_database_read() {
    a_key_that_is_not_well_formed_costs_no_database_read(Backend::Postgres).await;
}
