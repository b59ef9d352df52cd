//! `POST /{version}/{phone_number_id}/messages`: a template message, as Meta takes it. The
//! Bearer must be the number's access token (else Meta's 401, `OAuthException` 190); the body
//! must be a template message with a `to` of digits and a template name (else Meta's 400,
//! code 100); bodies are bounded (64 KB). Accepted: 200 with the wamid, the message kept, and
//! its statuses posted later (`statuses`).

use super::{FAILS_TO_DELIVER, NOT_ON_WHATSAPP, Received, SandboxWhatsapp, UNAVAILABLE, lock};
use crate::secrets::{constant_time_eq, sha256_hex};
use crate::whatsapp::wire::{
    Contact, ErrorOut, MessageRef, MetaError, PRODUCT, SentOut, TemplateMessage,
};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use std::sync::Arc;

/// The most a message's body may be.
const MAX_BODY: usize = 64 * 1024;

pub(super) fn router(sandbox: Arc<SandboxWhatsapp>) -> Router {
    Router::new()
        .route("/{version}/{phone_number_id}/messages", post(send_message))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(sandbox)
}

/// Meta's error body with `status`.
pub(super) fn meta_error(status: StatusCode, kind: &str, code: i64, message: &str) -> Response {
    let trace = uuid::Uuid::new_v4().simple().to_string();
    (
        status,
        Json(ErrorOut {
            error: MetaError {
                message: message.to_owned(),
                kind: kind.to_owned(),
                code,
                error_subcode: None,
                fbtrace_id: Some(trace[..11].to_owned()),
            },
        }),
    )
        .into_response()
}

fn bad_payload(message: &str) -> Response {
    meta_error(
        StatusCode::BAD_REQUEST,
        "OAuthException",
        100,
        &format!("(#100) {message}"),
    )
}

pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

async fn send_message(
    State(sandbox): State<Arc<SandboxWhatsapp>>,
    Path((_version, phone_number_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let known = {
        let numbers = lock(&sandbox.numbers);
        numbers.get(&phone_number_id).map(|number| {
            bearer(&headers)
                .is_some_and(|token| constant_time_eq(&sha256_hex(token), &number.token_hash))
        })
    };
    match known {
        Some(true) => {}
        // Meta answers a token that does not open the number the same as a bad token.
        Some(false) | None if bearer(&headers).is_none() => {
            return meta_error(
                StatusCode::UNAUTHORIZED,
                "OAuthException",
                190,
                "An active access token must be used to query information about the current user.",
            );
        }
        Some(false) => {
            return meta_error(
                StatusCode::UNAUTHORIZED,
                "OAuthException",
                190,
                "Invalid OAuth access token - Cannot parse access token",
            );
        }
        None => {
            return meta_error(
                StatusCode::BAD_REQUEST,
                "GraphMethodException",
                100,
                &format!(
                    "Unsupported post request. Object with ID '{phone_number_id}' does not exist"
                ),
            );
        }
    }
    let Ok(body) = body else {
        return meta_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "OAuthException",
            100,
            "(#100) The request body is too large",
        );
    };
    let message: TemplateMessage = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(err) => return bad_payload(&format!("Invalid parameter: {err}")),
    };
    if message.messaging_product != PRODUCT {
        return bad_payload("The parameter messaging_product is required and must be whatsapp.");
    }
    if message.kind != "template" {
        return bad_payload("Param type must be one of {TEMPLATE} in this sandbox.");
    }
    if message.to.is_empty()
        || message.to.len() > 15
        || !message.to.bytes().all(|b| b.is_ascii_digit())
    {
        return bad_payload("Param to must be a phone number.");
    }
    let name = &message.template.name;
    if name.is_empty() || name.len() > 512 {
        return bad_payload("Param template['name'] is required.");
    }
    if message.template.language.code.is_empty() {
        return bad_payload("Param template['language']['code'] is required.");
    }
    if message.to == UNAVAILABLE {
        return meta_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "OAuthException",
            131_016,
            "(#131016) Service unavailable",
        );
    }
    if message.to == NOT_ON_WHATSAPP {
        return meta_error(
            StatusCode::BAD_REQUEST,
            "OAuthException",
            131_026,
            "(#131026) Message undeliverable: the recipient is not a WhatsApp user",
        );
    }
    let wamid = sandbox.next_wamid();
    sandbox.keep(Received {
        id: wamid.clone(),
        phone_number_id: phone_number_id.clone(),
        to: message.to.clone(),
        template: name.clone(),
        language: message.template.language.code.clone(),
        parameters: message.body_texts(),
        status: "accepted".to_owned(),
        received_at: chrono::Utc::now().timestamp_millis(),
    });
    sandbox.report_later(
        &phone_number_id,
        &wamid,
        &message.to,
        message.to == FAILS_TO_DELIVER,
    );
    Json(SentOut {
        messaging_product: PRODUCT.to_owned(),
        contacts: vec![Contact {
            input: message.to.clone(),
            wa_id: message.to,
        }],
        messages: vec![MessageRef { id: wamid }],
    })
    .into_response()
}
