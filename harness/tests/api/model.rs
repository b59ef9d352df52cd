//! A model-based property test: random sequences of subscription actions, top-ups and clock
//! moves through the real API, each checked against a small reference model of what the
//! contract says should happen, and after every step the money invariants
//! (`common::assert_invariants` plus the period laws checked here):
//! - the answer's status is the model's (accepted, 400, 404, 409);
//! - periods are contiguous: a new period starts where the last ended, and its length is its
//!   cycle's (a month of 28 to 31 days, or a year);
//! - each renewal charges the plan plus the add-ons billed for that period, at that period's
//!   cycle; each proration is at most the difference at the cycle the period was billed at.

use crate::common::{TestApp, assert_invariants, read};
use crate::subscriptions::{advance, events, get, shop, subscribe};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use std::collections::BTreeSet;

crate::db_tests!(random_action_sequences_keep_the_money_invariants);

const DAY: i64 = 86_400;
/// (monthly, annual) prices of the plans and add-ons the model uses.
const PLANS: [(i64, i64); 3] = [
    (1_000_000, 10_000_000),
    (2_500_000, 25_000_000),
    (700_000, 7_000_000),
];
const ADDONS: [(i64, i64); 2] = [(100_000, 1_000_000), (250_000, 2_500_000)];

#[derive(Clone, Debug)]
enum Op {
    Cancel {
        at_period_end: bool,
    },
    Pause,
    Resume,
    ChangePlan {
        plan: usize,
        annual: Option<bool>,
        prorate: bool,
    },
    Attach {
        addon: usize,
        prorate: bool,
    },
    Detach {
        addon: usize,
    },
    ChargeNow,
    TopUp,
    Advance {
        days: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => any::<bool>().prop_map(|at_period_end| Op::Cancel { at_period_end }),
        2 => Just(Op::Pause),
        2 => Just(Op::Resume),
        4 => (0..PLANS.len(), proptest::option::of(any::<bool>()), any::<bool>())
            .prop_map(|(plan, annual, prorate)| Op::ChangePlan { plan, annual, prorate }),
        3 => (0..ADDONS.len(), any::<bool>()).prop_map(|(addon, prorate)| Op::Attach { addon, prorate }),
        2 => (0..ADDONS.len()).prop_map(|addon| Op::Detach { addon }),
        1 => Just(Op::ChargeNow),
        1 => Just(Op::TopUp),
        5 => prop_oneof![Just(1i64), Just(7), Just(20)].prop_map(|days| Op::Advance { days }),
    ]
}

/// What the contract says a subscription is, as far as these operations can tell.
#[derive(Clone, Debug)]
struct Model {
    status: &'static str,
    plan: usize,
    annual: bool,
    /// The cycle the current period was billed at.
    period_annual: bool,
    cancel_at_period_end: bool,
    /// Attached and billed from the next period on.
    addons: BTreeSet<usize>,
    /// Attached but detached: billed no further period.
    detaching: BTreeSet<usize>,
}

impl Model {
    fn price(&self, plan: usize, annual: bool) -> i64 {
        if annual { PLANS[plan].1 } else { PLANS[plan].0 }
    }

    fn next_period_amount(&self) -> i64 {
        let addons: i64 = self
            .addons
            .iter()
            .map(|a| {
                if self.annual {
                    ADDONS[*a].1
                } else {
                    ADDONS[*a].0
                }
            })
            .sum();
        self.price(self.plan, self.annual) + addons
    }

    /// The status the API should answer `op` with (200 for accepted).
    fn expected(&self, op: &Op) -> u16 {
        let live = matches!(self.status, "active" | "trialing");
        match op {
            Op::Cancel { .. } if self.status == "canceled" => 409,
            Op::Cancel {
                at_period_end: true,
            } if !live => 409,
            Op::Pause if matches!(self.status, "canceled" | "paused") => 409,
            Op::Resume if self.status != "paused" => 409,
            Op::ChangePlan { .. } if !live => 409,
            Op::ChangePlan { plan, annual, .. }
                if *plan == self.plan && annual.is_none_or(|a| a == self.annual) =>
            {
                400
            }
            Op::Attach { .. } if self.status == "canceled" => 409,
            Op::Attach { addon, .. }
                if self.addons.contains(addon) || self.detaching.contains(addon) =>
            {
                409
            }
            Op::Detach { addon } if !self.addons.contains(addon) => 404,
            Op::ChargeNow if !matches!(self.status, "active" | "trialing" | "past_due") => 409,
            _ => 200,
        }
    }

    /// The model after `op` was accepted.
    fn accept(&mut self, op: &Op) {
        match op {
            Op::Cancel {
                at_period_end: true,
            } => self.cancel_at_period_end = true,
            Op::Cancel {
                at_period_end: false,
            } => self.status = "canceled",
            Op::Pause => self.status = "paused",
            Op::Resume => self.status = "active",
            Op::ChangePlan { plan, annual, .. } => {
                self.plan = *plan;
                if let Some(annual) = annual {
                    self.annual = *annual;
                }
            }
            Op::Attach { addon, .. } => {
                self.addons.insert(*addon);
            }
            Op::Detach { addon } => {
                self.addons.remove(addon);
                self.detaching.insert(*addon);
            }
            Op::ChargeNow => self.new_period(),
            Op::TopUp | Op::Advance { .. } => {}
        }
    }

    /// A new period began: detached add-ons leave, a pending cycle takes effect.
    fn new_period(&mut self) {
        self.detaching.clear();
        self.period_annual = self.annual;
    }
}

struct Fixture {
    store: billing::store::Store,
    shop: crate::subscriptions::Shop,
    method: String,
    plans: Vec<String>,
    addons: Vec<String>,
}

async fn random_action_sequences_keep_the_money_invariants(app: TestApp) {
    app.lift_rate_limit().await;
    let (shop, method) = shop(&app, "4242424242424242").await;
    app.top_up(1_000_000_000).await;
    let mut plans = Vec::new();
    for (i, (monthly, annual)) in PLANS.iter().enumerate() {
        plans.push(id(&app
            .create_plan(&format!("P{i}"), *monthly, *annual)
            .await));
    }
    let mut addons = Vec::new();
    for (i, (monthly, annual)) in ADDONS.iter().enumerate() {
        let body = json!({"name": format!("A{i}"), "monthly_amount_cents": monthly, "annual_amount_cents": annual});
        addons.push(id(&read(app.post("/v1/addons", body).await).await.1));
    }
    let store = billing::store::Store::connect(&app.database_url)
        .await
        .expect("store");
    let fixture = Fixture {
        store,
        shop,
        method,
        plans,
        addons,
    };
    let handle = tokio::runtime::Handle::current();
    let cases: u32 = std::env::var("BILLING_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let mut runner = TestRunner::new(Config {
        cases,
        // Cases share one service and its clock, so a shrunk case does not replay the
        // original: the history in the failure message is what to read.
        max_shrink_iters: 0,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 4..14), |ops| {
        tokio::task::block_in_place(|| handle.block_on(run_case(&app, &fixture, &ops)));
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
    assert_invariants(&app).await;
}

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

fn instant(value: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(value.as_str().expect("instant"))
        .expect("rfc3339")
        .timestamp()
}

async fn run_case(app: &TestApp, fixture: &Fixture, ops: &[Op]) {
    let mut body = json!({"plan_id": fixture.plans[0]});
    body["metadata"] = Value::Null;
    let sub = subscribe(app, &fixture.shop, &fixture.method, body).await;
    let sub_id = id(&sub);
    let mut model = Model {
        status: "active",
        plan: 0,
        annual: false,
        period_annual: false,
        cancel_at_period_end: false,
        addons: BTreeSet::new(),
        detaching: BTreeSet::new(),
    };
    // The first period's charge settles through the processor's event; start from there.
    crate::common::eventually(std::time::Duration::from_secs(20), || async {
        events(app, &sub_id)
            .await
            .iter()
            .any(|e| e["type"] == "charge.approved")
    })
    .await;
    let mut seen_events = events(app, &sub_id).await.len();
    let mut seen_invoices = 1;
    let mut before = get(app, &sub_id).await;
    let mut history: Vec<String> = Vec::new();
    for op in ops {
        let status = apply(app, fixture, &sub_id, op).await;
        let expected = model.expected(op);
        history.push(format!("{op:?} -> {status}"));
        assert_eq!(
            status, expected,
            "{op:?} on {model:?}; history {history:#?}"
        );
        let renewal_amount = model.next_period_amount();
        let period_price = |m: &Model, plan: usize| m.price(plan, m.period_annual);
        let (old_price, old_model) = (period_price(&model, model.plan), model.clone());
        if status == 200 {
            model.accept(op);
        }
        // Some actions answer before their charge settles (a resume that restarts the period):
        // wait for it, so that each charge is judged against the step that made it.
        crate::common::eventually(std::time::Duration::from_secs(20), || async {
            fixture
                .store
                .pending_charge_of(&billing::ids::SubscriptionId::parse(&sub_id).expect("an id"))
                .await
                .expect("db")
                .is_none()
        })
        .await;
        let after = get(app, &sub_id).await;
        // Whatever the model did not foresee (a timer's cancellation, a resume's restart),
        // the subscription's status is the service's: the laws below hold either way.
        model.status = status_str(&after);
        let new_events = events(app, &sub_id).await;
        for event in &new_events[seen_events..] {
            if event["type"] != "charge.approved" {
                continue;
            }
            let amount = event["data"]["amount_in_cents"].as_i64().expect("amount");
            let proration = matches!(op, Op::ChangePlan { .. } | Op::Attach { .. });
            if proration {
                let bound = match op {
                    Op::ChangePlan { plan, .. } => period_price(&old_model, *plan) - old_price,
                    Op::Attach { addon, .. } => {
                        if old_model.period_annual {
                            ADDONS[*addon].1
                        } else {
                            ADDONS[*addon].0
                        }
                    }
                    _ => unreachable!(),
                };
                assert!(
                    amount > 0 && amount <= bound,
                    "proration {amount} > {bound}: {op:?}"
                );
            } else {
                assert_eq!(
                    amount, renewal_amount,
                    "renewal after {op:?} on {old_model:?}; history {history:#?}; sub {before}"
                );
            }
        }
        seen_events = new_events.len();
        seen_invoices = check_invoices(app, &sub_id, &old_model, op, seen_invoices).await;
        check_period(&before, &after, op);
        if after["current_period_start"] != before["current_period_start"] {
            model.new_period();
        }
        before = after;
    }
}

/// Every approved charge of the subscription has exactly one invoice, of its amount, whose
/// lines add up, with one `invoice.created` each; the invoice this step made (if it made one)
/// has, for a renewal, the plan's line and one per add-on the model bills, for a proration one
/// line. Answers how many invoices there are now.
async fn check_invoices(app: &TestApp, sub_id: &str, model: &Model, op: &Op, seen: usize) -> usize {
    let list = |path: String| async move {
        let (status, page) = read(app.get(&path).await).await;
        assert_eq!(status, 200, "{page}");
        page["data"].as_array().expect("data").clone()
    };
    let charges = list(format!(
        "/v1/charges?subscription_id={sub_id}&status=approved&limit=100"
    ))
    .await;
    let invoices = list(format!("/v1/invoices?subscription_id={sub_id}&limit=100")).await;
    assert_eq!(
        invoices.len(),
        charges.len(),
        "one invoice per approved charge"
    );
    for charge in &charges {
        let of_charge: Vec<&Value> = invoices
            .iter()
            .filter(|i| i["charge_id"] == charge["id"])
            .collect();
        assert_eq!(of_charge.len(), 1, "{charge}");
        let invoice = of_charge[0];
        assert_eq!(invoice["total_cents"], charge["amount_cents"], "{invoice}");
        let lines = invoice["lines"].as_array().expect("lines");
        let sum: i64 = lines
            .iter()
            .map(|l| l["amount_cents"].as_i64().expect("amount"))
            .sum();
        assert_eq!(Some(sum), invoice["total_cents"].as_i64(), "{invoice}");
    }
    let created = events(app, sub_id)
        .await
        .iter()
        .filter(|e| e["type"] == "invoice.created")
        .count();
    assert_eq!(created, invoices.len(), "one invoice.created per invoice");
    // Newest first: the step's own invoice, when it made exactly one.
    if invoices.len() == seen + 1 {
        let newest = &invoices[0];
        let lines = newest["lines"].as_array().expect("lines");
        match op {
            Op::ChangePlan { prorate: true, .. } | Op::Attach { prorate: true, .. } => {
                assert_eq!(lines.len(), 1, "a proration's one line: {newest}");
            }
            Op::Advance { .. } | Op::ChargeNow
                if newest["total_cents"] == model.next_period_amount() =>
            {
                assert_eq!(
                    lines.len(),
                    1 + model.addons.len(),
                    "{newest} after {op:?} on {model:?}"
                );
                assert!(lines[0]["plan_id"].is_string(), "{newest}");
                assert!(
                    lines[1..].iter().all(|l| l["addon_id"].is_string()),
                    "{newest}"
                );
            }
            _ => {}
        }
    }
    invoices.len()
}

fn status_str(sub: &Value) -> &'static str {
    match sub["status"].as_str().expect("status") {
        "trialing" => "trialing",
        "active" => "active",
        "past_due" => "past_due",
        "paused" => "paused",
        "paused_insufficient_balance" => "paused_insufficient_balance",
        _ => "canceled",
    }
}

/// Periods are contiguous (or restart at a charge-now or a resume) and as long as a cycle.
fn check_period(before: &Value, after: &Value, op: &Op) {
    let (start, end) = (
        instant(&after["current_period_start"]),
        instant(&after["current_period_end"]),
    );
    let days = (end - start) / DAY;
    assert!(
        (28..=31).contains(&days) || (365..=366).contains(&days),
        "a period of {days} days: {after}"
    );
    let old_end = instant(&before["current_period_end"]);
    if start != instant(&before["current_period_start"]) {
        let restarted = matches!(op, Op::ChargeNow | Op::Resume);
        assert!(
            start == old_end || restarted,
            "period {start}..{end} does not follow {old_end} after {op:?}"
        );
    }
}

async fn apply(app: &TestApp, fixture: &Fixture, sub_id: &str, op: &Op) -> u16 {
    let path = |action: &str| format!("/v1/subscriptions/{sub_id}/{action}");
    let (status, _) = match op {
        Op::Cancel { at_period_end } => {
            read(
                app.post(&path("cancel"), json!({"at_period_end": at_period_end}))
                    .await,
            )
            .await
        }
        Op::Pause => read(app.post(&path("pause"), json!({})).await).await,
        Op::Resume => read(app.post(&path("resume"), json!({})).await).await,
        Op::ChangePlan {
            plan,
            annual,
            prorate,
        } => {
            let mut body = json!({"plan_id": fixture.plans[*plan], "prorate": prorate});
            if let Some(annual) = annual {
                body["cycle"] = json!(if *annual { "annual" } else { "monthly" });
            }
            read(app.post(&path("change-plan"), body).await).await
        }
        Op::Attach { addon, prorate } => {
            let body = json!({"addon_id": fixture.addons[*addon], "prorate": prorate});
            read(app.post(&path("addons"), body).await).await
        }
        Op::Detach { addon } => {
            let response = app
                .request(
                    reqwest::Method::DELETE,
                    &path(&format!("addons/{}", fixture.addons[*addon])),
                )
                .send()
                .await
                .expect("send");
            read(response).await
        }
        Op::ChargeNow => read(app.post(&path("charge-now"), json!({})).await).await,
        Op::TopUp => {
            app.top_up(5_000_000).await;
            (200, Value::Null)
        }
        Op::Advance { days } => {
            advance(app, days * DAY).await;
            (200, Value::Null)
        }
    };
    status
}
