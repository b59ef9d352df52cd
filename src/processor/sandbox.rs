//! The sandbox processor: Wompi's protocol served by our code, so that every test and every
//! newcomer's first charge crosses a real HTTP boundary and comes back as a real signed event.
//!
//! Card outcomes (CONTRACT §7): 4242 4242 4242 4242 → APPROVED, 4111 1111 1111 1111 →
//! DECLINED, any other number → ERROR. The outcome travels token → payment source → every
//! charge, and is encoded in the ids themselves (`tok_test_…_a`, payment source `n*10 + code`),
//! so charges against a payment source keep working after the process restarts even though the
//! sandbox keeps its state in memory. Transactions live only in memory: after a restart a
//! lookup by reference finds nothing, and the caller creates the transaction again.

use super::signature::{event_checksum, integrity_signature};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use dashmap::DashMap;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::Semaphore;

#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// How long a transaction stays PENDING.
    pub settle_delay: Duration,
    /// Waits before re-sending an event that was not answered 200.
    pub event_retry_delays: Vec<Duration>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            settle_delay: Duration::from_millis(100),
            event_retry_delays: [1, 2, 5, 10, 30].map(Duration::from_secs).to_vec(),
        }
    }
}

/// A merchant's four keys.
#[derive(Clone)]
pub struct MerchantKeys {
    pub public_key: String,
    pub private_key: String,
    pub events_secret: String,
    pub integrity_secret: String,
}

struct Merchant {
    keys: MerchantKeys,
    events_url: RwLock<Option<String>>,
}

impl Merchant {
    fn acceptance_token(&self) -> String {
        format!(
            "acc_test_{}",
            &crate::secrets::sha256_hex(&self.keys.public_key)[..24]
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Approved,
    Declined,
    Error,
}

impl Outcome {
    fn of_card(number: &str) -> Self {
        match number {
            "4242424242424242" => Outcome::Approved,
            "4111111111111111" => Outcome::Declined,
            _ => Outcome::Error,
        }
    }
    fn code(self) -> i64 {
        match self {
            Outcome::Approved => 0,
            Outcome::Declined => 1,
            Outcome::Error => 2,
        }
    }
    fn from_code(code: i64) -> Option<Self> {
        [Outcome::Approved, Outcome::Declined, Outcome::Error]
            .into_iter()
            .find(|o| o.code() == code)
    }
    fn letter(self) -> char {
        ['a', 'd', 'e'][self.code() as usize]
    }
    fn from_letter(letter: char) -> Option<Self> {
        [Outcome::Approved, Outcome::Declined, Outcome::Error]
            .into_iter()
            .find(|o| o.letter() == letter)
    }
    fn status(self) -> &'static str {
        match self {
            Outcome::Approved => "APPROVED",
            Outcome::Declined => "DECLINED",
            Outcome::Error => "ERROR",
        }
    }
}

/// A transaction as the sandbox keeps it: its JSON as compact text, a few hundred bytes,
/// where a `Value` tree took several KB (a long burst keeps every transaction it made).
#[derive(Clone)]
struct StoredTransaction {
    merchant: String,
    body: Box<str>,
}

impl StoredTransaction {
    fn body(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

pub struct SandboxProcessor {
    config: SandboxConfig,
    http: reqwest::Client,
    by_public: DashMap<String, Arc<Merchant>>,
    by_private: DashMap<String, Arc<Merchant>>,
    transactions: DashMap<String, StoredTransaction>,
    references: DashMap<(String, String), String>,
    counter: AtomicU64,
    event_slots: Arc<Semaphore>,
}

impl SandboxProcessor {
    pub fn new(config: SandboxConfig, http: reqwest::Client) -> Arc<Self> {
        Arc::new(Self {
            config,
            http,
            by_public: DashMap::new(),
            by_private: DashMap::new(),
            transactions: DashMap::new(),
            references: DashMap::new(),
            counter: AtomicU64::new(1),
            event_slots: Arc::new(Semaphore::new(64)),
        })
    }

    /// Adds (or updates the events URL of) a merchant with exactly these keys.
    pub fn register_merchant(&self, keys: MerchantKeys, events_url: Option<String>) {
        if let Some(existing) = self.by_public.get(&keys.public_key) {
            if let Ok(mut url) = existing.events_url.write() {
                *url = events_url;
            }
            return;
        }
        let merchant = Arc::new(Merchant {
            keys: keys.clone(),
            events_url: RwLock::new(events_url),
        });
        self.by_private
            .insert(keys.private_key.clone(), Arc::clone(&merchant));
        self.by_public.insert(keys.public_key, merchant);
    }

    /// The protocol's routes, relative: the caller nests them (`/sandbox/processor/v1`, `/v1`).
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/merchants/{public_key}", get(merchant))
            .route("/tokens/cards", post(tokenize_card))
            .route("/payment_sources", post(create_payment_source))
            .route("/payment_sources/{id}", get(get_payment_source))
            .route(
                "/transactions",
                post(create_transaction).get(find_transactions),
            )
            .route("/transactions/{id}", get(get_transaction))
            .route("/_sandbox/merchants", post(create_merchant))
            .layer(tower_http::cors::CorsLayer::permissive())
            .with_state(self)
    }

    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    fn merchant_by_private(&self, headers: &HeaderMap) -> Result<Arc<Merchant>, Response> {
        bearer(headers)
            .and_then(|key| self.by_private.get(key).map(|m| Arc::clone(&m)))
            .ok_or_else(|| unauthorized("private"))
    }

    fn settle_later(self: &Arc<Self>, id: String, outcome: Outcome) {
        let sandbox = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(sandbox.config.settle_delay).await;
            let Some(event) = sandbox.finalize(&id, outcome) else {
                return;
            };
            sandbox.deliver(event).await;
        });
    }

    /// Moves a transaction to its final status and builds the signed event.
    fn finalize(&self, id: &str, outcome: Outcome) -> Option<(Arc<Merchant>, Value)> {
        let mut stored = self.transactions.get_mut(id)?;
        let mut body = stored.body();
        body["status"] = json!(outcome.status());
        body["finalized_at"] = json!(chrono::Utc::now().to_rfc3339());
        if outcome != Outcome::Approved {
            body["status_message"] = json!(match outcome {
                Outcome::Declined => "Transacción rechazada por el banco (sandbox)",
                _ => "Error procesando la tarjeta (sandbox)",
            });
        }
        stored.body = body.to_string().into_boxed_str();
        let merchant = self
            .by_public
            .get(&stored.merchant)
            .map(|m| Arc::clone(&m))?;
        let mut event = json!({
            "event": "transaction.updated",
            "data": {"transaction": body},
            "environment": "test",
            "signature": {"properties": ["transaction.id", "transaction.status", "transaction.amount_in_cents"]},
            "timestamp": chrono::Utc::now().timestamp(),
            "sent_at": chrono::Utc::now().to_rfc3339(),
        });
        let checksum = event_checksum(&event, &merchant.keys.events_secret)?;
        event["signature"]["checksum"] = json!(checksum);
        Some((merchant, event))
    }

    /// POSTs the event to the merchant's events URL until it answers 200 or retries run out.
    async fn deliver(&self, (merchant, event): (Arc<Merchant>, Value)) {
        let Some(url) = merchant.events_url.read().ok().and_then(|u| u.clone()) else {
            return;
        };
        let checksum = event["signature"]["checksum"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut delays = self.config.event_retry_delays.iter();
        loop {
            let sent = {
                let _slot = self.event_slots.acquire().await;
                self.http
                    .post(&url)
                    .header("X-Event-Checksum", &checksum)
                    .json(&event)
                    .timeout(Duration::from_secs(15))
                    .send()
                    .await
            };
            if sent.is_ok_and(|r| r.status() == StatusCode::OK) {
                return;
            }
            let Some(delay) = delays.next() else {
                tracing::warn!(url = %url, "sandbox processor gave up delivering an event");
                return;
            };
            tokio::time::sleep(*delay).await;
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn unauthorized(which: &str) -> Response {
    let reason = format!(
        "Se esperaba una llave {} válida",
        if which == "private" {
            "privada"
        } else {
            "pública"
        }
    );
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"error": {"type": "INVALID_ACCESS_TOKEN", "reason": reason}})),
    )
        .into_response()
}

fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"error": {"type": "NOT_FOUND_ERROR", "reason": format!("{what} no encontrado")}})))
        .into_response()
}

fn invalid(field: &str, message: &str) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({"error": {"type": "INPUT_VALIDATION_ERROR", "messages": {field: [message]}}})),
    )
        .into_response()
}

async fn merchant(
    State(sandbox): State<Arc<SandboxProcessor>>,
    Path(public_key): Path<String>,
) -> Response {
    let Some(merchant) = sandbox.by_public.get(&public_key).map(|m| Arc::clone(&m)) else {
        return not_found("Comercio");
    };
    let token = merchant.acceptance_token();
    Json(json!({"data": {
        "id": 1, "name": "Sandbox merchant", "public_key": public_key,
        "presigned_acceptance": {"acceptance_token": token, "permalink": "https://wompi.com/assets/downloadble/reglamento-Usuarios-Colombia.pdf", "type": "END_USER_POLICY"},
        "presigned_personal_data_auth": {"acceptance_token": format!("{token}_pd"), "permalink": "https://wompi.com/assets/downloadble/autorizacion-administracion-datos-personales.pdf", "type": "PERSONAL_DATA_AUTH"},
    }}))
    .into_response()
}

#[derive(Deserialize)]
struct CardIn {
    number: String,
    cvc: String,
    exp_month: String,
    exp_year: String,
    card_holder: String,
}

fn luhn(number: &str) -> bool {
    let digits: Option<Vec<u32>> = number.chars().rev().map(|c| c.to_digit(10)).collect();
    let Some(digits) = digits else {
        return false;
    };
    let sum: u32 = digits
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                *d
            }
        })
        .sum();
    (12..=19).contains(&digits.len()) && sum % 10 == 0
}

async fn tokenize_card(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Json(card): Json<CardIn>,
) -> Response {
    if bearer(&headers).is_none_or(|key| !sandbox.by_public.contains_key(key)) {
        return unauthorized("public");
    }
    let number: String = card.number.chars().filter(|c| !c.is_whitespace()).collect();
    if !luhn(&number) {
        return invalid("number", "Número de tarjeta inválido");
    }
    if !(3..=4).contains(&card.cvc.len()) || !card.cvc.chars().all(|c| c.is_ascii_digit()) {
        return invalid("cvc", "CVC inválido");
    }
    let month: u32 = card.exp_month.parse().unwrap_or(0);
    if !(1..=12).contains(&month) || card.exp_year.len() != 2 || card.card_holder.trim().len() < 5 {
        return invalid("exp_month", "Fecha de expiración o titular inválidos");
    }
    let outcome = Outcome::of_card(&number);
    let last_four = &number[number.len() - 4..];
    let brand = if number.starts_with('4') {
        "VISA"
    } else if number.starts_with('5') {
        "MASTERCARD"
    } else {
        "UNKNOWN"
    };
    let id = format!("tok_test_{}_{}", sandbox.next(), outcome.letter());
    (StatusCode::CREATED, Json(json!({"status": "CREATED", "data": {
        "id": id, "created_at": chrono::Utc::now().to_rfc3339(), "brand": brand, "name": format!("{brand}-{last_four}"),
        "last_four": last_four, "bin": &number[..6], "exp_year": card.exp_year, "exp_month": card.exp_month,
        "card_holder": card.card_holder,
    }})))
    .into_response()
}

#[derive(Deserialize)]
struct PaymentSourceIn {
    #[serde(rename = "type")]
    kind: String,
    token: String,
    customer_email: String,
    acceptance_token: String,
}

async fn create_payment_source(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Json(body): Json<PaymentSourceIn>,
) -> Response {
    let merchant = match sandbox.merchant_by_private(&headers) {
        Ok(merchant) => merchant,
        Err(response) => return response,
    };
    if body.kind != "CARD" {
        return invalid("type", "Solo se admite CARD en el sandbox");
    }
    if body.acceptance_token != merchant.acceptance_token() {
        return invalid("acceptance_token", "Token de aceptación inválido");
    }
    let outcome = body
        .token
        .strip_prefix("tok_test_")
        .and_then(|rest| rest.chars().last())
        .and_then(Outcome::from_letter);
    let Some(outcome) = outcome else {
        return invalid("token", "Token de tarjeta inválido");
    };
    let id = sandbox.next() as i64 * 10 + outcome.code();
    (
        StatusCode::CREATED,
        Json(json!({"data": payment_source_body(id, outcome, &body.token, &body.customer_email)})),
    )
        .into_response()
}

fn payment_source_body(id: i64, outcome: Outcome, token: &str, email: &str) -> Value {
    let last_four = match outcome {
        Outcome::Approved => "4242",
        Outcome::Declined => "1111",
        Outcome::Error => "0000",
    };
    json!({"id": id, "type": "CARD", "token": token, "status": "AVAILABLE", "customer_email": email,
        "public_data": {"type": "CARD", "brand": "VISA", "last_four": last_four}})
}

async fn get_payment_source(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    if let Err(response) = sandbox.merchant_by_private(&headers) {
        return response;
    }
    match Outcome::from_code(id.rem_euclid(10)) {
        Some(outcome) if id > 0 => {
            Json(json!({"data": payment_source_body(id, outcome, "", "")})).into_response()
        }
        _ => not_found("Fuente de pago"),
    }
}

#[derive(Deserialize)]
struct TransactionIn {
    amount_in_cents: i64,
    currency: String,
    signature: String,
    customer_email: String,
    reference: String,
    payment_source_id: i64,
}

async fn create_transaction(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Json(body): Json<TransactionIn>,
) -> Response {
    let merchant = match sandbox.merchant_by_private(&headers) {
        Ok(merchant) => merchant,
        Err(response) => return response,
    };
    if body.amount_in_cents <= 0 || body.currency != "COP" {
        return invalid("amount_in_cents", "Monto o moneda inválidos");
    }
    let expected = integrity_signature(
        &body.reference,
        body.amount_in_cents,
        &body.currency,
        &merchant.keys.integrity_secret,
    );
    if expected != body.signature {
        return invalid("signature", "La firma es inválida");
    }
    let Some(outcome) = Outcome::from_code(body.payment_source_id.rem_euclid(10))
        .filter(|_| body.payment_source_id > 0)
    else {
        return invalid("payment_source_id", "Fuente de pago inválida");
    };
    let key = (merchant.keys.public_key.clone(), body.reference.clone());
    let id = format!(
        "{}-{}-{:05}",
        sandbox.next(),
        chrono::Utc::now().timestamp(),
        rand::random::<u16>() % 10_000
    );
    match sandbox.references.entry(key) {
        dashmap::Entry::Occupied(_) => {
            return invalid("reference", "La referencia ya ha sido usada");
        }
        dashmap::Entry::Vacant(slot) => {
            slot.insert(id.clone());
        }
    }
    let tx = json!({
        "id": id, "created_at": chrono::Utc::now().to_rfc3339(), "amount_in_cents": body.amount_in_cents,
        "reference": body.reference, "customer_email": body.customer_email, "currency": "COP",
        "payment_method_type": "CARD", "payment_source_id": body.payment_source_id, "status": "PENDING",
        "status_message": null, "recurrent": true,
    });
    sandbox.transactions.insert(
        id.clone(),
        StoredTransaction {
            merchant: merchant.keys.public_key.clone(),
            body: tx.to_string().into_boxed_str(),
        },
    );
    sandbox.settle_later(id, outcome);
    (StatusCode::CREATED, Json(json!({"data": tx}))).into_response()
}

async fn get_transaction(
    State(sandbox): State<Arc<SandboxProcessor>>,
    Path(id): Path<String>,
) -> Response {
    match sandbox.transactions.get(&id) {
        Some(stored) => Json(json!({"data": stored.body()})).into_response(),
        None => not_found("Transacción"),
    }
}

async fn find_transactions(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let merchant = match sandbox.merchant_by_private(&headers) {
        Ok(merchant) => merchant,
        Err(response) => return response,
    };
    let Some(reference) = query.get("reference") else {
        return invalid("reference", "Se requiere la referencia");
    };
    let found: Vec<Value> = sandbox
        .references
        .get(&(merchant.keys.public_key.clone(), reference.clone()))
        .and_then(|id| sandbox.transactions.get(id.value()).map(|t| t.body()))
        .into_iter()
        .collect();
    Json(json!({"data": found})).into_response()
}

#[derive(Deserialize)]
struct MerchantIn {
    events_url: Option<String>,
    public_key: Option<String>,
    private_key: Option<String>,
    events_secret: Option<String>,
    integrity_secret: Option<String>,
}

/// Sandbox-only: creates a merchant (tests of the standalone server use it).
async fn create_merchant(
    State(sandbox): State<Arc<SandboxProcessor>>,
    Json(body): Json<MerchantIn>,
) -> Response {
    use crate::secrets::random_token;
    let keys = MerchantKeys {
        public_key: body
            .public_key
            .unwrap_or_else(|| random_token("pub_test_", 32)),
        private_key: body
            .private_key
            .unwrap_or_else(|| random_token("prv_test_", 32)),
        events_secret: body
            .events_secret
            .unwrap_or_else(|| random_token("test_events_", 32)),
        integrity_secret: body
            .integrity_secret
            .unwrap_or_else(|| random_token("test_integrity_", 32)),
    };
    sandbox.register_merchant(keys.clone(), body.events_url);
    (
        StatusCode::CREATED,
        Json(
            json!({"public_key": keys.public_key, "private_key": keys.private_key,
        "events_secret": keys.events_secret, "integrity_secret": keys.integrity_secret}),
        ),
    )
        .into_response()
}

/// Serves the sandbox alone, at `/v1` (`billing sandbox-processor --bind ADDR`).
pub async fn serve_standalone(
    listener: tokio::net::TcpListener,
    config: SandboxConfig,
) -> anyhow::Result<()> {
    let sandbox = SandboxProcessor::new(config, reqwest::Client::new());
    let app = Router::new().nest("/v1", sandbox.router());
    axum::serve(listener, app).await?;
    Ok(())
}

/// Only the public key: the other three are the merchant's secrets.
impl std::fmt::Debug for MerchantKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MerchantKeys")
            .field("public_key", &self.public_key)
            .finish_non_exhaustive()
    }
}
