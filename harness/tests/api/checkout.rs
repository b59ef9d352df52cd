//! Issue 6 through HTTP: checkout sessions (create, read, status and its limit, expiry) and the
//! hosted page's HTML. Paying is in `checkout_payment.rs`, the page in a browser in
//! `checkout_browser.rs`.

use crate::checkout_payment::pay;
use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    create_and_read_a_session,
    create_rejects_what_the_contract_rejects,
    idempotent_create_returns_the_same_session,
    the_21st_status_call_in_a_minute_is_rate_limited,
    sessions_expire_on_the_account_clock,
    the_page_speaks_the_browsers_language_and_loads_nothing_from_elsewhere,
);

/// A plan (49,900.00 COP a month) and, with `balance`, a fee balance to charge against.
pub(crate) async fn plan(app: &TestApp, balance: bool) -> String {
    if balance {
        app.top_up(10_000_000).await;
    }
    app.create_plan("Pro", 4_990_000, 49_900_000).await["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

pub(crate) async fn new_session(app: &TestApp, plan: &str, extra: Value) -> Value {
    let mut body = json!({"plan_id": plan, "cycle": "monthly",
        "customer": {"email": "ana@example.co", "name": "Ana Gómez"}});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (status, session) = read(app.post("/v1/checkout-sessions", body).await).await;
    assert_eq!(status, 201, "{session}");
    session
}

/// Pays `session` with the card `number`, as the hosted page does.
pub(crate) async fn count(app: &TestApp, path: &str) -> usize {
    let (status, body) = read(app.get(path).await).await;
    assert_eq!(status, 200, "{path}: {body}");
    body["data"].as_array().expect("data").len()
}

pub(crate) async fn session_status(app: &TestApp, id: &str) -> Value {
    let (status, body) = read(app.get(&format!("/v1/checkout-sessions/{id}")).await).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn create_and_read_a_session(app: TestApp) {
    let plan = plan(&app, false).await;
    let session = new_session(
        &app,
        &plan,
        json!({"success_url": "https://shop.example/thanks", "metadata": {"order": "A-1"}}),
    )
    .await;
    let id = session["id"].as_str().expect("id");
    assert!(id.starts_with("cs_"));
    assert_eq!(session["url"], format!("{}/checkout/{id}", app.base));
    let got = session_status(&app, id).await;
    for field in [
        "id",
        "url",
        "status",
        "plan_id",
        "cycle",
        "metadata",
        "success_url",
    ] {
        assert_eq!(got[field], session[field], "{field}");
    }
    assert_eq!(got["status"], "open");
    assert_eq!(got["subscription_id"], Value::Null);
    assert_eq!(got["amount_in_cents"], 4_990_000);
    assert_eq!(got["currency"], "COP");
    // 24 h by default, in the account's clock.
    let created = chrono::DateTime::parse_from_rfc3339(got["created_at"].as_str().expect("at"));
    let expires = chrono::DateTime::parse_from_rfc3339(got["expires_at"].as_str().expect("at"));
    assert_eq!(
        (expires.expect("rfc") - created.expect("rfc")).num_seconds(),
        86_400
    );
    let (status, light) = read(app.get(&format!("/v1/checkout-sessions/{id}/status")).await).await;
    assert_eq!(status, 200);
    assert_eq!(
        light,
        json!({"id": id, "status": "open", "subscription_id": null})
    );
    let (status, list) = read(app.get("/v1/checkout-sessions?status=open").await).await;
    assert_eq!(status, 200);
    assert_eq!(list["data"][0]["id"], id);
    assert_eq!(list["has_more"], false);
    assert_eq!(
        count(&app, "/v1/checkout-sessions?status=complete").await,
        0
    );
    let (status, _) = read(app.get("/v1/checkout-sessions?status=paid").await).await;
    assert_eq!(status, 400);
    // Another account's key sees nothing.
    let other = app.create_account("Other").await;
    let response = app
        .client
        .get(app.url(&format!("/v1/checkout-sessions/{id}")))
        .bearer_auth(other["api_key"].as_str().expect("key"))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 404);
    let response = app
        .client
        .get(app.url("/v1/checkout-sessions"))
        .bearer_auth(other["api_key"].as_str().expect("key"))
        .send()
        .await
        .expect("send");
    let (_, list) = read(response).await;
    assert_eq!(list["data"], json!([]));
}

async fn create_rejects_what_the_contract_rejects(app: TestApp) {
    let plan = plan(&app, false).await;
    let customer = json!({"email": "ana@example.co", "name": "Ana"});
    let cases = [
        (
            json!({"plan_id": "nope", "cycle": "monthly", "customer": customer}),
            400,
            "plan_id",
        ),
        (
            json!({"plan_id": 7, "cycle": "monthly", "customer": customer}),
            400,
            "plan_id",
        ),
        (
            json!({"plan_id": "plan_unknown", "cycle": "monthly", "customer": customer}),
            404,
            "plan_id",
        ),
        (
            json!({"plan_id": plan, "cycle": "weekly", "customer": customer}),
            400,
            "cycle",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly"}),
            400,
            "customer",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer": customer, "customer_id": "cus_x"}),
            400,
            "customer_id",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer_id": "cus_unknown"}),
            404,
            "customer_id",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer": {"email": "nope", "name": "Ana"}}),
            400,
            "customer.email",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer": customer, "success_url": "javascript:alert(1)"}),
            400,
            "success_url",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer": customer, "cancel_url": "/relative"}),
            400,
            "cancel_url",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer": customer, "expires_in_seconds": 60}),
            400,
            "expires_in_seconds",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer": customer, "expires_in_seconds": 90_000}),
            400,
            "expires_in_seconds",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer": customer, "metadata": {"big": "x".repeat(61_440)}}),
            400,
            "metadata",
        ),
        (
            json!({"plan_id": plan, "cycle": "monthly", "customer": customer, "colour": "red"}),
            400,
            "colour",
        ),
    ];
    for (body, expected, param) in cases {
        let (status, error) = read(app.post("/v1/checkout-sessions", body.clone()).await).await;
        assert_eq!(status, expected, "{body}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request", "{error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
    // An inactive plan cannot be sold.
    let (status, _) = read(
        app.request(Method::PATCH, &format!("/v1/plans/{plan}"))
            .json(&json!({"active": false}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = read(
        app.post(
            "/v1/checkout-sessions",
            json!({"plan_id": plan, "cycle": "monthly", "customer": customer}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    for path in [
        "/v1/checkout-sessions/cs_unknown",
        "/v1/checkout-sessions/cs_unknown/status",
    ] {
        let (status, error) = read(app.get(path).await).await;
        assert_eq!(
            (status, &error["error"]["type"]),
            (404, &json!("invalid_request"))
        );
    }
}

async fn idempotent_create_returns_the_same_session(app: TestApp) {
    let plan = plan(&app, false).await;
    let body = json!({"plan_id": plan, "cycle": "annual", "customer": {"email": "ana@example.co", "name": "Ana"}});
    let send = |body: Value| {
        app.request(Method::POST, "/v1/checkout-sessions")
            .header("Idempotency-Key", "order-77")
            .json(&body)
            .send()
    };
    let first = send(body.clone()).await.expect("send");
    assert_eq!(first.status(), 201);
    let (_, first) = read(first).await;
    let retry = send(body.clone()).await.expect("send");
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let (_, retry) = read(retry).await;
    assert_eq!(retry["id"], first["id"]);
    assert_eq!(retry["url"], first["url"]);
    assert_eq!(first["amount_in_cents"], 49_900_000);
    let mut other = body;
    other["cycle"] = json!("monthly");
    let (status, error) = read(send(other).await.expect("send")).await;
    assert_eq!(
        (status, &error["error"]["type"]),
        (400, &json!("idempotency_error"))
    );
}

async fn the_21st_status_call_in_a_minute_is_rate_limited(app: TestApp) {
    let plan = plan(&app, false).await;
    let id = new_session(&app, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let path = format!("/v1/checkout-sessions/{id}/status");
    for i in 0..20 {
        assert_eq!(app.get(&path).await.status(), 200, "call {}", i + 1);
    }
    let response = app.get(&path).await;
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    let (_, error) = read(response).await;
    assert_eq!(error["error"]["type"], "rate_limit");
    // Only the status route has the extra limit.
    assert_eq!(
        app.get(&format!("/v1/checkout-sessions/{id}"))
            .await
            .status(),
        200
    );
}

async fn sessions_expire_on_the_account_clock(app: TestApp) {
    let plan = plan(&app, true).await;
    let id = new_session(
        &app,
        &plan,
        json!({"expires_in_seconds": 1800, "cancel_url": "https://shop.example/cart"}),
    )
    .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let advance = |seconds: i64| {
        app.post(
            "/v1/test-helpers/clock/advance",
            json!({"seconds": seconds}),
        )
    };
    assert_eq!(advance(1790).await.status(), 200);
    assert_eq!(session_status(&app, &id).await["status"], "open");
    assert_eq!(advance(11).await.status(), 200);
    assert_eq!(count(&app, "/v1/checkout-sessions?status=expired").await, 1);
    assert_eq!(session_status(&app, &id).await["status"], "expired");
    let (_, light) = read(app.get(&format!("/v1/checkout-sessions/{id}/status")).await).await;
    assert_eq!(light["status"], "expired");
    let (status, error) = pay(&app, &id, "4242424242424242").await;
    assert_eq!(status, 409, "{error}");
    assert_eq!(count(&app, "/v1/subscriptions").await, 0);
    let page = app
        .client
        .get(app.url(&format!("/checkout/{id}?lang=en")))
        .send()
        .await
        .expect("send");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("html");
    assert!(html.contains("This checkout session has expired"), "{html}");
    assert!(
        html.contains("href=\"https://shop.example/cart\""),
        "{html}"
    );
}

async fn the_page_speaks_the_browsers_language_and_loads_nothing_from_elsewhere(app: TestApp) {
    let plan = plan(&app, false).await;
    let id = new_session(
        &app,
        &plan,
        json!({"cancel_url": "https://shop.example/cart"}),
    )
    .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let get = |language: &str| {
        app.client
            .get(app.url(&format!("/checkout/{id}")))
            .header("Accept-Language", language)
            .send()
    };
    let spanish = get("es-CO,es;q=0.9,en;q=0.5").await.expect("send");
    assert_eq!(spanish.status(), 200);
    let policy = spanish.headers()["content-security-policy"]
        .to_str()
        .expect("csp")
        .to_owned();
    assert!(
        policy.contains("default-src 'none'") && policy.contains("script-src 'self'"),
        "{policy}"
    );
    let spanish = spanish.text().await.expect("html");
    assert!(spanish.contains("<html lang=\"es\">"));
    assert!(
        spanish.contains("$ 49.900,00 COP")
            && spanish.contains("Mensual")
            && spanish.contains("Número de tarjeta")
    );
    assert!(spanish.contains("href=\"https://shop.example/cart\""));
    let english = get("en-US,en;q=0.9")
        .await
        .expect("send")
        .text()
        .await
        .expect("html");
    assert!(english.contains("<html lang=\"en\">"));
    assert!(
        english.contains("COP 49,900.00")
            && english.contains("Monthly")
            && english.contains("Card number")
    );
    // Every asset is ours: relative stylesheet and script, no other origin.
    for html in [&spanish, &english] {
        assert!(html.contains("<link rel=\"stylesheet\" href=\"assets/checkout.css\">"));
        assert!(html.contains("<script src=\"assets/checkout.js\" defer></script>"));
        assert!(
            !html.contains("src=\"http") && !html.contains("href=\"//"),
            "{html}"
        );
    }
    for (asset, kind) in [
        ("checkout.js", "text/javascript"),
        ("checkout.css", "text/css"),
    ] {
        let response = app
            .client
            .get(app.url(&format!("/checkout/assets/{asset}")))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .expect("type")
                .starts_with(kind)
        );
    }
    let missing = app
        .client
        .get(app.url("/checkout/cs_unknown"))
        .send()
        .await
        .expect("send");
    assert_eq!(missing.status(), 404);
    assert!(
        missing
            .text()
            .await
            .expect("html")
            .contains("Sesión de pago no encontrada")
    );
}
