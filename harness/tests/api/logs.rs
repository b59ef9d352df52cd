//! Issue 17, logs: the real binary's log lines as an operator's pipeline reads them. With
//! `--log-format json` every line of stdout is a JSON object, and every line of a request
//! (also those its subscription actor writes while it handles the request's command) carries
//! the request's id, which the response echoes (also on 401, 404 and 429), also on the node a
//! request is forwarded to; a text log written to a file has no colour codes.

use crate::common::process::ServerProcess;
use crate::common::{Backend, database_url, eventually, read};
use crate::subscriptions::{shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};

/// `RUST_LOG` for these servers: the request span's start and end lines are DEBUG.
const RUST_LOG: &str = "info,tower_http=debug";

/// The `x-request-id` a response carries.
fn request_id(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .expect("an x-request-id header")
        .to_owned()
}

/// The `request_id` of the spans a JSON line was written in.
fn request_ids(line: &Value) -> Vec<&str> {
    line["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(std::iter::once(&line["span"]))
        .filter_map(|span| span["request_id"].as_str())
        .collect()
}

async fn json_lines_carry_the_request_id_into_the_actor(backend: Backend) {
    let Some(url) = database_url(backend).await else {
        return;
    };
    let server = ServerProcess::start_with(&url, RUST_LOG, &["--log-format", "json"]).await;
    let mut app = server.app();
    let (status, account) = read(
        app.admin(Method::POST, "/admin/accounts")
            .json(&json!({"name": "Logged", "sandbox": true, "rate_limit_per_minute": 0}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{account}");
    app.api_key = account["api_key"].as_str().expect("api_key").to_owned();
    app.account_id = account["id"].as_str().expect("id").to_owned();
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id");

    let paused = app
        .request(Method::POST, &format!("/v1/subscriptions/{id}/pause"))
        .header("x-request-id", "abc-123")
        .json(&json!({}))
        .send()
        .await
        .expect("send");
    assert_eq!(request_id(&paused), "abc-123", "the client's id is echoed");
    let (status, body) = read(paused).await;
    assert_eq!(status, 200, "{body}");

    let listed = app.get("/v1/plans").await;
    let generated = request_id(&listed);
    assert_eq!(listed.status(), 200);
    assert!(generated.starts_with("req_"), "{generated}");

    // Errors answered outside the handlers echo it too.
    let unknown = app
        .request(Method::GET, "/v1/nowhere")
        .header("x-request-id", "lost-1")
        .send()
        .await
        .expect("send");
    assert_eq!(unknown.status(), 404);
    assert_eq!(request_id(&unknown), "lost-1");
    let refused = app
        .client
        .get(app.url("/v1/plans"))
        .bearer_auth("sk_test_wrong")
        .header("x-request-id", "refused-1")
        .send()
        .await
        .expect("send");
    assert_eq!(refused.status(), 401);
    assert_eq!(request_id(&refused), "refused-1");
    let insane = "x".repeat(129);
    let replaced = app
        .request(Method::GET, "/v1/plans")
        .header("x-request-id", &insane)
        .send()
        .await
        .expect("send");
    assert!(
        request_id(&replaced).starts_with("req_"),
        "a 129-char id is replaced"
    );
    let (status, limited) = read(
        app.admin(Method::POST, "/admin/accounts")
            .json(&json!({"name": "Limited", "sandbox": true, "rate_limit_per_minute": 1}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{limited}");
    let limited_key = limited["api_key"].as_str().expect("api_key");
    let mut last = None;
    for attempt in 0..2 {
        let response = app
            .client
            .get(app.url("/v1/plans"))
            .bearer_auth(limited_key)
            .header("x-request-id", format!("limited-{attempt}"))
            .send()
            .await
            .expect("send");
        last = Some((response.status(), request_id(&response)));
    }
    assert_eq!(
        last,
        Some((
            reqwest::StatusCode::TOO_MANY_REQUESTS,
            "limited-1".to_owned()
        ))
    );

    let (stdout, stderr) = server.stop_split().await;
    assert!(
        stderr.contains("API key (shown once)") && !stdout.contains("shown once"),
        "the first start's credentials go to stderr, off the JSON stream"
    );
    let lines = json_lines(&stdout);
    assert!(!lines.is_empty(), "the server logged");
    let of = |request: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|line| request_ids(line).contains(&request))
            .collect()
    };
    let message = |line: &Value| {
        line["fields"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let pause_lines = of("abc-123");
    let messages: Vec<String> = pause_lines.iter().map(|line| message(line)).collect();
    for expected in [
        "started processing request",
        "applying a command",
        "finished processing request",
    ] {
        assert!(
            messages.iter().any(|m| m == expected),
            "no {expected:?} line of the pause request in {messages:?}"
        );
    }
    let in_actor = pause_lines
        .iter()
        .find(|line| message(line) == "applying a command")
        .expect("the actor's line");
    assert_eq!(in_actor["fields"]["subscription"], id, "{in_actor}");
    assert!(
        in_actor["target"]
            .as_str()
            .unwrap_or_default()
            .starts_with("billing::actors"),
        "{in_actor}"
    );
    assert!(!of(&generated).is_empty(), "the generated id is logged");
    assert!(!of("lost-1").is_empty(), "the 404 is logged with its id");
}

async fn text_logs_to_a_file_have_no_colour_codes(backend: Backend) {
    let Some(url) = database_url(backend).await else {
        return;
    };
    let server = ServerProcess::start(&url, RUST_LOG).await;
    let app = server.app();
    let unknown = app.get("/v1/nowhere").await;
    assert_eq!(unknown.status(), 404);
    let (stdout, stderr) = server.stop_split().await;
    assert!(
        stdout.contains("finished processing request"),
        "the request was logged: {stdout}"
    );
    assert!(
        stdout.contains("API key (shown once)"),
        "the first start's credentials are printed beside text logs"
    );
    for (stream, output) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(!output.contains('\u{1b}'), "ESC on {stream}: {output}");
    }
}

/// Parses a JSON log stream, line by line.
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}"))
        })
        .collect()
}

/// The shards a node holds, as `/admin/cluster` says.
async fn shards_held(app: &crate::common::TestApp) -> usize {
    let (status, body) = read(
        app.admin(Method::GET, "/admin/cluster")
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["shards_owned"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_command_is_logged_on_its_owner_with_the_request_id() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let args = [
        "--log-format",
        "json",
        "--lease-ttl-ms",
        "2000",
        "--lease-renew-ms",
        "200",
    ];
    let first = ServerProcess::start_with(&url, RUST_LOG, &args).await;
    let owner = ServerProcess::start_with(&url, RUST_LOG, &args).await;
    let (mut at_first, mut at_owner) = (first.app(), owner.app());
    eventually(std::time::Duration::from_secs(30), || async {
        shards_held(&at_first).await > 0 && shards_held(&at_owner).await > 0
    })
    .await;
    let (status, account) = read(
        at_first
            .admin(Method::POST, "/admin/accounts")
            .json(&json!({"name": "Forwarded", "sandbox": true, "rate_limit_per_minute": 0}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{account}");
    for app in [&mut at_first, &mut at_owner] {
        app.api_key = account["api_key"].as_str().expect("api_key").to_owned();
        app.account_id = account["id"].as_str().expect("id").to_owned();
    }
    // The card is tokenized at the first node's in-process sandbox, which holds the
    // account's keys; created through the owner, the subscription is in the owner's shards,
    // and its trial spares the owner a charge at a sandbox that does not know the account.
    let (shop, method) = shop(&at_first, "4242424242424242").await;
    let sub = subscribe(&at_owner, &shop, &method, json!({"trial_days": 30})).await;
    let id = sub["id"].as_str().expect("id");
    let paused = at_first
        .request(Method::POST, &format!("/v1/subscriptions/{id}/pause"))
        .header("x-request-id", "forwarded-1")
        .json(&json!({}))
        .send()
        .await
        .expect("send");
    assert_eq!(request_id(&paused), "forwarded-1");
    let (status, body) = read(paused).await;
    assert_eq!(status, 200, "{body}");

    let (first_out, _) = first.stop_split().await;
    let (owner_out, _) = owner.stop_split().await;
    let applied_here = |stdout: &str| {
        json_lines(stdout).iter().any(|line| {
            line["fields"]["message"] == "applying a command"
                && request_ids(line).contains(&"forwarded-1")
        })
    };
    assert!(
        applied_here(&owner_out),
        "the owner applied the command in the request's span"
    );
    assert!(
        !applied_here(&first_out),
        "the first node forwarded the command rather than applying it"
    );
}

/// A request that fails inside the server (its database schema dropped under it) is logged
/// once at ERROR, with its cause, in its request's span: not a second time by the HTTP trace
/// layer, whose lines about a 5xx say nothing the first does not (and would put a starting
/// server's `/readyz` 503 at ERROR too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_is_logged_once_with_its_cause() {
    use sea_orm::ConnectionTrait;
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let server = ServerProcess::start_with(&url, RUST_LOG, &["--log-format", "json"]).await;
    let mut app = server.app();
    let account = app.create_account("Failing").await;
    app.api_key = account["api_key"].as_str().expect("api_key").to_owned();
    let schema = url
        .rsplit("search_path%3D")
        .next()
        .expect("the test's schema");
    let database = crate::common::postgres_database().await.expect("postgres");
    sea_orm::Database::connect(&database)
        .await
        .expect("connect")
        .execute_unprepared(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop the schema");
    let response = app
        .request(Method::GET, "/v1/plans")
        .header("x-request-id", "failing-1")
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 500);
    let (stdout, _) = server.stop_split().await;
    let lines = json_lines(&stdout);
    let errors: Vec<&Value> = lines
        .iter()
        .filter(|line| request_ids(line).contains(&"failing-1") && line["level"] == "ERROR")
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "one ERROR line for the failed request: {errors:#?}"
    );
    assert!(
        errors[0]["fields"]["source"]
            .as_str()
            .is_some_and(|cause| cause.contains("does not exist")),
        "the line names the cause: {}",
        errors[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_json_lines_carry_the_request_id_into_the_actor() {
    json_lines_carry_the_request_id_into_the_actor(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_json_lines_carry_the_request_id_into_the_actor() {
    json_lines_carry_the_request_id_into_the_actor(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_text_logs_to_a_file_have_no_colour_codes() {
    text_logs_to_a_file_have_no_colour_codes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_text_logs_to_a_file_have_no_colour_codes() {
    text_logs_to_a_file_have_no_colour_codes(Backend::Postgres).await;
}
