//! The sandbox DIAN's administration, under `_sandbox` and behind the admin token (as the
//! sandbox processor's): telling it of a numbering range (`POST ranges`), of a software and
//! its PIN (`POST software`), of a number it holds for another document (`POST documents`),
//! and of failures to produce (`POST faults`); and what it accepted (`GET documents`).

use super::{AcceptedDocument, Fault, SandboxDian};
use crate::dian::document::NumberingRange;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::NaiveDate;
use serde::Deserialize;
use std::sync::Arc;

pub(super) fn router(sandbox: Arc<SandboxDian>) -> Router {
    Router::new()
        .route("/ranges", post(register_range))
        .route("/software", post(register_software))
        .route("/faults", post(set_fault))
        .route("/documents", get(accepted).post(hold_for_another))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&sandbox),
            require_admin,
        ))
        .with_state(sandbox)
}

async fn require_admin(
    State(sandbox): State<Arc<SandboxDian>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if !sandbox.admin.admits(presented) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    next.run(request).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeIn {
    seller_nit: String,
    resolution_number: String,
    prefix: String,
    from: i64,
    to: i64,
    valid_from: NaiveDate,
    valid_to: NaiveDate,
    technical_key: String,
}

async fn register_range(
    State(sandbox): State<Arc<SandboxDian>>,
    Json(body): Json<RangeIn>,
) -> StatusCode {
    sandbox.register_range(
        &body.seller_nit,
        NumberingRange {
            resolution_number: body.resolution_number,
            prefix: body.prefix,
            from: body.from,
            to: body.to,
            valid_from: body.valid_from,
            valid_to: body.valid_to,
            technical_key: body.technical_key,
        },
    );
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SoftwareIn {
    software_id: String,
    pin: String,
}

async fn register_software(
    State(sandbox): State<Arc<SandboxDian>>,
    Json(body): Json<SoftwareIn>,
) -> StatusCode {
    sandbox.register_software(&body.software_id, &body.pin);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultIn {
    /// `late`, `unavailable` or `none`.
    mode: String,
    #[serde(default = "one")]
    times: u32,
}

fn one() -> u32 {
    1
}

async fn set_fault(
    State(sandbox): State<Arc<SandboxDian>>,
    Json(body): Json<FaultIn>,
) -> StatusCode {
    match body.mode.as_str() {
        "late" => sandbox.fail_next(Fault::Late, body.times),
        "unavailable" => sandbox.fail_next(Fault::Unavailable, body.times),
        "none" => sandbox.fail_next(Fault::Late, 0),
        _ => return StatusCode::UNPROCESSABLE_ENTITY,
    }
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeldIn {
    seller_nit: String,
    number: String,
    key: String,
}

async fn hold_for_another(
    State(sandbox): State<Arc<SandboxDian>>,
    Json(body): Json<HeldIn>,
) -> StatusCode {
    sandbox.hold_for_another(&body.seller_nit, &body.number, &body.key);
    StatusCode::NO_CONTENT
}

async fn accepted(State(sandbox): State<Arc<SandboxDian>>) -> Json<Vec<AcceptedDocument>> {
    Json(sandbox.accepted())
}
