//! The protocol's routes, with the keys Wompi requires: `GET merchants/info` with the public
//! key in `x-merchant-public-key`, `POST tokens/cards` and the Nequi tokens with the public key
//! as Bearer, payment sources, transactions and refunds with the private key. A transaction
//! or a refund is answered only to its own merchant: by id another merchant's is 404, by
//! reference or transaction id it is not found. A body that does not read is Wompi's 422.
//!
//! Here: the acceptance tokens, card tokens and payment sources. A payment source needs both
//! acceptances (the end-user policy's token and the personal-data authorization's), and is
//! made from a card token or an APPROVED Nequi token. What its transactions come to is chosen
//! by the card or the phone number and carried in the ids (`scenario`).

use super::nequi::TokenStatus;
use super::scenario::{Scenario, SourceId};
use super::{Body, SandboxProcessor, invalid, not_found, unauthorized};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// The header `GET merchants/info` takes the public key in.
const PUBLIC_KEY_HEADER: &str = "x-merchant-public-key";

/// The protocol's routes, relative. The browser calls the acceptance, card-token and Nequi
/// routes from the checkout page, hence CORS (the others need the private key, which no
/// browser holds).
pub(super) fn router(sandbox: Arc<SandboxProcessor>) -> Router {
    Router::new()
        .route("/merchants/info", get(merchant_info))
        .route("/tokens/cards", post(tokenize_card))
        .route("/payment_sources", post(create_payment_source))
        .route("/payment_sources/{id}", get(get_payment_source))
        .merge(super::nequi::router())
        .merge(super::transactions::router())
        .merge(super::refunds::router())
        .layer(tower_http::cors::CorsLayer::permissive())
        .with_state(sandbox)
}

/// The merchant and the two documents its customers accept, each with its own token.
async fn merchant_info(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
) -> Response {
    let merchant = headers
        .get(PUBLIC_KEY_HEADER)
        .and_then(|key| key.to_str().ok())
        .and_then(|key| sandbox.merchants.by_public(key.trim()));
    let Some(merchant) = merchant else {
        return not_found("Comercio");
    };
    Json(json!({"data": {
        "id": 1, "name": "Sandbox merchant", "public_key": merchant.keys.public_key,
        "presigned_acceptance": {"acceptance_token": merchant.acceptance_token(),
            "permalink": "https://wompi.com/assets/downloadble/reglamento-Usuarios-Colombia.pdf",
            "type": "END_USER_POLICY"},
        "presigned_personal_data_auth": {"acceptance_token": merchant.personal_data_token(),
            "permalink": "https://wompi.com/assets/downloadble/autorizacion-administracion-datos-personales.pdf",
            "type": "PERSONAL_DATA_AUTH"},
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

pub(super) fn luhn(number: &str) -> bool {
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
    Body(card): Body<CardIn>,
) -> Response {
    if sandbox.merchant_by_public(&headers).is_none() {
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
    let letter = Scenario::of_card(&number).card_letter().unwrap_or('e');
    let last_four = &number[number.len() - 4..];
    let brand = if number.starts_with('4') {
        "VISA"
    } else if number.starts_with('5') {
        "MASTERCARD"
    } else {
        "UNKNOWN"
    };
    // The card's expiry travels in the token, as its scenario does: `tok_test_<n>_<mmyy>_<letter>`.
    let id = format!(
        "tok_test_{}_{:02}{}_{letter}",
        sandbox.next(),
        month,
        card.exp_year
    );
    (StatusCode::CREATED, Json(json!({"status": "CREATED", "data": {
        "id": id, "created_at": chrono::Utc::now().to_rfc3339(), "brand": brand, "name": format!("{brand}-{last_four}"),
        "last_four": last_four, "bin": &number[..6], "exp_year": card.exp_year, "exp_month": card.exp_month,
        "card_holder": card.card_holder,
    }})))
    .into_response()
}

/// Every field optional, so that a missing one is refused in Wompi's shape, naming it.
#[derive(Deserialize)]
struct PaymentSourceIn {
    #[serde(rename = "type")]
    kind: Option<String>,
    token: Option<String>,
    customer_email: Option<String>,
    acceptance_token: Option<String>,
    accept_personal_auth: Option<String>,
}

async fn create_payment_source(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Body(body): Body<PaymentSourceIn>,
) -> Response {
    let Some(merchant) = sandbox.merchant_by_private(&headers) else {
        return unauthorized("privada");
    };
    if body.acceptance_token.as_deref() != Some(&merchant.acceptance_token()) {
        return invalid(
            "acceptance_token",
            "Token de aceptación de la política de usuarios inválido o ausente",
        );
    }
    if body.accept_personal_auth.as_deref() != Some(&merchant.personal_data_token()) {
        return invalid(
            "accept_personal_auth",
            "Token de autorización de datos personales inválido o ausente",
        );
    }
    let Some(email) = body.customer_email.filter(|e| e.contains('@')) else {
        return invalid("customer_email", "Correo electrónico inválido o ausente");
    };
    let token = body.token.unwrap_or_default();
    let source = match body.kind.as_deref() {
        Some("CARD") => card_source(&token),
        Some("NEQUI") => {
            let delay = sandbox.config.nequi_approval_delay;
            let status = sandbox
                .nequi_tokens
                .status(&merchant.keys.public_key, &token, delay);
            nequi_source(status)
        }
        _ => return invalid("type", "Debe ser CARD o NEQUI"),
    };
    let source = match source {
        Ok(source) => source,
        Err(message) => return invalid("token", message),
    };
    let Some(id) = source.id(sandbox.next()) else {
        return super::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "SERVICE_UNAVAILABLE_ERROR",
            "El sandbox agotó sus identificadores de fuentes de pago",
        );
    };
    let body = payment_source_body(id, &source, &token, &email);
    let mut body = body;
    if let Some((month, year)) = card_expiry(&token) {
        body["public_data"]["exp_month"] = json!(month);
        body["public_data"]["exp_year"] = json!(year);
    }
    (StatusCode::CREATED, Json(json!({"data": body}))).into_response()
}

fn card_source(token: &str) -> Result<SourceId, &'static str> {
    let scenario = token
        .strip_prefix("tok_test_")
        .and_then(|rest| rest.chars().last())
        .and_then(Scenario::of_card_letter)
        .ok_or("Token de tarjeta inválido")?;
    Ok(SourceId {
        scenario,
        phone_number: None,
    })
}

/// The expiry a card token carries (`tok_test_<n>_<mmyy>_<letter>`): ("08", "30").
fn card_expiry(token: &str) -> Option<(String, String)> {
    let mut parts = token.strip_prefix("tok_test_")?.split('_');
    let (_, mmyy) = (parts.next()?, parts.next()?);
    parts.next()?;
    (mmyy.len() == 4 && mmyy.bytes().all(|b| b.is_ascii_digit()))
        .then(|| (mmyy[..2].to_owned(), mmyy[2..].to_owned()))
}

/// A Nequi payment source needs a token the customer has accepted.
fn nequi_source(token: Option<(TokenStatus, String)>) -> Result<SourceId, &'static str> {
    match token {
        Some((TokenStatus::Approved, phone_number)) => Ok(SourceId {
            scenario: Scenario::of_nequi(&phone_number),
            phone_number: Some(phone_number),
        }),
        Some((TokenStatus::Pending, _)) => Err("El cliente aún no ha aceptado el token Nequi"),
        Some((TokenStatus::Declined, _)) => Err("El cliente rechazó el token Nequi"),
        None => Err("Token Nequi inválido"),
    }
}

/// A payment source as the protocol shows it.
fn payment_source_body(id: i64, source: &SourceId, token: &str, email: &str) -> Value {
    let public_data = match &source.phone_number {
        Some(phone_number) => json!({"type": "NEQUI", "phone_number": phone_number}),
        None => {
            json!({"type": "CARD", "brand": source.scenario.brand(), "last_four": source.scenario.last_four()})
        }
    };
    json!({"id": id, "type": source.scenario.method_type(), "token": token, "status": "AVAILABLE",
        "customer_email": email, "public_data": public_data})
}

/// A payment source by id, from the id alone (its token and e-mail are not kept).
async fn get_payment_source(
    State(sandbox): State<Arc<SandboxProcessor>>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    if sandbox.merchant_by_private(&headers).is_none() {
        return unauthorized("privada");
    }
    match SourceId::decode(id) {
        Some(source) => {
            Json(json!({"data": payment_source_body(id, &source, "", "")})).into_response()
        }
        None => not_found("Fuente de pago"),
    }
}
