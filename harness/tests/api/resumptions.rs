//! Issue 32 through HTTP: a resumption exists only with the charge it begins. A top-up that
//! covers some of the subscriptions paused for balance resumes (and announces) only those; the
//! API's resume after the renewal date passed commits with its charge's beginning or not at
//! all.

use crate::actions::drain_balance;
use crate::common::{TestApp, assert_invariants, eventually, read};
use crate::subscriptions::{advance, events, get, shop, subscribe};
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    a_top_up_covering_one_fee_resumes_and_announces_only_one_subscription,
    a_resume_short_of_balance_announces_nothing,
    a_resume_whose_charge_cannot_begin_leaves_no_trace,
);

const DAY: i64 = 86_400;
/// The fee of the shop's plan (3,000,000 at 1.5 %).
const FEE: i64 = 45_000;
/// Subscriptions paused for balance that one top-up wakes at once.
const PAUSED: usize = 5;

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

/// How many events of `event_type` the subscription has.
async fn count(app: &TestApp, sub: &str, event_type: &str) -> usize {
    events(app, sub)
        .await
        .iter()
        .filter(|e| e["type"] == event_type)
        .count()
}

async fn a_top_up_covering_one_fee_resumes_and_announces_only_one_subscription(app: TestApp) {
    app.lift_rate_limit().await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    drain_balance(&app).await;
    let mut ids = Vec::new();
    for _ in 0..PAUSED {
        ids.push(id(&subscribe(
            &app,
            &shop,
            &method,
            json!({"trial_days": 1}),
        )
        .await));
    }
    // Their trials end into an empty balance.
    advance(&app, 2 * DAY).await;
    for sub in &ids {
        assert_eq!(
            get(&app, sub).await["status"],
            "paused_insufficient_balance"
        );
    }

    // One fee and a half: all of them are woken at once, one charge can begin.
    app.top_up(FEE + FEE / 2).await;
    eventually(Duration::from_secs(30), || async {
        let mut active = 0;
        for sub in &ids {
            active += usize::from(get(&app, sub).await["status"] == "active");
        }
        let (_, balance) = read(app.get("/v1/balance").await).await;
        active == 1 && balance["reserved_cents"] == 0
    })
    .await;
    // Every timer due by now has run.
    advance(&app, 1).await;
    let mut resumed = Vec::new();
    for sub in &ids {
        let status = get(&app, sub).await["status"].clone();
        let announced = count(&app, sub, "subscription.resumed").await;
        let approved = count(&app, sub, "charge.approved").await;
        if status == "active" {
            assert_eq!((announced, approved), (1, 1), "{sub}");
            resumed.push(sub.clone());
        } else {
            assert_eq!(status, "paused_insufficient_balance");
            assert_eq!(
                (announced, approved),
                (0, 0),
                "{sub} was announced as resumed though its charge never began"
            );
        }
    }
    assert_eq!(resumed.len(), 1);
    let (_, balance) = read(app.get("/v1/balance").await).await;
    assert_eq!(balance["available_cents"], FEE / 2);

    // Those left paused have no timer: time passing does nothing to them...
    advance(&app, DAY).await;
    for sub in ids.iter().filter(|s| !resumed.contains(s)) {
        assert_eq!(
            get(&app, sub).await["status"],
            "paused_insufficient_balance"
        );
        assert_eq!(count(&app, sub, "subscription.resumed").await, 0);
    }
    // ...and the next top-up that covers them resumes them all, each announced once.
    app.top_up((PAUSED as i64 - 1) * FEE).await;
    eventually(Duration::from_secs(30), || async {
        let mut active = 0;
        for sub in &ids {
            active += usize::from(get(&app, sub).await["status"] == "active");
        }
        active == PAUSED
    })
    .await;
    advance(&app, 1).await;
    for sub in &ids {
        assert_eq!(count(&app, sub, "subscription.resumed").await, 1, "{sub}");
        assert_eq!(count(&app, sub, "charge.approved").await, 1, "{sub}");
    }
    assert_invariants(&app).await;
}

/// A paused subscription whose renewal date passed, resumed while the balance cannot cover
/// the new period's fee.
async fn paused_past_its_renewal(app: &TestApp) -> String {
    let (shop, method) = shop(app, "4242424242424242").await;
    let sub = id(&subscribe(app, &shop, &method, json!({})).await);
    advance(app, 1).await;
    let (status, paused) = read(
        app.post(&format!("/v1/subscriptions/{sub}/pause"), json!({}))
            .await,
    )
    .await;
    assert_eq!((status, paused["status"].clone()), (200, json!("paused")));
    advance(app, 45 * DAY).await;
    sub
}

async fn a_resume_short_of_balance_announces_nothing(app: TestApp) {
    let sub = paused_past_its_renewal(&app).await;
    drain_balance(&app).await;
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{sub}/resume"), json!({}))
            .await,
    )
    .await;
    // The new period's charge could not begin: paused for balance, as a renewal would be,
    // with no `subscription.resumed` for a subscription that did not resume.
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "paused_insufficient_balance");
    assert_eq!(count(&app, &sub, "subscription.resumed").await, 0);
    // A top-up resumes it with its charge, announced once.
    app.top_up(FEE).await;
    eventually(Duration::from_secs(30), || async {
        get(&app, &sub).await["status"] == "active"
    })
    .await;
    advance(&app, 1).await;
    assert_eq!(count(&app, &sub, "subscription.resumed").await, 1);
    assert_eq!(count(&app, &sub, "charge.approved").await, 2);
    assert_invariants(&app).await;
}

/// Refuses, in the database itself, every charge attempt inserted from now on (`refuse`
/// true), or no longer (false).
async fn refuse_charges(app: &TestApp, refuse: bool) {
    use sea_orm::{ConnectionTrait, Database, DbBackend};
    let db = Database::connect(app.database_url.as_str())
        .await
        .expect("connect");
    let statements: &[&str] = match (db.get_database_backend(), refuse) {
        (DbBackend::Sqlite, true) => &[
            "CREATE TRIGGER refuse_charges BEFORE INSERT ON charge_attempts \
             BEGIN SELECT RAISE(ABORT, 'no charge may begin'); END",
        ],
        (DbBackend::Sqlite, false) => &["DROP TRIGGER refuse_charges"],
        (_, true) => &[
            "CREATE FUNCTION refuse_charge() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'no charge may begin'; END $$",
            "CREATE TRIGGER refuse_charges BEFORE INSERT ON charge_attempts \
             FOR EACH ROW EXECUTE FUNCTION refuse_charge()",
        ],
        (_, false) => &["DROP TRIGGER refuse_charges ON charge_attempts"],
    };
    for statement in statements {
        db.execute_unprepared(statement).await.expect("trigger");
    }
    db.close().await.expect("close");
}

async fn a_resume_whose_charge_cannot_begin_leaves_no_trace(app: TestApp) {
    let sub = paused_past_its_renewal(&app).await;
    let before = get(&app, &sub).await;
    // The new period's charge fails to begin (as a write refused by a fence would): the
    // resume, in the same unit, did not happen either.
    refuse_charges(&app, true).await;
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{sub}/resume"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(get(&app, &sub).await, before, "the resume left a trace");
    assert_eq!(count(&app, &sub, "subscription.resumed").await, 0);
    // Once charges can begin, the same resume commits whole.
    refuse_charges(&app, false).await;
    let (status, body) = read(
        app.post(&format!("/v1/subscriptions/{sub}/resume"), json!({}))
            .await,
    )
    .await;
    assert_eq!(
        (status, body["status"].clone()),
        (200, json!("active")),
        "{body}"
    );
    advance(&app, 1).await;
    assert_eq!(count(&app, &sub, "subscription.resumed").await, 1);
    assert_eq!(count(&app, &sub, "charge.approved").await, 2);
    assert_invariants(&app).await;
}
