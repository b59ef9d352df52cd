//! Issue 4 through HTTP: subscriptions created directly, renewed by the test clock, charged
//! through the sandbox processor and the signed ingress, with their events.

/// Other test modules (webhooks) tokenize cards through here too.
pub(crate) use crate::common::card_token;
use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    immediate_first_charge_then_a_year_of_monthly_renewals,
    trial_ends_into_a_charge,
    failed_card_goes_through_every_retry_to_cancellation,
    pause_across_a_renewal_date_then_resume_charges_a_new_period,
    cancel_at_period_end_cancels_at_the_period_end,
    state_errors_are_409_and_unknown_ids_404,
    change_plan_preview_equals_what_change_plan_charges,
    insufficient_balance_pauses_and_a_top_up_resumes,
    concurrent_actions_on_one_subscription_are_serialised,
    addons_attach_with_proration_and_detach_from_the_next_period,
    the_scheduler_fires_a_due_timer_in_real_time,
    charge_now_answers_with_the_outcome,
    a_new_card_in_past_due_is_used_by_the_next_retry_which_returns_it_to_active,
    downgrades_cycle_changes_trials_and_card_changes,
    two_schedulers_never_load_the_same_due_row,
);

const DAY: i64 = 86_400;

pub(crate) struct Shop {
    pub(crate) customer: String,
    pub(crate) plan: String,
}

/// A customer with a card (`number`) attached through the sandbox, a plan, and a balance.
pub(crate) async fn shop(app: &TestApp, number: &str) -> (Shop, String) {
    let token = card_token(app, number).await;
    let (_, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": "ana@example.co", "name": "Ana"}),
        )
        .await,
    )
    .await;
    let customer = customer["id"].as_str().expect("id").to_owned();
    let (status, method) = read(
        app.post(
            &format!("/v1/customers/{customer}/payment-methods"),
            token.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{method}");
    let plan = app.create_plan("Pro", 3_000_000, 30_000_000).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    app.top_up(10_000_000).await;
    (
        Shop { customer, plan },
        method["id"].as_str().expect("id").to_owned(),
    )
}

pub(crate) async fn subscribe(app: &TestApp, shop: &Shop, method: &str, extra: Value) -> Value {
    let mut body = json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
        "payment_method_id": method, "metadata": {"order": "A-1"}});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (status, sub) = read(app.post("/v1/subscriptions", body).await).await;
    assert_eq!(status, 201, "{sub}");
    sub
}

pub(crate) async fn advance(app: &TestApp, seconds: i64) {
    let (status, body) = read(
        app.post(
            "/v1/test-helpers/clock/advance",
            json!({"seconds": seconds}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

pub(crate) async fn get(app: &TestApp, id: &str) -> Value {
    read(app.get(&format!("/v1/subscriptions/{id}")).await)
        .await
        .1
}

pub(crate) async fn events(app: &TestApp, id: &str) -> Vec<Value> {
    let (_, page) = read(
        app.get(&format!("/v1/events?subscription_id={id}&limit=100"))
            .await,
    )
    .await;
    let mut events = page["data"].as_array().expect("data").clone();
    events.reverse();
    events
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().expect("type").to_owned())
        .collect()
}

async fn immediate_first_charge_then_a_year_of_monthly_renewals(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id");
    assert!(id.starts_with("sub_"));
    assert_eq!(sub["status"], "active");
    advance(&app, 1).await;
    let first = get(&app, id).await;
    assert_eq!(first["next_charge_date"], first["current_period_end"]);
    for month in 1..=12 {
        advance(&app, 31 * DAY).await;
        let now = get(&app, id).await;
        assert_eq!(now["status"], "active", "month {month}: {now}");
    }
    let all = events(&app, id).await;
    let approved: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "charge.approved")
        .collect();
    assert!(
        approved.len() >= 13,
        "first charge and at least 12 renewals: {}",
        approved.len()
    );
    for event in &all {
        assert_eq!(event["data"]["subscription_id"], id);
        assert_eq!(event["data"]["metadata"], json!({"order": "A-1"}));
    }
    for event in &approved {
        assert_eq!(event["data"]["status"], "APPROVED");
        assert_eq!(event["data"]["amount_in_cents"], 3_000_000);
        assert!(
            event["data"]["charge_attempt_id"]
                .as_str()
                .is_some_and(|c| c.starts_with("ch_"))
        );
    }
    let (_, balance) = read(app.get("/v1/balance").await).await;
    let fees = approved.len() as i64 * 45_000;
    assert_eq!(balance["available_cents"], 10_000_000 - fees);
    assert_eq!(balance["reserved_cents"], 0);
    crate::common::assert_invariants(&app).await;
}

async fn trial_ends_into_a_charge(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({"trial_days": 14})).await;
    let id = sub["id"].as_str().expect("id");
    assert_eq!(sub["status"], "trialing");
    assert_eq!(sub["trial_end"], sub["current_period_end"]);
    assert_eq!(sub["trial_end"], sub["next_charge_date"]);
    advance(&app, 13 * DAY).await;
    assert_eq!(get(&app, id).await["status"], "trialing");
    assert!(!types(&events(&app, id).await).contains(&"charge.approved".to_owned()));
    advance(&app, 2 * DAY).await;
    let after = get(&app, id).await;
    assert_eq!(after["status"], "active");
    assert_eq!(
        after["current_period_start"], sub["trial_end"],
        "the first period starts at trial end"
    );
    assert_eq!(
        types(&events(&app, id).await),
        ["subscription.created", "charge.approved", "invoice.created"]
    );
}

async fn failed_card_goes_through_every_retry_to_cancellation(app: TestApp) {
    let (shop, method) = shop(&app, "4111111111111111").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id");
    advance(&app, 60).await;
    let failed = get(&app, id).await;
    assert_eq!(failed["status"], "past_due");
    assert_eq!(failed["failed_attempts"], 1);
    for (day, attempts) in [(1, 2), (3, 3), (5, 4)] {
        advance(&app, if day == 1 { DAY } else { 2 * DAY }).await;
        let now = get(&app, id).await;
        assert_eq!(
            (now["status"].clone(), now["failed_attempts"].clone()),
            (json!("past_due"), json!(attempts)),
            "day {day}"
        );
    }
    advance(&app, 2 * DAY).await;
    assert_eq!(get(&app, id).await["status"], "canceled");
    assert_eq!(
        types(&events(&app, id).await),
        [
            "subscription.created",
            "charge.declined",
            "subscription.past_due",
            "charge.declined",
            "charge.declined",
            "charge.declined",
            "charge.declined",
            "subscription.canceled"
        ]
    );
    let declined = events(&app, id)
        .await
        .into_iter()
        .find(|e| e["type"] == "charge.declined")
        .expect("declined");
    assert_eq!(declined["data"]["status"], "DECLINED");
    let (_, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(
        (
            balance["available_cents"].clone(),
            balance["reserved_cents"].clone()
        ),
        (json!(10_000_000), json!(0)),
        "declines cost no fee"
    );
    crate::common::assert_invariants(&app).await;
}

async fn pause_across_a_renewal_date_then_resume_charges_a_new_period(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 1).await;
    let (status, paused) = read(
        app.post(&format!("/v1/subscriptions/{id}/pause"), json!({}))
            .await,
    )
    .await;
    assert_eq!((status, paused["status"].clone()), (200, json!("paused")));
    advance(&app, 45 * DAY).await;
    let approved_before = types(&events(&app, &id).await)
        .iter()
        .filter(|t| *t == "charge.approved")
        .count();
    assert_eq!(approved_before, 1, "no renewal while paused");
    let (status, resumed) = read(
        app.post(&format!("/v1/subscriptions/{id}/resume"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{resumed}");
    advance(&app, 1).await;
    let now = get(&app, &id).await;
    assert_eq!(now["status"], "active");
    let clock = read(app.get("/v1/test-helpers/clock").await).await.1["now"]
        .as_str()
        .expect("now")
        .to_owned();
    assert!(now["current_period_start"].as_str().expect("start") <= clock.as_str());
    let kinds = types(&events(&app, &id).await);
    assert_eq!(
        kinds.iter().filter(|t| *t == "charge.approved").count(),
        2,
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&"subscription.paused".to_owned())
            && kinds.contains(&"subscription.resumed".to_owned())
    );
}

async fn cancel_at_period_end_cancels_at_the_period_end(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 1).await;
    let (status, sub) = read(
        app.post(&format!("/v1/subscriptions/{id}/cancel"), json!({}))
            .await,
    )
    .await;
    assert_eq!(
        (
            status,
            sub["status"].clone(),
            sub["cancel_at_period_end"].clone()
        ),
        (200, json!("active"), json!(true))
    );
    advance(&app, 32 * DAY).await;
    assert_eq!(get(&app, &id).await["status"], "canceled");
    let kinds = types(&events(&app, &id).await);
    assert_eq!(
        kinds.iter().filter(|t| *t == "charge.approved").count(),
        1,
        "no renewal after cancel: {kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("subscription.canceled")
    );
}

async fn state_errors_are_409_and_unknown_ids_404(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, _) = read(
        app.post(&format!("/v1/subscriptions/{id}/resume"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 409, "resume of an active subscription");
    let (status, sub) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/cancel"),
            json!({"at_period_end": false}),
        )
        .await,
    )
    .await;
    assert_eq!((status, sub["status"].clone()), (200, json!("canceled")));
    for action in ["pause", "cancel", "charge-now"] {
        let (status, body) = read(
            app.post(&format!("/v1/subscriptions/{id}/{action}"), json!({}))
                .await,
        )
        .await;
        assert_eq!(status, 409, "{action} on canceled");
        assert_eq!(body["error"]["type"], "invalid_request");
    }
    for action in ["pause", "cancel", "resume", "charge-now"] {
        let (status, _) = read(
            app.post(
                &format!("/v1/subscriptions/sub_missing/{action}"),
                json!({}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 404, "{action}");
    }
    let (status, _) = read(app.get("/v1/subscriptions/sub_missing").await).await;
    assert_eq!(status, 404);
    let (status, body) = read(
        app.post(
            "/v1/subscriptions",
            json!({"customer_id": shop.customer, "plan_id": shop.plan,
        "cycle": "weekly", "payment_method_id": method}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (400, json!("cycle"))
    );
    let (status, body) = read(
        app.post(
            "/v1/subscriptions",
            json!({"customer_id": shop.customer, "plan_id": shop.plan,
        "cycle": "monthly", "payment_method_id": method, "start_date": "2001-01-01T00:00:00Z"}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (400, json!("start_date"))
    );
    let (_, list) = read(app.get("/v1/subscriptions?status=canceled").await).await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1));
}

async fn change_plan_preview_equals_what_change_plan_charges(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 1).await;
    advance(&app, 10 * DAY).await;
    let bigger = app.create_plan("Max", 6_000_000, 60_000_000).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, preview) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/change-plan/preview"),
            json!({"plan_id": bigger}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["immediate_charge"], true);
    let expected = preview["prorated_amount_cents"].as_i64().expect("amount");
    assert!(expected > 0 && expected < 3_000_000);
    // subscription.created, charge.approved and invoice.created.
    assert_eq!(
        types(&events(&app, &id).await).len(),
        3,
        "the preview emitted nothing"
    );
    let (status, changed) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/change-plan"),
            json!({"plan_id": bigger}),
        )
        .await,
    )
    .await;
    assert_eq!((status, changed["plan_id"].clone()), (200, json!(bigger)));
    advance(&app, 1).await;
    let all = events(&app, &id).await;
    let charged = all
        .iter()
        .rev()
        .find(|e| e["type"] == "charge.approved")
        .expect("proration charge");
    // The test clock moved a second between preview and change: allow that second's worth.
    let actual = charged["data"]["amount_in_cents"].as_i64().expect("amount");
    assert!(
        (actual - expected).abs() <= 2,
        "preview {expected} vs charged {actual}"
    );
    assert!(types(&all).contains(&"subscription.plan_changed".to_owned()));
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/change-plan"),
            json!({"plan_id": bigger}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "same plan and cycle");
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/change-plan"),
            json!({"plan_id": "plan_missing"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    crate::common::assert_invariants(&app).await;
}

async fn insufficient_balance_pauses_and_a_top_up_resumes(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let expensive = app.create_plan("Huge", 1_000_000_000, 1_000_000_000).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let shop = Shop {
        plan: expensive,
        ..shop
    };
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(
        get(&app, &id).await["status"],
        "paused_insufficient_balance"
    );
    app.top_up(20_000_000).await;
    advance(&app, 1).await;
    assert_eq!(get(&app, &id).await["status"], "active");
    let kinds = types(&events(&app, &id).await);
    assert!(
        kinds.contains(&"subscription.resumed".to_owned())
            && kinds.contains(&"charge.approved".to_owned()),
        "{kinds:?}"
    );
    crate::common::assert_invariants(&app).await;
}

async fn concurrent_actions_on_one_subscription_are_serialised(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 1).await;
    // Lift the rate limit for this burst.
    app.lift_rate_limit().await;
    let requests = (0..1000).map(|i| {
        let action = if i % 2 == 0 { "pause" } else { "resume" };
        app.request(Method::POST, &format!("/v1/subscriptions/{id}/{action}"))
            .json(&json!({}))
            .send()
    });
    let responses = futures::future::join_all(requests).await;
    let ok = responses
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status() == 200))
        .count();
    let conflicts = responses
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status() == 409))
        .count();
    assert_eq!(ok + conflicts, 1000);
    // Every accepted action emitted exactly one event, and they alternate: no lost update.
    let kinds: Vec<String> = types(&events_all(&app, &id).await)
        .into_iter()
        .filter(|t| t.starts_with("subscription.p") || t == "subscription.resumed")
        .collect();
    assert_eq!(kinds.len(), ok);
    for pair in kinds.windows(2) {
        assert_ne!(pair[0], pair[1], "two pauses or two resumes in a row");
    }
}

async fn events_all(app: &TestApp, id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!("/v1/events?subscription_id={id}&limit=100{cursor}");
        let (_, page) = read(app.get(&path).await).await;
        out.extend(page["data"].as_array().expect("data").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    out.reverse();
    out
}

async fn addons_attach_with_proration_and_detach_from_the_next_period(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 1).await;
    let (_, addon) = read(app.post("/v1/addons", json!({"name": "Seat", "monthly_amount_cents": 1_000_000, "annual_amount_cents": 10_000_000})).await).await;
    let addon_id = addon["id"].as_str().expect("id").to_owned();
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/addons"),
            json!({"addon_id": addon_id}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/addons"),
            json!({"addon_id": addon_id}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409, "already attached");
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/addons"),
            json!({"addon_id": "addon_missing"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    let (_, inactive) = read(
        app.post(
            "/v1/addons",
            json!({"name": "Old", "monthly_amount_cents": 5, "annual_amount_cents": 5}),
        )
        .await,
    )
    .await;
    let inactive_id = inactive["id"].as_str().expect("id");
    app.request(Method::PATCH, &format!("/v1/addons/{inactive_id}"))
        .json(&json!({"active": false}))
        .send()
        .await
        .expect("send");
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/addons"),
            json!({"addon_id": inactive_id}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422, "deactivated add-on");
    advance(&app, 1).await;
    let approved: Vec<i64> = events(&app, &id)
        .await
        .iter()
        .filter(|e| e["type"] == "charge.approved")
        .map(|e| e["data"]["amount_in_cents"].as_i64().expect("amount"))
        .collect();
    // The first month, then the add-on prorated for (almost) the whole period.
    assert_eq!(approved.len(), 2);
    assert!(
        approved[1] > 990_000 && approved[1] <= 1_000_000,
        "{approved:?}"
    );
    let (_, listed) = read(app.get(&format!("/v1/subscriptions/{id}/addons")).await).await;
    assert_eq!(listed["data"][0]["id"], addon_id.as_str());

    // The renewal bills plan + add-on; after a detach the next one bills the plan alone.
    advance(&app, 31 * DAY).await;
    let detach = app
        .request(
            Method::DELETE,
            &format!("/v1/subscriptions/{id}/addons/{addon_id}"),
        )
        .send()
        .await
        .expect("send");
    assert_eq!(detach.status(), 200);
    let again = app
        .request(
            Method::DELETE,
            &format!("/v1/subscriptions/{id}/addons/{addon_id}"),
        )
        .send()
        .await
        .expect("send");
    assert_eq!(again.status(), 404, "not attached any more");
    advance(&app, 31 * DAY).await;
    let approved: Vec<i64> = events(&app, &id)
        .await
        .iter()
        .filter(|e| e["type"] == "charge.approved")
        .map(|e| e["data"]["amount_in_cents"].as_i64().expect("amount"))
        .collect();
    assert_eq!(&approved[2..], &[4_000_000, 3_000_000]);
    crate::common::assert_invariants(&app).await;
}

async fn the_scheduler_fires_a_due_timer_in_real_time(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    // The wait below polls the API; lift the rate limit so that a slow machine cannot hit it.
    app.lift_rate_limit().await;
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let now =
        chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now")).expect("rfc3339");
    let start = (now + chrono::Duration::seconds(2)).to_rfc3339();
    let id = subscribe(&app, &shop, &method, json!({"start_date": start})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert!(!types(&events(&app, &id).await).contains(&"charge.approved".to_owned()));
    // No clock advance: the background scheduler must wake the actor when start_date passes.
    crate::common::eventually(std::time::Duration::from_secs(20), || async {
        types(&events(&app, &id).await).contains(&"charge.approved".to_owned())
    })
    .await;
    let sub = get(&app, &id).await;
    assert_eq!(sub["status"], "active");
    assert_eq!(
        sub["current_period_start"].as_str().map(|s| &s[..19]),
        Some(&start[..19])
    );
}

async fn charge_now_answers_with_the_outcome(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 1).await;
    let (status, charge) = read(
        app.post(&format!("/v1/subscriptions/{id}/charge-now"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{charge}");
    assert_eq!(
        (charge["status"].clone(), charge["processor_status"].clone()),
        (json!("approved"), json!("APPROVED"))
    );
    assert!(charge["id"].as_str().is_some_and(|c| c.starts_with("ch_")));
    let sub = get(&app, &id).await;
    assert_eq!(sub["status"], "active");

    // A declined card: past_due, and charge-now retries it and answers 422 processor_error.
    let (declining, declining_method) = self::shop(&app, "4111111111111111").await;
    let bad = subscribe(&app, &declining, &declining_method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 1).await;
    assert_eq!(get(&app, &bad).await["status"], "past_due");
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{bad}/charge-now"), json!({}))
            .await,
    )
    .await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (422, json!("processor_error"))
    );
    assert_eq!(get(&app, &bad).await["failed_attempts"], 2);
    let (status, _) = read(
        app.post(&format!("/v1/subscriptions/{bad}/pause"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = read(
        app.post(&format!("/v1/subscriptions/{bad}/charge-now"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 409, "charge-now while paused");
}

async fn downgrades_cycle_changes_trials_and_card_changes(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let id = subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 1).await;
    let cheaper = app.create_plan("Lite", 1_000_000, 10_000_000).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (_, preview) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/change-plan/preview"),
            json!({"plan_id": cheaper}),
        )
        .await,
    )
    .await;
    assert!(
        preview["prorated_amount_cents"]
            .as_i64()
            .is_some_and(|a| a < 0)
    );
    assert_eq!(preview["immediate_charge"], false);
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/change-plan"),
            json!({"plan_id": cheaper, "cycle": "weekly"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "cycle neither monthly nor annual");
    let (status, changed) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/change-plan"),
            json!({"plan_id": cheaper}),
        )
        .await,
    )
    .await;
    assert_eq!((status, changed["plan_id"].clone()), (200, json!(cheaper)));
    let before = get(&app, &id).await;
    advance(&app, 31 * DAY).await;
    let amounts: Vec<i64> = events(&app, &id)
        .await
        .iter()
        .filter(|e| e["type"] == "charge.approved")
        .map(|e| e["data"]["amount_in_cents"].as_i64().expect("amount"))
        .collect();
    assert_eq!(
        amounts,
        [3_000_000, 1_000_000],
        "nothing refunded now; the lower price from the next renewal"
    );

    // A cycle change: the current period keeps its end, the next one is a year at the annual price.
    let (status, changed) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/change-plan"),
            json!({"plan_id": shop.plan, "cycle": "annual", "prorate": false}),
        )
        .await,
    )
    .await;
    assert_eq!((status, changed["cycle"].clone()), (200, json!("annual")));
    let period_end = changed["current_period_end"].clone();
    assert_ne!(period_end, before["current_period_end"]);
    advance(&app, 31 * DAY).await;
    let renewed = get(&app, &id).await;
    assert_eq!(renewed["current_period_start"], period_end);
    let start = chrono::DateTime::parse_from_rfc3339(
        renewed["current_period_start"].as_str().expect("start"),
    )
    .expect("start");
    let end =
        chrono::DateTime::parse_from_rfc3339(renewed["current_period_end"].as_str().expect("end"))
            .expect("end");
    assert!((365..=366).contains(&(end - start).num_days()));
    let last = events(&app, &id)
        .await
        .into_iter()
        .rev()
        .find(|e| e["type"] == "charge.approved")
        .expect("charge");
    assert_eq!(last["data"]["amount_in_cents"], 30_000_000);

    // A trialing subscription changes plan with no charge.
    let trial = subscribe(&app, &shop, &method, json!({"trial_days": 7})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (_, preview) = read(
        app.post(
            &format!("/v1/subscriptions/{trial}/change-plan/preview"),
            json!({"plan_id": cheaper}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (
            &preview["prorated_amount_cents"],
            &preview["immediate_charge"]
        ),
        (&json!(0), &json!(false)),
        "{preview}"
    );
    assert!(preview["proration_date"].is_string(), "{preview}");
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{trial}/change-plan"),
            json!({"plan_id": cheaper}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        types(&events(&app, &trial).await),
        ["subscription.created", "subscription.plan_changed"]
    );

    // The card: only one of the same customer.
    let patch = app
        .request(Method::PATCH, &format!("/v1/subscriptions/{id}"))
        .json(&json!({"default_payment_method_id": "pm_missing"}));
    assert_eq!(read(patch.send().await.expect("send")).await.0, 404);
    let patch = app
        .request(Method::PATCH, &format!("/v1/subscriptions/{id}"))
        .json(&json!({"default_payment_method_id": method}));
    let (status, body) = read(patch.send().await.expect("send")).await;
    assert_eq!(
        (status, body["default_payment_method_id"].clone()),
        (200, json!(method))
    );
}

async fn a_new_card_in_past_due_is_used_by_the_next_retry_which_returns_it_to_active(app: TestApp) {
    let (shop, declining) = shop(&app, "4111111111111111").await;
    let id = subscribe(&app, &shop, &declining, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    advance(&app, 60).await;
    assert_eq!(get(&app, &id).await["status"], "past_due");
    let token = card_token(&app, "4242424242424242").await;
    let (status, good) = read(
        app.post(
            &format!("/v1/customers/{}/payment-methods", shop.customer),
            token.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    let patch = app
        .request(Method::PATCH, &format!("/v1/subscriptions/{id}"))
        .json(&json!({"default_payment_method_id": good["id"]}));
    assert_eq!(patch.send().await.expect("send").status(), 200);
    advance(&app, DAY).await;
    let sub = get(&app, &id).await;
    assert_eq!(
        (sub["status"].clone(), sub["failed_attempts"].clone()),
        (json!("active"), json!(0))
    );
    let kinds = types(&events(&app, &id).await);
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
    // The approved retry paid the first period: the next charge is at its end.
    assert_eq!(sub["next_charge_date"], sub["current_period_end"]);
}

/// Two nodes sharing a database load disjoint due rows: each scheduler loads only the rows of
/// the shards its node holds (an id's shard is its last byte, which the query reads from the
/// index), and between them every row is loaded.
async fn two_schedulers_never_load_the_same_due_row(app: TestApp) {
    use billing::store::Store;
    use billing::store::ownership::{SHARDS, shard_of};
    use std::collections::BTreeSet;

    let (shop, method) = shop(&app, "4242424242424242").await;
    // Due in ten days: outside the running service's own 10-second window.
    let start = (chrono::Utc::now() + chrono::Duration::days(10)).to_rfc3339();
    let mut ids = BTreeSet::new();
    for _ in 0..24 {
        let sub = subscribe(&app, &shop, &method, json!({"start_date": start})).await;
        ids.insert(sub["id"].as_str().expect("id").to_owned());
    }
    let account = billing::ids::AccountId::parse(&app.account_id).expect("an account's id");
    let store = Store::connect(&app.database_url).await.expect("store");
    let horizon = chrono::Utc::now().timestamp_millis() + 11 * DAY * 1000;
    // One node holds the even shards, the other the odd ones.
    let (even, odd): (Vec<u16>, Vec<u16>) = (0..SHARDS).partition(|s| s % 2 == 0);
    let load = |shards: Vec<u16>| {
        let (store, account) = (store.clone(), account.clone());
        async move {
            store
                .due_timers_page(&account, horizon, None, 1_000, Some(&shards))
                .await
                .expect("page")
                .into_iter()
                .map(|(id, _)| id.into_string())
                .collect::<BTreeSet<String>>()
        }
    };
    let (a, b) = tokio::join!(load(even), load(odd));
    assert!(a.is_disjoint(&b), "both loaded {:?}", a.intersection(&b));
    assert_eq!(&a | &b, ids);
    assert!(a.iter().all(|id| shard_of(id).is_multiple_of(2)), "{a:?}");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "24 ids all in one parity: {ids:?}"
    );
}
