//! What the integrator does during a cluster run, through the public API only: the setup (two
//! webhook endpoints at the harness's receiver, one customer with a card that approves and one
//! that declines, a second plan, M subscriptions whose first charge falls due at one instant a
//! few seconds ahead, so the nodes' own timers drive the burst) and the stream of actions sent
//! during it to random nodes, directly or through the front: cancel at period end, pause,
//! resume, change plan, charge now, a top-up of the balance.

use crate::chaos::shop::{APPROVING_CARD, DECLINING_CARD, Shop, send, text};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Subscriptions created at once during setup.
const SETUP_CONCURRENCY: usize = 8;
/// One subscription in this many is on the card that declines.
const DECLINE_ONE_IN: u32 = 5;
/// The second plan's monthly amount: more than the first, so a change to it is an upgrade
/// charged at once (a prorated charge during the burst).
const PLAN_B_MONTHLY: i64 = 150_000;
/// How often a 503 (a shard being taken over) is retried, after its `Retry-After`.
const RETRIES_ON_503: usize = 5;

/// What setup made.
pub struct Setup {
    pub subscriptions: Vec<String>,
    /// The instant (real time, ms) every subscription's first charge falls due.
    pub due_at_ms: i64,
    pub approving_method: String,
    pub declining_method: String,
    /// Endpoint number (the receiver's `/hooks/<n>`) → its id.
    pub endpoints: BTreeMap<usize, String>,
    pub plan_b: String,
}

/// The endpoints a run registers: number → event types.
pub fn endpoint_types() -> Vec<(usize, Vec<&'static str>)> {
    vec![
        (1, vec!["*"]),
        (2, vec!["charge.approved", "charge.declined"]),
    ]
}

#[allow(clippy::too_many_arguments)]
/// Sets up the run's objects through the front; `lead` is how long from now (at least) the
/// subscriptions fall due, enough for their creation to finish first.
pub async fn setup(
    shop: &Arc<Shop>,
    http: &reqwest::Client,
    front: &str,
    receiver_urls: &dyn Fn(usize) -> String,
    subscriptions: usize,
    with_endpoints: bool,
    lead: Duration,
    rng: &mut StdRng,
) -> anyhow::Result<Setup> {
    let key = shop.key().to_owned();
    let mut endpoints = BTreeMap::new();
    if with_endpoints {
        for (n, types) in endpoint_types() {
            let endpoint = send(
                http.post(format!("{front}/v1/webhook-endpoints"))
                    .bearer_auth(&key)
                    .json(&json!({"url": receiver_urls(n), "events": types})),
            )
            .await?;
            endpoints.insert(n, text(&endpoint["id"])?);
        }
    }
    let plan_b = send(
        http.post(format!("{front}/v1/plans"))
            .bearer_auth(&key)
            .json(
                &json!({"name": "Cluster B", "monthly_amount_cents": PLAN_B_MONTHLY,
                "annual_amount_cents": PLAN_B_MONTHLY * 10}),
            ),
    )
    .await?;
    let customer = shop.customer(0).await?;
    let approving = shop.card(&customer, APPROVING_CARD).await?;
    let declining = shop.card(&customer, DECLINING_CARD).await?;
    // Whole seconds: the API takes RFC 3339, and the burst should start on the instant.
    let earliest = chrono::Utc::now().timestamp_millis() + lead.as_millis() as i64;
    let due_at_ms = (earliest / 1000 + 1) * 1000;
    let start_date = billing::domain::time::rfc3339(billing::domain::time::from_millis(due_at_ms));
    let methods: Vec<String> = (0..subscriptions)
        .map(|_| {
            if rng.random_ratio(1, DECLINE_ONE_IN) {
                declining.method.clone()
            } else {
                approving.method.clone()
            }
        })
        .collect();
    let mut made = Vec::with_capacity(subscriptions);
    for chunk in methods.chunks(SETUP_CONCURRENCY) {
        let mut tasks = tokio::task::JoinSet::new();
        for method in chunk {
            let body = json!({"customer_id": customer, "plan_id": shop.plan(),
                "cycle": "monthly", "payment_method_id": method, "start_date": start_date});
            let request = http
                .post(format!("{front}/v1/subscriptions"))
                .bearer_auth(&key)
                .json(&body);
            tasks.spawn(async move { text(&send(request).await?["id"]) });
        }
        while let Some(done) = tasks.join_next().await {
            made.push(done??);
        }
    }
    anyhow::ensure!(
        chrono::Utc::now().timestamp_millis() < due_at_ms,
        "setup took longer than its lead of {lead:?}: use fewer subscriptions"
    );
    Ok(Setup {
        subscriptions: made,
        due_at_ms,
        approving_method: approving.method,
        declining_method: declining.method,
        endpoints,
        plan_b: text(&plan_b["id"])?,
    })
}

/// How the actions were answered.
#[derive(Clone, Debug, Default)]
pub struct ActionTally {
    pub sent: usize,
    /// Answers by status.
    pub statuses: BTreeMap<u16, usize>,
    /// Requests that reached no node (it died or was stopped with the request in flight).
    pub unreachable: usize,
    /// 500 answers: what was asked and answered, and when.
    pub server_errors: Vec<ServerError>,
}

/// A 500 answer. It is a bug unless the node that held the request's subscription died (or
/// froze) while the request ran: the message was sent and its outcome is unknown, which the
/// contract answers with 500 (kept for the request's Idempotency-Key), never with a guess.
#[derive(Clone, Debug)]
pub struct ServerError {
    pub what: String,
    pub sent: std::time::Instant,
    pub answered: std::time::Instant,
}

impl ActionTally {
    fn count(&self, f: impl Fn(u16) -> bool) -> usize {
        self.statuses
            .iter()
            .filter(|(s, _)| f(**s))
            .map(|(_, n)| n)
            .sum()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} actions ({} 2xx, {} 4xx, {} 503, {} 500, {} unreachable)",
            self.sent,
            self.count(|s| (200..300).contains(&s)),
            self.count(|s| (400..500).contains(&s)),
            self.count(|s| s == 503),
            self.count(|s| s == 500),
            self.unreachable
        )
    }
}

/// Where actions may be sent: the live nodes' bases (the harness updates it as nodes die and
/// come back) and the front.
#[derive(Clone)]
pub struct Targets {
    pub live: Arc<Mutex<Vec<String>>>,
    pub front: String,
}

impl Targets {
    pub fn set_live(&self, bases: Vec<String>) {
        *self.live.lock().unwrap_or_else(PoisonError::into_inner) = bases;
    }

    /// A random live node three times in four, else the front.
    fn pick(&self, rng: &mut StdRng) -> String {
        let live = self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if live.is_empty() || rng.random_ratio(1, 4) {
            self.front.clone()
        } else {
            live[rng.random_range(0..live.len())].clone()
        }
    }
}

/// The action stream: `workers` loops sending one action at a time until `stop` is set.
pub struct Actions {
    stop: Arc<AtomicBool>,
    tasks: tokio::task::JoinSet<ActionTally>,
}

impl Actions {
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        http: &reqwest::Client,
        targets: Targets,
        key: String,
        admin_token: String,
        account: String,
        subscriptions: Vec<String>,
        plans: [String; 2],
        workers: usize,
        seed: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        let context = Arc::new(ActionContext {
            http: http.clone(),
            targets,
            key,
            admin_token,
            account,
            subscriptions,
            plans,
        });
        for worker in 0..workers {
            let (context, stop) = (Arc::clone(&context), Arc::clone(&stop));
            let mut rng = StdRng::seed_from_u64(seed.wrapping_add(worker as u64 + 1));
            tasks.spawn(async move {
                let mut tally = ActionTally::default();
                while !stop.load(Ordering::Relaxed) {
                    context.one(&mut rng, &mut tally).await;
                    // Pacing, not waiting for anything: the stream is background load beside
                    // the burst, not a load test of its own.
                    tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
                }
                tally
            });
        }
        Self { stop, tasks }
    }

    /// Stops the stream and adds up its answers.
    pub async fn finish(mut self) -> ActionTally {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = ActionTally::default();
        while let Some(done) = self.tasks.join_next().await {
            if let Ok(tally) = done {
                total.sent += tally.sent;
                total.unreachable += tally.unreachable;
                for (status, n) in tally.statuses {
                    *total.statuses.entry(status).or_default() += n;
                }
                total.server_errors.extend(tally.server_errors);
            }
        }
        total
    }
}

struct ActionContext {
    http: reqwest::Client,
    targets: Targets,
    key: String,
    admin_token: String,
    account: String,
    subscriptions: Vec<String>,
    plans: [String; 2],
}

impl ActionContext {
    async fn one(&self, rng: &mut StdRng, tally: &mut ActionTally) {
        let sub = &self.subscriptions[rng.random_range(0..self.subscriptions.len())];
        let (path, body, admin) = match rng.random_range(0..100) {
            0..20 => (format!("/v1/subscriptions/{sub}/pause"), None, false),
            20..40 => (format!("/v1/subscriptions/{sub}/resume"), None, false),
            40..50 => (
                format!("/v1/subscriptions/{sub}/cancel"),
                Some(json!({"at_period_end": true})),
                false,
            ),
            50..65 => {
                let plan = &self.plans[rng.random_range(0..2)];
                (
                    format!("/v1/subscriptions/{sub}/change-plan"),
                    Some(json!({"plan_id": plan})),
                    false,
                )
            }
            65..80 => (format!("/v1/subscriptions/{sub}/charge-now"), None, false),
            80..90 => (
                format!("/admin/accounts/{}/balance/top-ups", self.account),
                Some(json!({"amount_cents": 1_000})),
                true,
            ),
            _ => (format!("/v1/subscriptions/{sub}"), None, false),
        };
        let read = path == format!("/v1/subscriptions/{sub}");
        tally.sent += 1;
        for _ in 0..=RETRIES_ON_503 {
            let sent = std::time::Instant::now();
            let base = self.targets.pick(rng);
            let mut request = if read {
                self.http.get(format!("{base}{path}"))
            } else {
                self.http.post(format!("{base}{path}"))
            };
            request = request
                .bearer_auth(if admin { &self.admin_token } else { &self.key })
                // charge-now and an upgrade wait up to 10 s for the processor's outcome.
                .timeout(Duration::from_secs(20));
            if let Some(body) = &body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(response) => response,
                Err(_) => {
                    tally.unreachable += 1;
                    return;
                }
            };
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            *tally.statuses.entry(status).or_default() += 1;
            if status == 500 {
                let answer = response.text().await.unwrap_or_default();
                tally.server_errors.push(ServerError {
                    what: format!("{path} at {base}: {answer}"),
                    sent,
                    answered: std::time::Instant::now(),
                });
            }
            if status != 503 {
                return;
            }
            // A takeover in progress: the answer says when to come back.
            tokio::time::sleep(Duration::from_secs(retry_after.unwrap_or(1).min(5))).await;
        }
    }
}
