//! API keys, the admin token, and isolation between accounts.

use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::json;

crate::db_tests!(
    missing_or_wrong_key_is_401,
    admin_routes_need_the_admin_token,
    accounts_never_see_each_other,
    account_shows_processor_keys_but_no_secrets,
    sandbox_account_adopts_given_processor_keys,
);

async fn missing_or_wrong_key_is_401(app: TestApp) {
    let no_key = app
        .client
        .get(app.url("/v1/plans"))
        .send()
        .await
        .expect("send");
    let (status, body) = read(no_key).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(body["error"]["param"].is_null());

    let wrong = app
        .client
        .get(app.url("/v1/plans"))
        .bearer_auth("sk_test_nope")
        .send()
        .await
        .expect("send");
    assert_eq!(read(wrong).await.0, 401);
    let admin_token_as_key = app
        .client
        .get(app.url("/v1/plans"))
        .bearer_auth(crate::common::ADMIN_TOKEN)
        .send()
        .await
        .expect("send");
    assert_eq!(read(admin_token_as_key).await.0, 401);
}

async fn admin_routes_need_the_admin_token(app: TestApp) {
    let with_api_key = app
        .request(Method::POST, "/admin/accounts")
        .json(&json!({"name": "x", "sandbox": true}))
        .send()
        .await
        .expect("send");
    let (status, body) = read(with_api_key).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "authentication_error");

    let created = app.create_account("Second").await;
    assert!(
        created["api_key"]
            .as_str()
            .is_some_and(|k| k.starts_with("sk_test_"))
    );
    assert!(
        created["id"]
            .as_str()
            .is_some_and(|k| k.starts_with("acct_"))
    );
}

async fn accounts_never_see_each_other(app: TestApp) {
    let plan = app.create_plan("Mine", 1000, 10000).await;
    let plan_id = plan["id"].as_str().expect("id");
    let other = app.create_account("Other").await;
    let other_key = other["api_key"].as_str().expect("key");

    let get = app
        .client
        .get(app.url(&format!("/v1/plans/{plan_id}")))
        .bearer_auth(other_key)
        .send()
        .await
        .expect("send");
    let (status, body) = read(get).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "invalid_request");

    let list = app
        .client
        .get(app.url("/v1/plans"))
        .bearer_auth(other_key)
        .send()
        .await
        .expect("send");
    assert_eq!(read(list).await.1["data"], json!([]));

    let patch = app
        .client
        .patch(app.url(&format!("/v1/plans/{plan_id}")))
        .bearer_auth(other_key)
        .json(&json!({"name": "stolen"}))
        .send()
        .await
        .expect("send");
    assert_eq!(read(patch).await.0, 404);
    let (_, mine) = read(app.get(&format!("/v1/plans/{plan_id}")).await).await;
    assert_eq!(mine["name"], "Mine");
}

async fn account_shows_processor_keys_but_no_secrets(app: TestApp) {
    let (status, account) = read(app.get("/v1/account").await).await;
    assert_eq!(status, 200);
    assert_eq!(account["id"], app.account_id.as_str());
    assert!(account.get("api_key").is_none());
    assert!(
        account["processor"]["public_key"]
            .as_str()
            .is_some_and(|k| k.starts_with("pub_test_"))
    );
    assert_eq!(
        account["processor"]["base_url"],
        format!("{}/sandbox/processor/v1", app.base)
    );
    let text = account.to_string();
    assert!(!text.contains("prv_test_") && !text.contains("test_events_"));
}

async fn sandbox_account_adopts_given_processor_keys(app: TestApp) {
    let response = app
        .admin(Method::POST, "/admin/accounts")
        .json(&json!({"name": "Keys", "sandbox": true, "processor": {
            "public_key": "pub_test_given", "private_key": "prv_test_given",
            "events_secret": "test_events_given", "integrity_secret": "test_integrity_given"}}))
        .send()
        .await
        .expect("send");
    let (status, body) = read(response).await;
    assert_eq!(status, 201);
    assert_eq!(body["processor"]["public_key"], "pub_test_given");

    let mismatch = app
        .admin(Method::POST, "/admin/accounts")
        .json(&json!({"name": "Bad", "sandbox": true, "processor": {
            "public_key": "pub_prod_x", "private_key": "prv_test_x",
            "events_secret": "e", "integrity_secret": "i"}}))
        .send()
        .await
        .expect("send");
    let (status, body) = read(mismatch).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "processor.public_key");
}

/// API keys and the admin token are stored only as their SHA-256: nothing in the database's
/// files (SQLite's main file and its write-ahead log) holds either in the clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keys_and_the_admin_token_are_stored_hashed() {
    let app = crate::common::spawn_app(crate::common::Backend::Sqlite)
        .await
        .expect("sqlite app");
    // A write after the account's, so that both are on disk.
    let (status, _) = read(
        app.post(
            "/v1/customers",
            json!({"email": "a@example.co", "name": "Ana"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    let holds = |needle: &str| crate::common::sqlite_files_hold(&app, needle);
    assert!(
        holds(&billing::secrets::sha256_hex(&app.api_key)),
        "the key's hash is what is stored"
    );
    assert!(!holds(&app.api_key), "an API key is stored in the clear");
    assert!(
        !holds(crate::common::ADMIN_TOKEN),
        "the admin token is stored in the clear"
    );
}
