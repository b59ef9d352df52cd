//! The processor client against the standalone sandbox processor, both over real HTTP: the
//! protocol from tokenization to the signed `transaction.updated` event.

use crate::common::eventually;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use billing::processor::client::Transaction;
use billing::processor::client::{
    CardDetails, NewPaymentSource, NewTransaction, ProcessorClient, ProcessorCredentials,
    ProcessorError,
};
use billing::processor::outcome::ProcessorOutcome;
use billing::processor::sandbox::{AdminAuth, SandboxConfig, serve_standalone};
use billing::processor::signature::checksum_matches;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
struct Receiver {
    events: Arc<Mutex<Vec<(Value, String)>>>,
    fail_first: Arc<AtomicUsize>,
}

async fn receive(
    State(receiver): State<Receiver>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> StatusCode {
    if receiver.fail_first.load(Ordering::SeqCst) > 0 {
        receiver.fail_first.fetch_sub(1, Ordering::SeqCst);
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let header = headers
        .get("x-event-checksum")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    receiver.events.lock().expect("lock").push((body.0, header));
    StatusCode::OK
}

/// The token the standalone sandboxes of these tests are administered with.
pub(crate) const SANDBOX_ADMIN_TOKEN: &str = "sandbox-admin-token-for-tests";

/// The tests' sandbox configuration: quick to settle, quick to retry.
pub(crate) fn quick() -> SandboxConfig {
    SandboxConfig {
        settle_delay: Duration::from_millis(50),
        event_retry_delays: vec![Duration::from_millis(200); 3],
        ..SandboxConfig::default()
    }
}

/// A standalone sandbox (`serve_standalone`) on a port of its own: its base URL.
pub(crate) async fn standalone(config: SandboxConfig) -> String {
    let sandbox = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let sandbox_base = format!("http://{}/v1", sandbox.local_addr().expect("addr"));
    let admin = AdminAuth::from_token(SANDBOX_ADMIN_TOKEN);
    tokio::spawn(serve_standalone(sandbox, config, admin));
    sandbox_base
}

async fn start(receiver: Receiver) -> (String, String) {
    let sandbox_base = standalone(quick()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let receiver_url = format!("http://{}/events", listener.local_addr().expect("addr"));
    let app = axum::Router::new()
        .route("/events", post(receive))
        .with_state(receiver);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (sandbox_base, receiver_url)
}

/// A new merchant at the sandbox at `base`, made with the admin token: its credentials and
/// events secret.
pub(crate) async fn merchant(base: &str, events_url: &str) -> (ProcessorCredentials, String) {
    let response = reqwest::Client::new()
        .post(format!("{base}/_sandbox/merchants"))
        .bearer_auth(SANDBOX_ADMIN_TOKEN)
        .json(&json!({"events_url": events_url}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 201);
    let keys: Value = response.json().await.expect("json");
    let field = |name: &str| keys[name].as_str().expect(name).to_owned();
    let creds = ProcessorCredentials::new(
        base,
        field("public_key"),
        field("private_key"),
        field("integrity_secret"),
    )
    .expect("creds");
    (creds, field("events_secret"))
}

/// A transaction posted as our service posts one (card `number`), still PENDING.
pub(crate) async fn post_transaction(
    client: &ProcessorClient,
    creds: &ProcessorCredentials,
    number: &str,
    reference: &str,
) -> Transaction {
    let acceptance = client.acceptance_tokens(creds).await.expect("acceptance");
    let card = CardDetails {
        number: number.into(),
        cvc: "123".into(),
        exp_month: "12".into(),
        exp_year: "29".into(),
        card_holder: "Ana Gómez".into(),
    };
    let token = client.tokenize_card(creds, &card).await.expect("token");
    let source = client
        .create_payment_source(
            creds,
            &NewPaymentSource {
                token: token.id,
                customer_email: "a@b.co".into(),
                acceptance_token: acceptance.acceptance_token,
                accept_personal_auth: None,
            },
        )
        .await
        .expect("source");
    let tx = client
        .create_transaction(
            creds,
            &NewTransaction {
                amount_in_cents: 500_000,
                currency: "COP".into(),
                reference: reference.into(),
                payment_source_id: source.id,
                customer_email: "a@b.co".into(),
            },
        )
        .await;
    let ProcessorOutcome::Pending(tx) = tx else {
        panic!("expected a pending transaction, got {tx:?}");
    };
    tx
}

/// A transaction posted and waited for: its final status.
async fn charge(
    client: &ProcessorClient,
    creds: &ProcessorCredentials,
    number: &str,
    reference: &str,
) -> String {
    let tx = post_transaction(client, creds, number, reference).await;
    let status = || async {
        client
            .get_transaction(creds, &tx.id)
            .await
            .expect("get")
            .status
    };
    eventually(Duration::from_secs(10), || async {
        status().await != "PENDING"
    })
    .await;
    status().await
}

#[tokio::test]
async fn tokenize_to_signed_event_round_trip() {
    let receiver = Receiver::default();
    let (base, events_url) = start(receiver.clone()).await;
    let (creds, secret) = merchant(&base, &events_url).await;
    let client = ProcessorClient::new().expect("client");
    assert_eq!(
        charge(&client, &creds, "4242424242424242", "ref-approved").await,
        "APPROVED"
    );
    assert_eq!(
        charge(&client, &creds, "4111111111111111", "ref-declined").await,
        "DECLINED"
    );
    assert_eq!(
        charge(&client, &creds, "5555555555554444", "ref-error").await,
        "ERROR"
    );
    eventually(Duration::from_secs(10), || async {
        receiver.events.lock().expect("lock").len() == 3
    })
    .await;
    for (event, header) in receiver.events.lock().expect("lock").iter() {
        assert_eq!(event["event"], "transaction.updated");
        let checksum = event["signature"]["checksum"].as_str().expect("checksum");
        assert!(
            checksum_matches(event, checksum, &secret),
            "event signed with the events secret"
        );
        assert_eq!(header, checksum, "X-Event-Checksum carries the same value");
        assert!(!checksum_matches(event, checksum, "test_events_wrong"));
    }
}

#[tokio::test]
async fn a_reused_reference_returns_the_existing_transaction() {
    let (base, events_url) = start(Receiver::default()).await;
    let (creds, _) = merchant(&base, &events_url).await;
    let client = ProcessorClient::new().expect("client");
    charge(&client, &creds, "4242424242424242", "ref-once").await;
    let first = client
        .find_transaction_by_reference(&creds, "ref-once")
        .await
        .expect("find")
        .expect("exists");
    // Create again with the same reference: the sandbox answers 422 and the client finds it.
    let again = client
        .create_transaction(
            &creds,
            &NewTransaction {
                amount_in_cents: 500_000,
                currency: "COP".into(),
                reference: "ref-once".into(),
                payment_source_id: 10,
                customer_email: "a@b.co".into(),
            },
        )
        .await;
    let again = again.transaction().expect("the existing transaction");
    assert_eq!(again.id, first.id);
}

#[tokio::test]
async fn bad_keys_and_mixed_environments_are_refused() {
    let (base, events_url) = start(Receiver::default()).await;
    let (creds, _) = merchant(&base, &events_url).await;
    assert!(matches!(
        ProcessorCredentials::new(&base, "pub_test_a", "prv_prod_b", "s"),
        Err(ProcessorError::EnvironmentMismatch)
    ));
    let wrong = ProcessorCredentials::new(&base, creds.public_key.clone(), "prv_test_wrong", "s")
        .expect("creds");
    let client = ProcessorClient::new().expect("client");
    match client.find_transaction_by_reference(&wrong, "x").await {
        Err(ProcessorError::Rejected {
            status: 401,
            message,
        }) => assert!(message.contains("privada"), "{message}"),
        other => panic!("expected 401, got {other:?}"),
    }
}

#[tokio::test]
async fn events_are_retried_until_answered_200() {
    let receiver = Receiver::default();
    receiver.fail_first.store(1, Ordering::SeqCst);
    let (base, events_url) = start(receiver.clone()).await;
    let (creds, _) = merchant(&base, &events_url).await;
    let client = ProcessorClient::new().expect("client");
    charge(&client, &creds, "4242424242424242", "ref-retry").await;
    eventually(Duration::from_secs(10), || async {
        receiver.events.lock().expect("lock").len() == 1
    })
    .await;
    assert_eq!(
        receiver.fail_first.load(Ordering::SeqCst),
        0,
        "the first POST was answered 500"
    );
}
