//! `/webhooks/whatsapp/{account_id}`: what Meta (or the sandbox WhatsApp) says became of the
//! account's WhatsApp notices, and Meta's handshake when the merchant subscribes the URL.
//!
//! `POST`, in this order: size (413 past 64 KB, without reading the rest) → the account's app
//! secret (401 when the account has none, or there is no such account: the two look alike) →
//! `X-Hub-Signature-256` over the raw bytes, in constant time (401; nothing is read or changed
//! before it passes) → parse (400) → each status recorded on the notice its wamid names:
//! `delivered` and `read` once each, `failed` ends a sent notice `failed` with the error;
//! `sent` adds nothing (the send's own answer said so). A wamid no notice has is answered 200
//! and ignored, as Meta expects of a receiver (it also reports messages sent by other tools).
//!
//! `GET` is the handshake: `hub.mode=subscribe` and the account's `verify_token` → the
//! `hub.challenge`, as text; anything else 403.

use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::state::AppState;
use crate::ids::AccountId;
use crate::secrets::constant_time_eq;
use crate::store::notices::Delivery;
use crate::whatsapp::signature;
use crate::whatsapp::wire::Webhook;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(verify_whatsapp_webhook, receive_whatsapp_status))
        .layer(DefaultBodyLimit::max(super::ingress::INGRESS_MAX_BYTES))
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"received": true, "recorded": 1})))]
pub struct WhatsappIngressOut {
    pub received: bool,
    /// How many statuses named a notice of this account (the others are ignored).
    pub recorded: u32,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HandshakeQuery {
    /// `subscribe`.
    #[serde(rename = "hub.mode")]
    #[param(rename = "hub.mode")]
    pub mode: Option<String>,
    /// The account's `whatsapp.verify_token`.
    #[serde(rename = "hub.verify_token")]
    #[param(rename = "hub.verify_token")]
    pub verify_token: Option<String>,
    /// Answered back as it came.
    #[serde(rename = "hub.challenge")]
    #[param(rename = "hub.challenge", max_length = 256)]
    pub challenge: Option<String>,
}

/// Meta's subscription handshake: the challenge back when the verify token is the account's.
#[utoipa::path(get, path = "/webhooks/whatsapp/{account_id}", tag = "notices",
    security(()),
    params(("account_id" = String, Path, description = "The account's id (`acct_…`)."), HandshakeQuery),
    responses((status = 200, description = "The challenge, as text.", body = String, content_type = "text/plain", example = json!("1158201444")),
        (status = 403, body = ErrorBody)))]
async fn verify_whatsapp_webhook(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
    query: Result<Query<HandshakeQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<String> {
    let refused = || {
        ApiError::invalid(
            StatusCode::FORBIDDEN,
            "The verify token is not this account's.",
        )
    };
    let Ok(Query(query)) = query else {
        return Err(refused());
    };
    let settings = state
        .store
        .notice_settings(&AccountId::given(account_id.as_str()))
        .await?;
    let (Some(expected), Some(presented), Some(challenge)) = (
        settings.whatsapp.verify_token.as_deref(),
        query.verify_token.as_deref(),
        query.challenge,
    ) else {
        return Err(refused());
    };
    if query.mode.as_deref() != Some("subscribe")
        || challenge.len() > 256
        || !constant_time_eq(expected, presented)
    {
        return Err(refused());
    }
    Ok(challenge)
}

/// Receives WhatsApp status webhooks. No Bearer: `X-Hub-Signature-256` under the account's app
/// secret authenticates them.
#[utoipa::path(post, path = "/webhooks/whatsapp/{account_id}", tag = "notices",
    security(()),
    params(("account_id" = String, Path, description = "The account's id (`acct_…`).")),
    request_body(content = Object, description = "Meta's webhook of message statuses", example = json!({
        "object": "whatsapp_business_account",
        "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
            "statuses": [{"id": "wamid.HBgLMTY0NjcwNDM1OTUVAgARGBI1RjQyNUE3NEYxMzAzMzQ5MkEA",
                "status": "delivered", "timestamp": "1764600000", "recipient_id": "573001234567"}]}}]}]
    })),
    responses((status = 200, body = WhatsappIngressOut), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "A message the webhook reports on is still being sent (its id not yet recorded): what matched was recorded, and Meta sends the webhook again.",
            headers(("Retry-After" = u64, description = "Seconds to wait before sending it again.")))))]
async fn receive_whatsapp_status(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<WhatsappIngressOut>> {
    let body = body.map_err(|rejection| {
        ApiError::invalid(rejection.status(), "Webhook body too large or unreadable.")
    })?;
    let account = AccountId::given(account_id.as_str());
    let settings = state.store.notice_settings(&account).await?;
    let Some(secret) = settings.whatsapp.app_secret.as_deref() else {
        return Err(ApiError::Authentication);
    };
    let header = headers.get(signature::HEADER).and_then(|v| v.to_str().ok());
    if !signature::verify(secret, &body, header) {
        return Err(ApiError::Authentication);
    }
    let webhook: Webhook = serde_json::from_slice(&body)
        .map_err(|_| ApiError::bad_request("The webhook is not Meta's shape."))?;
    // Meta's instants are real time; a notice's are on the account's clock.
    let now = state.runtime.clock().fresh_now_ms(&account).await?;
    let offset = now - chrono::Utc::now().timestamp_millis();
    let (mut recorded, mut unmatched) = (0, 0);
    for change in webhook.entry.iter().flat_map(|entry| &entry.changes) {
        if change.field != "messages" {
            continue;
        }
        for status in &change.value.statuses {
            let at = status.at_ms().map_or(now, |at| at.saturating_add(offset));
            let delivery = match status.status.as_str() {
                "delivered" => Delivery::Delivered { at },
                "read" => Delivery::Read { at },
                "failed" => Delivery::Failed {
                    error: status.error_text(),
                },
                _ => continue,
            };
            metrics::counter!("whatsapp_statuses_total", "status" => status.status.clone())
                .increment(1);
            if state
                .store
                .record_whatsapp_delivery(&account, &status.id, &delivery)
                .await?
            {
                recorded += 1;
            } else {
                unmatched += 1;
            }
        }
    }
    // A status may outrun the send it reports on: Meta answers the send with the wamid, and
    // reports on it at once, before the worker records the wamid. While a WhatsApp send of the
    // account is under way an unknown wamid may be that one's, so the webhook is refused and
    // Meta sends it again (what matched is recorded, and recording it again changes nothing).
    if unmatched > 0
        && state
            .store
            .notices_in_flight(&account, Some(crate::domain::notices::Channel::Whatsapp))
            .await?
            > 0
    {
        return Err(ApiError::NotYet {
            message: "A message this webhook reports on is still being sent: send the webhook again.",
            retry_after_secs: 1,
        });
    }
    Ok(Json(WhatsappIngressOut {
        received: true,
        recorded,
    }))
}
