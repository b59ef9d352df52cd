//! Issue 14, point 5: no secret reaches the log. The real binary runs a whole scenario with
//! `RUST_LOG=trace` (an account with processor keys the test chose, a card tokenized at the
//! in-process sandbox, a subscription renewed by the test clock, webhooks delivered and
//! signed, the dashboard's login, failed authentications, DIAN turned on with a certificate
//! and a range, an invoice signed and accepted); everything it wrote to stdout and
//! stderr is then searched for every credential it was given or made.

use crate::common::process::ServerProcess;
use crate::common::receiver::{Receiver, Reply, signature_is_valid};
use crate::common::{ADMIN_TOKEN, Backend, database_url, eventually, read};
use crate::subscriptions::{advance, events, shop, subscribe};
use billing::secrets::random_token;
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

async fn a_traced_scenario_logs_no_secret(backend: Backend) {
    let Some(url) = database_url(backend).await else {
        return;
    };
    // A database password, which the server must not log either. The test server trusts
    // local connections, so one made up here is sent only if asked for.
    let (url, database_password) = with_password(url);
    let server = ServerProcess::start(&url, "trace").await;
    let mut app = server.app();
    let private_key = random_token("prv_test_", 32);
    let events_secret = random_token("test_events_", 32);
    let integrity_secret = random_token("test_integrity_", 32);
    let (status, account) = read(
        app.admin(Method::POST, "/admin/accounts")
            .json(
                &json!({"name": "Logged", "sandbox": true, "rate_limit_per_minute": 0,
                "processor": {"public_key": random_token("pub_test_", 32),
                    "private_key": private_key, "events_secret": events_secret,
                    "integrity_secret": integrity_secret}}),
            )
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{account}");
    app.api_key = account["api_key"].as_str().expect("api_key").to_owned();
    app.account_id = account["id"].as_str().expect("id").to_owned();

    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let (status, endpoint) = read(
        app.post(
            "/v1/webhook-endpoints",
            json!({"url": receiver.url, "events": ["*"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{endpoint}");
    let webhook_secret = endpoint["secret"].as_str().expect("secret").to_owned();

    // DIAN on: its PIN, certificate and password, and the range's technical key, are secrets
    // too; the invoice is signed and sent before the log is read.
    let made = crate::dian::make_certificate();
    if let Some(made) = &made {
        crate::dian::turn_dian_on(&app, made).await;
        crate::dian::add_range(&app, 1, 1000).await;
    }
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    assert_eq!(sub["status"], "active", "{sub}");
    if made.is_some() {
        let invoice = crate::dian::invoice_of(&app, &id).await;
        let path = format!("/v1/invoices/{}", invoice["id"].as_str().expect("id"));
        let done = crate::dian::settled_dian(&app, &path).await;
        assert_eq!(done["dian"]["status"], "accepted", "{done}");
    }
    advance(&app, 32 * 86_400).await;
    let approved = |events: &[serde_json::Value]| {
        events
            .iter()
            .filter(|e| e["type"] == "charge.approved")
            .count()
    };
    assert_eq!(
        approved(&events(&app, &id).await),
        2,
        "the renewal was charged"
    );
    let expected = events(&app, &id).await.len();
    eventually(Duration::from_secs(30), || async {
        receiver.count() >= expected
    })
    .await;
    assert!(
        receiver
            .received()
            .iter()
            .all(|delivery| signature_is_valid(&webhook_secret, delivery))
    );

    // The credentials also travel in a form body and in refused requests.
    let login = app
        .client
        .post(app.url("/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("token", ADMIN_TOKEN)]).expect("form"))
        .send()
        .await
        .expect("send");
    assert!(login.status().is_success(), "{}", login.status());
    let wrong_key = format!("{}x", app.api_key);
    for key in [wrong_key.as_str(), &app.api_key[..app.api_key.len() - 1]] {
        let refused = app
            .client
            .get(app.url("/v1/plans"))
            .bearer_auth(key)
            .send()
            .await
            .expect("send");
        assert_eq!(refused.status(), 401);
    }

    // The account the first start made (its key is shown once, on purpose); its processor
    // secrets are no more loggable than the test's.
    let store = billing::store::Store::connect(&url).await.expect("store");
    let first = store
        .all_accounts()
        .await
        .expect("accounts")
        .into_iter()
        .find(|a| a.id.as_str() != app.account_id)
        .expect("the first start's sandbox account");
    let output = server.stop().await;
    assert!(output.contains("TRACE"), "the server logged at trace level");

    let secrets = [
        ("the account's API key", app.api_key.clone()),
        ("the admin token", ADMIN_TOKEN.to_owned()),
        ("the webhook secret", webhook_secret),
        ("the processor private key", private_key),
        ("the processor events secret", events_secret),
        ("the processor integrity secret", integrity_secret),
        (
            "the first account's private key",
            first.processor_private_key.expose().to_owned(),
        ),
        (
            "the first account's events secret",
            first.processor_events_secret.expose().to_owned(),
        ),
        (
            "the first account's integrity secret",
            first.processor_integrity_secret.expose().to_owned(),
        ),
    ];
    let dian = made.iter().flat_map(|made| {
        [
            ("the DIAN software PIN", crate::dian::PIN.to_owned()),
            (
                "the certificate's password",
                crate::dian::PASSWORD.to_owned(),
            ),
            (
                "the range's technical key",
                crate::dian::TECHNICAL_KEY.to_owned(),
            ),
            (
                "the PKCS#12 file",
                made.p12_base64.chars().take(64).collect(),
            ),
        ]
    });
    let secrets = secrets
        .into_iter()
        .chain(dian)
        .chain(database_password.map(|password| ("the database password", password)));
    let leaks: Vec<String> = secrets
        .filter_map(|(what, secret)| {
            let line = output.lines().find(|line| line.contains(secret.as_str()))?;
            let shown: String = line.chars().take(400).collect();
            Some(format!("{what} in: {shown}"))
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "secrets in the log:\n{}",
        leaks.join("\n")
    );
}

/// A PostgreSQL URL with a password (made up unless it has one); SQLite's has none.
fn with_password(url: String) -> (String, Option<String>) {
    if !url.starts_with("postgres") {
        return (url, None);
    }
    let mut parsed = url::Url::parse(&url).expect("database url");
    if let Some(password) = parsed.password() {
        let password = password.to_owned();
        return (url, Some(password));
    }
    let password = random_token("dbpass", 24);
    parsed.set_password(Some(&password)).expect("password");
    (parsed.to_string(), Some(password))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_traced_scenario_logs_no_secret() {
    a_traced_scenario_logs_no_secret(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_traced_scenario_logs_no_secret() {
    a_traced_scenario_logs_no_secret(Backend::Postgres).await;
}
