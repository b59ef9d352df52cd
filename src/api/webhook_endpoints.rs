//! Webhook endpoints and their deliveries log (spec: Webhook endpoints; CONTRACT §9).
//!
//! At most [`MAX_ENDPOINTS_PER_ACCOUNT`] per account, disabled ones included (the 17th create
//! answers 400 and writes nothing; the store counts inside the insert's transaction, so
//! concurrent creates cannot overshoot). The signing secret is in the creation response only. A disabled endpoint receives nothing
//! more; deliveries it had pending wait and resume if it is enabled again. A deleted endpoint
//! goes with its deliveries and attempts.

use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::list::{ListOut, ListQuery};
use crate::http::state::AppState;
use crate::ids::{DeliveryId, WebhookEndpointId};
use crate::store::webhooks::{
    EndpointPatch, InsertEndpointError, WebhookAttempt, WebhookDelivery, WebhookEndpoint,
};
use crate::webhooks::{is_event_type, signing, target};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

/// Endpoints one account may have (issue 14: no tenant grows without bound). Each is an actor
/// and a fan-out row per event, so the bound also bounds one event's write amplification.
pub const MAX_ENDPOINTS_PER_ACCOUNT: u64 = 16;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_endpoint, list_endpoints))
        .routes(routes!(get_endpoint, update_endpoint, delete_endpoint))
        .routes(routes!(list_deliveries))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "url": "https://shop.example.co/webhooks/billing",
    "events": ["charge.approved", "charge.declined", "subscription.canceled"]
})))]
pub struct EndpointIn {
    /// An http(s) URL.
    #[schema(schema_with = super::openapi::schemas::web_url)]
    pub url: String,
    /// Event types to receive (at least one); `*` receives every type.
    #[schema(schema_with = super::openapi::schemas::event_types)]
    pub events: Vec<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"events": ["*"], "active": true})))]
pub struct EndpointPatchIn {
    #[schema(schema_with = super::openapi::schemas::optional_web_url)]
    pub url: Option<String>,
    #[schema(schema_with = super::openapi::schemas::optional_event_types)]
    pub events: Option<Vec<String>>,
    pub active: Option<bool>,
}

/// `Debug` leaves the secret out (see the impl at the end of the file).
#[derive(Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "we_0193a1f9c0d17e2f8a3b4c5d6e7f8a9b",
    "url": "https://shop.example.co/webhooks/billing",
    "events": ["charge.approved", "charge.declined", "subscription.canceled"],
    "active": true,
    "secret": "whsec_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct EndpointOut {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub active: bool,
    /// Only in the creation response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<WebhookEndpoint> for EndpointOut {
    fn from(endpoint: WebhookEndpoint) -> Self {
        Self {
            events: serde_json::from_str(&endpoint.events).unwrap_or_default(),
            created_at: rfc3339(from_millis(endpoint.created_at)),
            id: endpoint.id.into_string(),
            url: endpoint.url,
            active: endpoint.active,
            secret: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"id": "we_0193a1f9c0d17e2f8a3b4c5d6e7f8a9b", "deleted": true})))]
pub struct DeletedOut {
    pub id: String,
    pub deleted: bool,
}

/// One attempt of a delivery.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"attempted_at": "2026-11-24T09:15:42.318Z", "status_code": 500, "latency_ms": 212, "error": null})))]
pub struct AttemptOut {
    #[schema(format = DateTime)]
    pub attempted_at: String,
    /// The receiver's HTTP status, null when none came (timeout, refused connection).
    pub status_code: Option<i32>,
    pub latency_ms: i64,
    pub error: Option<String>,
}

/// One event's delivery to one endpoint, with every attempt so far.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "del_0193a1fb2c3d7e4f8a5b6c7d8e9f0a1b",
    "endpoint_id": "we_0193a1f9c0d17e2f8a3b4c5d6e7f8a9b",
    "event_id": "evt_0193a1fa1b2c7d3e8f4a5b6c7d8e9f0a",
    "status": "pending",
    "attempt_count": 1,
    "next_attempt_at": "2026-11-24T09:16:42.530Z",
    "created_at": "2026-11-24T09:15:42.318Z",
    "attempts": [{"attempted_at": "2026-11-24T09:15:42.318Z", "status_code": 500, "latency_ms": 212, "error": null}]
})))]
pub struct DeliveryOut {
    pub id: String,
    pub endpoint_id: String,
    pub event_id: String,
    #[schema(schema_with = super::openapi::schemas::delivery_status)]
    pub status: String,
    pub attempt_count: i32,
    /// When the next attempt is due (account clock); null once delivered or failed.
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub attempts: Vec<AttemptOut>,
}

pub fn delivery_out(delivery: WebhookDelivery, attempts: &[WebhookAttempt]) -> DeliveryOut {
    DeliveryOut {
        attempts: attempts
            .iter()
            .filter(|a| a.delivery_id == delivery.id)
            .map(|a| AttemptOut {
                attempted_at: rfc3339(from_millis(a.attempted_at)),
                status_code: a.status_code,
                latency_ms: a.latency_ms,
                error: a.error.clone(),
            })
            .collect(),
        next_attempt_at: delivery.next_attempt_at.map(|t| rfc3339(from_millis(t))),
        created_at: rfc3339(from_millis(delivery.created_at)),
        id: delivery.id.into_string(),
        endpoint_id: delivery.endpoint_id.into_string(),
        event_id: delivery.event_id.into_string(),
        status: delivery.status,
        attempt_count: delivery.attempts,
    }
}

/// The URL, if the caller's account may register it (its mode's address policy, CONTRACT §9).
async fn checked_url(state: &AppState, caller: &Caller, raw: &str) -> ApiResult<String> {
    let policy = state.config.webhook_policy(caller.0.sandbox);
    target::check(raw, policy, state.config.host_resolver().as_ref())
        .await
        .map(|url| url.to_string())
        .map_err(|err| ApiError::bad_request(format!("{err}.")).param("url"))
}

fn checked_events(events: Vec<String>) -> ApiResult<Vec<String>> {
    if events.is_empty() {
        return Err(
            ApiError::bad_request("events must name at least one event type.").param("events"),
        );
    }
    if let Some(unknown) = events.iter().find(|e| !is_event_type(e)) {
        return Err(ApiError::bad_request(format!(
            "Unknown event type `{unknown}`; known types: {}.",
            crate::webhooks::EVENT_TYPES.join(", ")
        ))
        .param("events"));
    }
    let mut unique: Vec<String> = Vec::with_capacity(events.len());
    for event in events {
        if !unique.contains(&event) {
            unique.push(event);
        }
    }
    Ok(unique)
}

async fn find(
    state: &AppState,
    caller: &Caller,
    id: &WebhookEndpointId,
) -> ApiResult<WebhookEndpoint> {
    state
        .store
        .webhook_endpoint(caller.account_id(), id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No webhook endpoint with id `{id}`.")).param("id")
        })
}

/// Register an endpoint (at most 16 per account, disabled ones included; 400 beyond). The
/// answer carries the signing secret, shown only here.
#[utoipa::path(post, path = "/v1/webhook-endpoints", tag = "webhooks", request_body = EndpointIn,
    responses((status = 201, body = EndpointOut), (status = 400, body = ErrorBody)))]
async fn create_endpoint(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<EndpointIn>,
) -> ApiResult<(StatusCode, Json<EndpointOut>)> {
    let url = checked_url(&state, &caller, &body.url).await?;
    let events = checked_events(body.events)?;
    let now = chrono::Utc::now().timestamp_millis();
    let row = WebhookEndpoint {
        id: WebhookEndpointId::generate(),
        account_id: caller.account_id().clone(),
        url,
        secret: signing::new_secret().into(),
        events: serde_json::Value::from(events).to_string(),
        active: true,
        created_at: now,
        updated_at: now,
    };
    state
        .store
        .insert_webhook_endpoint(row.clone(), MAX_ENDPOINTS_PER_ACCOUNT)
        .await
        .map_err(|err| match err {
            InsertEndpointError::LimitReached { limit } => ApiError::bad_request(format!(
                "An account may have at most {limit} webhook endpoints (disabled ones count); \
                 delete one first."
            )),
            InsertEndpointError::Store(err) => err.into(),
        })?;
    let secret = row.secret.clone();
    let mut out = EndpointOut::from(row);
    out.secret = Some(secret.into());
    Ok((StatusCode::CREATED, Json(out)))
}

/// The account's endpoints, newest first, without secrets.
#[utoipa::path(get, path = "/v1/webhook-endpoints", tag = "webhooks", params(ListQuery),
    responses((status = 200, body = ListOut<EndpointOut>), (status = 400, body = ErrorBody)))]
async fn list_endpoints(
    State(state): State<AppState>,
    caller: Caller,
    crate::http::extract::ApiQuery(query): crate::http::extract::ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<EndpointOut>>> {
    let page = state
        .store
        .list_webhook_endpoints(caller.account_id(), &query.page()?)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |e| e.id.to_string(),
        EndpointOut::from,
    )))
}

/// One endpoint, without its secret.
#[utoipa::path(get, path = "/v1/webhook-endpoints/{id}", tag = "webhooks",
    responses((status = 200, body = EndpointOut), (status = 404, body = ErrorBody)))]
async fn get_endpoint(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<EndpointOut>> {
    let id = WebhookEndpointId::given(id);
    Ok(Json(find(&state, &caller, &id).await?.into()))
}

/// Change `url`, `events` or `active`.
#[utoipa::path(patch, path = "/v1/webhook-endpoints/{id}", tag = "webhooks", request_body = EndpointPatchIn,
    responses((status = 200, body = EndpointOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn update_endpoint(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<EndpointPatchIn>,
) -> ApiResult<Json<EndpointOut>> {
    let id = WebhookEndpointId::given(id);
    find(&state, &caller, &id).await?;
    let url = match &body.url {
        Some(raw) => Some(checked_url(&state, &caller, raw).await?),
        None => None,
    };
    let events = body.events.map(checked_events).transpose()?;
    let patch = EndpointPatch {
        url,
        events,
        active: body.active,
    };
    let updated = state
        .store
        .update_webhook_endpoint(
            caller.account_id(),
            &id,
            patch,
            chrono::Utc::now().timestamp_millis(),
        )
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No webhook endpoint with id `{id}`.")).param("id")
        })?;
    if updated.active {
        state.runtime.wake_endpoint(&id).await;
    } else {
        state.runtime.stop_endpoint(&id);
    }
    Ok(Json(updated.into()))
}

/// Delete an endpoint with its delivery log; nothing more is sent to it.
#[utoipa::path(delete, path = "/v1/webhook-endpoints/{id}", tag = "webhooks",
    responses((status = 200, body = DeletedOut), (status = 404, body = ErrorBody)))]
async fn delete_endpoint(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<DeletedOut>> {
    let id = WebhookEndpointId::given(id);
    if !state
        .store
        .delete_webhook_endpoint(caller.account_id(), &id)
        .await?
    {
        return Err(
            ApiError::not_found(format!("No webhook endpoint with id `{id}`.")).param("id"),
        );
    }
    state.runtime.stop_endpoint(&id);
    Ok(Json(DeletedOut {
        id: id.into_string(),
        deleted: true,
    }))
}

/// The endpoint's deliveries, newest first, each with its attempts.
#[utoipa::path(get, path = "/v1/webhook-endpoints/{id}/deliveries", tag = "webhooks", params(ListQuery),
    responses((status = 200, body = ListOut<DeliveryOut>), (status = 404, body = ErrorBody)))]
async fn list_deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    crate::http::extract::ApiQuery(query): crate::http::extract::ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<DeliveryOut>>> {
    let id = WebhookEndpointId::given(id);
    find(&state, &caller, &id).await?;
    let page = state
        .store
        .list_deliveries(caller.account_id(), &id, &query.page()?)
        .await?;
    let ids: Vec<DeliveryId> = page.items.iter().map(|d| d.id.clone()).collect();
    let attempts = state.store.attempts_of(&ids).await?;
    Ok(Json(ListOut::from_page(
        page,
        |d| d.id.to_string(),
        |d| delivery_out(d, &attempts),
    )))
}

impl std::fmt::Debug for EndpointOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointOut")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("events", &self.events)
            .field("active", &self.active)
            .finish_non_exhaustive()
    }
}
