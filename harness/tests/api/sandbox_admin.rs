//! Issue 14, the sandbox processor: its administration behind the admin token, its
//! transactions behind their merchant's private key, its events never redirected, its memory
//! bounded. In-process (`spawn_app`) and standalone (`serve_standalone`), over real HTTP.

use crate::common::receiver::{Receiver, Reply};
use crate::common::{ADMIN_TOKEN, TestApp, eventually, read};
use crate::protocol::{SANDBOX_ADMIN_TOKEN, post_transaction, quick, standalone};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use billing::ids::AccountId;
use billing::processor::client::{ProcessorClient, ProcessorCredentials, ProcessorError};
use billing::processor::sandbox::SandboxConfig;
use billing::store::Store;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

crate::db_tests!(
    in_process_administration_requires_the_servers_admin_token,
    nobody_without_the_token_takes_over_an_accounts_events,
);

/// POSTs `body` to `{base}/_sandbox/merchants`, with `token` as Bearer when given.
async fn admin_post(base: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/_sandbox/merchants"))
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    read(request.send().await.expect("send")).await
}

fn assert_unauthorized((status, body): (u16, Value)) {
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        body["error"]["type"], "INVALID_ACCESS_TOKEN",
        "Wompi's shape: {body}"
    );
}

/// Keys no merchant has yet.
fn fresh_keys() -> Value {
    let unique = uuid::Uuid::new_v4().simple().to_string();
    json!({"public_key": format!("pub_test_{unique}"), "private_key": format!("prv_test_{unique}"),
        "events_secret": format!("test_events_{unique}"), "integrity_secret": format!("test_integrity_{unique}")})
}

/// Whether the sandbox at `base` knows a merchant with this public key.
async fn knows(base: &str, public_key: &str) -> bool {
    let response = reqwest::Client::new()
        .get(format!("{base}/merchants/info"))
        .header("x-merchant-public-key", public_key)
        .send()
        .await
        .expect("send");
    response.status() == 200
}

/// The administration refuses everyone but the holder of `token` (401, nothing made), and
/// makes a merchant for the holder (201).
async fn only_the_token_administers(base: &str, token: &str, not_the_token: &[&str]) {
    let attacker = Receiver::start(&[], Reply::Status(200)).await;
    let mut body = fresh_keys();
    body["events_url"] = json!(attacker.url);
    assert_unauthorized(admin_post(base, None, &body).await);
    for wrong in not_the_token {
        assert_unauthorized(admin_post(base, Some(wrong), &body).await);
    }
    // A wrong method is refused before it is routed.
    let get = reqwest::get(format!("{base}/_sandbox/merchants"))
        .await
        .expect("send");
    assert_eq!(get.status(), 401);
    let public_key = body["public_key"].as_str().expect("key");
    assert!(
        !knows(base, public_key).await,
        "an anonymous post made nothing"
    );
    let (status, made) = admin_post(base, Some(token), &body).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["public_key"], public_key);
    assert!(knows(base, public_key).await);
}

async fn in_process_administration_requires_the_servers_admin_token(app: TestApp) {
    let base = app.url("/sandbox/processor/v1");
    // An integrator's API key is not the admin token.
    only_the_token_administers(&base, ADMIN_TOKEN, &[&app.api_key, "wrong"]).await;
}

#[tokio::test]
async fn standalone_administration_requires_its_own_token() {
    let base = standalone(quick()).await;
    // The server's admin token is not the standalone sandbox's.
    only_the_token_administers(&base, SANDBOX_ADMIN_TOKEN, &[ADMIN_TOKEN, "wrong"]).await;
}

/// The account's public key is on every checkout page: posting it with an attacker's events
/// URL is refused, and the account's charges still settle through its own ingress.
async fn nobody_without_the_token_takes_over_an_accounts_events(app: TestApp) {
    let (_, account) = read(app.get("/v1/account").await).await;
    let public_key = account["processor"]["public_key"].as_str().expect("key");
    let attacker = Receiver::start(&[], Reply::Status(200)).await;
    let base = app.url("/sandbox/processor/v1");
    let takeover = json!({"public_key": public_key, "events_url": attacker.url});
    assert_unauthorized(admin_post(&base, None, &takeover).await);
    assert_unauthorized(admin_post(&base, Some(&app.api_key), &takeover).await);

    let (shop, method) = crate::subscriptions::shop(&app, "4242424242424242").await;
    let sub = crate::subscriptions::subscribe(&app, &shop, &method, json!({})).await;
    assert_eq!(sub["status"], "active", "{sub}");
    let store = Store::connect(&app.database_url).await.expect("store");
    let account = AccountId::parse(&app.account_id).expect("an account's id");
    eventually(Duration::from_secs(10), || async {
        store.count_processor_events(&account).await.expect("db") >= 1
    })
    .await;
    assert_eq!(attacker.count(), 0, "no event went to the attacker");
}

/// A merchant made with the token: its credentials and its private key.
async fn merchant(base: &str, events_url: Option<&str>) -> (ProcessorCredentials, String) {
    let mut body = fresh_keys();
    body["events_url"] = json!(events_url);
    let (status, keys) = admin_post(base, Some(SANDBOX_ADMIN_TOKEN), &body).await;
    assert_eq!(status, 201, "{keys}");
    let key = |name: &str| keys[name].as_str().expect(name).to_owned();
    let creds = ProcessorCredentials::new(
        base,
        key("public_key"),
        key("private_key"),
        key("integrity_secret"),
    )
    .expect("creds");
    (creds, key("private_key"))
}

#[tokio::test]
async fn a_transaction_is_read_only_with_its_merchants_private_key() {
    let base = standalone(quick()).await;
    let (mine, my_private_key) = merchant(&base, None).await;
    let (_, their_private_key) = merchant(&base, None).await;
    let client = ProcessorClient::new().expect("client");
    let tx = post_transaction(&client, &mine, "4242424242424242", "ref-mine").await;
    let url = format!("{base}/transactions/{}", tx.id);
    let get = |key: Option<String>| {
        let url = url.clone();
        async move {
            let mut request = reqwest::Client::new().get(url);
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            read(request.send().await.expect("send")).await
        }
    };
    assert_unauthorized(get(None).await);
    assert_unauthorized(get(Some(mine.public_key.clone())).await);
    let (status, body) = get(Some(their_private_key)).await;
    assert_eq!(status, 404, "another merchant's transaction: {body}");
    let (status, body) = get(Some(my_private_key)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["id"], tx.id);
}

#[tokio::test]
async fn events_never_follow_a_redirect() {
    // The events URL answers its first POST with a redirect to another receiver, then 200.
    let elsewhere = Receiver::start(&[], Reply::Status(200)).await;
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let location = elsewhere.url.clone();
    let redirecting = axum::Router::new().fallback(move || {
        let (hits, location) = (Arc::clone(&counted), location.clone());
        async move {
            if hits.fetch_add(1, Ordering::SeqCst) == 0 {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, location)],
                )
                    .into_response()
            } else {
                StatusCode::OK.into_response()
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let events_url = format!("http://{}/events", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, redirecting).await });

    let base = standalone(SandboxConfig {
        event_retry_delays: vec![Duration::from_millis(100)],
        ..quick()
    })
    .await;
    let (creds, _) = merchant(&base, Some(&events_url)).await;
    let client = ProcessorClient::new().expect("client");
    post_transaction(&client, &creds, "4242424242424242", "ref-redirected").await;
    // A followed redirect would have ended the delivery at `elsewhere`; unfollowed, the 307
    // is an answer that is not 200, and the retry comes back to the events URL.
    eventually(Duration::from_secs(10), || async {
        hits.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(elsewhere.count(), 0, "the redirect was not followed");
}

#[tokio::test]
async fn transactions_past_their_retention_are_pruned_with_their_reference() {
    // A retention of zero: each transaction is kept until the next one is made.
    let base = standalone(SandboxConfig {
        retention: Duration::ZERO,
        ..quick()
    })
    .await;
    let (creds, _) = merchant(&base, None).await;
    let client = ProcessorClient::new().expect("client");
    let first = post_transaction(&client, &creds, "4242424242424242", "ref-first").await;
    let second = post_transaction(&client, &creds, "4242424242424242", "ref-second").await;
    match client.get_transaction(&creds, &first.id).await {
        Err(ProcessorError::Rejected { status: 404, .. }) => {}
        other => panic!("expected the first transaction pruned, got {other:?}"),
    }
    let by_reference = client
        .find_transaction_by_reference(&creds, "ref-first")
        .await
        .expect("find");
    assert!(by_reference.is_none(), "its reference went with it");
    let kept = client
        .get_transaction(&creds, &second.id)
        .await
        .expect("kept");
    assert_eq!(kept.reference, "ref-second");
    // The reference is free again, as at a processor that never saw it.
    let again = post_transaction(&client, &creds, "4242424242424242", "ref-first").await;
    assert_ne!(again.id, first.id);
}

#[tokio::test]
async fn the_administration_makes_at_most_max_merchants() {
    let base = standalone(SandboxConfig {
        max_merchants: 1,
        ..quick()
    })
    .await;
    let first = fresh_keys();
    let (status, _) = admin_post(&base, Some(SANDBOX_ADMIN_TOKEN), &first).await;
    assert_eq!(status, 201);
    let (status, body) = admin_post(&base, Some(SANDBOX_ADMIN_TOKEN), &fresh_keys()).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["type"], "CONFLICT_ERROR");
    // The one there may still be pointed elsewhere, with its own keys only.
    let mut moved = first.clone();
    moved["events_url"] = json!("http://127.0.0.1:9/events");
    let (status, body) = admin_post(&base, Some(SANDBOX_ADMIN_TOKEN), &moved).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["events_url"], "http://127.0.0.1:9/events");
    moved["private_key"] = json!("prv_test_not_its_key");
    let (status, body) = admin_post(&base, Some(SANDBOX_ADMIN_TOKEN), &moved).await;
    assert_eq!(status, 409, "{body}");
}
