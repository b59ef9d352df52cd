//! Issue 14, point 2: which webhook URLs an account may register and reach (CONTRACT §9).
//! Live accounts never reach private addresses unless the operator says so; sandbox accounts
//! may while the server binds to loopback (as every test server does); and the address is
//! checked again when connecting, so a host name that rebinds to 127.0.0.1 after
//! registration gets nothing, and the delivery log says only `refused`.

use crate::common::receiver::{Receiver, Reply};
use crate::common::{ADMIN_TOKEN, TestApp, eventually, read};
use crate::subscriptions::{shop, subscribe};
use billing::egress::{HostResolver, Lookup, SystemResolver};
use reqwest::Method;
use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

crate::db_tests!(a_live_account_on_a_loopback_server_registers_only_public_urls);

mod allowed {
    use super::the_flag_lets_a_live_account_register_a_private_url;
    crate::db_tests!(config = crate::webhook_targets::allow_private;
        the_flag_lets_a_live_account_register_a_private_url);
}

mod rebinding {
    use super::a_name_rebound_to_loopback_after_registration_is_refused_at_delivery;
    crate::db_tests!(config = crate::webhook_targets::rebinding_without_private;
        a_name_rebound_to_loopback_after_registration_is_refused_at_delivery);
}

pub fn allow_private(config: &mut billing::config::Config) {
    config.allow_private_webhook_urls = Some(true);
}

/// No account may reach private addresses, and `rebind.example` answers a public address
/// once (the registration's check), then 127.0.0.1.
pub fn rebinding_without_private(config: &mut billing::config::Config) {
    config.allow_private_webhook_urls = Some(false);
    config.resolver = Some(Arc::new(Rebinding::default()));
}

#[derive(Default)]
struct Rebinding {
    lookups: AtomicUsize,
}

impl HostResolver for Rebinding {
    fn lookup(&self, host: &str) -> Lookup {
        if host != "rebind.example" {
            return SystemResolver.lookup(host);
        }
        let first = self.lookups.fetch_add(1, Ordering::SeqCst) == 0;
        let ip: IpAddr = if first {
            [93, 184, 215, 14].into()
        } else {
            [127, 0, 0, 1].into()
        };
        Box::pin(async move { Ok(vec![ip]) })
    }
}

/// A live account (its processor elsewhere: nothing here charges it) and its API key.
async fn live_account(app: &TestApp) -> String {
    let (status, account) = read(
        app.client
            .post(app.url("/admin/accounts"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({
                "name": "Live shop",
                "sandbox": false,
                "processor": {
                    "base_url": "https://processor.example/v1",
                    "public_key": "pub_prod_0123456789abcdef",
                    "private_key": "prv_prod_0123456789abcdef",
                    "events_secret": "prod_events_0123456789",
                    "integrity_secret": "prod_integrity_0123456789"
                }
            }))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{account}");
    account["api_key"].as_str().expect("key").to_owned()
}

async fn register(app: &TestApp, key: &str, url: &str) -> (u16, Value) {
    read(
        app.client
            .post(app.url("/v1/webhook-endpoints"))
            .bearer_auth(key)
            .json(&json!({"url": url, "events": ["*"]}))
            .send()
            .await
            .expect("send"),
    )
    .await
}

async fn a_live_account_on_a_loopback_server_registers_only_public_urls(app: TestApp) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let port = receiver.url.split(':').nth(2).expect("port");
    let port = port.trim_end_matches("/hooks");
    let live = live_account(&app).await;
    for url in [
        receiver.url.clone(),
        format!("http://localhost:{port}/hooks"),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        "http://[64:ff9b::7f00:1]/".to_owned(),
        "http://[::127.0.0.1]/".to_owned(),
        "http://[::ffff:127.0.0.1]/".to_owned(),
        "http://[2002:7f00:1::1]/".to_owned(),
        "http://[fd00::1]/".to_owned(),
    ] {
        let (status, error) = register(&app, &live, &url).await;
        assert_eq!(status, 400, "{url}: {error}");
        assert_eq!(error["error"]["param"], "url", "{error}");
    }
    // A public literal passes (no DNS needed), but cannot be changed into a private one.
    let (status, endpoint) = register(&app, &live, "http://8.8.8.8/hooks").await;
    assert_eq!(status, 201, "{endpoint}");
    let patched = app
        .client
        .request(
            Method::PATCH,
            app.url(&format!(
                "/v1/webhook-endpoints/{}",
                endpoint["id"].as_str().expect("id")
            )),
        )
        .bearer_auth(&live)
        .json(&json!({"url": receiver.url}))
        .send()
        .await
        .expect("send");
    assert_eq!(patched.status(), 400);
    // The sandbox account of the same server may: the local development setup.
    let (status, endpoint) = register(&app, &app.api_key, &receiver.url).await;
    assert_eq!(status, 201, "{endpoint}");
}

async fn the_flag_lets_a_live_account_register_a_private_url(app: TestApp) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let live = live_account(&app).await;
    let (status, endpoint) = register(&app, &live, &receiver.url).await;
    assert_eq!(status, 201, "{endpoint}");
}

async fn a_name_rebound_to_loopback_after_registration_is_refused_at_delivery(app: TestApp) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    // `false`: even the sandbox account may not name a private address outright.
    let (status, error) = register(&app, &app.api_key, &receiver.url).await;
    assert_eq!(status, 400, "{error}");
    let rebound = receiver.url.replace("127.0.0.1", "rebind.example");
    let (status, endpoint) = register(&app, &app.api_key, &rebound).await;
    assert_eq!(status, 201, "{endpoint}");
    let endpoint = endpoint["id"].as_str().expect("id").to_owned();

    let (shop, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &shop, &method, json!({})).await;
    let log = async || {
        let (status, page) = read(
            app.get(&format!("/v1/webhook-endpoints/{endpoint}/deliveries"))
                .await,
        )
        .await;
        assert_eq!(status, 200, "{page}");
        page["data"].as_array().expect("data").clone()
    };
    eventually(Duration::from_secs(20), || async {
        let deliveries = log().await;
        !deliveries.is_empty()
            && deliveries
                .iter()
                .all(|d| !d["attempts"].as_array().expect("attempts").is_empty())
    })
    .await;
    // Exactly `refused`: no address, no port, no status that would map our network.
    for delivery in log().await {
        for attempt in delivery["attempts"].as_array().expect("attempts") {
            assert_eq!(attempt["error"], "refused", "{delivery}");
            assert!(attempt["status_code"].is_null(), "{delivery}");
        }
    }
    assert_eq!(receiver.count(), 0, "nothing reached the local receiver");
}
