//! Issue 7 through HTTP: the supervision tree at `GET /admin/actors` and `billing actors`, plan
//! deletion reserved to operators, and the operational metrics.

use crate::common::{ADMIN_TOKEN, TestApp, read};
use crate::subscriptions::{advance, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    admin_actors_pages_live_actors_with_counts_per_kind_and_shard,
    billing_actors_prints_the_tree_of_a_running_server,
    a_plan_is_deleted_only_while_no_subscription_uses_it,
    metrics_count_renewals_charges_ingress_and_actors_after_a_renewal,
    the_dashboard_needs_a_login_and_deletes_plans_with_a_csrf_token,
);

async fn actors(app: &TestApp, query: &str) -> (u16, Value) {
    read(
        app.admin(Method::GET, &format!("/admin/actors{query}"))
            .send()
            .await
            .expect("send"),
    )
    .await
}

/// Three subscriptions paused through their actors, which stay live until idle.
async fn three_live_actors(app: &TestApp) -> Vec<String> {
    let (shop, method) = shop(app, "4242424242424242").await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let sub = subscribe(app, &shop, &method, json!({"trial_days": 7})).await;
        let id = sub["id"].as_str().expect("id").to_owned();
        let (status, body) = read(
            app.post(&format!("/v1/subscriptions/{id}/pause"), json!({}))
                .await,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        ids.push(id);
    }
    ids.sort();
    ids
}

async fn admin_actors_pages_live_actors_with_counts_per_kind_and_shard(app: TestApp) {
    let unauthenticated = app
        .request(Method::GET, "/admin/actors")
        .send()
        .await
        .expect("send");
    assert_eq!(
        unauthenticated.status(),
        401,
        "an API key is not the admin token"
    );
    let ids = three_live_actors(&app).await;

    let (status, tree) = actors(&app, "").await;
    assert_eq!(status, 200, "{tree}");
    assert_eq!(tree["supervisor"]["name"], "root");
    let kinds = tree["supervisor"]["kinds"].as_array().expect("kinds");
    let subs = kinds
        .iter()
        .find(|k| k["kind"] == "subscription")
        .expect("subscription kind");
    assert_eq!(subs["live"], 3, "{tree}");
    let shards = tree["supervisor"]["shards"].as_array().expect("shards");
    assert!(shards.len() > 1, "the tree is sharded");
    let per_shard: u64 = shards
        .iter()
        .map(|s| s["live"]["subscription"].as_u64().expect("count"))
        .sum();
    assert_eq!(per_shard, 3, "shard counts add up to the kind's count");

    let (_, first) = actors(&app, "?kind=subscription&limit=2").await;
    let page: Vec<&Value> = first["children"]
        .as_array()
        .expect("children")
        .iter()
        .collect();
    assert_eq!(page.len(), 2);
    assert_eq!(first["has_more"], true);
    for actor in &page {
        assert_eq!(actor["kind"], "subscription");
        assert_eq!(actor["state"], "idle");
        assert_eq!(actor["mailbox_len"], 0);
        assert_eq!(actor["restarts"], 0);
        assert!(
            actor["shard"]
                .as_str()
                .expect("shard")
                .starts_with("shard-")
        );
        assert!(actor.get("next_due_at").is_some());
    }
    let cursor = first["next_cursor"].as_str().expect("cursor");
    let (_, second) = actors(&app, &format!("?kind=subscription&limit=2&cursor={cursor}")).await;
    assert_eq!(second["has_more"], false);
    let mut seen: Vec<String> = page
        .iter()
        .copied()
        .chain(second["children"].as_array().expect("children").iter())
        .map(|a| a["id"].as_str().expect("id").to_owned())
        .collect();
    seen.sort();
    assert_eq!(seen, ids, "two pages list each live actor once");

    let (status, error) = actors(&app, "?kind=nope").await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["param"], "kind");
    let (status, _) = actors(&app, "?limit=0").await;
    assert_eq!(status, 400);
}

async fn billing_actors_prints_the_tree_of_a_running_server(app: TestApp) {
    let ids = three_live_actors(&app).await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_billing"))
        .args(["actors", "--url", &app.base])
        .env("BILLING_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .await
        .expect("run billing actors");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.starts_with("root ("), "{text}");
    assert!(text.contains("subscription: 3 live"), "{text}");
    assert!(text.contains("shard-0"), "{text}");
    for id in &ids {
        assert!(text.contains(id.as_str()), "{id} in {text}");
    }
    let refused = tokio::process::Command::new(env!("CARGO_BIN_EXE_billing"))
        .args(["actors", "--url", &app.base, "--admin-token", "wrong"])
        .output()
        .await
        .expect("run billing actors");
    assert!(!refused.status.success());
}

async fn a_plan_is_deleted_only_while_no_subscription_uses_it(app: TestApp) {
    let unused = app.create_plan("Unused", 1_000, 10_000).await;
    let unused = unused["id"].as_str().expect("id");
    let (shop, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &shop, &method, json!({"trial_days": 7})).await;

    let delete = |id: String| {
        app.admin(Method::DELETE, &format!("/admin/plans/{id}"))
            .send()
    };
    let (status, body) = read(delete(shop.plan.clone()).await.expect("send")).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request");
    let response = delete(unused.to_owned()).await.expect("send");
    assert_eq!(response.status(), 204);
    let (status, _) = read(app.get(&format!("/v1/plans/{unused}")).await).await;
    assert_eq!(status, 404);
    let (status, _) = read(delete(unused.to_owned()).await.expect("send")).await;
    assert_eq!(status, 404);
    let (status, _) = read(
        app.request(Method::DELETE, &format!("/admin/plans/{}", shop.plan))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 401, "an API key cannot delete plans");
}

async fn metrics_count_renewals_charges_ingress_and_actors_after_a_renewal(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &shop, &method, json!({"trial_days": 1})).await;
    advance(&app, 2 * 86_400).await;
    let text = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("text");
    for name in [
        "renewals_due_total",
        "renewals_processed_total",
        "charge_outcomes_total{outcome=\"approved\"}",
        "processor_request_seconds",
        "ingress_events_total",
        "webhook_deliveries_total",
        "actors_live{kind=\"subscription\"}",
        "timer_queue_depth",
        "db_transaction_seconds",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
}

/// Logs in to the dashboard; the session cookie (`name=value`).
pub(crate) async fn dashboard_login(app: &TestApp, client: &reqwest::Client) -> String {
    let response = client
        .post(app.url("/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("token", ADMIN_TOKEN)]))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 303);
    let cookie = response
        .headers()
        .get("set-cookie")
        .expect("cookie")
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    cookie.split(';').next().expect("pair").to_owned()
}

/// Logs in to the dashboard in `browser`, through the page's form.
pub(crate) async fn dashboard_login_in(browser: &crate::common::browser::Browser, app: &TestApp) {
    browser
        .client
        .goto(&app.url("/dashboard"))
        .await
        .expect("goto");
    browser.fill("#token", ADMIN_TOKEN).await;
    browser.click("#login").await;
}

/// The dashboard at `path_and_query`, as a client without redirects logged in: the page.
pub(crate) async fn dashboard_page(app: &TestApp, path_and_query: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let cookie = dashboard_login(app, &client).await;
    client
        .get(app.url(path_and_query))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("text")
}

pub(crate) fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("csrf field") + 19;
    page[at..].split('"').next().expect("value").to_owned()
}

async fn the_dashboard_needs_a_login_and_deletes_plans_with_a_csrf_token(app: TestApp) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let (shop, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &shop, &method, json!({"trial_days": 7})).await;
    let unused = app.create_plan("Spare", 1_000, 10_000).await;
    let unused = unused["id"].as_str().expect("id");

    let anonymous = client
        .get(app.url("/dashboard"))
        .send()
        .await
        .expect("send");
    let body = anonymous.text().await.expect("text");
    assert!(body.contains("Admin token"), "a login form: {body}");
    assert!(!body.contains(&shop.plan), "nothing shown before login");
    let wrong = client
        .post(app.url("/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("token", "nope")]))
        .send()
        .await
        .expect("send");
    assert_eq!(wrong.status(), 401);

    let cookie = dashboard_login(&app, &client).await;
    let page = client
        .get(app.url("/dashboard"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("send");
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .expect("csp")
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let page = page.text().await.expect("text");
    for section in [
        "id=\"actors\"",
        "id=\"accounts\"",
        "id=\"subscriptions\"",
        "id=\"plans\"",
        "id=\"deliveries\"",
        "id=\"failures\"",
    ] {
        assert!(page.contains(section), "{section}");
    }
    assert!(page.contains(&app.account_id));
    assert!(page.contains("trialing"));
    let csrf = csrf_of(&page);

    let forged = client
        .post(app.url(&format!("/dashboard/plans/{unused}/delete")))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", "forged")]))
        .send()
        .await
        .expect("send");
    assert_eq!(forged.status(), 403, "a wrong CSRF token is refused");
    let cross_origin = client
        .post(app.url(&format!("/dashboard/plans/{unused}/delete")))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf.as_str())]))
        .send()
        .await
        .expect("send");
    assert_eq!(cross_origin.status(), 403, "a cross-origin post is refused");

    let refused = client
        .post(app.url(&format!("/dashboard/plans/{}/delete", shop.plan)))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf.as_str())]))
        .send()
        .await
        .expect("send");
    assert_eq!(refused.status(), 303);
    let location = refused.headers()["location"]
        .to_str()
        .expect("location")
        .to_owned();
    assert!(location.contains("cannot+be+deleted"), "{location}");
    let (status, _) = read(app.get(&format!("/v1/plans/{}", shop.plan)).await).await;
    assert_eq!(status, 200, "a plan in use stays");

    let deleted = client
        .post(app.url(&format!("/dashboard/plans/{unused}/delete")))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf.as_str())]))
        .send()
        .await
        .expect("send");
    assert_eq!(deleted.status(), 303);
    let (status, _) = read(app.get(&format!("/v1/plans/{unused}")).await).await;
    assert_eq!(status, 404, "the unused plan is gone");
}

pub(crate) fn form_body(pairs: &[(&str, &str)]) -> String {
    serde_urlencoded::to_string(pairs).expect("form")
}

/// The dashboard in a real browser: log in through the form, see every section, delete an
/// unused plan with the page's own form. SQLite only: the page is the same on both databases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_renders_in_a_browser_and_deletes_a_plan() {
    let app = crate::common::spawn_app(crate::common::Backend::Sqlite)
        .await
        .expect("sqlite");
    let (shop, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &shop, &method, json!({"trial_days": 7})).await;
    let spare = app.create_plan("Spare", 1_000, 10_000).await;
    let spare = spare["id"].as_str().expect("id").to_owned();
    three_live_actors(&app).await;
    let Some(browser) = crate::common::browser::Browser::start_sized(1280, 1600).await else {
        return;
    };
    dashboard_login_in(&browser, &app).await;
    browser.wait_for_text("#actors", "subscription").await;
    let source = browser.client.source().await.expect("source");
    assert!(source.contains(&spare) && source.contains("trialing"));
    browser.screenshot("dashboard").await;

    browser.click(&format!("#delete-{spare}")).await;
    browser.wait_for_text("#notice", "deleted").await;
    browser.screenshot("dashboard-after-delete").await;
    let (status, _) = read(app.get(&format!("/v1/plans/{spare}")).await).await;
    assert_eq!(status, 404);
    browser.close().await;
}
