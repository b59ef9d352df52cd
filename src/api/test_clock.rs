//! The test clock of sandbox accounts (CONTRACT §10): read it, and move it forward, answering
//! once every timer due by the new instant has run and its charges and webhooks have settled.

use crate::actors::ActionError;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_clock))
        .routes(routes!(advance_clock))
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"now": "2026-11-24T09:15:42.318Z"})))]
pub struct ClockOut {
    #[schema(format = DateTime)]
    pub now: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"seconds": 2592000})))]
pub struct AdvanceIn {
    /// Seconds to move forward, > 0.
    #[schema(minimum = 1, maximum = 316_224_000)]
    #[serde(deserialize_with = "crate::http::extract::whole")]
    pub seconds: i64,
}

fn sandbox_only(caller: &Caller) -> ApiResult<()> {
    if caller.0.sandbox {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "The test clock exists only for sandbox accounts.",
        ))
    }
}

/// The account's clock: real time plus the test offset.
#[utoipa::path(get, path = "/v1/test-helpers/clock", tag = "test helpers",
    responses((status = 200, body = ClockOut), (status = 400, body = ErrorBody)))]
async fn get_clock(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<ClockOut>> {
    sandbox_only(&caller)?;
    // From the database: another node may have moved the clock without this one hearing.
    let now = state
        .runtime
        .clock()
        .fresh_now_ms(caller.account_id())
        .await?;
    Ok(Json(ClockOut {
        now: rfc3339(from_millis(now)),
    }))
}

/// Moves the clock forward and answers once every timer due by then has run, in due order,
/// and the charges it started have settled through the processor.
#[utoipa::path(post, path = "/v1/test-helpers/clock/advance", tag = "test helpers", request_body = AdvanceIn,
    responses((status = 200, body = ClockOut), (status = 400, body = ErrorBody)))]
async fn advance_clock(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<AdvanceIn>,
) -> ApiResult<Json<ClockOut>> {
    sandbox_only(&caller)?;
    if !(1..=10 * 366 * 86_400).contains(&body.seconds) {
        return Err(
            ApiError::bad_request("seconds must be between 1 and ten years.").param("seconds"),
        );
    }
    let account = caller.account_id();
    let now = state
        .runtime
        .advance_clock(account, body.seconds * 1000)
        .await?;
    // Timers can schedule timers due by `now` (a retry after a failure): repeat until quiet.
    // A subscription whose shard is moving between nodes is its new owner's to run (its
    // scheduler finds it due): asked again on the next round, after a pause.
    for _ in 0..1000 {
        let due = state.store.due_subscriptions(account, now, 100).await?;
        let mut moving = false;
        for sub in &due {
            match state.runtime.due(&sub.id).await {
                Ok(()) => {}
                Err(ActionError::Moving) => moving = true,
                Err(err) => return Err(ApiError::Internal(Box::new(err))),
            }
        }
        if moving {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while state.store.count_pending_charges(account).await? > 0
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if due.is_empty() {
            break;
        }
    }
    // Then the background loops, in order: every electronic document due for DIAN, the
    // notices due by then (the receipts the renewals caused, the failed payments'); and last
    // every webhook delivery due by the new instant (their events included), first attempts
    // and retries alike.
    state.background.flush(account).await?;
    state.runtime.flush_endpoints(account).await?;
    Ok(Json(ClockOut {
        now: rfc3339(from_millis(now)),
    }))
}
