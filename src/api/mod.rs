//! The HTTP API: the only module (with `checkout`) that names axum. Each submodule exports
//! `router()`; this file stacks the shared layers once, in this order from the outside in:
//! request id → trace (the request's span) → panic catcher → metrics → (per group)
//! authentication → rate limit → idempotency.

pub mod accounts;
pub mod admin;
pub mod balance;
pub mod catalog;
pub mod charges;
pub mod checkout_sessions;
pub mod console;
pub mod coupons;
pub mod customers;
pub mod dashboard;
pub mod dian;
pub mod events;
pub mod exports;
pub mod ingress;
pub mod internal;
pub mod invoices;
pub mod invoicing;
pub mod notices;
pub mod numbering_ranges;
pub mod openapi;
pub mod payment_methods;
pub mod portal;
pub mod probes;
pub mod promotion_codes;
pub mod revenue;
pub mod subscriptions;
pub mod test_clock;
pub mod webhook_endpoints;
pub mod whatsapp;

use crate::http::error::ApiError;
use crate::http::state::AppState;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use openapi::error_responses::Layer;
use std::sync::Arc;
use std::time::Instant;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

#[derive(OpenApi)]
#[openapi(
    info(title = "billing", description = "Recurring billing in COP: subscriptions, hosted checkout, webhooks."),
    modifiers(&BearerAuth),
    security(("api_key" = [])),
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The whole application with its OpenAPI document.
pub fn app(state: AppState) -> Router {
    let (router, mut openapi) = routes(&state).split_for_parts();
    finish(&mut openapi);
    let openapi = Arc::new(openapi);
    let routed = router
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let openapi = Arc::clone(&openapi);
                async move { Json(openapi) }
            }),
        )
        // Pages for people, not part of the API's document (the portal's JSON is documented
        // in docs/portal.md).
        .merge(dashboard::router())
        .merge(portal::customer_router(&state))
        .merge(console::pages(&state, inner_api(&state)))
        // Between the nodes of a cluster, behind the cluster's secret.
        .merge(internal::router())
        // The processor's protocol, not our API: outside the OpenAPI document.
        .nest(
            "/sandbox/processor/v1",
            state
                .sandbox
                .clone()
                .router()
                .layer(middleware::from_fn_with_state(
                    state.clone(),
                    crate::http::layers::limit_sandbox_admin,
                ))
                .with_state(()),
        )
        .route_layer(middleware::from_fn(record_metrics))
        .fallback(unknown_path)
        .with_state(state.clone());
    // DIAN's web service, not our API: outside the OpenAPI document. Mounted only while the
    // sandbox accounts file with it: an operator who names another sandbox DIAN
    // (`BILLING_DIAN_SANDBOX_URL`, a standalone `billing sandbox-dian`) serves none here.
    let routed = if state.config.dian_sandbox_url.is_none() {
        routed.nest(
            crate::filing::SANDBOX_MOUNT,
            state
                .dian_sandbox
                .clone()
                .router()
                .layer(middleware::from_fn_with_state(
                    state.clone(),
                    crate::http::layers::limit_sandbox_admin,
                ))
                .route_layer(middleware::from_fn(record_metrics)),
        )
    } else {
        routed
    };
    // WhatsApp's Cloud API, not our API: outside the OpenAPI document; only while sandbox
    // accounts send through it (no `BILLING_WHATSAPP_SANDBOX_URL`).
    let routed = if state.config.whatsapp_sandbox_url.is_none() {
        routed.nest(
            crate::whatsapp::SANDBOX_MOUNT,
            state
                .whatsapp_sandbox
                .clone()
                .router()
                .layer(middleware::from_fn_with_state(
                    state.clone(),
                    crate::http::layers::limit_sandbox_admin,
                ))
                .route_layer(middleware::from_fn(record_metrics)),
        )
    } else {
        routed
    };
    Router::new()
        .fallback_service(routed)
        // Before routing, so that no route's extractor, method check (axum's 405 and its
        // `Allow`) or metric sees a stranger's request to the nodes' routes: it is answered as
        // an unknown path.
        .layer(middleware::from_fn_with_state(
            state,
            internal::only_the_cluster,
        ))
        .layer(middleware::map_response(method_not_allowed_in_our_shape))
        .layer(DefaultBodyLimit::max(1024 * 1024))
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal("handler panicked".into()).into_response()
        }))
        // A 5xx is logged once, at ERROR with its cause, by `ApiError` itself: the trace
        // layer's own line about it (status and latency, also a starting server's `/readyz`
        // 503) is DEBUG, beside its lines about every request.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(crate::http::request_id::span_for::<axum::body::Body>)
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
        )
        .layer(middleware::from_fn(crate::http::request_id::assign))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
        ]))
}

/// The `/v1` routes, before any layer: what an API key reaches, and what the console reaches
/// through `console::InnerApi` in the name of its signed-in person.
fn v1_routes(state: &AppState) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(accounts::router())
        .merge(catalog::router())
        .merge(coupons::router())
        .merge(promotion_codes::router())
        .merge(customers::router())
        .merge(invoicing::router())
        .merge(numbering_ranges::router())
        .merge(dian::router())
        .merge(balance::router())
        .merge(payment_methods::router())
        .merge(portal::router())
        .merge(notices::router())
        .merge(revenue::router())
        .merge(charges::router())
        .merge(invoices::router())
        .merge(exports::router())
        .merge(subscriptions::router())
        .merge(checkout_sessions::router(state))
        .merge(events::router())
        .merge(test_clock::router())
        .merge(webhook_endpoints::router())
        .merge(console::router())
}

/// Every documented route, grouped by how it authenticates.
pub fn routes(state: &AppState) -> OpenApiRouter<AppState> {
    let mut v1 = v1_routes(state)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::layers::idempotent_posts,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::layers::limit_api,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::layers::require_api_key,
        ));
    openapi::error_responses::document(
        v1.get_openapi_mut(),
        &[Layer::Bearer, Layer::RateLimit, Layer::Idempotency],
    );
    let mut admin = OpenApiRouter::new()
        .merge(accounts::admin_router())
        .merge(admin::admin_router())
        .merge(console::admin_router())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::layers::require_admin,
        ));
    openapi::error_responses::document(admin.get_openapi_mut(), &[Layer::Bearer]);
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(v1)
        .merge(admin)
        .merge(ingress::router())
        .merge(whatsapp::router())
        .merge(crate::checkout::router())
        .merge(crate::documents::router())
        .merge(probes::router())
}

/// The `/v1` routes with the API's Idempotency-Keys and no credential of their own: the
/// console's requests arrive here with their `Caller` (and Idempotency scope) already set.
fn inner_api(state: &AppState) -> console::InnerApi {
    let (router, _) = v1_routes(state)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::layers::idempotent_posts,
        ))
        .split_for_parts();
    console::InnerApi::new(router.with_state(state.clone()))
}

/// The OpenAPI document, for tools that want it without a server.
pub fn openapi_document(state: &AppState) -> utoipa::openapi::OpenApi {
    let mut openapi = routes(state).into_openapi();
    finish(&mut openapi);
    openapi
}

/// What the whole document gets once every group is in: descriptions on every response, no
/// credential asked where none is read, list items and enumerations referred to by name, and
/// examples on every list and error response.
fn finish(openapi: &mut utoipa::openapi::OpenApi) {
    openapi::error_responses::describe(openapi);
    openapi::error_responses::lift_empty_security(openapi);
    crate::http::list::refer_to_items(openapi);
    openapi::schemas::add_enumerations(openapi);
    openapi::schemas::tax_id_in(openapi);
    openapi::error_responses::exemplify(openapi);
    crate::http::list::exemplify(openapi);
}

async fn unknown_path(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "Unknown path: {} {}",
        request.method(),
        request.uri().path()
    ))
}

/// axum answers a wrong method with an empty 405; give it our error body.
async fn method_not_allowed_in_our_shape(response: Response) -> Response {
    if response.status() != StatusCode::METHOD_NOT_ALLOWED
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let mut ours = ApiError::invalid(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method not allowed on this path.",
    )
    .into_response();
    if let Some(allow) = allow {
        ours.headers_mut().insert(header::ALLOW, allow);
    }
    ours
}

async fn record_metrics(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let method = request.method().to_string();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("http_requests_total", "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("http_request_duration_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}
