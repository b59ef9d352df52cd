//! A model-based property test: random sequences of subscription actions, top-ups and clock
//! moves through the real API, each checked against a small reference model of what the
//! contract says should happen, and after every step the money invariants
//! (`common::assert_invariants` plus the period laws checked here):
//! - the answer's status is the model's (accepted, 400, 404, 409);
//! - periods are contiguous: a new period starts where the last ended, and its length is its
//!   cycle's (a month of 28 to 31 days, or a year);
//! - each renewal charges the plan times its quantity plus the add-ons billed for that period,
//!   at that period's cycle, less the discount (CONTRACT §14: a percent off each line rounded
//!   half away from zero, an amount off the total never below zero), for as many billed periods
//!   as the coupon lasts; a period whose total is 0 has an invoice of 0 and no charge; each
//!   proration is at most the difference at the cycle and quantity the period was billed at.

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
/// The coupons the model redeems: (percent off in bps, amount off in cents, periods; 0 for
/// forever). The last takes any period to 0.
const COUPONS: [(i64, i64, i64); 3] = [(2_000, 0, 0), (0, 300_000, 2), (10_000, 0, 1)];

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
    /// change-plan to the same plan with this quantity.
    Quantity {
        quantity: i64,
        prorate: bool,
    },
    Discount {
        coupon: usize,
    },
    RemoveDiscount,
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
        2 => (1i64..4, any::<bool>()).prop_map(|(quantity, prorate)| Op::Quantity { quantity, prorate }),
        2 => (0..COUPONS.len()).prop_map(|coupon| Op::Discount { coupon }),
        1 => Just(Op::RemoveDiscount),
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
    /// Seats billed from the next period, and those the current period was billed at.
    quantity: i64,
    period_quantity: i64,
    /// The coupon the subscription has, and the period charges it still takes part in
    /// (`None` forever).
    discount: Option<(usize, Option<i64>)>,
}

impl Model {
    fn price(&self, plan: usize, annual: bool) -> i64 {
        if annual { PLANS[plan].1 } else { PLANS[plan].0 }
    }

    /// The next period's lines before any discount: the plan times the quantity, then the
    /// add-ons billed.
    fn next_period_lines(&self) -> Vec<i64> {
        std::iter::once(self.price(self.plan, self.annual) * self.quantity)
            .chain(self.addons.iter().map(|a| {
                if self.annual {
                    ADDONS[*a].1
                } else {
                    ADDONS[*a].0
                }
            }))
            .collect()
    }

    /// What the next period charges: its lines less the discount, by the contract's rules
    /// written here independently of the service's code.
    fn next_period_amount(&self) -> i64 {
        let lines = self.next_period_lines();
        let gross: i64 = lines.iter().sum();
        match self.discount.map(|(coupon, _)| COUPONS[coupon]) {
            None => gross,
            Some((bps, 0, _)) => lines
                .iter()
                .map(|line| {
                    // round half away from zero of line × bps / 10 000, in integers.
                    let off = (2 * line * bps + 10_000) / 20_000;
                    line - off.min(*line)
                })
                .sum(),
            Some((_, cents, _)) => gross - cents.min(gross),
        }
    }

    /// A period charge (or a period of nothing) was paid: the discount took part once more.
    fn period_paid(&mut self) {
        if let Some((coupon, Some(left))) = self.discount {
            self.discount = (left > 1).then_some((coupon, Some(left - 1)));
        }
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
            // Nothing to charge: a free period is invoiced when it renews.
            Op::ChargeNow if self.next_period_amount() == 0 => 409,
            Op::Quantity { .. } if !live => 409,
            Op::Quantity { quantity, .. } if *quantity == self.quantity => 400,
            Op::Discount { .. } if self.status == "canceled" => 409,
            Op::RemoveDiscount if self.discount.is_none() => 404,
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
            Op::Quantity { quantity, .. } => self.quantity = *quantity,
            Op::Discount { coupon } => {
                let periods = COUPONS[*coupon].2;
                self.discount = Some((*coupon, (periods > 0).then_some(periods)));
            }
            Op::RemoveDiscount => self.discount = None,
        }
    }

    /// A new period began: detached add-ons leave, a pending cycle takes effect.
    fn new_period(&mut self) {
        self.detaching.clear();
        self.period_annual = self.annual;
        self.period_quantity = self.quantity;
    }
}

struct Fixture {
    store: billing::store::Store,
    shop: crate::subscriptions::Shop,
    method: String,
    plans: Vec<String>,
    addons: Vec<String>,
    coupons: Vec<String>,
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
    let mut coupons = Vec::new();
    for (i, (bps, cents, periods)) in COUPONS.iter().enumerate() {
        let mut body = json!({"name": format!("C{i}")});
        if *bps > 0 {
            body["percent_off_bps"] = json!(bps);
        } else {
            body["amount_off_cents"] = json!(cents);
        }
        match periods {
            0 => body["duration"] = json!("forever"),
            1 => body["duration"] = json!("once"),
            n => {
                body["duration"] = json!("repeating");
                body["duration_in_periods"] = json!(n);
            }
        }
        let (status, coupon) = read(app.post("/v1/coupons", body).await).await;
        assert_eq!(status, 201, "{coupon}");
        coupons.push(id(&coupon));
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
        coupons,
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
        quantity: 1,
        period_quantity: 1,
        discount: None,
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
    let mut seen_free = 0;
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
        let period_price =
            |m: &Model, plan: usize, quantity: i64| m.price(plan, m.period_annual) * quantity;
        let (old_price, old_model) = (
            period_price(&model, model.plan, model.period_quantity),
            model.clone(),
        );
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
            let proration = matches!(
                op,
                Op::ChangePlan { .. } | Op::Attach { .. } | Op::Quantity { .. }
            );
            if proration {
                let bound = match op {
                    Op::ChangePlan { plan, .. } => {
                        period_price(&old_model, *plan, old_model.quantity) - old_price
                    }
                    Op::Quantity { quantity, .. } => {
                        period_price(&old_model, old_model.plan, *quantity) - old_price
                    }
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
                model.period_paid();
            }
        }
        seen_events = new_events.len();
        let (invoices, free) = check_invoices(app, &sub_id, &old_model, op, seen_invoices).await;
        // A period whose total was 0: an invoice of nothing, no charge; it counts as paid.
        for _ in seen_free..free {
            assert_eq!(
                renewal_amount, 0,
                "a free period after {op:?} on {old_model:?}; history {history:#?}"
            );
            model.period_paid();
        }
        (seen_invoices, seen_free) = (invoices, free);
        check_period(&before, &after, op);
        check_ledger(app, fixture, &sub_id, &history).await;
        if after["current_period_start"] != before["current_period_start"] {
            model.new_period();
        }
        before = after;
    }
}

/// The MRR ledger (CONTRACT §16) after every step: the subscription's movements add up to
/// its MRR now by the rule (`Store::mrr_now`, from the row, its plan and add-ons), which is
/// the MRR it has stored and the `mrr_after_cents` of its last movement; each movement's
/// after is the running sum, and none is of 0.
async fn check_ledger(app: &TestApp, fixture: &Fixture, sub_id: &str, history: &[String]) {
    let (status, page) = read(
        app.get(&format!(
            "/v1/revenue/movements?subscription_id={sub_id}&limit=100"
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let mut moves = page["data"].as_array().expect("data").clone();
    moves.reverse();
    let mut sum = 0;
    for movement in &moves {
        let delta = movement["mrr_delta_cents"].as_i64().expect("delta");
        assert_ne!(delta, 0, "{movement}");
        sum += delta;
        assert_eq!(
            movement["mrr_after_cents"].as_i64(),
            Some(sum),
            "a running sum: {moves:#?}; history {history:#?}"
        );
    }
    let account = billing::ids::AccountId::parse(&app.account_id).expect("an account id");
    let id = billing::ids::SubscriptionId::parse(sub_id).expect("an id");
    let (stored, rule) = fixture
        .store
        .mrr_now(&account, &id)
        .await
        .expect("db")
        .expect("the subscription");
    assert_eq!(
        (sum, stored),
        (rule, rule),
        "movements, stored, by the rule: {moves:#?}; history {history:#?}"
    );
}

/// Every approved charge of the subscription has exactly one invoice, of its amount, whose
/// lines add up, with one `invoice.created` each, and every other invoice is of nothing; the
/// invoice this step made (if it made one) has, for a renewal, the plan's line at the model's
/// quantity and one per add-on the model bills, for a proration one line. Answers how many
/// invoices there are now, and how many of them are of nothing.
async fn check_invoices(
    app: &TestApp,
    sub_id: &str,
    model: &Model,
    op: &Op,
    seen: usize,
) -> (usize, usize) {
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
    let free: Vec<&Value> = invoices
        .iter()
        .filter(|i| i["charge_id"].is_null())
        .collect();
    for invoice in &free {
        assert_eq!(invoice["total_cents"], 0, "{invoice}");
    }
    assert_eq!(
        invoices.len() - free.len(),
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
            Op::ChangePlan { prorate: true, .. }
            | Op::Attach { prorate: true, .. }
            | Op::Quantity { prorate: true, .. } => {
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
                assert_eq!(lines[0]["quantity"], model.quantity, "{newest}");
                assert!(
                    lines[1..].iter().all(|l| l["addon_id"].is_string()),
                    "{newest}"
                );
            }
            _ => {}
        }
    }
    (invoices.len(), free.len())
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
        Op::Quantity { quantity, prorate } => {
            let plan_id = get(app, sub_id).await["plan_id"].clone();
            let body = json!({"plan_id": plan_id, "quantity": quantity, "prorate": prorate});
            read(app.post(&path("change-plan"), body).await).await
        }
        Op::Discount { coupon } => {
            let body = json!({"coupon_id": fixture.coupons[*coupon]});
            read(app.post(&path("discount"), body).await).await
        }
        Op::RemoveDiscount => {
            let response = app
                .request(reqwest::Method::DELETE, &path("discount"))
                .send()
                .await
                .expect("send");
            read(response).await
        }
    };
    status
}
