//! Probes for orchestrators and Prometheus.

use crate::http::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use std::sync::atomic::Ordering;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({"status": "ready"})))]
pub struct ProbeOut {
    pub status: &'static str,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "probes", responses((status = 200, body = ProbeOut, example = json!({"status": "ok"}))))]
async fn healthz() -> Json<ProbeOut> {
    Json(ProbeOut { status: "ok" })
}

/// The database answers and every actor has been recovered.
#[utoipa::path(get, path = "/readyz", tag = "probes",
    responses((status = 200, body = ProbeOut, example = json!({"status": "ready"})),
        (status = 503, body = ProbeOut, example = json!({"status": "starting"}))))]
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<ProbeOut>) {
    if !state.ready.load(Ordering::Acquire) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(ProbeOut { status: "starting" }),
        );
    }
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, Json(ProbeOut { status: "ready" })),
        Err(err) => {
            tracing::warn!(error = %err, "readiness: database unreachable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(ProbeOut {
                    status: "database unreachable",
                }),
            )
        }
    }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "probes",
    responses((status = 200, content_type = "text/plain", body = String, example = json!(
        "# TYPE http_requests_total counter\nhttp_requests_total{method=\"GET\",route=\"/v1/subscriptions/{id}\",status=\"200\"} 1027\n"
    ))))]
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
