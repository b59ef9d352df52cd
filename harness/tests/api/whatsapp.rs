//! WhatsApp notices (CONTRACT §15) against the in-process sandbox WhatsApp over real HTTP: an
//! opted-in customer's receipt reaches the sandbox as the `receipt` template with its
//! parameters, ends `sent` and is then marked delivered by the sandbox's signed status
//! webhook; a customer who did not opt in gets none; a forged webhook is refused and changes
//! nothing; a 503 from the Cloud API leaves the notice to be tried again; a failed payment
//! reaches a customer through one channel a week (Ley 2300).

use crate::common::{TestApp, eventually, read};
use billing::whatsapp::signature;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(config = crate::whatsapp::quick_whatsapp;
    an_opted_in_customers_receipt_arrives_by_whatsapp_and_is_delivered,
    a_customer_who_did_not_opt_in_gets_no_whatsapp,
    the_ingress_refuses_a_forged_webhook_and_answers_metas_handshake,
    a_cloud_api_that_is_unavailable_leaves_the_notice_to_be_tried_again,
    a_failed_payment_goes_through_one_channel_a_week,
    an_annual_renewal_is_announced_by_whatsapp_to_a_customer_who_opted_in,
    a_status_that_outruns_its_send_is_refused_until_the_wamid_is_recorded,
);

const APP_SECRET: &str = "app_secret_for_tests_0123456789";
const PHONE: &str = "+573001234567";

/// Notices looked for every 50 ms; the sandbox's statuses 100 ms apart.
pub(crate) fn quick_whatsapp(config: &mut billing::config::Config) {
    crate::notices::quick_notices(config);
    config.whatsapp_sandbox.status_delay = Duration::from_millis(100);
}

async fn turn_whatsapp_on(app: &TestApp) {
    app.lift_rate_limit().await;
    let (status, settings) = read(
        app.request(Method::PATCH, "/v1/account/notices")
            .json(
                &json!({"whatsapp": {"enabled": true, "phone_number_id": "106540352242922",
                "access_token": "EAAG-sandbox-token", "app_secret": APP_SECRET,
                "verify_token": "verify-me"}}),
            )
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{settings}");
    assert_eq!(settings["whatsapp"]["app_secret_set"], true);
    let text = settings.to_string();
    assert!(
        !text.contains(APP_SECRET) && !text.contains("EAAG-sandbox-token"),
        "{text}"
    );
}

/// A customer (`customer` is the body) with a card of `number`, subscribed monthly to a
/// 30,000 COP plan.
async fn subscribe(app: &TestApp, customer: Value, number: &str) -> (Value, Value) {
    app.top_up(100_000_000).await;
    let plan = app.create_plan("Plan Pro", 3_000_000, 30_000_000).await;
    let (status, customer) = read(app.post("/v1/customers", customer).await).await;
    assert_eq!(status, 201, "{customer}");
    let token = crate::common::card_token(app, number).await;
    let (status, method) = read(
        app.post(
            &format!(
                "/v1/customers/{}/payment-methods",
                customer["id"].as_str().expect("id")
            ),
            token.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{method}");
    let (status, sub) = read(
        app.post(
            "/v1/subscriptions",
            json!({"customer_id": customer["id"], "plan_id": plan["id"], "cycle": "monthly",
                "payment_method_id": method["id"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{sub}");
    (customer, sub)
}

fn opted_in(phone: &str) -> Value {
    json!({"email": "ana@example.co", "name": "Ana Gómez", "phone": phone,
        "whatsapp_opt_in": true})
}

async fn notices(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, page) = read(app.get(&format!("/v1/notices?{query}")).await).await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().expect("data").clone()
}

async fn sandbox_messages(app: &TestApp) -> Vec<Value> {
    let (status, listed) = read(
        app.admin(Method::GET, "/sandbox/whatsapp/_sandbox/messages")
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    listed["data"].as_array().expect("data").clone()
}

/// Waits until the first notice of `query` is `sent`; that notice.
async fn sent_first(app: &TestApp, query: &str) -> Value {
    eventually(Duration::from_secs(20), || async {
        notices(app, query)
            .await
            .first()
            .is_some_and(|n| n["status"] == "sent")
    })
    .await;
    notices(app, query).await[0].clone()
}

async fn post_webhook(app: &TestApp, body: &Value, signed_with: &str) -> (u16, Value) {
    let raw = serde_json::to_vec(body).expect("json");
    read(
        app.client
            .post(app.url(&format!("/webhooks/whatsapp/{}", app.account_id)))
            .header("x-hub-signature-256", signature::sign(signed_with, &raw))
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .expect("send"),
    )
    .await
}

async fn an_opted_in_customers_receipt_arrives_by_whatsapp_and_is_delivered(app: TestApp) {
    turn_whatsapp_on(&app).await;
    let (customer, sub) = subscribe(&app, opted_in(PHONE), "4242424242424242").await;
    let sub_id = sub["id"].as_str().expect("id").to_owned();
    let query = format!("subscription_id={sub_id}&kind=receipt");
    eventually(Duration::from_secs(20), || async {
        notices(&app, &query)
            .await
            .first()
            .is_some_and(|n| n["status"] == "sent" && n["delivered_at"].is_string())
    })
    .await;
    let listed = notices(&app, &query).await;
    assert_eq!(listed.len(), 1, "WhatsApp only: {listed:?}");
    let notice = &listed[0];
    assert_eq!(notice["channel"], "whatsapp");
    assert_eq!(notice["to"], PHONE);
    assert_eq!(notice["attempts"], 1);
    assert_eq!(notice["customer_id"], customer["id"]);
    let (_, invoices) = read(
        app.get(&format!("/v1/invoices?subscription_id={sub_id}"))
            .await,
    )
    .await;
    let invoice = &invoices["data"][0];
    let messages = sandbox_messages(&app).await;
    let message = messages
        .iter()
        .find(|m| m["to"] == "573001234567")
        .expect("the receipt reached the sandbox");
    assert_eq!(message["template"], "receipt", "{message}");
    assert_eq!(message["language"], "es");
    assert_eq!(message["phone_number_id"], "106540352242922");
    let parameters = message["parameters"].as_array().expect("parameters");
    assert_eq!(parameters[0], "Ana Gómez", "{message}");
    assert_eq!(parameters[1], "Test account");
    assert_eq!(parameters[2], invoice["number"]);
    assert_eq!(parameters[3], "$ 30.000,00");
    assert!(
        parameters[5].as_str().expect("link").contains("/invoices/"),
        "{message}"
    );
    assert_eq!(message["status"], "delivered");
    // A `failed` for the same message, signed with another secret, is refused and changes
    // nothing.
    let wamid = message["id"].as_str().expect("wamid");
    let forged = json!({"object": "whatsapp_business_account", "entry": [{"id": "1",
        "changes": [{"field": "messages", "value": {"messaging_product": "whatsapp",
            "metadata": {"phone_number_id": "106540352242922"},
            "statuses": [{"id": wamid, "status": "failed", "timestamp": "1764600000",
                "recipient_id": "573001234567",
                "errors": [{"code": 131026, "title": "Message undeliverable"}]}]}}]}]});
    let (status, refused) = post_webhook(&app, &forged, "not-the-app-secret").await;
    assert_eq!(status, 401, "{refused}");
    let again = &notices(&app, &query).await[0];
    assert_eq!(again, notice, "a forged webhook changes nothing");
    // Signed with the app's secret, a read is recorded.
    let mut read_status = forged.clone();
    read_status["entry"][0]["changes"][0]["value"]["statuses"][0]["status"] = json!("read");
    let (status, answer) = post_webhook(&app, &read_status, APP_SECRET).await;
    assert_eq!((status, &answer["recorded"]), (200, &json!(1)), "{answer}");
    let read_notice = &notices(&app, &query).await[0];
    assert!(read_notice["read_at"].is_string(), "{read_notice}");
    assert_eq!(read_notice["status"], "sent");
}

async fn a_customer_who_did_not_opt_in_gets_no_whatsapp(app: TestApp) {
    turn_whatsapp_on(&app).await;
    let customer = json!({"email": "beto@example.co", "name": "Beto", "phone": PHONE});
    let (_, sub) = subscribe(&app, customer, "4242424242424242").await;
    let sub_id = sub["id"].as_str().expect("id").to_owned();
    eventually(Duration::from_secs(20), || async {
        let (_, invoices) = read(
            app.get(&format!("/v1/invoices?subscription_id={sub_id}"))
                .await,
        )
        .await;
        invoices["data"].as_array().is_some_and(|d| !d.is_empty())
    })
    .await;
    assert!(
        notices(&app, &format!("subscription_id={sub_id}"))
            .await
            .is_empty(),
        "no opt-in, no WhatsApp notice"
    );
    assert!(sandbox_messages(&app).await.is_empty());
}

async fn the_ingress_refuses_a_forged_webhook_and_answers_metas_handshake(app: TestApp) {
    let unknown = json!({"object": "whatsapp_business_account", "entry": [{"id": "1",
        "changes": [{"field": "messages", "value": {"messaging_product": "whatsapp",
            "metadata": {"phone_number_id": "106540352242922"},
            "statuses": [{"id": "wamid.nobody", "status": "delivered",
                "timestamp": "1764600000", "recipient_id": "573001234567"}]}}]}]});
    // No app secret yet: nothing can be verified.
    let (status, _) = post_webhook(&app, &unknown, APP_SECRET).await;
    assert_eq!(status, 401);
    turn_whatsapp_on(&app).await;
    let (status, _) = post_webhook(&app, &unknown, "wrong").await;
    assert_eq!(status, 401);
    let unsigned = app
        .client
        .post(app.url(&format!("/webhooks/whatsapp/{}", app.account_id)))
        .json(&unknown)
        .send()
        .await
        .expect("send");
    assert_eq!(unsigned.status(), 401);
    let (status, answer) = post_webhook(&app, &unknown, APP_SECRET).await;
    assert_eq!(status, 200, "an unknown wamid is answered 200: {answer}");
    assert_eq!(answer["recorded"], 0);
    let too_big = json!({"object": "x".repeat(70 * 1024)});
    let (status, _) = post_webhook(&app, &too_big, APP_SECRET).await;
    assert_eq!(status, 413);
    let handshake = |token: &str| {
        app.client.get(app.url(&format!(
            "/webhooks/whatsapp/{}?hub.mode=subscribe&hub.verify_token={token}&hub.challenge=1158201444",
            app.account_id
        )))
    };
    let answered = handshake("verify-me").send().await.expect("send");
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.text().await.expect("text"), "1158201444");
    assert_eq!(handshake("guess").send().await.expect("send").status(), 403);
}

async fn a_cloud_api_that_is_unavailable_leaves_the_notice_to_be_tried_again(app: TestApp) {
    turn_whatsapp_on(&app).await;
    // The sandbox answers this number 503, Meta's "service unavailable".
    let unavailable = format!("+{}", billing::whatsapp::sandbox::UNAVAILABLE);
    let (customer, sub) = subscribe(&app, opted_in(&unavailable), "4242424242424242").await;
    let sub_id = sub["id"].as_str().expect("id").to_owned();
    let query = format!("subscription_id={sub_id}&kind=receipt");
    eventually(Duration::from_secs(20), || async {
        notices(&app, &query)
            .await
            .first()
            .is_some_and(|n| n["last_error"].is_string())
    })
    .await;
    let notice = &notices(&app, &query).await[0];
    assert_eq!(
        notice["status"], "scheduled",
        "a 503 is tried again: {notice}"
    );
    assert!(
        notice["last_error"]
            .as_str()
            .expect("error")
            .contains("HTTP 503"),
        "{notice}"
    );
    assert!(!notice.to_string().contains("EAAG-sandbox-token"));
    // The customer's number changes; a minute later by the account's clock it goes.
    let (status, changed) = read(
        app.request(
            Method::PATCH,
            &format!("/v1/customers/{}", customer["id"].as_str().expect("id")),
        )
        .json(&json!({"phone": PHONE}))
        .send()
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    let (status, _) = read(
        app.post("/v1/test-helpers/clock/advance", json!({"seconds": 61}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    // The advance's flush or the worker's own pass (which may have taken it first) sends it.
    eventually(Duration::from_secs(10), || async {
        notices(&app, &query).await[0]["status"] == "sent"
    })
    .await;
    let notice = &notices(&app, &query).await[0];
    assert_eq!(notice["attempts"], 2, "{notice}");
}

async fn a_failed_payment_goes_through_one_channel_a_week(app: TestApp) {
    let sink = crate::notices::SmtpSink::start();
    crate::notices::turn_email_on(&app, &sink).await;
    turn_whatsapp_on(&app).await;
    let (_, sub) = subscribe(&app, opted_in(PHONE), "4111111111111111").await;
    let sub_id = sub["id"].as_str().expect("id").to_owned();
    let query = format!("subscription_id={sub_id}&kind=payment_failed");
    eventually(Duration::from_secs(20), || async {
        notices(&app, &query).await.len() >= 2
    })
    .await;
    // At the first instant the law allows two days on, the first decline's notices are due.
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let now = chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now"))
        .expect("rfc3339")
        .with_timezone(&chrono::Utc);
    let target = billing::domain::collection_hours::next_allowed(now + chrono::Duration::days(2));
    let seconds = (target - now).num_seconds() + 1;
    let (status, _) = read(
        app.post(
            "/v1/test-helpers/clock/advance",
            json!({"seconds": seconds}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let listed = notices(&app, &query).await;
    // The list is newest first: the first decline's pair is at its end.
    let first_cause: Vec<&Value> = listed
        .iter()
        .filter(|n| n["created_at"] == listed.last().expect("one")["created_at"])
        .collect();
    assert_eq!(first_cause.len(), 2, "one a channel: {listed:#?}");
    let sent: Vec<_> = first_cause
        .iter()
        .filter(|n| n["status"] == "sent")
        .collect();
    let suppressed: Vec<_> = first_cause
        .iter()
        .filter(|n| n["status"] == "suppressed")
        .collect();
    assert_eq!(
        (sent.len(), suppressed.len()),
        (1, 1),
        "one channel a week: {first_cause:#?}"
    );
    assert_ne!(sent[0]["channel"], suppressed[0]["channel"]);
    assert!(
        suppressed[0]["suppressed_reason"]
            .as_str()
            .expect("reason")
            .contains("Ley 2300"),
        "{first_cause:#?}"
    );
    // No later collection message this week goes through the other channel.
    let other = suppressed[0]["channel"].clone();
    assert!(
        listed
            .iter()
            .filter(|n| n["channel"] == other)
            .all(|n| n["status"] != "sent"),
        "{listed:#?}"
    );
}

/// Reminders go by WhatsApp too (its templates in docs/notices.md): an annual subscription's
/// renewal, 7 days before it, to the customer who opted in, with the plan, the amount and the
/// date; once, however often the window is looked at.
async fn an_annual_renewal_is_announced_by_whatsapp_to_a_customer_who_opted_in(app: TestApp) {
    turn_whatsapp_on(&app).await;
    app.top_up(100_000_000).await;
    let plan = app.create_plan("Plan Pro", 3_000_000, 30_000_000).await;
    let (status, customer) = read(app.post("/v1/customers", opted_in(PHONE)).await).await;
    assert_eq!(status, 201, "{customer}");
    let token = crate::common::card_token(&app, "4242424242424242").await;
    let (_, method) = read(
        app.post(
            &format!(
                "/v1/customers/{}/payment-methods",
                customer["id"].as_str().expect("id")
            ),
            token.payment_method(),
        )
        .await,
    )
    .await;
    let (status, sub) = read(
        app.post(
            "/v1/subscriptions",
            json!({"customer_id": customer["id"], "plan_id": plan["id"], "cycle": "annual",
                "payment_method_id": method["id"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{sub}");
    let sub_id = sub["id"].as_str().expect("id").to_owned();
    // Six days before the window opens nothing is announced; a day later it is.
    let year = 365 * 86_400;
    crate::subscriptions::advance(&app, year - 8 * 86_400).await;
    let query = format!("subscription_id={sub_id}&kind=renewal_upcoming");
    assert!(notices(&app, &query).await.is_empty());
    crate::subscriptions::advance(&app, 2 * 86_400).await;
    sent_first(&app, &query).await;
    crate::subscriptions::advance(&app, 3_600).await;
    let listed = notices(&app, &query).await;
    assert_eq!(listed.len(), 1, "once: {listed:?}");
    assert_eq!(listed[0]["channel"], "whatsapp");
    let messages = sandbox_messages(&app).await;
    let message = messages
        .iter()
        .find(|m| m["template"] == "renewal_upcoming")
        .expect("the reminder reached the sandbox");
    let parameters = message["parameters"].as_array().expect("parameters");
    assert_eq!(parameters.len(), 5, "{message}");
    assert_eq!(parameters[0], "Ana Gómez");
    assert_eq!(parameters[2], "Plan Pro");
    assert_eq!(parameters[3], "$ 300.000,00", "the annual price: {message}");
    let (_, now) = read(app.get(&format!("/v1/subscriptions/{sub_id}")).await).await;
    let renews = now["current_period_end"]
        .as_str()
        .expect("period end")
        .to_owned();
    assert!(
        parameters[4].as_str().expect("date").contains(&renews[..4]),
        "the renewal's date ({renews}): {message}"
    );
}

/// Meta may report on a message before the send that made it has recorded its wamid. While a
/// WhatsApp send of the account is under way (a notice claimed by a worker), a status naming an
/// unknown wamid is answered 503 with `Retry-After`, and Meta sends it again; with none under
/// way an unknown wamid is someone else's, and is answered 200 with nothing recorded.
async fn a_status_that_outruns_its_send_is_refused_until_the_wamid_is_recorded(app: TestApp) {
    use sea_orm::{ConnectionTrait, Database};
    turn_whatsapp_on(&app).await;
    let (_, sub) = subscribe(&app, opted_in(PHONE), "4242424242424242").await;
    let query = format!(
        "subscription_id={}&kind=receipt",
        sub["id"].as_str().expect("id")
    );
    let notice = sent_first(&app, &query).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let unknown = json!({"object": "whatsapp_business_account", "entry": [{"id": "1",
        "changes": [{"field": "messages", "value": {"messaging_product": "whatsapp",
            "metadata": {"phone_number_id": "106540352242922"},
            "statuses": [{"id": "wamid.not-recorded-yet", "status": "delivered",
                "timestamp": "1764600000", "recipient_id": "573001234567"}]}}]}]});
    let (status, answer) = post_webhook(&app, &unknown, APP_SECRET).await;
    assert_eq!((status, &answer["recorded"]), (200, &json!(0)), "{answer}");
    // The notice as a worker holds it while its send is under way.
    let db = Database::connect(app.database_url.as_str())
        .await
        .expect("connect");
    let hold = |claimed: bool| {
        format!(
            "UPDATE notices SET status = '{}', claim = {} WHERE id = '{notice}'",
            if claimed { "scheduled" } else { "sent" },
            if claimed { "'a-worker'" } else { "NULL" }
        )
    };
    db.execute_unprepared(&hold(true)).await.expect("claim");
    let raw = serde_json::to_vec(&unknown).expect("json");
    let refused = app
        .client
        .post(app.url(&format!("/webhooks/whatsapp/{}", app.account_id)))
        .header("x-hub-signature-256", signature::sign(APP_SECRET, &raw))
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .expect("send");
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    db.execute_unprepared(&hold(false)).await.expect("release");
    let (status, _) = post_webhook(&app, &unknown, APP_SECRET).await;
    assert_eq!(
        status, 200,
        "nothing under way: an unknown wamid is not ours"
    );
}
