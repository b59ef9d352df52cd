//! The operator's view of the runtime and the catalog actions reserved to operators:
//! `GET /admin/actors` (CONTRACT §10), `DELETE /admin/plans/{id}` (CONTRACT §2), and
//! `GET /admin/charge-conflicts`: processor reports that contradicted their charge and moved
//! no money (CONTRACT §7), for an operator to look into: a final status that contradicts the
//! recorded outcome (`outcome`), or an event whose amount, currency or transaction id are not
//! the charge's (`mismatch`). The event that carried one stays in the processor events, by
//! its checksum; the dashboard shows how many there are.

use crate::actors::tree::{ActorInfo, TreeCounts};
use crate::domain::time::{from_millis, rfc3339};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery};
use crate::http::list::{ListOut, ListQuery, page_request};
use crate::http::state::AppState;
use crate::ids::PlanId;
use crate::store::admin::PlanDeletion;
use crate::store::charges::conflicts::ChargeConflict;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn admin_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_actors))
        .routes(routes!(delete_plan))
        .routes(routes!(list_charge_conflicts))
        .routes(routes!(cluster))
        .routes(routes!(close_refund))
}

/// Why an operator closes a refund.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"reason": "Not in the merchant's Wompi dashboard on 2026-12-01; the customer was told."})))]
pub struct CloseRefundIn {
    /// What was checked at the processor; kept as the refund's message.
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub reason: String,
}

/// Close a refund the processor never shows: `declined`, its amount freed for another refund.
/// The processor is asked once more first; a refund it shows settles by what it says, one it
/// cannot be asked about stays pending, and one posted less than the in-flight bound ago (an
/// hour by default) may still reach it: 409 for each, nothing changed.
#[utoipa::path(post, path = "/admin/refunds/{id}/close", tag = "admin", request_body = CloseRefundIn,
    responses((status = 200, body = crate::api::charges::RefundOut), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn close_refund(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CloseRefundIn>,
) -> ApiResult<Json<crate::api::charges::RefundOut>> {
    use crate::refunds::CloseOutcome;
    let reason = crate::domain::text::Name::parse(&body.reason)
        .map_err(|why| ApiError::bad_request(format!("reason {why}.")).param("reason"))?
        .into_string();
    let id = crate::ids::RefundId::given(id);
    let outcome = state.runtime.refunds().close_unshown(&id, &reason).await?;
    match outcome {
        CloseOutcome::Closed(refund) => Ok(Json(refund.into())),
        CloseOutcome::NotFound => {
            Err(ApiError::not_found(format!("No refund with id `{id}`.")).param("id"))
        }
        CloseOutcome::NotPending(refund) => Err(ApiError::conflict(format!(
            "This refund is {} already.",
            refund.status.as_str()
        ))),
        CloseOutcome::ShownByProcessor(refund) => Err(ApiError::conflict(format!(
            "The processor shows this refund; it settles by the processor's answer (now {}).",
            refund.status.as_str()
        ))),
        CloseOutcome::MayStillArrive { until_ms } => Err(ApiError::conflict(format!(
            "A post held up on its way may still reach the processor until {}; close it after.",
            rfc3339(from_millis(until_ms))
        ))),
        CloseOutcome::Unknown(why) => Err(ApiError::conflict(format!(
            "The processor could not be asked ({why}); nothing was closed. Try again."
        ))),
    }
}

/// One node of the cluster.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"id": "node-a", "url": "http://10.0.0.11:8080", "live": true, "shards": 128})))]
pub struct NodeOut {
    pub id: String,
    /// Where other nodes forward requests to it.
    #[schema(format = "uri")]
    pub url: String,
    /// Whether its heartbeat is current and it is not leaving.
    pub live: bool,
    /// Shards it holds under an unexpired lease.
    pub shards: u64,
}

/// The cluster as this node sees it (PostgreSQL); on SQLite, this one node holding every shard.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "node": "node-a",
    "nodes": [
        {"id": "node-a", "url": "http://10.0.0.11:8080", "live": true, "shards": 128},
        {"id": "node-b", "url": "http://10.0.0.12:8080", "live": true, "shards": 128}
    ],
    "shards_owned": [0, 2, 4, 6]
})))]
pub struct ClusterOut {
    /// This node's id.
    pub node: String,
    pub nodes: Vec<NodeOut>,
    /// The shards this node holds now (out of 256).
    pub shards_owned: Vec<u16>,
}

#[utoipa::path(get, path = "/admin/cluster", tag = "admin",
    responses((status = 200, body = ClusterOut), (status = 401, body = ErrorBody)))]
async fn cluster(State(state): State<AppState>) -> ApiResult<Json<ClusterOut>> {
    let ownership = state.runtime.ownership();
    let shards_owned = ownership.held_shards();
    if ownership.is_single() {
        return Ok(Json(ClusterOut {
            node: ownership.node().to_owned(),
            nodes: vec![NodeOut {
                id: ownership.node().to_owned(),
                url: state.config.node_url(),
                live: true,
                shards: shards_owned.len() as u64,
            }],
            shards_owned,
        }));
    }
    let store = &state.store;
    let live: Vec<String> = store
        .live_nodes()
        .await?
        .into_iter()
        .map(|n| n.id)
        .collect();
    let leases = store.leases().await?;
    let now = store.database_now_ms().await?;
    let nodes = store
        .nodes(false)
        .await?
        .into_iter()
        .map(|node| NodeOut {
            live: live.contains(&node.id),
            shards: leases
                .iter()
                .filter(|l| l.owner.as_deref() == Some(&node.id) && l.expires_at > now)
                .count() as u64,
            id: node.id,
            url: node.url,
        })
        .collect();
    Ok(Json(ClusterOut {
        node: ownership.node().to_owned(),
        nodes,
        shards_owned,
    }))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ActorsQuery {
    /// Only actors of this kind.
    #[param(schema_with = super::openapi::schemas::actor_kind)]
    pub kind: Option<String>,
    /// Page size, 1 to 100 (default 10).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// Counts of one kind of actor.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"kind": "subscription", "live": 42, "restarts": 0, "mailbox_backlog": 3})))]
pub struct KindCountsOut {
    pub kind: String,
    pub live: u64,
    pub restarts: u64,
    /// Messages waiting in the mailboxes of this kind's actors.
    pub mailbox_backlog: u64,
}

/// One shard supervisor and its live children per kind.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"name": "shard-0", "live": {"subscription": 11, "webhook_endpoint": 1}})))]
pub struct ShardOut {
    pub name: String,
    pub live: BTreeMap<String, u64>,
}

/// The root supervisor.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "name": "root",
    "kinds": [
        {"kind": "subscription", "live": 42, "restarts": 0, "mailbox_backlog": 3},
        {"kind": "webhook_endpoint", "live": 2, "restarts": 0, "mailbox_backlog": 0}
    ],
    "shards": [{"name": "shard-0", "live": {"subscription": 11, "webhook_endpoint": 1}}]
})))]
pub struct SupervisorOut {
    pub name: String,
    pub kinds: Vec<KindCountsOut>,
    pub shards: Vec<ShardOut>,
}

/// One live actor.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "kind": "subscription",
    "id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "shard": "shard-0",
    "state": "idle",
    "mailbox_len": 0,
    "restarts": 0,
    "next_due_at": "2026-12-02T14:30:00Z"
})))]
pub struct ActorOut {
    #[schema(schema_with = super::openapi::schemas::actor_kind)]
    pub kind: String,
    pub id: String,
    /// The shard supervisor it is linked to.
    pub shard: String,
    /// `idle` or `handling`.
    pub state: String,
    pub mailbox_len: u64,
    pub restarts: u64,
    #[schema(format = DateTime)]
    pub next_due_at: Option<String>,
}

/// The supervision tree, with one page of live actors as `children`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "supervisor": {
        "name": "root",
        "kinds": [{"kind": "subscription", "live": 1, "restarts": 0, "mailbox_backlog": 0}],
        "shards": [{"name": "shard-0", "live": {"subscription": 1}}]
    },
    "children": [{
        "kind": "subscription",
        "id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
        "shard": "shard-0",
        "state": "idle",
        "mailbox_len": 0,
        "restarts": 0,
        "next_due_at": "2026-12-02T14:30:00Z"
    }],
    "has_more": false,
    "next_cursor": null
})))]
pub struct ActorsOut {
    pub supervisor: SupervisorOut,
    pub children: Vec<ActorOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}

pub fn supervisor_out(counts: &TreeCounts) -> SupervisorOut {
    SupervisorOut {
        name: "root".into(),
        kinds: counts
            .kinds
            .iter()
            .map(|k| KindCountsOut {
                kind: k.kind.to_owned(),
                live: k.live,
                restarts: k.restarts,
                mailbox_backlog: k.mailbox_backlog,
            })
            .collect(),
        shards: (0..counts.shards)
            .map(|shard| ShardOut {
                name: format!("shard-{shard}"),
                live: counts
                    .kinds
                    .iter()
                    .map(|k| {
                        (
                            k.kind.to_owned(),
                            k.per_shard.get(shard).copied().unwrap_or(0),
                        )
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn actor_out(info: ActorInfo) -> ActorOut {
    ActorOut {
        kind: info.kind.to_owned(),
        shard: format!("shard-{}", info.shard),
        state: info.state.to_owned(),
        mailbox_len: info.mailbox_len,
        restarts: info.restarts,
        next_due_at: info.next_due_ms.map(|ms| rfc3339(from_millis(ms))),
        id: info.id,
    }
}

/// The supervision tree: counts per kind and shard, and a page of live actors.
#[utoipa::path(get, path = "/admin/actors", tag = "admin", params(ActorsQuery),
    responses((status = 200, body = ActorsOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_actors(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ActorsQuery>,
) -> ApiResult<Json<ActorsOut>> {
    let page = page_request(query.limit, query.cursor)?;
    let tree = state.runtime.tree();
    let counts = tree.counts();
    if let Some(kind) = &query.kind
        && !counts.kinds.iter().any(|k| k.kind == kind)
    {
        return Err(ApiError::bad_request(format!("Unknown actor kind `{kind}`.")).param("kind"));
    }
    let limit = page.limit as usize;
    let mut actors = tree.page(query.kind.as_deref(), page.cursor.as_deref(), limit + 1);
    let has_more = actors.len() > limit;
    actors.truncate(limit);
    let next_cursor = if has_more {
        actors.last().map(|a| format!("{}:{}", a.kind, a.id))
    } else {
        None
    };
    Ok(Json(ActorsOut {
        supervisor: supervisor_out(&counts),
        children: actors.into_iter().map(actor_out).collect(),
        has_more,
        next_cursor,
    }))
}

/// Deletes a plan; refused (409) while any subscription uses it.
#[utoipa::path(delete, path = "/admin/plans/{id}", tag = "admin",
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn delete_plan(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    plan_deletion(&state, &PlanId::given(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The one implementation of plan deletion, shared with the dashboard's form.
pub async fn plan_deletion(state: &AppState, id: &PlanId) -> ApiResult<()> {
    match state.store.delete_plan(id).await? {
        PlanDeletion::Deleted => Ok(()),
        PlanDeletion::NotFound => Err(ApiError::not_found(format!("No plan `{id}`."))),
        PlanDeletion::InUse(n) => Err(ApiError::conflict(format!(
            "Plan `{id}` is used by {n} subscription(s); it cannot be deleted."
        ))),
    }
}

/// One processor report that did not fit its charge.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "ccf_0193a1fd4e5f7a6b8c7d8e9f0a1b2c3d",
    "account_id": "acct_0193a1f2c4d57e8f9a0b1c2d3e4f5a6b",
    "charge_id": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
    "kind": "mismatch",
    "recorded_status": "pending",
    "reported_status": "APPROVED",
    "transaction_id": "1234-1764581400-49201",
    "amount_cents": 499000,
    "currency": "COP",
    "event_checksum": "8fb1e2fa0c36f9bbe1088a4b28fb19dfc04ccdb7b8ced48438ac2bee39e503f6",
    "detail": "the event's amount 499000 is not the charge's 4990000",
    "created_at": "2026-11-24T09:15:42.318Z"
})))]
pub struct ChargeConflictOut {
    pub id: String,
    pub account_id: String,
    pub charge_id: String,
    /// `outcome` or `mismatch`.
    pub kind: String,
    /// The charge's status when the report came.
    pub recorded_status: String,
    /// The processor's raw status in the report (APPROVED, DECLINED, …).
    pub reported_status: Option<String>,
    pub transaction_id: Option<String>,
    pub amount_cents: Option<i64>,
    pub currency: Option<String>,
    /// The checksum of the processor event that carried it, when it came as an event.
    pub event_checksum: Option<String>,
    pub detail: String,
    #[schema(format = DateTime)]
    pub created_at: String,
}

fn conflict_out(row: ChargeConflict) -> ChargeConflictOut {
    ChargeConflictOut {
        created_at: rfc3339(from_millis(row.created_at)),
        id: row.id.into_string(),
        account_id: row.account_id.into_string(),
        charge_id: row.charge_id.into_string(),
        kind: row.kind,
        recorded_status: row.recorded_status,
        reported_status: row.reported_status,
        transaction_id: row.transaction_id,
        amount_cents: row.amount_cents,
        currency: row.currency,
        event_checksum: row.event_checksum,
        detail: row.detail,
    }
}

/// Charge conflicts over every account, newest first.
#[utoipa::path(get, path = "/admin/charge-conflicts", tag = "admin", params(ListQuery),
    responses((status = 200, body = ListOut<ChargeConflictOut>), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody)))]
async fn list_charge_conflicts(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<ChargeConflictOut>>> {
    let page = state.store.list_charge_conflicts(&query.page()?).await?;
    Ok(Json(ListOut::from_page(
        page,
        |row| row.id.to_string(),
        conflict_out,
    )))
}
