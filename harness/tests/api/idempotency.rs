//! Issue 13, items 3 and 9: an `Idempotency-Key` survives a client that hangs up (CONTRACT §3:
//! the work runs to completion and its response is kept; a retry meanwhile answers 409, then
//! the kept response), keys older than a day are purged, and a direct create answers the
//! subscription as it stands after its first charge.
//!
//! Slow requests come from a real peer: a standalone sandbox processor that keeps every
//! transaction PENDING for two seconds, so a request that waits for a charge's outcome (a
//! direct create, a charge-now) is still running when its client hangs up.

use crate::common::{TestApp, eventually, read};
use crate::subscriptions::{events, get, shop, subscribe};
use billing::processor::sandbox::{AdminAuth, MerchantKeys, SandboxConfig, SandboxProcessor};
use reqwest::{Method, Response};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement, TransactionTrait};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

crate::db_tests!(
    a_client_that_hangs_up_during_charge_now_finds_its_charge_under_the_key,
    a_client_that_hangs_up_during_a_create_finds_one_subscription_under_the_key,
    a_direct_create_answers_the_subscription_after_its_first_charge,
    a_client_that_hangs_up_while_its_key_is_claimed_does_not_lock_the_key,
    keys_older_than_a_day_are_purged_in_batches,
    a_key_that_is_not_printable_ascii_is_refused_not_ignored,
);

/// How long the slow processor keeps a transaction PENDING.
const SETTLE: Duration = Duration::from_secs(2);

/// Moves `app` to a new sandbox account (no rate limit) whose processor is a standalone
/// sandbox settling after `SETTLE`, its events sent to this service's ingress.
async fn use_slow_processor(app: &mut TestApp) {
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let keys = MerchantKeys {
        public_key: format!("pub_test_{unique}"),
        private_key: format!("prv_test_{unique}"),
        events_secret: format!("test_events_{unique}"),
        integrity_secret: format!("test_integrity_{unique}"),
    };
    let config = SandboxConfig {
        settle_delay: SETTLE,
        event_retry_delays: vec![Duration::from_millis(200); 5],
        ..SandboxConfig::default()
    };
    // Administered in-process only: no token reaches HTTP.
    let admin = AdminAuth::from_token(&uuid::Uuid::new_v4().to_string());
    let (sandbox, base_url) = serve_sandbox(config, admin).await;
    sandbox.register_merchant(keys.clone(), None);
    let response = app
        .admin(Method::POST, "/admin/accounts")
        .json(
            &json!({"name": "Slow processor", "sandbox": true, "processor": {
            "base_url": base_url, "public_key": keys.public_key, "private_key": keys.private_key,
            "events_secret": keys.events_secret, "integrity_secret": keys.integrity_secret}}),
        )
        .send()
        .await
        .expect("send");
    let (status, account) = read(response).await;
    assert_eq!(status, 201, "{account}");
    app.account_id = account["id"].as_str().expect("id").to_owned();
    app.api_key = account["api_key"].as_str().expect("key").to_owned();
    let ingress = format!("{}/webhooks/processor/{}", app.base, app.account_id);
    sandbox.register_merchant(keys, Some(ingress));
    // Retries below poll faster than 100 a minute.
    app.lift_rate_limit().await;
}

/// A standalone sandbox processor with `config`, administered by the holder of `admin`'s
/// token, serving on a port of its own; with its base URL (`…/v1`).
pub(crate) async fn serve_sandbox(
    config: SandboxConfig,
    admin: AdminAuth,
) -> (Arc<SandboxProcessor>, String) {
    let sandbox = SandboxProcessor::new(config, admin).expect("sandbox");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base_url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let router = axum::Router::new().nest("/v1", sandbox.clone().router());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (sandbox, base_url)
}

/// A POST under `key` sent by a client of its own, in a task: aborting the task hangs up.
fn send_in_background(
    app: &TestApp,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> tokio::task::JoinHandle<reqwest::Result<Response>> {
    let mut request = reqwest::Client::new()
        .post(app.url(path))
        .bearer_auth(&app.api_key)
        .header("Idempotency-Key", key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    tokio::spawn(request.send())
}

async fn retry(app: &TestApp, path: &str, key: &str, body: Option<Value>) -> Response {
    let mut request = app
        .request(Method::POST, path)
        .header("Idempotency-Key", key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("send")
}

async fn database(app: &TestApp) -> DatabaseConnection {
    Database::connect(app.database_url.as_str())
        .await
        .expect("connect")
}

/// The state of `key`'s record (`running`, `done`), read from the database.
async fn key_state(db: &DatabaseConnection, key: &str) -> Option<String> {
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            format!("SELECT state FROM idempotency_keys WHERE key = '{key}'"),
        ))
        .await
        .expect("query")?;
    Some(row.try_get_by_index::<String>(0).expect("state"))
}

/// Sends `path` under `key`, hangs up once the service runs it, and checks what the retries
/// that follow see: 409 `idempotency_error` while it still runs, then its response, the same on
/// every later retry. Returns that response.
async fn hang_up_then_retry(app: &TestApp, path: &str, key: &str, body: Option<Value>) -> Value {
    let db = database(app).await;
    let first = send_in_background(app, path, key, body.clone());
    eventually(Duration::from_secs(10), || async {
        key_state(&db, key).await.as_deref() == Some("running")
    })
    .await;
    first.abort();
    let _ = first.await;
    let (status, conflict) = read(retry(app, path, key, body.clone()).await).await;
    assert_eq!(
        (status, &conflict["error"]["type"]),
        (409, &json!("idempotency_error")),
        "a retry while the first runs: {conflict}"
    );
    // The work goes on without its client and its response is kept for the key.
    eventually(Duration::from_secs(20), || async {
        key_state(&db, key).await.as_deref() == Some("done")
    })
    .await;
    let kept = retry(app, path, key, body.clone()).await;
    assert_eq!(kept.headers()["idempotent-replayed"], "true");
    let (status, kept) = read(kept).await;
    let (again_status, again) = read(retry(app, path, key, body).await).await;
    assert_eq!(
        (again_status, &again),
        (status, &kept),
        "every retry replays"
    );
    json!({"status": status, "body": kept})
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

async fn a_client_that_hangs_up_during_charge_now_finds_its_charge_under_the_key(mut app: TestApp) {
    use_slow_processor(&mut app).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    eventually(Duration::from_secs(20), || async {
        count(&events(&app, &id).await, "charge.approved") == 1
    })
    .await;

    let path = format!("/v1/subscriptions/{id}/charge-now");
    let kept = hang_up_then_retry(&app, &path, "charge-now-1", None).await;
    assert_eq!(kept["status"], 200, "{kept}");
    assert_eq!(kept["body"]["status"], "approved", "{kept}");
    assert_eq!(kept["body"]["subscription_id"], id.as_str());
    // One charge for the hung-up request and its retries together.
    let events = events(&app, &id).await;
    assert_eq!(count(&events, "charge.approved"), 2, "{events:?}");
}

async fn a_client_that_hangs_up_during_a_create_finds_one_subscription_under_the_key(
    mut app: TestApp,
) {
    use_slow_processor(&mut app).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let body = json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
        "payment_method_id": method});
    let kept = hang_up_then_retry(&app, "/v1/subscriptions", "create-1", Some(body)).await;
    assert_eq!(kept["status"], 201, "{kept}");
    let sub = &kept["body"];
    let id = sub["id"].as_str().expect("id");
    assert_eq!(sub["status"], "active");
    assert_eq!(sub["next_charge_date"], sub["current_period_end"]);

    let (_, list) = read(app.get("/v1/subscriptions").await).await;
    let ids: Vec<&Value> = list["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|s| &s["id"])
        .collect();
    assert_eq!(ids, [&json!(id)], "exactly one subscription");
    let events = events(&app, id).await;
    assert_eq!(count(&events, "subscription.created"), 1, "{events:?}");
    assert_eq!(count(&events, "charge.approved"), 1, "{events:?}");
}

async fn a_direct_create_answers_the_subscription_after_its_first_charge(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id");
    assert_eq!(sub["status"], "active");
    assert_ne!(sub["next_charge_date"], sub["current_period_start"]);
    assert_eq!(sub["next_charge_date"], sub["current_period_end"]);
    // The answer is the subscription as GET shows it: its first period is paid.
    assert_eq!(get(&app, id).await, sub);
    assert_eq!(count(&events(&app, id).await, "charge.approved"), 1);
}

/// Found by `billing chaos` (seed 0x7d1 on PostgreSQL): a client that hangs up while its key's
/// claim is being written dropped the request after the claim committed and before its work
/// was handed to a task of its own, so the key stayed `running` (409 to every retry) for a day
/// with nothing running under it. Here the claim's insert is held up by another transaction
/// writing the same key, the client gives up, that transaction rolls back (so the claim
/// commits), and a retry must get the request's own answer.
async fn a_client_that_hangs_up_while_its_key_is_claimed_does_not_lock_the_key(app: TestApp) {
    app.lift_rate_limit().await;
    let db = database(&app).await;
    // The same key, written in a transaction left open: the claim's insert waits for it (on
    // SQLite, for the database's one writer; on PostgreSQL, for the row's unique index entry).
    let lock = db.begin().await.expect("begin");
    lock.execute_unprepared(&format!(
        "INSERT INTO idempotency_keys (account_id, key, request_hash, state, created_at) \
         VALUES ('{}', 'held-1', 'hash', 'done', 0)",
        app.account_id
    ))
    .await
    .expect("lock");
    let body = json!({"email": "held@example.co", "name": "Held"});
    // The client's own timeout: it gives up while the claim waits for the lock.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let first = impatient
        .post(app.url("/v1/customers"))
        .bearer_auth(&app.api_key)
        .header("Idempotency-Key", "held-1")
        .json(&body)
        .send()
        .await;
    assert!(first.is_err(), "the first client was to give up: {first:?}");
    lock.rollback().await.expect("unlock");

    // Retries answer 409 while the request runs, then its kept answer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (status, answer) = loop {
        let (status, answer) =
            read(retry(&app, "/v1/customers", "held-1", Some(body.clone())).await).await;
        if status != 409 || tokio::time::Instant::now() >= deadline {
            break (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 201, "{answer}");
    let (_, list) = read(app.get("/v1/customers?limit=100").await).await;
    let made = list["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter(|c| c["email"] == "held@example.co")
        .count();
    assert_eq!(made, 1, "one customer for the key: {list}");
}

/// Records of `count` keys created `age_ms` ago, written straight into the table.
async fn insert_keys(
    db: &DatabaseConnection,
    account: &str,
    prefix: &str,
    count: usize,
    age_ms: i64,
) {
    let created_at = chrono::Utc::now().timestamp_millis() - age_ms;
    let rows: Vec<String> = (0..count)
        .map(|i| {
            format!("('{account}', '{prefix}-{i}', 'hash', 'done', 201, '{{}}', {created_at})")
        })
        .collect();
    for chunk in rows.chunks(500) {
        db.execute_unprepared(&format!(
            "INSERT INTO idempotency_keys (account_id, key, request_hash, state, \
             response_status, response_body, created_at) VALUES {}",
            chunk.join(", ")
        ))
        .await
        .expect("insert");
    }
}

async fn count_keys(db: &DatabaseConnection, prefix: &str) -> i64 {
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            format!("SELECT COUNT(*) FROM idempotency_keys WHERE key LIKE '{prefix}-%'"),
        ))
        .await
        .expect("query")
        .expect("row");
    row.try_get_by_index::<i64>(0).expect("count")
}

async fn keys_older_than_a_day_are_purged_in_batches(app: TestApp) {
    let db = database(&app).await;
    let day_ms = 24 * 60 * 60 * 1000;
    // More than one purge batch of expired keys, and keys just inside the day.
    insert_keys(&db, &app.account_id, "expired", 2_500, day_ms + 60_000).await;
    insert_keys(&db, &app.account_id, "recent", 10, day_ms - 600_000).await;
    eventually(Duration::from_secs(30), || async {
        count_keys(&db, "expired").await == 0
    })
    .await;
    assert_eq!(count_keys(&db, "recent").await, 10);
}

/// Issue 14 (found writing the `idempotency_key` fuzz target): a key with bytes that are not
/// printable ASCII (here UTF-8) used to be unreadable as text and so silently ignored: the
/// request ran without idempotency and a retry created a second customer. It is refused now.
async fn a_key_that_is_not_printable_ascii_is_refused_not_ignored(app: TestApp) {
    let customer = json!({"email": "ana@example.co", "name": "Ana"});
    let send = |key: reqwest::header::HeaderValue| {
        app.request(Method::POST, "/v1/customers")
            .header("idempotency-key", key)
            .json(&customer)
            .send()
    };
    let utf8 = reqwest::header::HeaderValue::from_bytes("pedido-ñ-1".as_bytes()).expect("value");
    for _ in 0..2 {
        let (status, error) = read(send(utf8.clone()).await.expect("send")).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["param"], "Idempotency-Key", "{error}");
    }
    let too_long = reqwest::header::HeaderValue::from_str(&"k".repeat(256)).expect("value");
    let (status, _) = read(send(too_long).await.expect("send")).await;
    assert_eq!(status, 400);
    let longest = reqwest::header::HeaderValue::from_str(&"k".repeat(255)).expect("value");
    let first = read(send(longest.clone()).await.expect("send")).await;
    let again = read(send(longest).await.expect("send")).await;
    assert_eq!(first.0, 201, "{}", first.1);
    assert_eq!(first, again, "the replay answers the first response");
    let (_, page) = read(app.get("/v1/customers").await).await;
    assert_eq!(page["data"].as_array().map(Vec::len), Some(1), "{page}");
}

/// Issue 32, item 3: a server told to stop (SIGTERM) while a request whose client hung up
/// still runs lets that request end before it stops: the request ran in a task of its own,
/// which the shutdown used to drop, leaving its key `running` (409 for a day) and its work
/// stopped between two units. After a restart its key answers the kept response. A real
/// process, so that stopping it stops everything it runs.
async fn a_request_whose_client_hung_up_ends_before_the_server_stops(database_url: String) {
    use crate::common::process::ServerProcess;
    let server = ServerProcess::start(&database_url, "billing=info").await;
    let mut app = server.app();
    use_slow_processor(&mut app).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/subscriptions/{id}/charge-now");
    let key = "charge-now-at-shutdown";
    let db = database(&app).await;
    let first = send_in_background(&app, &path, key, None);
    eventually(Duration::from_secs(10), || async {
        key_state(&db, key).await.as_deref() == Some("running")
    })
    .await;
    first.abort();
    let _ = first.await;
    // Stopped while the charge waits at the slow processor, its client gone.
    let output = server.stop().await;

    let server = ServerProcess::start(&database_url, "billing=info").await;
    let mut again = server.app();
    again.api_key = app.api_key.clone();
    again.account_id = app.account_id.clone();
    let kept = retry(&again, &path, key, None).await;
    let replayed = kept.headers().get("idempotent-replayed").cloned();
    let (status, charge) = read(kept).await;
    assert_eq!(status, 200, "the key after a restart: {charge}");
    assert_eq!(replayed.as_ref().map(|v| v.as_bytes()), Some(&b"true"[..]));
    assert_eq!(charge["status"], "approved", "{charge}");
    assert!(
        output.contains("waiting for the requests in flight to end"),
        "{output}"
    );
    let events = events(&again, &id).await;
    assert_eq!(count(&events, "charge.approved"), 2, "{events:?}");
    server.stop().await;
}

mod drained_at_shutdown {
    use crate::common::{Backend, database_url};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        let url = database_url(Backend::Sqlite).await.expect("sqlite");
        super::a_request_whose_client_hung_up_ends_before_the_server_stops(url).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        if let Some(url) = database_url(Backend::Postgres).await {
            super::a_request_whose_client_hung_up_ends_before_the_server_stops(url).await;
        }
    }
}
