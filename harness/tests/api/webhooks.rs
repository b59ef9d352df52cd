//! Issue 5 through HTTP: endpoints registered over the API, events delivered to real
//! receivers (axum servers on random ports), signatures checked with an independent HMAC,
//! retries on schedule under the test clock, and a slow endpoint that delays no other.

use crate::common::receiver::{Receiver, Reply, signature_is_valid};
use crate::common::{TestApp, eventually, read};
use crate::subscriptions::{advance, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

crate::db_tests!(
    endpoints_are_validated_listed_patched_and_deleted,
    every_event_type_arrives_signed_with_the_subscriptions_metadata,
    a_500_is_retried_five_seconds_later_and_then_delivered,
    the_retry_schedule_runs_on_the_test_clock_and_ends_failed,
    a_disabled_endpoint_gets_nothing_and_redeliver_queues_again,
    a_hanging_endpoint_delays_no_other_endpoint,
);

async fn register(app: &TestApp, url: &str, events: Value) -> (String, String) {
    let (status, body) = read(
        app.post(
            "/v1/webhook-endpoints",
            json!({"url": url, "events": events}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    (
        body["id"].as_str().expect("id").to_owned(),
        body["secret"].as_str().expect("secret").to_owned(),
    )
}

async fn deliveries(app: &TestApp, endpoint: &str) -> Vec<Value> {
    let (status, page) = read(
        app.get(&format!(
            "/v1/webhook-endpoints/{endpoint}/deliveries?limit=100"
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().expect("data").clone()
}

async fn endpoints_are_validated_listed_patched_and_deleted(app: TestApp) {
    for (body, param) in [
        (
            json!({"url": "ftp://example.com/x", "events": ["charge.approved"]}),
            "url",
        ),
        (
            json!({"url": "not a url", "events": ["charge.approved"]}),
            "url",
        ),
        (
            json!({"url": "https://example.com/x", "events": ["charge.disputed"]}),
            "events",
        ),
        (
            json!({"url": "https://example.com/x", "events": []}),
            "events",
        ),
        (json!({"url": "https://example.com/x"}), "events"),
    ] {
        let (status, error) = read(app.post("/v1/webhook-endpoints", body.clone()).await).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request");
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    let (id, secret) = register(
        &app,
        "https://example.com/hooks",
        json!(["charge.approved"]),
    )
    .await;
    assert!(id.starts_with("we_"));
    assert!(secret.starts_with("whsec_") && secret.len() > 30);

    let (_, list) = read(app.get("/v1/webhook-endpoints").await).await;
    assert_eq!(list["data"][0]["id"], id.as_str());
    assert!(list["data"][0].get("secret").is_none(), "{list}");
    assert!(!list.to_string().contains(&secret));
    let (_, one) = read(app.get(&format!("/v1/webhook-endpoints/{id}")).await).await;
    assert!(one.get("secret").is_none());

    let patch = |body: Value| {
        app.request(Method::PATCH, &format!("/v1/webhook-endpoints/{id}"))
            .json(&body)
            .send()
    };
    let (status, patched) = read(
        patch(json!({"active": false, "events": ["charge.declined", "subscription.created"], "url": "https://example.org/h"}))
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["active"], false);
    assert_eq!(patched["url"], "https://example.org/h");
    assert_eq!(
        patched["events"],
        json!(["charge.declined", "subscription.created"])
    );
    let (status, _) = read(patch(json!({"events": ["nope"]})).await.expect("send")).await;
    assert_eq!(status, 400);

    let (status, missing) = read(
        app.request(Method::PATCH, "/v1/webhook-endpoints/we_missing")
            .json(&json!({"active": true}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["type"], "invalid_request");

    let delete = app
        .request(Method::DELETE, &format!("/v1/webhook-endpoints/{id}"))
        .send()
        .await
        .expect("send");
    assert_eq!(delete.status(), 200);
    let (status, _) = read(app.get(&format!("/v1/webhook-endpoints/{id}")).await).await;
    assert_eq!(status, 404);
    let again = app
        .request(Method::DELETE, &format!("/v1/webhook-endpoints/{id}"))
        .send()
        .await
        .expect("send");
    assert_eq!(again.status(), 404);

    // Another account's key finds nothing of this one.
    let (other_id, _) = register(&app, "https://example.com/o", json!(["*"])).await;
    let other = app.create_account("Other").await;
    let response = app
        .client
        .get(app.url(&format!("/v1/webhook-endpoints/{other_id}")))
        .bearer_auth(other["api_key"].as_str().expect("key"))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 404);
}

async fn every_event_type_arrives_signed_with_the_subscriptions_metadata(app: TestApp) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let (endpoint, secret) = register(&app, &receiver.url, json!(["*"])).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let bigger = app.create_plan("Max", 5_000_000, 50_000_000).await;
    let act = async |path: &str, body: Value| {
        app.post(&format!("/v1/subscriptions/{id}/{path}"), body)
            .await
    };
    assert_eq!(
        act(
            "change-plan",
            json!({"plan_id": bigger["id"], "prorate": false})
        )
        .await
        .status(),
        200
    );
    assert_eq!(act("pause", json!({})).await.status(), 200);
    assert_eq!(act("resume", json!({})).await.status(), 200);
    // A declining card makes the next renewal fail: charge.declined and subscription.past_due.
    let token = crate::subscriptions::card_token(&app, "4111111111111111").await;
    let (status, bad_card) = read(
        app.post(
            &format!("/v1/customers/{}/payment-methods", shop.customer),
            token.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{bad_card}");
    let patched = app
        .request(Method::PATCH, &format!("/v1/subscriptions/{id}"))
        .json(&json!({"default_payment_method_id": bad_card["id"]}))
        .send()
        .await
        .expect("send");
    assert_eq!(patched.status(), 200);
    advance(&app, 32 * 86_400).await;
    assert_eq!(
        act("cancel", json!({"at_period_end": false}))
            .await
            .status(),
        200
    );

    let (_, page) = read(
        app.get(&format!("/v1/events?subscription_id={id}&limit=100"))
            .await,
    )
    .await;
    let events = page["data"].as_array().expect("data").clone();
    let expected: BTreeSet<&str> = [
        "subscription.created",
        "subscription.canceled",
        "subscription.paused",
        "subscription.resumed",
        "subscription.past_due",
        "subscription.plan_changed",
        "charge.approved",
        "charge.declined",
        "invoice.created",
    ]
    .into();
    let seen: BTreeSet<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(seen, expected);

    eventually(Duration::from_secs(20), || async {
        receiver.count() >= events.len()
    })
    .await;
    let received = receiver.received();
    assert_eq!(received.len(), events.len(), "each event exactly once");
    for delivery in &received {
        assert!(signature_is_valid(&secret, delivery), "bad signature");
        assert!(!signature_is_valid("whsec_wrong", delivery));
        assert!(delivery.body.len() <= 64 * 1024);
        let body: Value = serde_json::from_slice(&delivery.body).expect("json");
        assert_eq!(body["data"]["subscription_id"], id.as_str());
        assert_eq!(body["data"]["metadata"], json!({"order": "A-1"}));
        let stored = events
            .iter()
            .find(|e| e["id"] == body["id"])
            .expect("a stored event");
        assert_eq!(&body, stored, "the delivered payload is the stored event");
        assert!(body["created"].as_str().is_some_and(|c| c.ends_with('Z')));
        if body["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("charge."))
        {
            assert!(
                body["data"]["charge_attempt_id"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("ch_"))
            );
            assert!(body["data"]["amount_in_cents"].is_i64());
            let status = if body["type"] == "charge.approved" {
                "APPROVED"
            } else {
                "DECLINED"
            };
            assert_eq!(body["data"]["status"], status);
        } else {
            assert!(body["data"].get("status").is_none(), "{body}");
        }
    }
    // The receiver has answered; each attempt's record commits just after.
    eventually(Duration::from_secs(10), || async {
        let log = deliveries(&app, &endpoint).await;
        log.len() == events.len() && log.iter().all(|d| d["status"] == "delivered")
    })
    .await;
    for delivery in &deliveries(&app, &endpoint).await {
        assert_eq!(delivery["attempt_count"], 1);
        assert_eq!(delivery["attempts"][0]["status_code"], 200);
        assert!(delivery["next_attempt_at"].is_null());
    }
}

async fn a_500_is_retried_five_seconds_later_and_then_delivered(app: TestApp) {
    let receiver = Receiver::start(&[Reply::Status(500)], Reply::Status(200)).await;
    let (endpoint, secret) = register(&app, &receiver.url, json!(["subscription.created"])).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    // Only subscription.created is subscribed: the charge events stay undelivered here.
    subscribe(&app, &shop, &method, json!({})).await;
    eventually(Duration::from_secs(20), || async { receiver.count() >= 2 }).await;
    let received = receiver.received();
    assert_eq!(received.len(), 2);
    assert_eq!(
        received[0].body, received[1].body,
        "the same event, byte for byte"
    );
    assert!(received.iter().all(|r| signature_is_valid(&secret, r)));
    let gap = received[1].at - received[0].at;
    assert!(
        gap >= Duration::from_millis(4_500) && gap < Duration::from_secs(9),
        "second attempt {gap:?} after the first"
    );
    eventually(Duration::from_secs(5), || async {
        deliveries(&app, &endpoint).await[0]["status"] == "delivered"
    })
    .await;
    let log = deliveries(&app, &endpoint).await;
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["attempt_count"], 2);
    let codes: Vec<&Value> = log[0]["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| &a["status_code"])
        .collect();
    assert_eq!(codes, [&json!(500), &json!(200)]);
    assert_eq!(log[0]["attempts"][0]["error"], "the endpoint answered 500");
}

async fn clock_now(app: &TestApp) -> chrono::DateTime<chrono::Utc> {
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now"))
        .expect("rfc3339")
        .with_timezone(&chrono::Utc)
}

async fn the_retry_schedule_runs_on_the_test_clock_and_ends_failed(app: TestApp) {
    let receiver = Receiver::start(&[], Reply::Status(503)).await;
    let (endpoint, _) = register(&app, &receiver.url, json!(["subscription.created"])).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &shop, &method, json!({})).await;
    eventually(Duration::from_secs(10), || async {
        deliveries(&app, &endpoint)
            .await
            .first()
            .is_some_and(|d| d["attempt_count"] == 1)
    })
    .await;
    // Operators see the endpoint's actor with its next retry. The actor sets it just after it
    // commits the attempt, so a reader may briefly see the attempt before the timer.
    let expected = deliveries(&app, &endpoint).await[0]["next_attempt_at"].clone();
    assert!(expected.is_string(), "a retry is scheduled");
    eventually(Duration::from_secs(5), || async {
        let (_, tree) = read(
            app.admin(Method::GET, "/admin/actors?kind=webhook_endpoint&limit=100")
                .send()
                .await
                .expect("send"),
        )
        .await;
        let found = tree["children"]
            .as_array()
            .expect("children")
            .iter()
            .find(|a| a["id"] == endpoint.as_str())
            .cloned()
            .unwrap_or_default();
        found["kind"] == "webhook_endpoint" && found["next_due_at"] == expected
    })
    .await;
    let schedule = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];
    for (n, wait) in schedule.iter().enumerate() {
        let log = deliveries(&app, &endpoint).await;
        let delivery = &log[0];
        assert_eq!(delivery["status"], "pending", "{delivery}");
        let next = chrono::DateTime::parse_from_rfc3339(
            delivery["next_attempt_at"].as_str().expect("next"),
        )
        .expect("rfc3339");
        let ahead = (next.with_timezone(&chrono::Utc) - clock_now(&app).await).num_milliseconds();
        // The retry is due `wait` after the failed attempt, plus at most 10 % of jitter.
        assert!(
            ahead <= wait * 1_100 && ahead >= wait * 1_000 - 3_000,
            "retry {} is due in {ahead} ms, expected about {wait} s",
            n + 1
        );
        advance(&app, wait + wait / 10 + 1).await;
        let log = deliveries(&app, &endpoint).await;
        assert_eq!(
            log[0]["attempt_count"],
            n as i64 + 2,
            "after waiting {wait} s: {}",
            log[0]
        );
    }
    let log = deliveries(&app, &endpoint).await;
    assert_eq!(log[0]["status"], "failed");
    assert!(log[0]["next_attempt_at"].is_null());
    assert_eq!(log[0]["attempts"].as_array().expect("attempts").len(), 8);
    assert_eq!(receiver.count(), 8);
    advance(&app, 2 * 86_400).await;
    assert_eq!(receiver.count(), 8, "a failed delivery is not tried again");
}

async fn a_disabled_endpoint_gets_nothing_and_redeliver_queues_again(app: TestApp) {
    let live = Receiver::start(&[], Reply::Status(200)).await;
    let off = Receiver::start(&[], Reply::Status(200)).await;
    let (live_id, _) = register(&app, &live.url, json!(["subscription.created"])).await;
    let (off_id, _) = register(&app, &off.url, json!(["subscription.created"])).await;
    let disabled = app
        .request(Method::PATCH, &format!("/v1/webhook-endpoints/{off_id}"))
        .json(&json!({"active": false}))
        .send()
        .await
        .expect("send");
    assert_eq!(disabled.status(), 200);
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    eventually(Duration::from_secs(10), || async { live.count() == 1 }).await;
    assert!(deliveries(&app, &off_id).await.is_empty());
    let (_, page) = read(
        app.get(&format!(
            "/v1/events?type=subscription.created&subscription_id={}",
            sub["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    let event_id = page["data"][0]["id"].as_str().expect("event").to_owned();
    let (status, redelivery) = read(
        app.post(&format!("/v1/events/{event_id}/redeliver"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 202, "{redelivery}");
    assert_eq!(redelivery["deliveries"].as_array().expect("list").len(), 1);
    assert_eq!(redelivery["deliveries"][0]["endpoint_id"], live_id.as_str());
    eventually(Duration::from_secs(10), || async { live.count() == 2 }).await;
    let received = live.received();
    assert_eq!(received[0].body, received[1].body);
    assert_eq!(off.count(), 0);
    let (status, _) = read(
        app.post("/v1/events/evt_missing/redeliver", json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 404);
}

/// 10 endpoints, one of which never answers; 1,000 events each (10,000 deliveries). The nine
/// healthy receivers get all of theirs while the hanging one still holds its attempts open.
async fn a_hanging_endpoint_delays_no_other_endpoint(app: TestApp) {
    const EVENTS: usize = 1_000;
    app.lift_rate_limit().await;
    let started = std::time::Instant::now();
    let hanging = Receiver::start(&[], Reply::Hang).await;
    register(&app, &hanging.url, json!(["*"])).await;
    let mut healthy = Vec::new();
    for _ in 0..9 {
        let receiver = Receiver::start(&[], Reply::Status(200)).await;
        register(&app, &receiver.url, json!(["*"])).await;
        healthy.push(receiver);
    }
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let (_, page) = read(
        app.get(&format!(
            "/v1/events?type=subscription.created&subscription_id={}",
            sub["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    let event_id = page["data"][0]["id"].as_str().expect("event").to_owned();
    // subscription.created, charge.approved and invoice.created, then the rest as
    // redeliveries of one event.
    let mut sent = 3;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..EVENTS - 3 {
        let request = app.request(Method::POST, &format!("/v1/events/{event_id}/redeliver"));
        calls.spawn(async move { request.send().await.map(|r| r.status().as_u16()) });
        sent += 1;
        while calls.len() >= 8 {
            let status = calls
                .join_next()
                .await
                .expect("task")
                .expect("join")
                .expect("send");
            assert_eq!(status, 202);
        }
    }
    while let Some(done) = calls.join_next().await {
        assert_eq!(done.expect("join").expect("send"), 202);
    }
    assert_eq!(sent, EVENTS);
    eventually(Duration::from_secs(60), || async {
        healthy.iter().all(|r| r.count() >= EVENTS)
    })
    .await;
    for receiver in &healthy {
        assert_eq!(receiver.count(), EVENTS);
    }
    // The hanging endpoint holds at most its concurrency bound (16) open at once: each batch
    // of attempts stays open until the 15 s timeout, so on a slow machine where all this took
    // longer, later batches may have started, but never more than one per 15 s.
    let batches = started.elapsed().as_secs() as usize / 15 + 1;
    assert!(
        hanging.count() <= 16 * batches,
        "{} attempts in {:?}",
        hanging.count(),
        started.elapsed()
    );
}

/// A node whose database connection dies as it records an attempt has still sent the event:
/// the record is written again on a new connection, and the event is not sent a second time.
/// A trigger terminates the connection inserting the first attempt (a sequence, which no
/// rollback undoes, counts the inserts).
#[tokio::test]
async fn an_attempt_whose_record_lost_its_connection_is_recorded_not_sent_again() {
    use crate::common::{Backend, database_url, spawn_on};
    use sea_orm::{ConnectionTrait, Database};

    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let app = spawn_on(url.clone()).await;
    let db = Database::connect(url.as_str()).await.expect("connect");
    for statement in [
        "CREATE SEQUENCE attempts_inserted",
        "CREATE FUNCTION cut_first_attempt() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN IF nextval('attempts_inserted') = 1 THEN \
         PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NEW; END $$",
        "CREATE TRIGGER cut_first_attempt BEFORE INSERT ON webhook_attempts \
         FOR EACH ROW EXECUTE FUNCTION cut_first_attempt()",
    ] {
        db.execute_unprepared(statement).await.expect("trigger");
    }
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let (endpoint, _) = register(&app, &receiver.url, json!(["subscription.created"])).await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &shop, &method, json!({})).await;
    let one = |sql: &'static str| {
        let db = &db;
        async move {
            db.query_one_raw(sea_orm::Statement::from_string(
                db.get_database_backend(),
                sql,
            ))
            .await
            .expect("query")
            .map(|row| row.try_get_by_index::<i64>(0).expect("count"))
        }
    };
    // Long enough for the sweep (every 30 s) to send a delivery left pending once more; read
    // from the database, which no rate limit guards.
    eventually(Duration::from_secs(70), || async {
        one("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'delivered'").await == Some(1)
    })
    .await;
    let inserted = one("SELECT last_value FROM attempts_inserted")
        .await
        .expect("sequence");
    assert!(inserted >= 2, "the connection was never cut ({inserted})");
    let log = deliveries(&app, &endpoint).await;
    assert_eq!(log[0]["attempt_count"], 1, "{log:?}");
    assert_eq!(receiver.count(), 1, "the event was sent again");
}
