//! The service under benchmark: started in this process on loopback HTTP, and the shop an
//! integrator would set up through its API (account, customer, card, plan); and the API
//! benchmark's fixture.

use anyhow::Context;
use billing::config::Config;
use billing::domain::subscription::Status;
use billing::domain::time::Cycle;
use billing::ids::{AccountId, CustomerId, PaymentMethodId, PlanId, SubscriptionId};
use billing::processor::client::{CardDetails, ProcessorClient, ProcessorCredentials};
use billing::store::Store;
use billing::store::subscriptions::Subscription;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

use super::{ADMIN_TOKEN, AMOUNT, DAY_MS, Standalone};

pub(super) struct Server {
    pub(super) base: String,
    pub(super) shutdown: tokio::sync::oneshot::Sender<()>,
    pub(super) task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Starts the service on a random port and waits for `/readyz`; returns it and the time taken.
pub(super) async fn start(
    database_url: &str,
    http: &reqwest::Client,
) -> anyhow::Result<(Server, Duration)> {
    start_as(database_url, http, Variant::SERVICE).await
}

/// What the benchmarked service runs with: as in service, or without one of its parts, for a
/// run that measures what the part costs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Variant {
    /// The cluster machinery (leases, fenced writes; PostgreSQL only).
    pub cluster: bool,
    /// An invoice for every approved charge (CONTRACT §11).
    pub invoices: bool,
    /// Every notice kind on, e-mailed to an SMTP sink on loopback (CONTRACT §15); off by
    /// default, as an account's notices are.
    pub notices: bool,
}

impl Variant {
    pub const SERVICE: Self = Self {
        cluster: true,
        invoices: true,
        notices: false,
    };
}

/// `start`, as `variant` says.
pub(super) async fn start_as(
    database_url: &str,
    http: &reqwest::Client,
    variant: Variant,
) -> anyhow::Result<(Server, Duration)> {
    let started = Instant::now();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let mut config = Config::new(database_url.to_owned());
    config.admin_token = Some(ADMIN_TOKEN.to_owned());
    config.single_node = !variant.cluster;
    config.benchmark_without_invoices = !variant.invoices;
    let (shutdown, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(billing::run(config, listener, async {
        let _ = rx.await;
    }));
    loop {
        if http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            break;
        }
        anyhow::ensure!(!task.is_finished(), "the service stopped while starting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((
        Server {
            base,
            shutdown,
            task,
        },
        started.elapsed(),
    ))
}

impl Server {
    pub(super) async fn stop(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(());
        self.task.await??;
        Ok(())
    }
}

pub(super) async fn call(
    http: &reqwest::Client,
    request: reqwest::RequestBuilder,
    expect: u16,
) -> anyhow::Result<Value> {
    let _ = http;
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    anyhow::ensure!(status == expect, "expected {expect}, got {status}: {body}");
    Ok(body)
}

/// The account, its customer's payment method and plan, made through the API as an
/// integrator would.
pub(super) struct Shop {
    pub(super) key: String,
    pub(super) account: AccountId,
    pub(super) customer: CustomerId,
    pub(super) plan: PlanId,
    pub(super) method: PaymentMethodId,
    /// The merchant's keys at the standalone sandbox (unused with the in-process one).
    pub(super) processor_keys: Value,
}

pub(super) async fn shop(
    server: &Server,
    store: &Store,
    http: &reqwest::Client,
    n: usize,
    standalone: Option<&Standalone>,
) -> anyhow::Result<Shop> {
    let base = &server.base;
    let mut new_account = json!({"name": "bench", "sandbox": true, "rate_limit_per_minute": 0,
        "status_rate_limit_per_minute": 0});
    // With the standalone sandbox: the account's processor is it, under keys made here.
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let keys = json!({"public_key": format!("pub_test_{unique}"),
        "private_key": format!("prv_test_{unique}"),
        "events_secret": format!("test_events_{unique}"),
        "integrity_secret": format!("test_integrity_{unique}")});
    if let Some(standalone) = standalone {
        let mut processor = keys.clone();
        processor["base_url"] = json!(standalone.sandbox.base);
        new_account["processor"] = processor;
    }
    let account = call(
        http,
        http.post(format!("{base}/admin/accounts"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&new_account),
        201,
    )
    .await?;
    let key = account["api_key"].as_str().context("api_key")?.to_owned();
    let account_id =
        AccountId::parse(account["id"].as_str().context("id")?).context("an account's id")?;
    if let Some(standalone) = standalone {
        standalone
            .point_events(http, &keys, base, &account_id)
            .await?;
    }
    // Twice (with room to spare) the fees of the burst and of the primitive's rows.
    let fees = 4 * (n as i64 + 10) * 1_500;
    call(
        http,
        http.post(format!(
            "{base}/admin/accounts/{}/balance/top-ups",
            account_id.as_str()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"amount_cents": fees})),
        201,
    )
    .await?;
    let plan = call(
        http,
        http.post(format!("{base}/v1/plans")).bearer_auth(&key).json(
            &json!({"name": "Bench", "monthly_amount_cents": AMOUNT, "annual_amount_cents": AMOUNT * 10}),
        ),
        201,
    )
    .await?;
    let customer = call(
        http,
        http.post(format!("{base}/v1/customers"))
            .bearer_auth(&key)
            .json(&json!({"email": "bench@example.co", "name": "Bench"})),
        201,
    )
    .await?;
    let customer =
        CustomerId::parse(customer["id"].as_str().context("id")?).context("a customer's id")?;
    let row = store.account(&account_id).await?.context("account row")?;
    let creds = ProcessorCredentials::new(
        account["processor"]["base_url"]
            .as_str()
            .context("base_url")?,
        row.processor_public_key.clone(),
        row.processor_private_key.clone(),
        row.processor_integrity_secret.clone(),
    )?;
    let client = ProcessorClient::new()?;
    let (acceptance, token) = approved_card(&client, &creds).await?;
    let method = call(
        http,
        http.post(format!("{base}/v1/customers/{customer}/payment-methods"))
            .bearer_auth(&key)
            .json(
                &json!({"card_token": token.id, "acceptance_token": acceptance.acceptance_token, "accept_personal_auth": acceptance.personal_auth_token}),
            ),
        201,
    )
    .await?;
    Ok(Shop {
        key,
        account: account_id,
        customer,
        plan: PlanId::parse(plan["id"].as_str().context("id")?).context("a plan's id")?,
        method: PaymentMethodId::parse(method["id"].as_str().context("id")?)
            .context("a payment method's id")?,
        processor_keys: keys,
    })
}

/// The processor's acceptance tokens and a token of the card it approves, as a browser would
/// get them.
pub(super) async fn approved_card(
    client: &ProcessorClient,
    creds: &ProcessorCredentials,
) -> anyhow::Result<(
    billing::processor::client::AcceptanceTokens,
    billing::processor::client::CardToken,
)> {
    let acceptance = client.acceptance_tokens(creds).await?;
    let card = CardDetails {
        number: "4242424242424242".into(),
        cvc: "123".into(),
        exp_month: "08".into(),
        exp_year: "30".into(),
        card_holder: "Bench".into(),
    };
    Ok((acceptance, client.tokenize_card(creds, &card).await?))
}

pub(super) fn seeded(shop: &Shop, now: i64) -> Subscription {
    let far = now + 365 * DAY_MS;
    Subscription {
        id: SubscriptionId::generate(),
        account_id: shop.account.clone(),
        customer_id: shop.customer.clone(),
        plan_id: shop.plan.clone(),
        cycle: Cycle::Monthly,
        status: Status::Active,
        current_period_start: now,
        current_period_end: far,
        next_charge_date: far,
        default_payment_method_id: shop.method.clone(),
        trial_end: None,
        cancel_at_period_end: false,
        failed_attempts: 0,
        first_failure_at: None,
        metadata: Some(r#"{"bench":true}"#.into()),
        anchor: now,
        period_index: 0,
        next_cycle: None,
        period_cycle: Cycle::Monthly,
        version: 0,
        due_at: Some(far),
        created_at: now,
        updated_at: now,
        quantity: 1,
        period_quantity: 1,
        discount: None,
        // What the ledger would say of it (the plan at the default IVA, 19 %): a seeded row's
        // renewals then move no MRR, as a real row's do not.
        mrr_cents: billing::domain::tax::TaxCode::Iva19.split(AMOUNT).base,
        period_discount: None,
    }
}

/// A running service with one account, `subscriptions` trialing subscriptions made through
/// the API, and its API key: the API benchmark's fixture.
pub struct Fixture {
    pub base: String,
    pub api_key: String,
    pub database_url: String,
    pub account_id: AccountId,
    pub subscription_id: String,
    pub(super) server: Server,
}

impl Fixture {
    pub async fn start(dir: &std::path::Path, subscriptions: usize) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("api-{}.db", uuid::Uuid::new_v4().simple()));
        let database_url = format!("sqlite://{}", path.display());
        let http = reqwest::Client::new();
        let (server, _) = start(&database_url, &http).await?;
        let store = Store::connect(&database_url).await?;
        let shop = shop(&server, &store, &http, 10, None).await?;
        let mut last = String::new();
        for _ in 0..subscriptions {
            let sub = call(
                &http,
                http.post(format!("{}/v1/subscriptions", server.base))
                    .bearer_auth(&shop.key)
                    .json(&json!({"customer_id": shop.customer, "plan_id": shop.plan, "cycle": "monthly",
                        "payment_method_id": shop.method, "trial_days": 30, "metadata": {"bench": true}})),
                201,
            )
            .await?;
            last = sub["id"].as_str().context("id")?.to_owned();
        }
        Ok(Self {
            base: server.base.clone(),
            api_key: shop.key.clone(),
            database_url,
            account_id: shop.account.clone(),
            subscription_id: last,
            server,
        })
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.server.stop().await
    }
}

/// Turns every notice of `shop` on, by e-mail to an SMTP server on loopback (`port`).
pub(super) async fn turn_notices_on(
    server: &Server,
    http: &reqwest::Client,
    shop: &Shop,
    port: u16,
) -> anyhow::Result<()> {
    let settings = json!({"email": {"enabled": true, "from_address": "cobros@bench.example",
        "from_name": "Bench", "smtp": {"host": "127.0.0.1", "port": port, "security": "none"}},
        "kinds": {"receipt": true, "payment_failed": true, "card_expiring": true,
            "renewal_upcoming": true, "trial_ending": true, "subscription_canceled": true}});
    let request = http
        .patch(format!("{}/v1/account/notices", server.base))
        .bearer_auth(&shop.key)
        .json(&settings);
    call(http, request, 200).await.map(drop)
}
