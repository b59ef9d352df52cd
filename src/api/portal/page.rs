//! `GET /portal/{token}`: the customer's page, server-rendered with askama (auto-escaped), in
//! Spanish or English, with one stylesheet and one script served from here. It shows what
//! `customer::customer_data` answers; its forms call the JSON routes under the same token and
//! the page then reloads to show the result. The same Content-Security-Policy as the hosted
//! checkout: nothing loaded from elsewhere, talk only to us and the account's processor.

use super::customer::{PortalCustomerOut, customer_data};
use super::i18n::{self, Text};
use super::session::{PortalCaller, resolve};
use crate::accounts::processor_base_url;
use crate::checkout::i18n::Locale;
use crate::documents::sheet::{date, money};
use crate::documents::text::of as documents_text;
use crate::domain::portal::{CancelMode, PortalConfig};
use crate::domain::subscription::Status;
use crate::domain::time::Cycle;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::ids::SubscriptionId;
use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

const SCRIPT: &str = include_str!("assets/portal.js");
const STYLE: &str = include_str!("assets/portal.css");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/portal/{token}", get(show_page))
        .route(
            "/portal/assets/portal.js",
            get(|| async { crate::http::pages::asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/portal/assets/portal.css",
            get(|| async { crate::http::pages::asset("text/css; charset=utf-8", STYLE) }),
        )
}

#[derive(Deserialize)]
struct PageQuery {
    lang: Option<String>,
}

/// A subscription as the page shows it.
struct SubView {
    id: String,
    plan_name: String,
    cycle: &'static str,
    status: &'static str,
    status_class: &'static str,
    amount: String,
    next_charge: String,
    /// The day a cancellation at the period's end would end access.
    period_end: String,
    /// Set when the subscription ends at its period's end.
    ends_on: Option<String>,
    method: String,
    past_due: bool,
    can_change_method: bool,
    can_switch: bool,
    can_cancel: bool,
}

/// A document with its download (and an invoice, its hosted page).
struct DocView {
    /// Its DIAN number with DIAN on (or that it awaits one), else its own.
    number: String,
    href: Option<String>,
    date: String,
    total: String,
    pdf_url: String,
    /// Its XML (an invoice's AttachedDocument, a credit note's signed XML), once DIAN
    /// accepted it.
    xml_url: Option<String>,
    credit_note: bool,
}

/// A plan the customer may switch to.
struct PlanOption {
    id: String,
    label: String,
}

#[derive(Template)]
#[template(path = "api/portal/templates/portal.html")]
struct PortalPage<'a> {
    lang: &'static str,
    t: &'static Text,
    merchant: &'a str,
    base: String,
    processor_url: &'a str,
    public_key: &'a str,
    return_url: Option<&'a str>,
    customer_name: String,
    customer_email: String,
    subscriptions: Vec<SubView>,
    documents: Vec<DocView>,
    show_invoices: bool,
    cancel_immediately: bool,
    plans: Vec<PlanOption>,
    flow: Option<(String, String)>,
    tax_id_type: String,
    tax_id_number: String,
    legal_name: String,
    address_line: String,
    city_code: String,
}

#[derive(Template)]
#[template(path = "api/portal/templates/expired.html")]
struct ExpiredPage {
    lang: &'static str,
    t: &'static Text,
}

async fn show_page(
    State(state): State<AppState>,
    Path(token): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let accept = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok());
    let chosen = |session_locale: Option<&str>| {
        Locale::choose(query.lang.as_deref().or(session_locale), accept)
    };
    let portal = match resolve(&state, &token).await {
        Ok(portal) => portal,
        Err(ApiError::PortalSession) => {
            let locale = chosen(None);
            let page = ExpiredPage {
                lang: locale.code(),
                t: i18n::of(locale),
            };
            return respond(StatusCode::UNAUTHORIZED, page.render(), "");
        }
        Err(err) => return err.into_response(),
    };
    let locale = chosen(portal.session.locale.as_deref());
    match render(&state, &portal, &token, locale).await {
        Ok((html, processor)) => respond(
            StatusCode::OK,
            html,
            &crate::http::pages::origin(&processor),
        ),
        Err(err) => err.into_response(),
    }
}

async fn render(
    state: &AppState,
    portal: &PortalCaller,
    token: &str,
    locale: Locale,
) -> Result<(askama::Result<String>, String), ApiError> {
    let t = i18n::of(locale);
    let account = portal.account_id();
    let config: PortalConfig = state.store.portal_config(account).await?;
    let data: PortalCustomerOut = customer_data(state, portal, &config).await?;
    // The page is drawn from the API's answers, whose ids are strings.
    let ids: Vec<SubscriptionId> = data
        .subscriptions
        .iter()
        .filter_map(|s| SubscriptionId::parse(&s.id))
        .collect();
    let snapshots: std::collections::HashMap<String, _> = state
        .store
        .due_snapshots(&ids)
        .await?
        .into_iter()
        .map(|(id, snapshot)| (id.into_string(), snapshot))
        .collect();
    let mut subscriptions = Vec::new();
    for sub in &data.subscriptions {
        let snapshot = snapshots.get(&sub.id);
        // The snapshot holds the subscription's plan (read with the batch, not once each).
        let plan_name = snapshot
            .and_then(|s| s.plan())
            .map_or_else(|| sub.plan_id.to_string(), |p| p.name.clone());
        let amount = snapshot
            .filter(|s| s.sub.plan_id.as_str() == sub.plan_id)
            .and_then(|s| s.recurring_amount(&s.sub.plan_id, sub.cycle, sub.quantity))
            .map_or_else(|| t.none.to_owned(), |cents| money(cents, locale));
        let method = data
            .payment_methods
            .iter()
            .find(|m| m.id == sub.default_payment_method_id)
            .map_or_else(
                || t.none.to_owned(),
                |m| match (&m.brand, &m.last4) {
                    (Some(brand), Some(last4)) => format!("{brand} •••• {last4}"),
                    (None, Some(last4)) => format!("{} •••• {last4}", t.nequi),
                    _ => t.card.to_owned(),
                },
            );
        let live = sub.status != Status::Canceled;
        subscriptions.push(SubView {
            id: sub.id.clone(),
            plan_name,
            cycle: if sub.cycle == Cycle::Annual {
                t.annual
            } else {
                t.monthly
            },
            status: t.status(sub.status, locale),
            status_class: sub.status.as_str(),
            amount,
            next_charge: if live && !sub.cancel_at_period_end {
                date(ms_of(&sub.next_charge_date), locale)
            } else {
                t.none.to_owned()
            },
            period_end: date(ms_of(&sub.current_period_end), locale),
            ends_on: (live && sub.cancel_at_period_end)
                .then(|| date(ms_of(&sub.current_period_end), locale)),
            method,
            past_due: sub.status == Status::PastDue,
            can_change_method: live && config.payment_method_update.enabled,
            can_switch: live
                && sub.status != Status::PastDue
                && config.plan_switch.enabled
                && config
                    .plan_switch
                    .plan_ids
                    .iter()
                    .any(|p| p.as_str() != sub.plan_id),
            can_cancel: live && !sub.cancel_at_period_end && config.cancel.enabled,
        });
    }
    let mut plans = Vec::new();
    if config.plan_switch.enabled {
        for id in &config.plan_switch.plan_ids {
            if let Some(plan) = state.store.plan(account, id).await?.filter(|p| p.active) {
                plans.push(PlanOption {
                    label: format!(
                        "{} · {} / {} · {} / {}",
                        plan.name,
                        money(plan.price(Cycle::Monthly), locale),
                        t.monthly,
                        money(plan.price(Cycle::Annual), locale),
                        t.annual
                    ),
                    id: plan.id.to_string(),
                });
            }
        }
    }
    let mut documents = Vec::new();
    for invoice in &data.invoices {
        documents.push(DocView {
            number: invoice
                .number
                .clone()
                .unwrap_or_else(|| documents_text(locale).awaiting_number.to_owned()),
            href: Some(format!("{}?lang={}", invoice.hosted_url, locale.code())),
            date: date(ms_of(&invoice.issued_at), locale),
            total: money(invoice.total_cents, locale),
            pdf_url: format!("{}/pdf?lang={}", invoice.hosted_url, locale.code()),
            xml_url: dian_accepted(invoice.dian.as_ref().map(|d| d.status.as_str()))
                .then(|| format!("{}/xml", invoice.hosted_url)),
            credit_note: false,
        });
        for note in data
            .credit_notes
            .iter()
            .filter(|n| n.invoice_id == invoice.id)
        {
            documents.push(DocView {
                number: note.number.clone(),
                href: None,
                date: date(ms_of(&note.issued_at), locale),
                total: money(-note.total_cents, locale),
                pdf_url: format!(
                    "{}/credit-notes/{}/pdf?lang={}",
                    invoice.hosted_url,
                    note.id,
                    locale.code()
                ),
                xml_url: dian_accepted(note.dian.as_ref().map(|d| d.status.as_str()))
                    .then(|| format!("{}/credit-notes/{}/xml", invoice.hosted_url, note.id)),
                credit_note: true,
            });
        }
    }
    let customer = &data.customer;
    let processor = processor_base_url(&portal.account, &state.config.public_url());
    let page = PortalPage {
        lang: locale.code(),
        t,
        merchant: &portal.account.name,
        base: format!("/portal/{token}"),
        processor_url: &processor,
        public_key: &portal.account.processor_public_key,
        return_url: portal.session.return_url.as_deref(),
        customer_name: customer.name.clone(),
        customer_email: customer.email.clone(),
        subscriptions,
        documents,
        show_invoices: config.invoice_history.enabled,
        cancel_immediately: config.cancel.mode == CancelMode::Immediately,
        plans,
        flow: portal.session.flow_type.clone().zip(
            portal
                .session
                .flow_subscription_id
                .as_ref()
                .map(SubscriptionId::to_string),
        ),
        tax_id_type: customer
            .tax_id
            .as_ref()
            .map(|id| id.kind.clone())
            .unwrap_or_default(),
        tax_id_number: customer
            .tax_id
            .as_ref()
            .map(|id| id.number.clone())
            .unwrap_or_default(),
        legal_name: customer.legal_name.clone().unwrap_or_default(),
        address_line: address_part(customer, "line"),
        city_code: address_part(customer, "city_code"),
    };
    Ok((page.render(), processor))
}

/// A field of the customer's address, or empty.
fn address_part(customer: &crate::api::customers::CustomerOut, field: &str) -> String {
    customer
        .address
        .as_ref()
        .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok())
        .and_then(|address| address.get(field)?.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn ms_of(raw: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(raw)
        .map(|d| d.timestamp_millis())
        .unwrap_or_default()
}

fn respond(status: StatusCode, html: askama::Result<String>, processor: &str) -> Response {
    let html = match html {
        Ok(html) => html,
        Err(err) => {
            tracing::error!(error = %err, "portal template failed");
            return (StatusCode::INTERNAL_SERVER_ERROR, "Internal error").into_response();
        }
    };
    let policy = format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src 'self' {processor}; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    );
    crate::http::pages::harden((status, Html(html)).into_response(), &policy)
}

/// Whether a document's DIAN status (as the API answers it) is `accepted`.
fn dian_accepted(status: Option<&str>) -> bool {
    status == Some(crate::domain::dian::DianStatus::Accepted.as_str())
}
