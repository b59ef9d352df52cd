//! Issue 6: paying a checkout session the way the hosted page does (a card token, or a Nequi
//! token the customer approved, from the sandbox processor, then `POST /checkout/{id}/complete`
//! with both acceptances), and what an approved payment creates, on both databases.

use crate::checkout::{count, new_session, plan, session_status};
use crate::common::receiver::{Receiver, Reply, hmac_sha256_hex};
use crate::common::{TestApp, card_token, eventually, read, sandbox_processor, spawn_on_with};
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    an_approved_payment_creates_customer_payment_method_and_subscription,
    a_declined_card_creates_nothing_and_the_session_stays_open,
    concurrent_submissions_charge_once,
    an_existing_customer_pays_without_retyping_details,
    a_short_fee_balance_refuses_the_payment_and_creates_nothing,
    a_paid_checkout_reaches_webhook_endpoints_signed,
    complete_answers_bad_requests_in_the_error_shape,
    a_payment_cut_off_before_it_was_posted_completes_after_a_restart,
    a_nequi_payment_creates_a_subscription_paid_by_nequi,
    a_nequi_account_is_tried_once_and_a_declined_one_creates_nothing,
    a_payment_without_the_personal_data_authorization_is_refused,
);

/// Pays `session` with the card `number`, as the hosted page does.
pub(crate) async fn pay(app: &TestApp, session: &str, number: &str) -> (u16, Value) {
    let token = card_token(app, number).await;
    complete(app, session, &token.payment_method()).await
}

/// `POST /checkout/{session}/complete` with `body`.
async fn complete(app: &TestApp, session: &str, body: &Value) -> (u16, Value) {
    let response = app
        .client
        .post(app.url(&format!("/checkout/{session}/complete")))
        .json(body)
        .send()
        .await
        .expect("send");
    read(response).await
}

/// A Nequi token for `phone` made at the sandbox as the page makes it, once the customer has
/// answered in the Nequi app (the sandbox's approval delay): its final status, and the body
/// the page then completes with (both acceptance tokens included).
async fn answered_nequi(app: &TestApp, phone: &str) -> (String, Value) {
    let (client, creds) = sandbox_processor(app).await;
    let acceptance = client.acceptance_tokens(&creds).await.expect("acceptance");
    let token = client
        .tokenize_nequi(&creds, phone)
        .await
        .expect("nequi token");
    assert_eq!(token.status, "PENDING");
    eventually(Duration::from_secs(30), || async {
        client
            .nequi_token(&creds, &token.id)
            .await
            .is_ok_and(|t| t.status != "PENDING")
    })
    .await;
    let status = client
        .nequi_token(&creds, &token.id)
        .await
        .expect("status")
        .status;
    let body = json!({"type": "nequi", "nequi_token": token.id,
        "acceptance_token": acceptance.acceptance_token,
        "accept_personal_auth": acceptance.personal_auth_token});
    (status, body)
}

async fn an_approved_payment_creates_customer_payment_method_and_subscription(app: TestApp) {
    let plan = plan(&app, true).await;
    let session = new_session(
        &app,
        &plan,
        json!({"success_url": "https://shop.example/thanks?order=42", "metadata": {"order": "A-1"}}),
    )
    .await;
    let id = session["id"].as_str().expect("id");
    let (status, out) = pay(&app, id, "4242424242424242").await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "complete");
    let sub_id = out["subscription_id"].as_str().expect("subscription");
    let summary = &out["summary"];
    assert_eq!(summary["status"], "APPROVED");
    assert_eq!(summary["customer_email"], "ana@example.co");
    assert_eq!(summary["customer_name"], "Ana Gómez");
    assert_eq!(summary["plan_name"], "Pro");
    assert_eq!(summary["amount_in_cents"], 4_990_000);
    assert_eq!(summary["currency"], "COP");
    assert_eq!(summary["card_brand"], "VISA");
    assert_eq!(summary["card_last4"], "4242");
    let redirect = url::Url::parse(out["redirect_url"].as_str().expect("redirect")).expect("url");
    assert_eq!(redirect.path(), "/thanks");
    let query: std::collections::HashMap<_, _> = redirect.query_pairs().into_owned().collect();
    assert_eq!(query["order"], "42");
    assert_eq!(query["subscription_id"], sub_id);
    assert_eq!(query["status"], "APPROVED");
    assert_eq!(query["amount_in_cents"], "4990000");
    assert_eq!(query["currency"], "COP");
    assert_eq!(query.len(), 5, "no personal data in {redirect}");
    assert!(!redirect.as_str().contains("ana") && !redirect.as_str().contains("4242"));

    let session = session_status(&app, id).await;
    assert_eq!(session["status"], "complete");
    assert_eq!(session["subscription_id"], sub_id);
    let (_, sub) = read(app.get(&format!("/v1/subscriptions/{sub_id}")).await).await;
    assert_eq!(sub["status"], "active");
    assert_eq!(sub["metadata"], json!({"order": "A-1"}));
    assert_eq!(sub["customer_id"], session["customer_id"]);
    let customer = sub["customer_id"].as_str().expect("customer");
    let (_, methods) = read(
        app.get(&format!("/v1/customers/{customer}/payment-methods"))
            .await,
    )
    .await;
    assert_eq!(methods["data"][0]["id"], sub["default_payment_method_id"]);
    assert_eq!(methods["data"][0]["last4"], "4242");
    let (_, events) = read(
        app.get(&format!("/v1/events?subscription_id={sub_id}"))
            .await,
    )
    .await;
    let types: Vec<&str> = events["data"]
        .as_array()
        .expect("events")
        .iter()
        .rev()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        types,
        ["subscription.created", "charge.approved", "invoice.created"]
    );
    for event in events["data"].as_array().expect("events") {
        assert_eq!(event["data"]["metadata"], json!({"order": "A-1"}));
    }
    // Newest first: the invoice's event, then the charge's.
    assert_eq!(events["data"][1]["data"]["status"], "APPROVED");
    assert_eq!(events["data"][1]["data"]["amount_in_cents"], 4_990_000);
    assert_eq!(events["data"][0]["data"]["amount_in_cents"], 4_990_000);
    // The fee of one approved charge: 1.5 % of 49,900.00.
    let (_, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(balance["available_cents"], 10_000_000 - 74_850);
    assert_eq!(balance["reserved_cents"], 0);

    // The page now says the payment is done, and links to the merchant's success URL.
    let page = checkout_page(&app, id).await;
    assert!(page.contains("Este pago ya fue completado"), "{page}");
    assert!(
        page.contains(&format!("subscription_id={sub_id}")),
        "{page}"
    );
    assert!(!page.contains("id=\"card-number\""));
    // Paying again: 409, and nothing more is charged.
    let (status, error) = pay(&app, id, "4242424242424242").await;
    assert_eq!(
        (status, &error["error"]["type"]),
        (409, &json!("invalid_request"))
    );
    // The first month was paid at checkout: a month later exactly one renewal is charged.
    let (status, _) = read(
        app.post(
            "/v1/test-helpers/clock/advance",
            json!({"seconds": 31 * 86_400}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        count(
            &app,
            &format!("/v1/events?type=charge.approved&subscription_id={sub_id}")
        )
        .await,
        2
    );
    let (_, sub) = read(app.get(&format!("/v1/subscriptions/{sub_id}")).await).await;
    assert_eq!(sub["status"], "active");
}

async fn a_declined_card_creates_nothing_and_the_session_stays_open(app: TestApp) {
    let plan = plan(&app, true).await;
    let id = new_session(&app, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let token = card_token(&app, "4111111111111111").await;
    let complete = || {
        app.client
            .post(app.url(&format!("/checkout/{id}/complete")))
            .json(&token.payment_method())
            .send()
    };
    let (status, error) = read(complete().await.expect("send")).await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["type"], "processor_error");
    assert_eq!(session_status(&app, &id).await["status"], "open");
    // The same token again (a re-sent request) gets the same answer, without a second attempt.
    let (status, again) = read(complete().await.expect("send")).await;
    assert_eq!(
        (status, &again["error"]["type"]),
        (422, &json!("processor_error"))
    );
    assert!(
        again["error"]["message"]
            .as_str()
            .expect("message")
            .contains("already tried")
    );
    assert_eq!(count(&app, "/v1/customers").await, 0);
    assert_eq!(count(&app, "/v1/subscriptions").await, 0);
    assert_eq!(count(&app, "/v1/events").await, 0);
    let (_, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(
        (
            balance["available_cents"].clone(),
            balance["reserved_cents"].clone()
        ),
        (json!(10_000_000), json!(0))
    );
    // Another card on the same session: approved; without a success_url there is no redirect.
    let (status, out) = pay(&app, &id, "4242424242424242").await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["redirect_url"], Value::Null);
    assert_eq!(out["summary"]["card_last4"], "4242");
    assert_eq!(count(&app, "/v1/customers").await, 1);
    assert_eq!(count(&app, "/v1/subscriptions").await, 1);
}

async fn concurrent_submissions_charge_once(app: TestApp) {
    let plan = plan(&app, true).await;
    let id = new_session(&app, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let ((first, a), (second, b)) = tokio::join!(
        pay(&app, &id, "4242424242424242"),
        pay(&app, &id, "4242424242424242")
    );
    // One pays; the other either waited for that same payment (200) or found it done (409).
    let mut statuses = [first, second];
    statuses.sort_unstable();
    assert!(matches!(statuses, [200, 200] | [200, 409]), "{a} {b}");
    if statuses == [200, 200] {
        assert_eq!(a["subscription_id"], b["subscription_id"]);
    }
    assert_eq!(count(&app, "/v1/subscriptions").await, 1);
    assert_eq!(count(&app, "/v1/customers").await, 1);
    assert_eq!(count(&app, "/v1/events?type=charge.approved").await, 1);
    let (_, ledger) = read(app.get("/v1/balance/transactions").await).await;
    let fees = ledger["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter(|t| t["type"] == "fee")
        .count();
    assert_eq!(fees, 1, "{ledger}");
}

async fn an_existing_customer_pays_without_retyping_details(app: TestApp) {
    let plan = plan(&app, true).await;
    let (_, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": "bo@example.co", "name": "Bo"}),
        )
        .await,
    )
    .await;
    let customer = customer["id"].as_str().expect("id");
    let session = new_session(
        &app,
        &plan,
        json!({"customer": null, "customer_id": customer, "cycle": "annual"}),
    )
    .await;
    let id = session["id"].as_str().expect("id");
    let html = checkout_page(&app, id).await;
    assert!(
        !html.contains("id=\"customer-email\""),
        "no e-mail field for a known customer"
    );
    assert!(html.contains("id=\"card-number\""));
    let (status, out) = pay(&app, id, "4242424242424242").await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["summary"]["customer_email"], "bo@example.co");
    assert_eq!(out["summary"]["amount_in_cents"], 49_900_000);
    assert_eq!(count(&app, "/v1/customers").await, 1);
    let (_, sub) = read(
        app.get(&format!(
            "/v1/subscriptions/{}",
            out["subscription_id"].as_str().expect("sub")
        ))
        .await,
    )
    .await;
    assert_eq!(sub["customer_id"], customer);
    assert_eq!(sub["cycle"], "annual");
    assert_eq!(
        count(&app, &format!("/v1/customers/{customer}/payment-methods")).await,
        1
    );
}

async fn a_short_fee_balance_refuses_the_payment_and_creates_nothing(app: TestApp) {
    let plan = plan(&app, false).await;
    let id = new_session(&app, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, error) = pay(&app, &id, "4242424242424242").await;
    assert_eq!(
        (status, &error["error"]["type"]),
        (422, &json!("insufficient_balance"))
    );
    assert_eq!(session_status(&app, &id).await["status"], "open");
    assert_eq!(count(&app, "/v1/customers").await, 0);
}

async fn a_paid_checkout_reaches_webhook_endpoints_signed(app: TestApp) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let (status, endpoint) = read(
        app.post(
            "/v1/webhook-endpoints",
            json!({"url": receiver.url, "events": ["subscription.created", "charge.approved"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{endpoint}");
    let secret = endpoint["secret"].as_str().expect("secret");
    let plan = plan(&app, true).await;
    let id = new_session(&app, &plan, json!({"metadata": {"order": "W-9"}})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, out) = pay(&app, &id, "4242424242424242").await;
    assert_eq!(status, 200, "{out}");
    eventually(Duration::from_secs(20), || async { receiver.count() >= 2 }).await;
    let mut types = Vec::new();
    for received in receiver.received() {
        let header = received.headers["service-signature"]
            .to_str()
            .expect("header");
        let (t, v1) = header
            .strip_prefix("t=")
            .and_then(|rest| rest.split_once(",v1="))
            .expect("t=…,v1=…");
        let signed = [t.as_bytes(), b".", &received.body].concat();
        assert_eq!(hmac_sha256_hex(secret.as_bytes(), &signed), v1);
        let event: Value = serde_json::from_slice(&received.body).expect("json");
        assert_eq!(event["data"]["subscription_id"], out["subscription_id"]);
        assert_eq!(event["data"]["metadata"], json!({"order": "W-9"}));
        types.push(event["type"].as_str().expect("type").to_owned());
    }
    types.sort();
    assert_eq!(types, ["charge.approved", "subscription.created"]);
}

/// The page's request claimed the session and recorded the charge, then died before posting it
/// (a closed tab, a crash). The next start's reconciliation posts it under the same reference,
/// and its approval completes the session like any other path.
async fn a_payment_cut_off_before_it_was_posted_completes_after_a_restart(app: TestApp) {
    use billing::store::charges::NewCharge;
    use billing::store::checkout::CheckoutAttempt;
    let plan = plan(&app, true).await;
    let id = new_session(&app, &plan, json!({"metadata": {"order": "R-1"}})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let store = billing::store::Store::connect(&app.database_url)
        .await
        .expect("store");
    let account = billing::ids::AccountId::parse(&app.account_id).expect("an account's id");
    let txn = store.begin().await.expect("begin");
    let charge = txn
        .begin_charge(NewCharge {
            account,
            subscription_id: None,
            customer_id: billing::ids::CustomerId::parse("cus_01cutoff").expect("an id"),
            payment_method_id: billing::ids::PaymentMethodId::parse("pm_01cutoff").expect("an id"),
            amount_cents: 4_990_000,
            fee_cents: 74_850,
            purpose: billing::domain::charge_purpose::ChargePurpose::Checkout,
            period_start: None,
            pending_change: None,
            lines: Vec::new(),
            now_ms: chrono::Utc::now().timestamp_millis(),
        })
        .await
        .expect("charge");
    let attempt = CheckoutAttempt {
        charge_id: charge.id.clone(),
        customer_id: billing::ids::CustomerId::parse("cus_01cutoff").expect("an id"),
        payment_method_id: billing::ids::PaymentMethodId::parse("pm_01cutoff").expect("an id"),
        // The sandbox's payment source ids end in their outcome: 0 approves.
        payment_source_id: 10,
        source_kind: billing::processor::client::SourceKind::Card,
        email: "ana@example.co".into(),
        name: "Ana Gómez".into(),
        brand: Some("VISA".into()),
        last4: Some("4242".into()),
        expires_at: None,
        token: "tok_test_1_a".into(),
        discount: None,
    };
    let claimed = txn
        .claim_checkout_session(
            &billing::ids::CheckoutSessionId::parse(&id).expect("a session's id"),
            &attempt,
            chrono::Utc::now().timestamp_millis(),
        )
        .await
        .expect("claim");
    assert!(claimed);
    txn.commit().await.expect("commit");
    // The process dies here; the next one starts on the same database.
    let key = app.api_key.clone();
    let url = app.database_url.clone();
    app.stop().await;
    // The reconciler leaves a charge written within twice the processor's timeout, or six
    // recheck bases, alone (its post may still be on its way): short ones keep the wait short.
    let mut app = spawn_on_with(url, |config| {
        config.processor_timeout_ms = 2_000;
        config.processor_recheck_base_ms = 500;
    })
    .await;
    app.api_key = key;
    // Watched in the database: the status endpoint's own rate limit (20 a minute) is not what
    // this test is about.
    eventually(Duration::from_secs(30), || async {
        store
            .checkout_session_by_id(
                &billing::ids::CheckoutSessionId::parse(&id).expect("a session's id"),
            )
            .await
            .expect("db")
            .is_some_and(|session| session.status == "complete")
    })
    .await;
    let session = session_status(&app, &id).await;
    assert_eq!(session["customer_id"], "cus_01cutoff");
    let sub = session["subscription_id"].as_str().expect("subscription");
    let (_, sub) = read(app.get(&format!("/v1/subscriptions/{sub}")).await).await;
    assert_eq!(sub["default_payment_method_id"], "pm_01cutoff");
    assert_eq!(sub["metadata"], json!({"order": "R-1"}));
    assert_eq!(count(&app, "/v1/events?type=charge.approved").await, 1);
}

async fn complete_answers_bad_requests_in_the_error_shape(app: TestApp) {
    let plan = plan(&app, true).await;
    let id = new_session(&app, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let complete = |session: String, body: Value| {
        app.client
            .post(app.url(&format!("/checkout/{session}/complete")))
            .json(&body)
            .send()
    };
    let cases = [
        (
            id.clone(),
            json!({"acceptance_token": "acc", "accept_personal_auth": "pd"}),
            400,
            Some("card_token"),
        ),
        (
            id.clone(),
            json!({"card_token": "", "acceptance_token": "acc", "accept_personal_auth": "pd"}),
            400,
            Some("card_token"),
        ),
        (
            id.clone(),
            json!({"card_token": "tok", "accept_personal_auth": "pd"}),
            400,
            Some("acceptance_token"),
        ),
        (
            id.clone(),
            json!({"card_token": "tok", "acceptance_token": "acc"}),
            400,
            Some("accept_personal_auth"),
        ),
        (
            id.clone(),
            json!({"type": "nequi", "card_token": "tok", "acceptance_token": "acc", "accept_personal_auth": "pd"}),
            400,
            Some("card_token"),
        ),
        (
            id.clone(),
            json!({"type": "nequi", "acceptance_token": "acc", "accept_personal_auth": "pd"}),
            400,
            Some("nequi_token"),
        ),
        (
            id.clone(),
            json!({"type": "paypal", "card_token": "tok", "acceptance_token": "acc", "accept_personal_auth": "pd"}),
            400,
            Some("type"),
        ),
        (
            id.clone(),
            json!({"card_token": "tok", "acceptance_token": "acc", "accept_personal_auth": "pd", "customer_email": "nope"}),
            400,
            Some("customer_email"),
        ),
        (
            id.clone(),
            json!({"card_token": "tok", "acceptance_token": "acc", "accept_personal_auth": "pd", "cvc": "123"}),
            400,
            Some("cvc"),
        ),
        (
            "cs_unknown".to_owned(),
            json!({"card_token": "tok", "acceptance_token": "acc", "accept_personal_auth": "pd"}),
            404,
            Some("id"),
        ),
    ];
    for (session, body, expected, param) in cases {
        let (status, error) = read(complete(session, body.clone()).await.expect("send")).await;
        assert_eq!(status, expected, "{body}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request", "{error}");
        assert_eq!(error["error"]["param"].as_str(), param, "{body}: {error}");
    }
    // A token the processor does not know: 422 processor_error, and the session stays open.
    let (status, error) = read(
        complete(
            id.clone(),
            json!({"card_token": "tok_forged", "acceptance_token": "acc", "accept_personal_auth": "pd"}),
        )
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(
        (status, &error["error"]["type"]),
        (422, &json!("processor_error"))
    );
    assert_eq!(session_status(&app, &id).await["status"], "open");
    assert_eq!(count(&app, "/v1/customers").await, 0);
}

async fn a_nequi_payment_creates_a_subscription_paid_by_nequi(app: TestApp) {
    let plan = plan(&app, true).await;
    let id = new_session(&app, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, body) = answered_nequi(&app, "3991111111").await;
    assert_eq!(status, "APPROVED");
    let (status, out) = complete(&app, &id, &body).await;
    assert_eq!(status, 200, "{out}");
    let summary = &out["summary"];
    assert_eq!(summary["status"], "APPROVED");
    assert_eq!(summary["payment_method_type"], "nequi");
    assert_eq!(summary["nequi_phone_last4"], "1111");
    assert_eq!(
        (&summary["card_brand"], &summary["card_last4"]),
        (&Value::Null, &Value::Null)
    );
    let sub_id = out["subscription_id"].as_str().expect("subscription");
    let (_, sub) = read(app.get(&format!("/v1/subscriptions/{sub_id}")).await).await;
    assert_eq!(sub["status"], "active");
    let customer = sub["customer_id"].as_str().expect("customer");
    let (_, methods) = read(
        app.get(&format!("/v1/customers/{customer}/payment-methods"))
            .await,
    )
    .await;
    let method = &methods["data"][0];
    assert_eq!(method["id"], sub["default_payment_method_id"]);
    assert_eq!(method["type"], "nequi");
    assert_eq!(method["last4"], "1111");
    assert_eq!(method["brand"], Value::Null);
    // The next month is charged to the same Nequi account, with no one in the app.
    let (status, _) = read(
        app.post(
            "/v1/test-helpers/clock/advance",
            json!({"seconds": 31 * 86_400}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        count(
            &app,
            &format!("/v1/events?type=charge.approved&subscription_id={sub_id}")
        )
        .await,
        2
    );
}

/// A Nequi token is tried once per session, as a card token is; a token the customer declined
/// in the app is refused by the processor, and neither leaves anything behind.
async fn a_nequi_account_is_tried_once_and_a_declined_one_creates_nothing(app: TestApp) {
    let plan = plan(&app, true).await;
    let id = new_session(&app, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, declined) = answered_nequi(&app, "3992222222").await;
    assert_eq!(status, "DECLINED");
    let (status, error) = complete(&app, &id, &declined).await;
    assert_eq!(
        (status, &error["error"]["type"]),
        (422, &json!("processor_error")),
        "{error}"
    );
    // Any other number is approved in the app, but its payments fail at the processor.
    let (status, failing) = answered_nequi(&app, "3001234567").await;
    assert_eq!(status, "APPROVED");
    let (status, error) = complete(&app, &id, &failing).await;
    assert_eq!(
        (status, &error["error"]["type"]),
        (422, &json!("processor_error")),
        "{error}"
    );
    let (status, again) = complete(&app, &id, &failing).await;
    assert_eq!(status, 422, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .expect("message")
            .contains("already tried"),
        "{again}"
    );
    assert_eq!(session_status(&app, &id).await["status"], "open");
    assert_eq!(count(&app, "/v1/customers").await, 0);
    assert_eq!(count(&app, "/v1/subscriptions").await, 0);
    assert_eq!(count(&app, "/v1/events").await, 0);
    let (status, out) = pay(&app, &id, "4242424242424242").await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["summary"]["payment_method_type"], "card");
    assert_eq!(out["summary"]["card_last4"], "4242");
    assert_eq!(out["summary"]["nequi_phone_last4"], Value::Null);
}

async fn a_payment_without_the_personal_data_authorization_is_refused(app: TestApp) {
    let plan = plan(&app, true).await;
    let id = new_session(&app, &plan, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let token = card_token(&app, "4242424242424242").await;
    let mut body = token.payment_method();
    for personal in [Value::Null, json!(""), json!("  ")] {
        body["accept_personal_auth"] = personal;
        let (status, error) = complete(&app, &id, &body).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request");
        assert_eq!(error["error"]["param"], "accept_personal_auth", "{error}");
    }
    let mut without = token.payment_method();
    without
        .as_object_mut()
        .expect("object")
        .remove("accept_personal_auth");
    let (status, error) = complete(&app, &id, &without).await;
    assert_eq!(
        (status, &error["error"]["param"]),
        (400, &json!("accept_personal_auth"))
    );
    assert_eq!(session_status(&app, &id).await["status"], "open");
    assert_eq!(count(&app, "/v1/customers").await, 0);
    // Refused before the processor was asked: the same card, with both acceptances, pays.
    let (status, out) = complete(&app, &id, &token.payment_method()).await;
    assert_eq!(status, 200, "{out}");
}

/// The hosted page of session `id`, as a customer's browser would get it.
async fn checkout_page(app: &TestApp, id: &str) -> String {
    app.client
        .get(app.url(&format!("/checkout/{id}")))
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("html")
}
