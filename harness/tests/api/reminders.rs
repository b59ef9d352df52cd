//! Issue 47, the reminders time causes (CONTRACT §15), against a real SMTP server and driven by
//! the test clock: a trial over 7 days is told of its end 7 days before it, an annual
//! subscription of its renewal, a card that expires before the next charge 14 days before that
//! charge, with a link that opens the portal's card update while that card is still the one
//! charged; each once, whatever the clock does after; none for what does not qualify.

use crate::common::{TestApp, card_token_expiring, eventually, read};
use crate::notices::{SmtpSink, as_read, notices, turn_email_on};
use crate::subscriptions::advance;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(config = crate::notices::quick_notices;
    a_long_trial_and_an_annual_renewal_are_announced_seven_days_before_once,
    a_card_that_expires_before_the_next_charge_is_announced_with_a_link_to_replace_it,
);

const DAY: i64 = 86_400;

/// A customer of `email` with a 4242 card expiring at the end of `month`/`year`, subscribed to
/// `plan` for `cycle`, with `extra` fields.
async fn subscribe(
    app: &TestApp,
    plan: &Value,
    email: &str,
    (month, year): (&str, &str),
    cycle: &str,
    extra: Value,
) -> Value {
    let (_, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": email, "name": "Ana Gómez"}),
        )
        .await,
    )
    .await;
    let token = card_token_expiring(app, "4242424242424242", month, year).await;
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
    let mut body = json!({"customer_id": customer["id"], "plan_id": plan["id"], "cycle": cycle,
        "payment_method_id": method["id"]});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (status, sub) = read(app.post("/v1/subscriptions", body).await).await;
    assert_eq!(status, 201, "{sub}");
    sub
}

fn id(value: &Value) -> &str {
    value["id"].as_str().expect("id")
}

/// The subjects of the e-mails the sink received, as a mail program reads them.
fn subjects(sink: &SmtpSink) -> Vec<String> {
    let dir = tempfile::tempdir().expect("dir");
    sink.messages()
        .iter()
        .map(|raw| {
            as_read(raw, dir.path())["subject"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

async fn sent(app: &TestApp, query: &str) -> Vec<Value> {
    notices(app, query)
        .await
        .into_iter()
        .filter(|n| n["status"] == "sent")
        .collect()
}

async fn a_long_trial_and_an_annual_renewal_are_announced_seven_days_before_once(app: TestApp) {
    let sink = SmtpSink::start();
    turn_email_on(&app, &sink).await;
    app.top_up(100_000_000).await;
    let plan = app.create_plan("Plan Pro", 3_000_000, 30_000_000).await;
    let trial = subscribe(
        &app,
        &plan,
        "ana@example.co",
        ("08", "30"),
        "monthly",
        json!({"trial_days": 14}),
    )
    .await;
    let short = subscribe(
        &app,
        &plan,
        "beto@example.co",
        ("08", "30"),
        "monthly",
        json!({"trial_days": 5}),
    )
    .await;
    let annual = subscribe(
        &app,
        &plan,
        "cami@example.co",
        ("08", "30"),
        "annual",
        json!({}),
    )
    .await;
    let monthly = subscribe(
        &app,
        &plan,
        "dani@example.co",
        ("08", "30"),
        "monthly",
        json!({}),
    )
    .await;

    // Six days in: nothing is within seven days of the trial's end yet.
    advance(&app, 6 * DAY).await;
    assert!(notices(&app, "kind=trial_ending").await.is_empty());
    // Seven days and an hour in: the 14-day trial ends in under seven days.
    advance(&app, DAY + 3_600).await;
    let trial_query = format!("kind=trial_ending&subscription_id={}", id(&trial));
    eventually(Duration::from_secs(20), || async {
        sent(&app, &trial_query).await.len() == 1
    })
    .await;
    let notice = &sent(&app, &trial_query).await[0];
    assert_eq!(notice["to"], "ana@example.co");
    assert!(
        notice["subject"]
            .as_str()
            .expect("subject")
            .starts_with("Tu periodo de prueba de Plan Pro termina el"),
        "{notice}"
    );
    assert!(subjects(&sink).contains(&notice["subject"].as_str().expect("s").to_owned()));
    assert!(
        notices(
            &app,
            &format!("subscription_id={}&kind=trial_ending", id(&short))
        )
        .await
        .is_empty(),
        "a trial of 7 days or less has no reminder"
    );
    // Its trial ends and it renews: still one.
    advance(&app, 8 * DAY).await;
    assert_eq!(notices(&app, &trial_query).await.len(), 1);

    // 358 days after the start, the annual renewal is 7 days away; the monthly one never is
    // announced.
    advance(&app, 343 * DAY).await;
    let annual_query = format!("kind=renewal_upcoming&subscription_id={}", id(&annual));
    eventually(Duration::from_secs(20), || async {
        sent(&app, &annual_query).await.len() == 1
    })
    .await;
    let notice = &sent(&app, &annual_query).await[0];
    assert!(
        notice["subject"]
            .as_str()
            .expect("subject")
            .starts_with("Tu suscripción anual a Plan Pro se renueva el"),
        "{notice}"
    );
    let dir = tempfile::tempdir().expect("dir");
    let mail = sink
        .messages()
        .iter()
        .map(|raw| as_read(raw, dir.path()))
        .find(|m| m["subject"] == notice["subject"])
        .expect("the renewal's e-mail");
    assert!(
        mail["text"]
            .as_str()
            .expect("text")
            .contains("$ 300.000,00"),
        "the year's amount: {mail}"
    );
    assert!(
        notices(
            &app,
            &format!("subscription_id={}&kind=renewal_upcoming", id(&monthly))
        )
        .await
        .is_empty()
    );
    advance(&app, DAY).await;
    assert_eq!(notices(&app, &annual_query).await.len(), 1, "once");
}

async fn a_card_that_expires_before_the_next_charge_is_announced_with_a_link_to_replace_it(
    app: TestApp,
) {
    let sink = SmtpSink::start();
    turn_email_on(&app, &sink).await;
    app.top_up(100_000_000).await;
    let plan = app.create_plan("Plan Pro", 3_000_000, 30_000_000).await;
    // The account's month: a card that expires at its end expires before a monthly
    // subscription's next charge.
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let now = chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now"))
        .expect("rfc3339")
        .with_timezone(&chrono_tz_colombia());
    let month = format!("{:02}", chrono::Datelike::month(&now));
    let year = format!("{:02}", chrono::Datelike::year(&now) % 100);
    let expiring = subscribe(
        &app,
        &plan,
        "ana@example.co",
        (&month, &year),
        "monthly",
        json!({}),
    )
    .await;
    let lasting = subscribe(
        &app,
        &plan,
        "beto@example.co",
        ("08", "30"),
        "monthly",
        json!({}),
    )
    .await;

    // 17 days later the next charge (a month after the start) is under 14 days away.
    advance(&app, 17 * DAY).await;
    let query = format!("kind=card_expiring&subscription_id={}", id(&expiring));
    eventually(Duration::from_secs(20), || async {
        sent(&app, &query).await.len() == 1
    })
    .await;
    assert!(
        notices(
            &app,
            &format!("kind=card_expiring&subscription_id={}", id(&lasting))
        )
        .await
        .is_empty(),
        "a card that outlives the charge has no reminder"
    );
    let dir = tempfile::tempdir().expect("dir");
    let mail = sink
        .messages()
        .iter()
        .map(|raw| as_read(raw, dir.path()))
        .find(|m| {
            m["subject"]
                .as_str()
                .is_some_and(|s| s.starts_with("Tu tarjeta vence antes de tu próximo pago"))
        })
        .expect("the reminder's e-mail");
    let text = mail["text"].as_str().expect("text");
    assert!(text.contains("4242"), "{text}");
    let link = text
        .split_whitespace()
        .find(|word| word.contains("/pay/pay_"))
        .expect("a link to replace the card")
        .to_owned();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let opened = client.get(&link).send().await.expect("send");
    assert_eq!(opened.status(), 303, "the link opens the card update");
    let location = opened.headers()["location"].to_str().expect("location");
    assert!(location.contains("/portal/"), "{location}");

    // Once the card is replaced the link no longer opens.
    let token = card_token_expiring(&app, "4242424242424242", "08", "30").await;
    let (_, method) = read(
        app.post(
            &format!(
                "/v1/customers/{}/payment-methods",
                expiring["customer_id"].as_str().expect("customer")
            ),
            token.payment_method(),
        )
        .await,
    )
    .await;
    let (status, changed) = read(
        app.request(
            reqwest::Method::PATCH,
            &format!("/v1/subscriptions/{}", id(&expiring)),
        )
        .json(&json!({"default_payment_method_id": method["id"]}))
        .send()
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    let closed = client.get(&link).send().await.expect("send");
    assert_eq!(
        closed.status(),
        404,
        "the card it was about is no longer charged"
    );
    advance(&app, DAY).await;
    assert_eq!(
        notices(&app, &query).await.len(),
        1,
        "once per card and charge date"
    );
}

/// Colombia's offset (UTC−5 all year).
fn chrono_tz_colombia() -> chrono::FixedOffset {
    chrono::FixedOffset::west_opt(5 * 3_600).expect("offset")
}
