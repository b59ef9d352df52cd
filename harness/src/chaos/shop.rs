//! The integrator and the operator of a chaos run, through the public HTTP API only: an
//! account whose processor is the fault proxy, a plan, customers with cards that approve
//! (4242) and decline (4111), subscriptions, the test clock, and requests under an
//! `Idempotency-Key` whose client hangs up and retries.

use anyhow::Context;
use billing::ids::AccountId;
use billing::processor::client::{CardDetails, ProcessorClient, ProcessorCredentials};
use serde_json::{Value, json};
use std::time::Duration;

pub const APPROVING_CARD: &str = "4242424242424242";
pub const DECLINING_CARD: &str = "4111111111111111";
const PLAN_MONTHLY: i64 = 100_000;
/// Far more than any run's fees: a short balance is not what a chaos run is about.
const TOP_UP: i64 = 1_000_000_000;

/// One account on the server under test.
pub struct Shop {
    http: reqwest::Client,
    /// The server's base URL: the same after a restart (same port).
    base: String,
    key: String,
    pub account: AccountId,
    plan: String,
    /// Straight to the sandbox, past the proxy: what the processor really holds.
    pub direct: ProcessorCredentials,
    processor: ProcessorClient,
}

/// A customer with one card.
#[derive(Clone, Debug)]
pub struct Holder {
    pub customer: String,
    pub method: String,
}

impl Shop {
    /// Creates the account (its processor at `processor_base`, the proxy), funds it, tells the
    /// sandbox at `sandbox_base` the merchant's keys and that its events go to `events_base`
    /// (the events proxy in front of our ingress), and creates a plan.
    pub async fn open(
        http: &reqwest::Client,
        base: &str,
        admin_token: &str,
        processor_base: &str,
        sandbox_base: &str,
        events_base: &str,
    ) -> anyhow::Result<Self> {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let keys = json!({"public_key": format!("pub_test_{unique}"),
            "private_key": format!("prv_test_{unique}"),
            "events_secret": format!("test_events_{unique}"),
            "integrity_secret": format!("test_integrity_{unique}")});
        let mut processor = keys.clone();
        processor["base_url"] = json!(processor_base);
        let account = send(
            http.post(format!("{base}/admin/accounts"))
                .bearer_auth(admin_token)
                .json(
                    &json!({"name": "Chaos", "sandbox": true, "processor": processor,
                    "rate_limit_per_minute": 0}),
                ),
        )
        .await?;
        let account_id = text(&account["id"])?;
        let mut merchant = keys.clone();
        merchant["events_url"] = json!(format!("{events_base}/webhooks/processor/{account_id}"));
        send(
            http.post(format!("{sandbox_base}/_sandbox/merchants"))
                .bearer_auth(admin_token)
                .json(&merchant),
        )
        .await?;
        send(
            http.post(format!(
                "{base}/admin/accounts/{account_id}/balance/top-ups"
            ))
            .bearer_auth(admin_token)
            .json(&json!({"amount_cents": TOP_UP})),
        )
        .await?;
        let key = text(&account["api_key"])?;
        let plan = send(
            http.post(format!("{base}/v1/plans"))
                .bearer_auth(&key)
                .json(
                    &json!({"name": "Chaos", "monthly_amount_cents": PLAN_MONTHLY,
                "annual_amount_cents": PLAN_MONTHLY * 10}),
                ),
        )
        .await?;
        let direct = ProcessorCredentials::new(
            sandbox_base,
            text(&keys["public_key"])?,
            text(&keys["private_key"])?,
            text(&keys["integrity_secret"])?,
        )?;
        Ok(Self {
            http: http.clone(),
            base: base.to_owned(),
            key,
            account: AccountId::parse(&account_id).context("an account's id")?,
            plan: text(&plan["id"])?,
            direct,
            processor: ProcessorClient::new()?,
        })
    }

    /// The account's API key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The plan every subscription of the run starts on.
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// A new customer.
    pub async fn customer(&self, n: usize) -> anyhow::Result<String> {
        let body = json!({"email": format!("c{n}@chaos.example"), "name": format!("Customer {n}")});
        text(&self.post("/v1/customers", body).await?["id"])
    }

    /// A card saved for `customer`: tokenized at the sandbox as a browser would, then given to
    /// the API (which creates the payment source through the proxy).
    pub async fn card(&self, customer: &str, number: &str) -> anyhow::Result<Holder> {
        let acceptance = self.processor.acceptance_tokens(&self.direct).await?;
        let card = CardDetails {
            number: number.into(),
            cvc: "123".into(),
            exp_month: "08".into(),
            exp_year: "30".into(),
            card_holder: "Chaos Holder".into(),
        };
        let token = self.processor.tokenize_card(&self.direct, &card).await?;
        let body = json!({"card_token": token.id, "acceptance_token": acceptance.acceptance_token, "accept_personal_auth": acceptance.personal_auth_token});
        let method = self
            .post(&format!("/v1/customers/{customer}/payment-methods"), body)
            .await?;
        Ok(Holder {
            customer: customer.to_owned(),
            method: text(&method["id"])?,
        })
    }

    /// A monthly subscription of `holder`, its first period charged at once; its id.
    pub async fn subscribe(&self, holder: &Holder) -> anyhow::Result<String> {
        let body = json!({"customer_id": holder.customer, "plan_id": self.plan,
            "cycle": "monthly", "payment_method_id": holder.method});
        text(&self.post("/v1/subscriptions", body).await?["id"])
    }

    /// Moves subscription `id` to another card of its customer, used from its next charge.
    pub async fn switch_card(&self, id: &str, method: &str) -> anyhow::Result<()> {
        let request = self
            .http
            .patch(format!("{}/v1/subscriptions/{id}", self.base))
            .bearer_auth(&self.key)
            .json(&json!({"default_payment_method_id": method}));
        send(request).await.map(drop)
    }

    /// Moves the account's test clock forward by `seconds`; the server answers once the
    /// timers due by then have run (the caller may kill it before).
    pub async fn advance_clock(&self, seconds: i64) -> anyhow::Result<()> {
        let request = self
            .http
            .post(format!("{}/v1/test-helpers/clock/advance", self.base))
            .bearer_auth(&self.key)
            .timeout(Duration::from_secs(600))
            .json(&json!({"seconds": seconds}));
        send(request).await.map(drop)
    }

    /// Creates a subscription of `holder` under `key` with a client that hangs up after
    /// `hang_up`, then retries under the same key (a new client each time) until the answer
    /// is not 409 (the first request still running), within `bound`.
    pub async fn create_hanging_up(
        &self,
        holder: &Holder,
        key: &str,
        hang_up: Duration,
        bound: Duration,
    ) -> anyhow::Result<Retried> {
        let body = json!({"customer_id": holder.customer, "plan_id": self.plan,
            "cycle": "monthly", "payment_method_id": holder.method});
        let request = |client: reqwest::Client| {
            client
                .post(format!("{}/v1/subscriptions", self.base))
                .bearer_auth(&self.key)
                .header("Idempotency-Key", key)
                .timeout(Duration::from_secs(30))
                .json(&body)
                .send()
        };
        // Dropping the future mid-flight closes its connection: the server sees a hang-up.
        let hung_up = tokio::time::timeout(hang_up, request(reqwest::Client::new()))
            .await
            .is_err();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let response = request(reqwest::Client::new()).await?;
            let status = response.status().as_u16();
            let answer: Value = response.json().await.unwrap_or(Value::Null);
            if status != 409 {
                anyhow::ensure!(
                    status == 201,
                    "retry under {key} answered {status}: {answer}"
                );
                let id = text(&answer["id"])?;
                return Ok(Retried::Answered { id, hung_up });
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Retried::Locked { hung_up });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call(reqwest::Method::POST, path, body).await
    }

    /// `method path` with `body` under the account's key; the answer, which must be 2xx.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .json(&body);
        send(request).await
    }
}

/// How a create under an Idempotency-Key whose first client hung up ended.
#[derive(Debug)]
pub enum Retried {
    /// A retry got the request's answer: the subscription it made.
    Answered { id: String, hung_up: bool },
    /// Every retry within the bound answered 409: the key stayed locked.
    Locked { hung_up: bool },
}

/// Sends `request`; any answer but 2xx is an error naming the status and body.
pub(crate) async fn send(request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    let response = request.send().await?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    anyhow::ensure!(status.is_success(), "{status}: {body}");
    Ok(body)
}

pub(crate) fn text(value: &Value) -> anyhow::Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("expected a string, got {value}"))
}
