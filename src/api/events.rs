//! The events history (the outbox): list, read, redeliver.

use super::openapi::schemas;
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiQuery;
use crate::http::list::{ListOut, page_request};
use crate::http::state::AppState;
use crate::ids::{EventId, SubscriptionId};
use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::openapi::{RefOr, schema::Schema};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_events))
        .routes(routes!(get_event))
        .routes(routes!(redeliver_event))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventListQuery {
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub event_type: Option<String>,
    pub subscription_id: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// An event exactly as delivered to webhook endpoints: its stored body, passed through. Its
/// schema is `EventDoc`'s.
#[derive(Debug, Serialize)]
pub struct EventOut(Box<RawValue>);

impl utoipa::PartialSchema for EventOut {
    fn schema() -> RefOr<Schema> {
        EventDoc::schema()
    }
}

impl ToSchema for EventOut {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        EventDoc::schemas(schemas);
    }
}

/// An event exactly as delivered to webhook endpoints.
#[derive(ToSchema)]
#[schema(examples(json!({
    "id": "evt_0193a1fa1b2c7d3e8f4a5b6c7d8e9f0a",
    "type": "charge.approved",
    "created": "2026-12-02T14:30:00Z",
    "data": {
        "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
        "metadata": {"order": "A-1042"},
        "charge_attempt_id": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
        "status": "APPROVED",
        "amount_in_cents": 4990000
    }
})))]
#[allow(dead_code)] // Describes what `actors::subscription` writes; never built.
struct EventDoc {
    id: String,
    /// The event's type (`subscription.created`, `charge.approved`, …).
    #[schema(rename = "type", schema_with = schemas::event_type)]
    event_type: String,
    /// RFC 3339.
    #[schema(format = DateTime)]
    created: String,
    data: EventData,
}

/// What an event is about.
#[derive(ToSchema)]
#[allow(dead_code)] // Describes what `actors::subscription` writes; never built.
struct EventData {
    /// Every event about a subscription (all but a notice or a console action about
    /// something else).
    #[schema(nullable = false)]
    subscription_id: Option<String>,
    /// The subscription's metadata, or null.
    #[schema(value_type = Option<Object>, required = true)]
    metadata: (),
    /// Charge events: the charge attempt.
    #[schema(nullable = false)]
    charge_attempt_id: Option<String>,
    /// Charge events: the processor's raw status (APPROVED, DECLINED, …).
    #[schema(nullable = false)]
    status: Option<String>,
    /// Charge events: the charge's amount; `charge.refunded`: what this refund gave back.
    #[schema(nullable = false)]
    amount_in_cents: Option<i64>,
    /// `charge.refunded`: the refund.
    #[schema(nullable = false)]
    refund_id: Option<String>,
    /// `invoice.created`, `invoice.dian_accepted`, `invoice.dian_rejected`: the invoice (its
    /// `amount_in_cents` is the invoice's total).
    #[schema(nullable = false)]
    invoice_id: Option<String>,
    /// `credit_note.created`: the credit note (its `amount_in_cents` is the refund's).
    #[schema(nullable = false)]
    credit_note_id: Option<String>,
    /// `notice.sent`, `notice.failed`: the notice (CONTRACT §15), with its `kind`, `channel`,
    /// `customer_id`, `to` and, when it failed, `last_error`; `invoice_id` and
    /// `charge_attempt_id` name what it was about.
    #[schema(nullable = false)]
    notice_id: Option<String>,
    #[schema(nullable = false)]
    kind: Option<String>,
    #[schema(nullable = false)]
    channel: Option<String>,
    #[schema(nullable = false)]
    customer_id: Option<String>,
    #[schema(nullable = false)]
    to: Option<String>,
    #[schema(nullable = false)]
    last_error: Option<String>,
    /// `console.action`: what a person did in the merchant's console (CONTRACT §17), with the
    /// `action`, the `object_id` it was taken on, the `idempotency_key` it went to the API
    /// under, the API's `http_status`, and who took it (`console_user`).
    #[schema(nullable = false)]
    console_action_id: Option<String>,
    #[schema(nullable = false)]
    action: Option<String>,
    #[schema(nullable = false)]
    object_id: Option<String>,
    #[schema(nullable = false)]
    idempotency_key: Option<String>,
    #[schema(nullable = false)]
    http_status: Option<u16>,
    #[schema(nullable = false)]
    console_user: Option<ConsoleUserRef>,
}

/// Who took a console action.
#[derive(ToSchema)]
#[allow(dead_code)] // Describes what `store::console` writes; never built.
struct ConsoleUserRef {
    id: String,
    email: Option<String>,
    /// `admin`, `support` or `accountant`.
    role: Option<String>,
}

fn event_out(body: String) -> EventOut {
    EventOut(
        RawValue::from_string(body)
            .unwrap_or_else(|_| RawValue::from_string("{}".into()).unwrap_or_default()),
    )
}

/// The account's events, newest first.
#[utoipa::path(get, path = "/v1/events", tag = "events", params(EventListQuery),
    responses((status = 200, body = ListOut<EventOut>), (status = 400, body = ErrorBody)))]
async fn list_events(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<EventListQuery>,
) -> ApiResult<Json<ListOut<EventOut>>> {
    let page = page_request(query.limit, query.cursor.clone())?;
    let page = state
        .store
        .list_events(
            caller.account_id(),
            query.event_type.as_deref(),
            query
                .subscription_id
                .as_deref()
                .map(SubscriptionId::given)
                .as_ref(),
            &page,
        )
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |e| e.id.to_string(),
        |e| event_out(e.body),
    )))
}

/// One event.
#[utoipa::path(get, path = "/v1/events/{id}", tag = "events",
    responses((status = 200, body = EventOut), (status = 404, body = ErrorBody)))]
async fn get_event(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<EventOut>> {
    let id = EventId::given(id);
    let event = state
        .store
        .event(caller.account_id(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No event with id `{id}`.")).param("id"))?;
    Ok(Json(event_out(event.body)))
}

/// The deliveries a redelivery queued.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "event_id": "evt_0193a1fa1b2c7d3e8f4a5b6c7d8e9f0a",
    "deliveries": [{
        "id": "del_0193a1fb2c3d7e4f8a5b6c7d8e9f0a1b",
        "endpoint_id": "we_0193a1f9c0d17e2f8a3b4c5d6e7f8a9b",
        "event_id": "evt_0193a1fa1b2c7d3e8f4a5b6c7d8e9f0a",
        "status": "pending",
        "attempt_count": 0,
        "next_attempt_at": "2026-11-24T09:15:42.318Z",
        "created_at": "2026-11-24T09:15:42.318Z",
        "attempts": []
    }]
})))]
pub struct RedeliveryOut {
    pub event_id: String,
    pub deliveries: Vec<super::webhook_endpoints::DeliveryOut>,
}

/// Queue the event again to every active endpoint subscribed to its type (202: the deliveries
/// run in the background like any other; follow them in each endpoint's deliveries log).
#[utoipa::path(post, path = "/v1/events/{id}/redeliver", tag = "events",
    responses((status = 202, body = RedeliveryOut), (status = 404, body = ErrorBody)))]
async fn redeliver_event(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<(axum::http::StatusCode, Json<RedeliveryOut>)> {
    let id = EventId::given(id);
    let account = caller.account_id();
    let event = state
        .store
        .event(account, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No event with id `{id}`.")).param("id"))?;
    let now = state.runtime.clock().now_ms(account).await?;
    let deliveries = state.store.redeliver(&event, now).await?;
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(RedeliveryOut {
            event_id: event.id.into_string(),
            deliveries: deliveries
                .into_iter()
                .map(|d| super::webhook_endpoints::delivery_out(d, &[]))
                .collect(),
        }),
    ))
}
