//! The protocol's routes, with the keys Wompi requires (CONTRACT §7): `GET merchants/{key}`
//! open (the public key is in the path), `POST tokens/cards` the public key, payment sources
//! and transactions the private key. A transaction is answered only to its own merchant: by id
//! another merchant's is 404, by reference it is not found.
//!
//! Card outcomes: 4242 4242 4242 4242 → APPROVED, 4111 1111 1111 1111 → DECLINED, any other
//! number → ERROR. The outcome travels token → payment source → every charge, and is encoded
//! in the ids themselves (`tok_test_…_a`, payment source `n*10 + code`), so charges against a
//! payment source keep working after the process restarts even though the sandbox keeps its
//! state in memory.

use super::{SandboxProcessor, bearer, error, invalid, not_found};
use crate::processor::signature::integrity_signature;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// The protocol's routes, relative. The browser calls the first two from the checkout page,
/// hence CORS (the others need the private key, which no browser holds).
pub(super) fn router(sandbox: Arc<SandboxProcessor>) -> Router {
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
        .layer(tower_http::cors::CorsLayer::permissive())
        .with_state(sandbox)
}

/// A transaction's outcome, decided when its payment source was made.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Approved,
    Declined,
    Error,
}

impl Outcome {
    pub(super) fn of_card(number: &str) -> Self {
        match number {
            "4242424242424242" => Outcome::Approved,
            "4111111111111111" => Outcome::Declined,
            _ => Outcome::Error,
        }
    }
    pub(super) fn code(self) -> i64 {
        match self {
            Outcome::Approved => 0,
            Outcome::Declined => 1,
            Outcome::Error => 2,
        }
    }
    pub(super) fn from_code(code: i64) -> Option<Self> {
        [Outcome::Approved, Outcome::Declined, Outcome::Error]
            .into_iter()
            .find(|o| o.code() == code)
    }
    pub(super) fn letter(self) -> char {
        ['a', 'd', 'e'][self.code() as usize]
    }
    pub(super) fn from_letter(letter: char) -> Option<Self> {
        [Outcome::Approved, Outcome::Declined, Outcome::Error]
            .into_iter()
            .find(|o| o.letter() == letter)
    }
    pub(super) fn status(self) -> &'static str {
        match self {
            Outcome::Approved => "APPROVED",
            Outcome::Declined => "DECLINED",
            Outcome::Error => "ERROR",
        }
    }
}

fn unauthorized(which: &str) -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "INVALID_ACCESS_TOKEN",
        &format!("Se esperaba una llave {which} válida"),
    )
}

impl SandboxProcessor {
    /// The merchant whose private key is the request's Bearer.
    fn merchant_by_private(&self, headers: &HeaderMap) -> Option<Arc<super::state::Merchant>> {
        bearer(headers).and_then(|key| self.merchants.by_private(key))
    }
}

async fn merchant(
    State(sandbox): State<Arc<SandboxProcessor>>,
    Path(public_key): Path<String>,
) -> Response {
    let Some(merchant) = sandbox.merchants.by_public(&public_key) else {
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
    (12..=19).contains(&digits.len()) && sum.is_multiple_of(10)
}

async fn tokenize_card(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Json(card): Json<CardIn>,
) -> Response {
    if bearer(&headers).is_none_or(|key| sandbox.merchants.by_public(key).is_none()) {
        return unauthorized("pública");
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
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
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
    if sandbox.merchant_by_private(&headers).is_none() {
        return unauthorized("privada");
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
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
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
    let id = format!(
        "{}-{}-{:05}",
        sandbox.next(),
        chrono::Utc::now().timestamp(),
        rand::random::<u16>() % 10_000
    );
    let tx = json!({
        "id": id, "created_at": chrono::Utc::now().to_rfc3339(), "amount_in_cents": body.amount_in_cents,
        "reference": body.reference, "customer_email": body.customer_email, "currency": "COP",
        "payment_method_type": "CARD", "payment_source_id": body.payment_source_id, "status": "PENDING",
        "status_message": null, "recurrent": true,
    });
    if !sandbox
        .transactions
        .insert(&id, &merchant.keys.public_key, &body.reference, &tx)
    {
        return invalid("reference", "La referencia ya ha sido usada");
    }
    sandbox.settle_later(id, outcome);
    (StatusCode::CREATED, Json(json!({"data": tx}))).into_response()
}

async fn get_transaction(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    match sandbox.transactions.get(&merchant.keys.public_key, &id) {
        Some(body) => Json(json!({"data": body})).into_response(),
        None => not_found("Transacción"),
    }
}

async fn find_transactions(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    let Some(reference) = query.get("reference") else {
        return invalid("reference", "Se requiere la referencia");
    };
    let found: Vec<Value> = sandbox
        .transactions
        .by_reference(&merchant.keys.public_key, reference)
        .into_iter()
        .collect();
    Json(json!({"data": found})).into_response()
}
