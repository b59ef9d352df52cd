//! The customer portal through HTTP (CONTRACT §13), on both databases: sessions and their
//! token's scope, the configuration and its merge, and each action as the API's (the same
//! rules, events and Idempotency-Keys), recorded with the session it came from.
//! `portal_browser.rs` walks the page in Chromium.

use crate::common::{TestApp, assert_invariants, card_token, read};
use crate::subscriptions::{Shop, advance, events, get, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    a_session_opens_for_an_hour_and_its_token_reaches_its_customer_only,
    a_session_refuses_what_is_not_the_customers_or_not_offered,
    the_configuration_merges_and_applies_to_sessions_opened_before,
    cancelling_asks_the_configuration_when_and_records_the_reason,
    a_new_card_in_past_due_is_charged_at_once_and_the_subscription_recovers,
    a_plan_switch_previews_then_charges_what_the_preview_said,
    the_customer_edits_their_invoicing_data_and_a_bad_nit_is_refused,
    a_repeated_action_with_its_idempotency_key_happens_once,
    each_session_has_the_accounts_rate_limit_of_its_own,
);

const DAY: i64 = 86_400;

/// A portal session for `customer` (with `extra` fields): its body.
pub(crate) async fn open(app: &TestApp, customer: &str, extra: Value) -> Value {
    let mut body = json!({"customer_id": customer});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (status, session) = read(app.post("/v1/portal-sessions", body).await).await;
    assert_eq!(status, 201, "{session}");
    session
}

/// The path part of a session's URL: `/portal/bpt_…`.
pub(crate) fn path_of(app: &TestApp, session: &Value) -> String {
    let url = session["url"].as_str().expect("url");
    url.strip_prefix(&app.base)
        .expect("the url is ours")
        .to_owned()
}

/// A request to the portal's JSON, with no API key: the token in the path is the credential.
fn portal(app: &TestApp, method: Method, path: &str) -> reqwest::RequestBuilder {
    app.client.request(method, app.url(path))
}

async fn portal_json(
    app: &TestApp,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = portal(app, method, path);
    if let Some(body) = body {
        request = request.json(&body);
    }
    read(request.send().await.expect("send")).await
}

async fn configure(app: &TestApp, patch: Value) -> Value {
    let (status, body) = read(
        app.request(Method::PATCH, "/v1/account/portal")
            .json(&patch)
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

/// Another customer of the same account, with a subscription of their own.
async fn stranger(app: &TestApp, shop: &Shop) -> (String, String) {
    let (_, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": "otro@example.co", "name": "Otro"}),
        )
        .await,
    )
    .await;
    let token = card_token(app, "4242424242424242").await;
    let (_, method) = read(
        app.post(
            &format!("/v1/customers/{}/payment-methods", id(&customer)),
            token.payment_method(),
        )
        .await,
    )
    .await;
    let theirs = Shop {
        customer: id(&customer),
        plan: shop.plan.clone(),
    };
    let sub = subscribe(app, &theirs, &id(&method), json!({})).await;
    (id(&customer), id(&sub))
}

async fn a_session_opens_for_an_hour_and_its_token_reaches_its_customer_only(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let (other_customer, other_sub) = stranger(&app, &shop).await;
    advance(&app, 60).await;
    let session = open(
        &app,
        &shop.customer,
        json!({"return_url": "https://shop.example.co/cuenta"}),
    )
    .await;
    assert!(id(&session).starts_with("bps_"), "{session}");
    assert_eq!(session["customer_id"], shop.customer.as_str());
    assert_eq!(session["return_url"], "https://shop.example.co/cuenta");
    let created = chrono::DateTime::parse_from_rfc3339(session["created_at"].as_str().expect("at"))
        .expect("rfc3339");
    let expires = chrono::DateTime::parse_from_rfc3339(session["expires_at"].as_str().expect("at"))
        .expect("rfc3339");
    assert_eq!((expires - created).num_seconds(), 3600);
    let base = path_of(&app, &session);
    assert!(base.starts_with("/portal/bpt_"), "{base}");

    let (status, data) =
        portal_json(&app, Method::GET, &format!("{base}/api/customer"), None).await;
    assert_eq!(status, 200, "{data}");
    assert_eq!(data["customer"]["id"], shop.customer.as_str());
    assert_eq!(
        data["customer"]["metadata"],
        Value::Null,
        "the merchant's metadata stays theirs"
    );
    let subs: Vec<&str> = data["subscriptions"]
        .as_array()
        .expect("array")
        .iter()
        .map(|s| s["id"].as_str().expect("id"))
        .collect();
    assert_eq!(subs, [sub["id"].as_str().expect("id")]);
    assert_eq!(data["payment_methods"][0]["id"], method.as_str());
    let invoices = data["invoices"].as_array().expect("invoices");
    assert_eq!(invoices.len(), 1, "the first charge's invoice: {data}");
    assert_eq!(invoices[0]["customer_id"], shop.customer.as_str());
    assert!(data["credit_notes"].as_array().expect("notes").is_empty());
    let text = data.to_string();
    assert!(
        !text.contains(&other_customer) && !text.contains(&other_sub),
        "{text}"
    );

    // Another customer's subscription through this token: 404, and nothing changes.
    let (status, body) = portal_json(
        &app,
        Method::POST,
        &format!("{base}/api/subscriptions/{other_sub}/cancel"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(get(&app, &other_sub).await["cancel_at_period_end"], false);

    // A token of the right shape that is nobody's, and a malformed one: 401.
    for path in [
        format!("/portal/bpt_{}/api/customer", "A".repeat(43)),
        "/portal/nope/api/customer".to_owned(),
    ] {
        let (status, body) = portal_json(&app, Method::GET, &path, None).await;
        assert_eq!(status, 401, "{path}: {body}");
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    // An hour later (the account's clock) the token no longer opens anything.
    advance(&app, 3601).await;
    let (status, body) =
        portal_json(&app, Method::GET, &format!("{base}/api/customer"), None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "authentication_error");
    let page = portal(&app, Method::GET, &base).send().await.expect("send");
    assert_eq!(page.status(), 401);
}

async fn a_session_refuses_what_is_not_the_customers_or_not_offered(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = id(&subscribe(&app, &shop, &method, json!({})).await);
    let (_, other_sub) = stranger(&app, &shop).await;
    let attempts = [
        (json!({"customer_id": "cus_nobody"}), 404, "customer_id"),
        (
            json!({"customer_id": shop.customer, "locale": "fr"}),
            400,
            "locale",
        ),
        (
            json!({"customer_id": shop.customer, "return_url": "javascript:alert(1)"}),
            400,
            "return_url",
        ),
        (
            json!({"customer_id": shop.customer, "flow": {"type": "subscription_cancel", "subscription_id": other_sub}}),
            404,
            "flow.subscription_id",
        ),
        (
            json!({"customer_id": shop.customer, "flow": {"type": "plan_switch", "subscription_id": sub}}),
            400,
            "flow.type",
        ),
    ];
    for (body, expected, param) in attempts {
        let (status, answer) = read(app.post("/v1/portal-sessions", body.clone()).await).await;
        assert_eq!(status, expected, "{body}: {answer}");
        assert_eq!(answer["error"]["param"], param, "{answer}");
    }
    configure(&app, json!({"payment_method_update": {"enabled": false}})).await;
    let (status, answer) = read(
        app.post(
            "/v1/portal-sessions",
            json!({"customer_id": shop.customer, "flow": {"type": "payment_method_update", "subscription_id": sub}}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, answer["error"]["param"].clone()),
        (400, json!("flow.type")),
        "{answer}"
    );
    let session = open(
        &app,
        &shop.customer,
        json!({"flow": {"type": "subscription_cancel", "subscription_id": sub}, "locale": "en"}),
    )
    .await;
    assert_eq!(session["flow"]["type"], "subscription_cancel");
    assert_eq!(session["locale"], "en");
}

async fn the_configuration_merges_and_applies_to_sessions_opened_before(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = id(&subscribe(&app, &shop, &method, json!({})).await);
    let (status, defaults) = read(app.get("/v1/account/portal").await).await;
    assert_eq!(status, 200);
    assert_eq!(
        defaults,
        json!({"cancel": {"enabled": true, "mode": "at_period_end"},
            "plan_switch": {"enabled": false, "plan_ids": [], "prorate": true},
            "payment_method_update": {"enabled": true}, "invoice_history": {"enabled": true}})
    );
    let session = open(&app, &shop.customer, json!({})).await;
    let base = path_of(&app, &session);
    // Opened before: the configuration changed after it applies to it.
    let merged = configure(&app, json!({"cancel": {"enabled": false}})).await;
    assert_eq!(
        merged["cancel"],
        json!({"enabled": false, "mode": "at_period_end"})
    );
    let (status, body) = portal_json(
        &app,
        Method::POST,
        &format!("{base}/api/subscriptions/{sub}/cancel"),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (403, json!("invalid_request")),
        "{body}"
    );
    let merged = configure(
        &app,
        json!({"invoice_history": {"enabled": false}, "cancel": {"mode": "immediately"}}),
    )
    .await;
    assert_eq!(
        merged["cancel"],
        json!({"enabled": false, "mode": "immediately"}),
        "nested fields merge"
    );
    assert_eq!(merged["invoice_history"]["enabled"], false);
    let (_, data) = portal_json(&app, Method::GET, &format!("{base}/api/customer"), None).await;
    assert_eq!(
        data["invoices"],
        json!([]),
        "no invoices while the history is off"
    );
    for (patch, param) in [
        (json!({"cancel": {"mode": "whenever"}}), "cancel.mode"),
        (
            json!({"plan_switch": {"plan_ids": ["plan_nope"]}}),
            "plan_switch.plan_ids",
        ),
    ] {
        let (status, body) = read(
            app.request(Method::PATCH, "/v1/account/portal")
                .json(&patch)
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(
            (status, body["error"]["param"].clone()),
            (400, json!(param)),
            "{body}"
        );
    }
    let (_, unchanged) = read(app.get("/v1/account/portal").await).await;
    assert_eq!(unchanged, merged, "a refused PATCH stored nothing");
}

async fn cancelling_asks_the_configuration_when_and_records_the_reason(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let first = id(&subscribe(&app, &shop, &method, json!({})).await);
    let second = id(&subscribe(&app, &shop, &method, json!({})).await);
    let session = open(&app, &shop.customer, json!({})).await;
    let base = path_of(&app, &session);
    let (status, canceled) = portal_json(
        &app,
        Method::POST,
        &format!("{base}/api/subscriptions/{first}/cancel"),
        Some(json!({"reason": "  Muy caro  "})),
    )
    .await;
    assert_eq!(status, 200, "{canceled}");
    assert_eq!(
        (
            canceled["status"].clone(),
            canceled["cancel_at_period_end"].clone()
        ),
        (json!("active"), json!(true))
    );
    configure(&app, json!({"cancel": {"mode": "immediately"}})).await;
    let (status, canceled) = portal_json(
        &app,
        Method::POST,
        &format!("{base}/api/subscriptions/{second}/cancel"),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (status, canceled["status"].clone()),
        (200, json!("canceled")),
        "{canceled}"
    );
    let (status, too_long) = portal_json(
        &app,
        Method::POST,
        &format!("{base}/api/subscriptions/{first}/cancel"),
        Some(json!({"reason": "x".repeat(501)})),
    )
    .await;
    assert_eq!(
        (status, too_long["error"]["param"].clone()),
        (400, json!("reason"))
    );
    // The same events as the API's cancel.
    assert!(
        events(&app, &second)
            .await
            .iter()
            .any(|e| e["type"] == "subscription.canceled")
    );
    let (_, read_back) = read(
        app.get(&format!("/v1/portal-sessions/{}", id(&session)))
            .await,
    )
    .await;
    let actions = read_back["actions"].as_array().expect("actions");
    assert_eq!(actions.len(), 2, "{read_back}");
    assert_eq!(actions[0]["action"], "subscription_cancel");
    assert_eq!(actions[0]["subscription_id"], first.as_str());
    assert_eq!(
        actions[0]["detail"],
        json!({"reason": "Muy caro", "mode": "at_period_end"})
    );
    assert_eq!(
        actions[1]["detail"],
        json!({"reason": null, "mode": "immediately"})
    );
    assert!(
        read_back.get("url").is_none(),
        "the URL is shown once: {read_back}"
    );
    assert_invariants(&app).await;
}

async fn a_new_card_in_past_due_is_charged_at_once_and_the_subscription_recovers(app: TestApp) {
    let (shop, declining) = shop(&app, "4111111111111111").await;
    let sub = id(&subscribe(&app, &shop, &declining, json!({})).await);
    advance(&app, 60).await;
    assert_eq!(get(&app, &sub).await["status"], "past_due");
    let session = open(
        &app,
        &shop.customer,
        json!({"flow": {"type": "payment_method_update", "subscription_id": sub}}),
    )
    .await;
    let base = path_of(&app, &session);
    // Missing an acceptance: 400 naming it, nothing stored.
    let token = card_token(&app, "4242424242424242").await;
    let (status, body) = portal_json(
        &app,
        Method::POST,
        &format!("{base}/api/subscriptions/{sub}/payment-method"),
        Some(json!({"card_token": token.token, "acceptance_token": token.acceptance})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (400, json!("accept_personal_auth")),
        "{body}"
    );
    let (status, body) = portal_json(
        &app,
        Method::POST,
        &format!("{base}/api/subscriptions/{sub}/payment-method"),
        Some(token.payment_method()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["charge"]["status"], "approved", "{body}");
    assert_eq!(body["subscription"]["status"], "active", "{body}");
    assert_eq!(
        body["subscription"]["default_payment_method_id"],
        body["payment_method"]["id"]
    );
    assert_eq!(body["payment_method"]["last4"], "4242");
    let now = get(&app, &sub).await;
    assert_eq!(
        (now["status"].clone(), now["failed_attempts"].clone()),
        (json!("active"), json!(0))
    );
    let kinds: Vec<String> = events(&app, &sub)
        .await
        .iter()
        .map(|e| e["type"].as_str().expect("type").to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "subscription.created",
            "charge.declined",
            "subscription.past_due",
            "charge.approved",
            "invoice.created"
        ]
    );
    // The next renewal uses the new card.
    advance(&app, 31 * DAY).await;
    assert_eq!(get(&app, &sub).await["status"], "active");
    let (_, read_back) = read(
        app.get(&format!("/v1/portal-sessions/{}", id(&session)))
            .await,
    )
    .await;
    assert_eq!(read_back["actions"][0]["action"], "payment_method_update");
    assert_eq!(
        read_back["actions"][0]["detail"]["retried_charge_id"],
        body["charge"]["id"]
    );
    assert_invariants(&app).await;
}

async fn a_plan_switch_previews_then_charges_what_the_preview_said(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = id(&subscribe(&app, &shop, &method, json!({})).await);
    let bigger = id(&app.create_plan("Pro Max", 6_000_000, 60_000_000).await);
    let unlisted = id(&app.create_plan("Secreto", 9_000_000, 90_000_000).await);
    advance(&app, 15 * DAY).await;
    let session = open(&app, &shop.customer, json!({})).await;
    let base = path_of(&app, &session);
    let preview_path = format!("{base}/api/subscriptions/{sub}/change-plan/preview");
    let (status, body) = portal_json(
        &app,
        Method::POST,
        &preview_path,
        Some(json!({"plan_id": bigger})),
    )
    .await;
    assert_eq!(status, 403, "no plan switch by default: {body}");
    configure(
        &app,
        json!({"plan_switch": {"enabled": true, "plan_ids": [bigger]}}),
    )
    .await;
    let (status, body) = portal_json(
        &app,
        Method::POST,
        &preview_path,
        Some(json!({"plan_id": unlisted})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (403, json!("plan_id")),
        "{body}"
    );
    let (status, preview) = portal_json(
        &app,
        Method::POST,
        &preview_path,
        Some(json!({"plan_id": bigger})),
    )
    .await;
    assert_eq!(status, 200, "{preview}");
    assert!(
        preview["prorated_amount_cents"].as_i64().expect("cents") > 0,
        "{preview}"
    );
    // Two minutes later the rest of the period is shorter, yet the switch sent with the
    // preview's proration_date is charged exactly what the preview said.
    advance(&app, 120).await;
    let (status, later) = portal_json(
        &app,
        Method::POST,
        &preview_path,
        Some(json!({"plan_id": bigger})),
    )
    .await;
    assert_eq!(status, 200, "{later}");
    assert!(
        later["prorated_amount_cents"].as_i64() < preview["prorated_amount_cents"].as_i64(),
        "{later} {preview}"
    );
    let (status, switched) = portal_json(
        &app,
        Method::POST,
        &format!("{base}/api/subscriptions/{sub}/change-plan"),
        Some(json!({"plan_id": bigger, "proration_date": preview["proration_date"]})),
    )
    .await;
    assert_eq!(status, 200, "{switched}");
    assert_eq!(switched["plan_id"], bigger.as_str());
    let (_, charges) = read(app.get(&format!("/v1/charges?subscription_id={sub}")).await).await;
    let proration = &charges["data"][0];
    assert_eq!(
        proration["amount_cents"], preview["prorated_amount_cents"],
        "{charges}"
    );
    // Through the API, a preview's date too old to honour is refused, and nothing changes.
    let (_, api_preview) = read(
        app.post(
            &format!("/v1/subscriptions/{sub}/change-plan/preview"),
            json!({"plan_id": shop.plan}),
        )
        .await,
    )
    .await;
    advance(&app, 301).await;
    let (status, stale) = read(
        app.post(
            &format!("/v1/subscriptions/{sub}/change-plan"),
            json!({"plan_id": shop.plan, "proration_date": api_preview["proration_date"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{stale}");
    assert!(
        stale["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("proration_date"),
        "{stale}"
    );
    assert_eq!(get(&app, &sub).await["plan_id"], bigger.as_str());
    assert_invariants(&app).await;
}

async fn the_customer_edits_their_invoicing_data_and_a_bad_nit_is_refused(app: TestApp) {
    let (shop, _) = shop(&app, "4242424242424242").await;
    let session = open(&app, &shop.customer, json!({})).await;
    let path = format!("{}/api/customer", path_of(&app, &session));
    for (body, param) in [
        (
            json!({"tax_id": {"type": "NIT", "number": "900123456-1"}}),
            "tax_id",
        ),
        (
            json!({"address": {"line": "Calle 1", "city_code": "123", "country": "CO"}}),
            "address.city_code",
        ),
        (json!({"email": "otro@example.co"}), "email"),
    ] {
        let (status, answer) = portal_json(&app, Method::PATCH, &path, Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let named = answer["error"]["param"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let message = answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            named.starts_with(param) || message.contains(param),
            "{param}: {answer}"
        );
    }
    let (status, customer) = portal_json(
        &app,
        Method::PATCH,
        &path,
        Some(json!({"tax_id": {"type": "NIT", "number": "900123456-8"}, "legal_name": "Gómez Asociados S.A.S.",
            "address": {"line": "Calle 93 # 11-26", "city_code": "11001", "country": "CO"}})),
    )
    .await;
    assert_eq!(status, 200, "{customer}");
    let (_, stored) = read(app.get(&format!("/v1/customers/{}", shop.customer)).await).await;
    assert_eq!(
        stored["tax_id"],
        json!({"type": "NIT", "number": "900123456", "check_digit": 8})
    );
    assert_eq!(stored["legal_name"], "Gómez Asociados S.A.S.");
    assert_eq!(
        stored["email"], "ana@example.co",
        "the e-mail is not the customer's to change here"
    );
}

async fn a_repeated_action_with_its_idempotency_key_happens_once(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = id(&subscribe(&app, &shop, &method, json!({})).await);
    let session = open(&app, &shop.customer, json!({})).await;
    let path = format!("{}/api/subscriptions/{sub}/cancel", path_of(&app, &session));
    let mut answers = Vec::new();
    for _ in 0..2 {
        let response = portal(&app, Method::POST, &path)
            .header("Idempotency-Key", "portal-cancel-1")
            .json(&json!({"reason": "Me mudo"}))
            .send()
            .await
            .expect("send");
        answers.push(read(response).await);
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0].0, 200);
    let (_, read_back) = read(
        app.get(&format!("/v1/portal-sessions/{}", id(&session)))
            .await,
    )
    .await;
    assert_eq!(
        read_back["actions"].as_array().expect("actions").len(),
        1,
        "{read_back}"
    );
}

async fn each_session_has_the_accounts_rate_limit_of_its_own(app: TestApp) {
    let (shop, _) = shop(&app, "4242424242424242").await;
    let first = path_of(&app, &open(&app, &shop.customer, json!({})).await);
    let second = path_of(&app, &open(&app, &shop.customer, json!({})).await);
    let response = app
        .admin(
            Method::PATCH,
            &format!("/admin/accounts/{}", app.account_id),
        )
        .json(&json!({"rate_limit_per_minute": 20}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    let mut statuses = Vec::new();
    for _ in 0..24 {
        let (status, _) =
            portal_json(&app, Method::GET, &format!("{first}/api/customer"), None).await;
        statuses.push(status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        20,
        "{statuses:?}"
    );
    let limited = portal(&app, Method::GET, &format!("{first}/api/customer"))
        .send()
        .await
        .expect("send");
    assert_eq!(limited.status(), 429);
    assert!(limited.headers().contains_key("retry-after"));
    // Another session, and the merchant's own API key, have budgets of their own.
    let (status, _) = portal_json(&app, Method::GET, &format!("{second}/api/customer"), None).await;
    assert_eq!(status, 200);
    assert_eq!(app.get("/v1/customers").await.status(), 200);
}
