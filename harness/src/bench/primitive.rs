//! The primitive limit the burst is compared with: the same processor round trips and the
//! same rows, with no service around them.

use anyhow::Context;
use billing::ids::SubscriptionId;
use billing::processor::client::{
    NewTransaction, ProcessorClient, ProcessorCredentials, SourceKind,
};
use billing::store::Store;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

use super::service::{Shop, approved_card, call};
use super::{AMOUNT, CONCURRENCY, DAY_MS, fixtures};

/// The machine's limit for the work of `n` renewals, measured beside the burst: the processor
/// round trips alone (`round_trips`), then the rows alone (`rows`). Neither has actors,
/// channels to a writer or per-statement hops: what is left is what the work itself costs here.
#[derive(Debug, Clone, Copy)]
pub struct Primitive {
    pub round_trips: Duration,
    pub rows: Duration,
}

impl Primitive {
    /// Renewals per second if both parts ran one after the other on this machine.
    pub fn rate(&self, n: usize) -> f64 {
        n as f64 / (self.round_trips + self.rows).as_secs_f64()
    }
}

/// The processor's part of `n` renewals over loopback HTTP, with the scheduler's concurrency:
/// create the transaction at a standalone sandbox in this process (settling at once), then
/// receive its signed `transaction.updated` at a bare receiver, which checks the signature as
/// the ingress does. The same whichever sandbox the burst charged through: the machine's limit.
pub(super) async fn round_trips(n: usize) -> anyhow::Result<Duration> {
    use axum::{Router, extract::State, http::HeaderMap, routing::post};
    type Waiting = Arc<dashmap::DashMap<String, tokio::sync::oneshot::Sender<()>>>;
    const EVENTS_SECRET: &str = "primitive_events_secret";

    async fn receive(
        State(waiting): State<Waiting>,
        headers: HeaderMap,
        body: axum::body::Bytes,
    ) -> axum::http::StatusCode {
        let event = billing::processor::signature::parse_event(&body);
        let header = headers
            .get("x-event-checksum")
            .and_then(|v| v.to_str().ok());
        let signed = event.as_ref().and_then(|event| {
            billing::processor::signature::authenticate_event(event, header, EVENTS_SECRET)
        });
        let reference = event.as_ref().and_then(|event| {
            event["data"]["transaction"]["reference"]
                .as_str()
                .map(str::to_owned)
        });
        match (signed, reference) {
            (Some(_), Some(reference)) => {
                if let Some((_, done)) = waiting.remove(&reference) {
                    let _ = done.send(());
                }
                axum::http::StatusCode::OK
            }
            _ => axum::http::StatusCode::UNAUTHORIZED,
        }
    }

    let waiting: Waiting = Arc::default();
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let events_url = format!("http://{}/events", receiver.local_addr()?);
    let router = Router::new()
        .route("/events", post(receive))
        .with_state(Arc::clone(&waiting));
    let receiving = tokio::spawn(async move { axum::serve(receiver, router).await });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sandbox_base = format!("http://{}/v1", listener.local_addr()?);
    let config = billing::processor::sandbox::SandboxConfig {
        settle_delay: Duration::from_millis(0),
        ..Default::default()
    };
    // A sandbox of its own, administered with a token only this function knows.
    let admin_token = billing::secrets::random_token("sandbox_admin_", 32);
    let sandbox = tokio::spawn(billing::processor::sandbox::serve_standalone(
        listener,
        config,
        billing::processor::sandbox::AdminAuth::from_token(&admin_token),
    ));
    let http = reqwest::Client::new();
    let merchant = call(
        &http,
        http.post(format!("{sandbox_base}/_sandbox/merchants"))
            .bearer_auth(&admin_token)
            .json(&json!({"events_url": events_url, "events_secret": EVENTS_SECRET})),
        201,
    )
    .await?;
    let key = |name: &str| -> anyhow::Result<String> {
        Ok(merchant[name].as_str().context("merchant key")?.to_owned())
    };
    let creds = ProcessorCredentials::new(
        sandbox_base,
        key("public_key")?,
        key("private_key")?,
        key("integrity_secret")?,
    )?;
    let client = ProcessorClient::new()?;
    let (acceptance, token) = approved_card(&client, &creds).await?;
    let source = client
        .create_payment_source(
            &creds,
            &billing::processor::client::NewPaymentSource {
                kind: SourceKind::Card,
                token: token.id,
                customer_email: "bench@example.co".into(),
                acceptance_token: acceptance.acceptance_token,
                accept_personal_auth: acceptance.personal_auth_token,
            },
        )
        .await?;

    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    let run = uuid::Uuid::new_v4().simple().to_string();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let permit = Arc::clone(&slots).acquire_owned().await?;
        let (client, creds, waiting) = (client.clone(), creds.clone(), Arc::clone(&waiting));
        let reference = format!("prim_{run}_{i}");
        tasks.spawn(async move {
            let _permit = permit;
            let (done, arrived) = tokio::sync::oneshot::channel();
            waiting.insert(reference.clone(), done);
            let posted = client
                .create_transaction(
                    &creds,
                    &NewTransaction {
                        source_kind: SourceKind::Card,
                        recurrent: true,
                        amount_in_cents: AMOUNT,
                        currency: "COP".into(),
                        reference,
                        payment_source_id: source.id,
                        customer_email: "bench@example.co".into(),
                    },
                )
                .await;
            anyhow::ensure!(
                posted.transaction().is_some(),
                "the sandbox did not take the transaction: {posted:?}"
            );
            tokio::time::timeout(Duration::from_secs(60), arrived)
                .await
                .context("no event within 60 s")?
                .context("receiver gone")?;
            Ok::<_, anyhow::Error>(())
        });
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let elapsed = started.elapsed();
    sandbox.abort();
    receiving.abort();
    Ok(elapsed)
}

/// The rows of `ids`' renewals, written as multi-row statements of 500 renewals per
/// transaction (`fixtures::write_renewal_rows`): for each, a copy of every row the burst wrote
/// for one of its renewals (its charge, fee, events, invoice, notices, the processor's event),
/// with ids of its own. The burst must have renewed `ids[0]`.
pub(super) async fn rows(
    store: &Store,
    shop: &Shop,
    ids: &[SubscriptionId],
) -> anyhow::Result<Duration> {
    let first = ids.first().context("no renewals")?;
    let like = crate::Raw(store)
        .renewal_written(first)
        .await?
        .context("the burst wrote no approved charge for its first subscription")?;
    let account = store.account(&shop.account).await?.context("account")?;
    let fee = billing::accounts::fee_schedule(&account).fee_for(AMOUNT);
    let now = chrono::Utc::now().timestamp_millis();
    // A period no renewal of the burst charged: the one-charge-per-period index stays quiet.
    let period_start = now + 400 * DAY_MS;
    let started = Instant::now();
    let renewals: Vec<fixtures::RenewalRows> = ids
        .iter()
        .map(|id| {
            let charge_id = billing::ids::ChargeAttemptId::generate();
            fixtures::RenewalRows {
                account: shop.account.clone(),
                subscription_id: id.clone(),
                transaction_id: format!("tx_{charge_id}"),
                charge_id,
                fee_cents: fee,
                period_start,
            }
        })
        .collect();
    crate::Raw(store)
        .write_renewal_rows(&renewals, &like, 500, now)
        .await?;
    Ok(started.elapsed())
}
