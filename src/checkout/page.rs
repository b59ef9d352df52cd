//! `GET /checkout/{id}`: the hosted page, server-rendered with askama (auto-escaped), in
//! Spanish or English, with its one stylesheet and one script served from here. A strict
//! Content-Security-Policy lets the page load nothing from elsewhere and talk only to us and
//! to the account's processor.

use super::i18n::{Locale, Text};
use crate::accounts::processor_base_url;
use crate::domain::checkout::SessionStatus;
use crate::domain::time::Cycle;
use crate::http::state::AppState;
use crate::ids::CheckoutSessionId;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;

const SCRIPT: &str = include_str!("assets/checkout.js");
const STYLE: &str = include_str!("assets/checkout.css");

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .route("/checkout/{id}", get(show_page))
        .route(
            "/checkout/assets/checkout.js",
            get(|| async { crate::http::pages::asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/checkout/assets/checkout.css",
            get(|| async { crate::http::pages::asset("text/css; charset=utf-8", STYLE) }),
        )
}

#[derive(Deserialize)]
struct PageQuery {
    lang: Option<String>,
}

#[derive(Template)]
#[template(path = "checkout/templates/pay.html")]
struct PayPage<'a> {
    lang: &'static str,
    t: &'static Text,
    merchant: &'a str,
    session_id: &'a str,
    processor_url: &'a str,
    public_key: &'a str,
    plan_name: &'a str,
    amount: String,
    /// The plan's amount times the quantity, shown with the discount when there is one.
    subtotal: String,
    discount: Option<String>,
    quantity: i64,
    allow_codes: bool,
    cycle: &'static str,
    per: &'static str,
    renews: &'static str,
    ask_contact: bool,
    prefill_name: &'a str,
    prefill_email: &'a str,
    cancel_url: Option<&'a str>,
}

/// A page that only says something: complete, expired, or not found.
#[derive(Template)]
#[template(path = "checkout/templates/message.html")]
struct MessagePage<'a> {
    lang: &'static str,
    t: &'static Text,
    merchant: &'a str,
    kind: &'static str,
    heading: &'static str,
    body: &'static str,
    summary: Option<String>,
    link: Option<String>,
    redirect_after: Option<String>,
}

async fn show_page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let id = CheckoutSessionId::given(id);
    let accept = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok());
    let locale = Locale::choose(query.lang.as_deref(), accept);
    match render(&state, &id, locale).await {
        Ok(Some((html, processor))) => page_response(StatusCode::OK, html, &processor),
        Ok(None) => {
            let t = locale.text();
            let page = MessagePage {
                lang: locale.code(),
                t,
                merchant: "",
                kind: "not-found",
                heading: t.not_found_title,
                body: t.not_found_body,
                summary: None,
                link: None,
                redirect_after: None,
            };
            page_response(StatusCode::NOT_FOUND, page.render(), "")
        }
        Err(err) => {
            tracing::error!(error = %err, source = ?std::error::Error::source(&err), "checkout page failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal error").into_response()
        }
    }
}

/// The page's HTML and the processor origin it may talk to; `None` for an unknown session.
async fn render(
    state: &AppState,
    id: &CheckoutSessionId,
    locale: Locale,
) -> Result<Option<(askama::Result<String>, String)>, crate::store::StoreError> {
    let Some(session) = state.store.checkout_session_by_id(id).await? else {
        return Ok(None);
    };
    let account_id = session.account_id.clone();
    let Some(account) = state.store.account(&account_id).await? else {
        return Ok(None);
    };
    let now = state.runtime.clock().now_ms(&account_id).await?;
    let session = super::current(&state.store, session, now).await?;
    let plan = state.store.plan(&account_id, &session.plan_id).await?;
    let plan_name = plan.as_ref().map_or("", |p| p.name.as_str());
    let t = locale.text();
    let amount = locale.money(session.amount_cents);
    let processor = processor_base_url(&account, &state.config.public_url());
    let message = |kind, heading, body, link: Option<String>, redirect_after| MessagePage {
        lang: locale.code(),
        t,
        merchant: &account.name,
        kind,
        heading,
        body,
        summary: Some(format!("{plan_name} · {amount}")),
        link,
        redirect_after,
    };
    let html = match SessionStatus::parse(&session.status) {
        Some(SessionStatus::Complete) => {
            let link = match (&session.success_url, &session.subscription_id) {
                (Some(url), Some(sub)) => {
                    super::redirect_url(url, sub, "APPROVED", session.amount_cents)
                }
                _ => None,
            };
            message("complete", t.complete_title, t.complete_body, link, None).render()
        }
        Some(SessionStatus::Expired) => {
            // cancel_url is where an expired session sends the customer back, after a pause
            // long enough to read why.
            let back = session.cancel_url.clone();
            message(
                "expired",
                t.expired_title,
                t.expired_body,
                back.clone(),
                back,
            )
            .render()
        }
        _ => {
            let annual = Cycle::parse(&session.cycle) == Some(Cycle::Annual);
            PayPage {
                lang: locale.code(),
                t,
                merchant: &account.name,
                session_id: session.id.as_str(),
                processor_url: &processor,
                public_key: &account.processor_public_key,
                plan_name,
                amount,
                subtotal: locale.money(session.subtotal_cents()),
                discount: (session.subtotal_cents() > session.amount_cents)
                    .then(|| locale.money(session.subtotal_cents() - session.amount_cents)),
                quantity: session.quantity,
                allow_codes: session.allow_promotion_codes,
                cycle: if annual { t.annual } else { t.monthly },
                per: if annual { t.per_year } else { t.per_month },
                renews: if annual {
                    t.renews_annual
                } else {
                    t.renews_monthly
                },
                ask_contact: session.customer_id.is_none(),
                prefill_name: session.customer_name.as_deref().unwrap_or_default(),
                prefill_email: session.customer_email.as_deref().unwrap_or_default(),
                cancel_url: session.cancel_url.as_deref(),
            }
            .render()
        }
    };
    Ok(Some((html, crate::http::pages::origin(&processor))))
}

fn page_response(status: StatusCode, html: askama::Result<String>, processor: &str) -> Response {
    let html = match html {
        Ok(html) => html,
        Err(err) => {
            tracing::error!(error = %err, "checkout template failed");
            return (StatusCode::INTERNAL_SERVER_ERROR, "Internal error").into_response();
        }
    };
    let policy = format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src 'self' {processor}; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    );
    crate::http::pages::harden((status, Html(html)).into_response(), &policy)
}
