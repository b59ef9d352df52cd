//! The sandbox processor's protocol (Wompi's, as of 2026), over real HTTP. The assertions in
//! `wire` and `money` run the same against the in-process sandbox (a spawned `TestApp`, on
//! SQLite and on PostgreSQL) and the standalone one (`serve_standalone`); the tests here drive
//! our processor client against the standalone sandbox, from tokenization to the signed
//! `transaction.updated` event.

mod money;
mod sandbox;
mod wire;

use crate::common::eventually;
use crate::common::receiver::{Receiver, Reply};
use billing::processor::client::Transaction;
use billing::processor::client::{
    CardDetails, NewPaymentSource, NewTransaction, ProcessorClient, ProcessorCredentials,
    ProcessorError, SourceKind,
};
use billing::processor::outcome::ProcessorOutcome;
use billing::processor::sandbox::{AdminAuth, SandboxConfig, serve_standalone};
use billing::processor::signature::checksum_matches;
use serde_json::{Value, json};
use std::time::Duration;

/// The token the standalone sandboxes of these tests are administered with.
pub(crate) const SANDBOX_ADMIN_TOKEN: &str = "sandbox-admin-token-for-tests";

/// The waits before an event is sent again, in the tests: Wompi's 30 minutes and 3 hours
/// compressed, still different, so that the test of the schedule sees which is which.
pub(crate) const EVENT_RETRY_DELAYS: [Duration; 2] =
    [Duration::from_millis(300), Duration::from_millis(900)];

/// The tests' sandbox configuration: quick to settle, to retry, and to approve Nequi tokens.
pub(crate) fn quick() -> SandboxConfig {
    SandboxConfig {
        settle_delay: Duration::from_millis(50),
        event_retry_delays: EVENT_RETRY_DELAYS.to_vec(),
        nequi_approval_delay: Duration::from_millis(300),
        ..SandboxConfig::default()
    }
}

/// `quick()` for the in-process sandbox (`db_tests!(config = …)`).
pub(crate) fn quick_in_process(config: &mut billing::config::Config) {
    config.sandbox = quick();
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
                kind: SourceKind::Card,
                token: token.id,
                customer_email: "a@b.co".into(),
                acceptance_token: acceptance.acceptance_token,
                accept_personal_auth: acceptance.personal_auth_token,
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
                source_kind: SourceKind::Card,
                customer_email: "a@b.co".into(),
                recurrent: true,
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
    let base = standalone(quick()).await;
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let (creds, secret) = merchant(&base, &receiver.url).await;
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
    eventually(Duration::from_secs(10), || async { receiver.count() == 3 }).await;
    for received in receiver.received() {
        let event: Value = serde_json::from_slice(&received.body).expect("json");
        assert_eq!(event["event"], "transaction.updated");
        let checksum = event["signature"]["checksum"].as_str().expect("checksum");
        assert!(
            checksum_matches(&event, checksum, &secret),
            "event signed with the events secret"
        );
        let header = received.headers.get("x-event-checksum").expect("header");
        assert_eq!(header, checksum, "X-Event-Checksum carries the same value");
        assert!(!checksum_matches(&event, checksum, "test_events_wrong"));
    }
}

#[tokio::test]
async fn a_reused_reference_returns_the_existing_transaction() {
    let base = standalone(quick()).await;
    let (creds, _) = merchant(&base, "http://127.0.0.1:9/events").await;
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
                source_kind: SourceKind::Card,
                customer_email: "a@b.co".into(),
                recurrent: true,
            },
        )
        .await;
    let again = again.transaction().expect("the existing transaction");
    assert_eq!(again.id, first.id);
}

#[tokio::test]
async fn bad_keys_and_mixed_environments_are_refused() {
    let base = standalone(quick()).await;
    let (creds, _) = merchant(&base, "http://127.0.0.1:9/events").await;
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

/// Our client's Nequi and refund calls against the standalone sandbox: a token approved in
/// the "app", a Nequi payment source, a recurrent transaction on it without
/// `payment_method`, then a refund posted, asked about by id and found among the
/// transaction's refunds.
#[tokio::test]
async fn the_client_pays_with_nequi_and_refunds_at_the_standalone_sandbox() {
    use billing::processor::refunds::NewRefund;
    let base = standalone(quick()).await;
    let (creds, _) = merchant(&base, "http://127.0.0.1:9/unused").await;
    let client = ProcessorClient::new().expect("client");
    let acceptance = client.acceptance_tokens(&creds).await.expect("acceptance");
    assert_ne!(acceptance.acceptance_token, acceptance.personal_auth_token);
    let token = client
        .tokenize_nequi(&creds, "3991111111")
        .await
        .expect("nequi token");
    assert_eq!(token.status, "PENDING");
    let mut status = token.status.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while status == "PENDING" {
        assert!(tokio::time::Instant::now() < deadline, "never approved");
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = client
            .nequi_token(&creds, &token.id)
            .await
            .expect("status")
            .status;
    }
    assert_eq!(status, "APPROVED");
    let source = client
        .create_payment_source(
            &creds,
            &NewPaymentSource {
                kind: SourceKind::Nequi,
                token: token.id,
                customer_email: "n@b.co".into(),
                acceptance_token: acceptance.acceptance_token,
                accept_personal_auth: acceptance.personal_auth_token,
            },
        )
        .await
        .expect("source");
    assert_eq!(source.kind, SourceKind::Nequi);
    assert_eq!(source.last_four.as_deref(), Some("1111"));
    assert_eq!(source.brand, None);
    let posted = client
        .create_transaction(
            &creds,
            &NewTransaction {
                amount_in_cents: 700_000,
                currency: "COP".into(),
                reference: "nequi-ref-1".into(),
                payment_source_id: source.id,
                source_kind: SourceKind::Nequi,
                customer_email: "n@b.co".into(),
                recurrent: true,
            },
        )
        .await;
    let id = posted.transaction().expect("created").id.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let approved = loop {
        let tx = client.get_transaction(&creds, &id).await.expect("lookup");
        if tx.is_final() {
            break tx;
        }
        assert!(tokio::time::Instant::now() < deadline, "never final");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(approved.status, "APPROVED");

    // Nequi refunds are total: a partial one is refused for certain.
    let partial = client
        .create_refund(
            &creds,
            &NewRefund {
                transaction_id: id.clone(),
                amount_in_cents: 100,
                reason: None,
            },
        )
        .await;
    assert!(
        matches!(partial, ProcessorOutcome::Refused(_)),
        "{partial:?}"
    );
    let refund = client
        .create_refund(
            &creds,
            &NewRefund {
                transaction_id: id.clone(),
                amount_in_cents: 700_000,
                reason: Some("requested_by_customer".into()),
            },
        )
        .await;
    let refund = refund.record().expect("accepted").clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = client.refund(&creds, &refund.id).await.expect("refund");
        if now.status != "PENDING" {
            assert_eq!(now.status, "APPROVED");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never final");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = client.refunds_of(&creds, &id).await.expect("listed");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, refund.id);
    assert_eq!(listed[0].amount_in_cents, 700_000);
}
