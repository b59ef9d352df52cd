//! Issue 14, point 4, and issue 32, point 1: failed authentication is limited per client
//! address (20 in any 60 s, then 429 `rate_limit` with `Retry-After` for every further unknown
//! credential from that address), a valid credential is never refused because of other
//! callers' failures (behind a load balancer every tenant shares its address), a request
//! without a credential is never counted, and a key that is not well formed is refused without
//! a database read. The window's passing is tested on explicit instants in
//! `api::auth_failures`.

use crate::common::process::ServerProcess;
use crate::common::{ADMIN_TOKEN, Backend, TestApp, database_url, read};
use reqwest::{Method, Response};
use serde_json::json;

crate::db_tests!(
    after_twenty_bad_keys_unknown_keys_are_answered_429_and_valid_ones_pass,
    after_twenty_wrong_admin_tokens_the_right_one_still_passes,
    failed_dashboard_logins_count_against_the_same_address,
    wrong_tokens_at_the_sandbox_administration_count_too,
    successful_authentications_do_not_count,
    requests_without_a_credential_are_never_counted_and_always_401,
    each_client_behind_a_trusted_proxy_has_its_own_budget,
);

/// A well-formed key that belongs to no account (it costs a database read).
fn unknown_key(i: usize) -> String {
    format!("sk_test_{:0>32}", format!("unknown{i}"))
}

async fn with_key(app: &TestApp, key: &str) -> Response {
    with_key_from(app, key, None).await
}

/// A request with `key`, sent as if through a proxy on this host that names the client in
/// `X-Forwarded-For` (loopback is a trusted proxy by default).
async fn with_key_from(app: &TestApp, key: &str, forwarded_for: Option<&str>) -> Response {
    let mut request = app.client.get(app.url("/v1/plans")).bearer_auth(key);
    if let Some(forwarded_for) = forwarded_for {
        request = request.header("x-forwarded-for", forwarded_for);
    }
    request.send().await.expect("send")
}

async fn with_admin_token(app: &TestApp, token: &str) -> Response {
    app.client
        .get(app.url("/admin/actors"))
        .bearer_auth(token)
        .send()
        .await
        .expect("send")
}

async fn without_credential(app: &TestApp, path: &str) -> Response {
    app.client.get(app.url(path)).send().await.expect("send")
}

/// The login form posted; a successful login answers 303 to the dashboard (not followed).
async fn dashboard_login(app: &TestApp, token: &str) -> Response {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
        .post(app.url("/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("token", token)]).expect("form"))
        .send()
        .await
        .expect("send")
}

async fn sandbox_admin(app: &TestApp, token: Option<&str>) -> Response {
    let mut request = app
        .client
        .post(app.url("/sandbox/processor/v1/_sandbox/merchants"))
        .json(&json!({}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("send")
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

/// A 401 `authentication_error`.
async fn assert_refused(response: Response, what: &str) {
    let (status, body) = read(response).await;
    assert_eq!(status, 401, "{what}: {body}");
    assert_eq!(body["error"]["type"], "authentication_error", "{what}");
}

async fn assert_status(response: Response, expected: u16, what: &str) {
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    assert_eq!(status, expected, "{what}: {body}");
}

async fn after_twenty_bad_keys_unknown_keys_are_answered_429_and_valid_ones_pass(app: TestApp) {
    // Another tenant behind the same address, whose key nothing has looked up yet: its first
    // request while the address is limited needs a database read, and passes.
    let (status, neighbour) = read(
        app.admin(Method::POST, "/admin/accounts")
            .json(&json!({"name": "Neighbour", "sandbox": true}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{neighbour}");
    let neighbour_key = neighbour["api_key"].as_str().expect("api_key").to_owned();
    for i in 0..20 {
        // Well-formed unknown keys and malformed ones count alike.
        let key = if i % 2 == 0 {
            unknown_key(i)
        } else {
            format!("sk_live_short{i}")
        };
        assert_refused(with_key(&app, &key).await, &format!("attempt {i}")).await;
    }
    assert_limited(with_key(&app, &unknown_key(99)).await, "21st bad key").await;
    assert_limited(with_key(&app, "sk_live_short").await, "malformed key").await;
    assert_status(
        with_key(&app, &neighbour_key).await,
        200,
        "a key not cached",
    )
    .await;
    assert_status(with_key(&app, &app.api_key).await, 200, "the valid key").await;
    assert_status(
        with_admin_token(&app, ADMIN_TOKEN).await,
        200,
        "the admin token",
    )
    .await;
    assert_refused(without_credential(&app, "/v1/plans").await, "no key").await;
    assert_limited(with_key(&app, &unknown_key(100)).await, "still limited").await;
    // What needs no credential still answers.
    assert_status(without_credential(&app, "/healthz").await, 200, "healthz").await;
}

async fn after_twenty_wrong_admin_tokens_the_right_one_still_passes(app: TestApp) {
    for i in 0..20 {
        let response = with_admin_token(&app, &format!("wrong-{i}")).await;
        assert_refused(response, &format!("attempt {i}")).await;
    }
    assert_limited(with_admin_token(&app, "wrong-21").await, "21st wrong token").await;
    assert_status(
        with_admin_token(&app, ADMIN_TOKEN).await,
        200,
        "right token",
    )
    .await;
    let create = app
        .admin(Method::POST, "/admin/accounts")
        .json(&json!({"name": "x", "sandbox": true}))
        .send()
        .await
        .expect("send");
    assert_status(create, 201, "right token, POST").await;
    assert_status(
        dashboard_login(&app, ADMIN_TOKEN).await,
        303,
        "dashboard login",
    )
    .await;
    assert_limited(
        dashboard_login(&app, "wrong-22").await,
        "wrong dashboard login",
    )
    .await;
    assert_status(with_key(&app, &app.api_key).await, 200, "valid key").await;
    assert_refused(without_credential(&app, "/admin/actors").await, "no token").await;
}

/// The in-process sandbox's administration takes the admin token: guessing it there is
/// limited like anywhere else, or it would be the way around the limit.
async fn wrong_tokens_at_the_sandbox_administration_count_too(app: TestApp) {
    for i in 0..20 {
        let response = sandbox_admin(&app, Some(&format!("wrong-{i}"))).await;
        assert_status(response, 401, &format!("attempt {i}")).await;
    }
    assert_limited(
        sandbox_admin(&app, Some("wrong-21")).await,
        "21st wrong token, sandbox",
    )
    .await;
    assert_limited(
        with_admin_token(&app, "wrong-22").await,
        "wrong token, admin",
    )
    .await;
    assert_status(
        sandbox_admin(&app, Some(ADMIN_TOKEN)).await,
        201,
        "right token, sandbox",
    )
    .await;
    assert_status(
        with_admin_token(&app, ADMIN_TOKEN).await,
        200,
        "right token, admin",
    )
    .await;
    assert_status(sandbox_admin(&app, None).await, 401, "no token, sandbox").await;
}

async fn failed_dashboard_logins_count_against_the_same_address(app: TestApp) {
    for i in 0..10 {
        let response = dashboard_login(&app, &format!("wrong-{i}")).await;
        assert_status(response, 401, &format!("login {i}")).await;
    }
    for i in 0..10 {
        let response = with_admin_token(&app, &format!("wrong-{i}")).await;
        assert_refused(response, &format!("admin {i}")).await;
    }
    assert_limited(dashboard_login(&app, "wrong-10").await, "wrong login").await;
    assert_limited(
        with_admin_token(&app, "wrong-10").await,
        "wrong admin token",
    )
    .await;
    assert_status(dashboard_login(&app, ADMIN_TOKEN).await, 303, "right login").await;
    assert_status(
        with_admin_token(&app, ADMIN_TOKEN).await,
        200,
        "right admin token",
    )
    .await;
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

/// A request without a credential guesses nothing: it is answered 401, not counted, and not
/// answered 429 when the address is limited (schemathesis checks every operation that way).
async fn requests_without_a_credential_are_never_counted_and_always_401(app: TestApp) {
    for i in 0..25 {
        assert_refused(
            without_credential(&app, "/v1/plans").await,
            &format!("v1 {i}"),
        )
        .await;
        let admin = without_credential(&app, "/admin/actors").await;
        assert_refused(admin, &format!("admin {i}")).await;
        let sandbox = sandbox_admin(&app, None).await;
        assert_status(sandbox, 401, &format!("sandbox {i}")).await;
        let login = dashboard_login(&app, "").await;
        assert_status(login, 401, &format!("empty login {i}")).await;
    }
    for i in 0..20 {
        let response = with_key(&app, &unknown_key(i)).await;
        assert_refused(response, &format!("failure {i}")).await;
    }
    assert_limited(with_key(&app, &unknown_key(20)).await, "21st failure").await;
    assert_refused(without_credential(&app, "/v1/plans").await, "v1, limited").await;
    assert_refused(
        without_credential(&app, "/admin/actors").await,
        "admin, limited",
    )
    .await;
    assert_status(sandbox_admin(&app, None).await, 401, "sandbox, limited").await;
}

/// Loopback is a trusted proxy by default: the client is the rightmost `X-Forwarded-For`
/// entry that is not itself a trusted proxy, and each client has its own budget.
async fn each_client_behind_a_trusted_proxy_has_its_own_budget(app: TestApp) {
    let guesser = Some("203.0.113.5");
    for i in 0..20 {
        let response = with_key_from(&app, &unknown_key(i), guesser).await;
        assert_refused(response, &format!("failure {i}")).await;
    }
    assert_limited(with_key_from(&app, &unknown_key(20), guesser).await, "21st").await;
    // An entry the client wrote to the left of what the proxy appended proves nothing.
    let spoofed = Some("198.51.100.77, 203.0.113.5");
    assert_limited(
        with_key_from(&app, &unknown_key(21), spoofed).await,
        "spoofed",
    )
    .await;
    // Trusted hops to the right are skipped.
    let via_two_proxies = Some("203.0.113.5, 127.0.0.1");
    let response = with_key_from(&app, &unknown_key(22), via_two_proxies).await;
    assert_limited(response, "through two proxies").await;
    let neighbour = Some("203.0.113.6");
    let response = with_key_from(&app, &unknown_key(23), neighbour).await;
    assert_refused(response, "another client").await;
    // The proxy itself, and an unreadable entry (which means the last trusted hop: the proxy).
    assert_refused(with_key(&app, &unknown_key(24)).await, "the proxy").await;
    let unreadable = Some("203.0.113.5, not-an-address");
    let response = with_key_from(&app, &unknown_key(25), unreadable).await;
    assert_refused(response, "unreadable entry").await;
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
