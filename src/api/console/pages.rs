//! What people read first in the console: home, customers (search) and a customer. Each page
//! is drawn from the API's own answers (`InnerApi`), so a figure here is the figure an
//! integrator reads; the home's revenue is the dashboard's section (`dashboard::revenue`), in
//! the person's language.

use super::InnerApi;
use super::frame::{
    Chrome, DocRow, SubRow, doc_row, failed, locale_of, method_words, page, problem, status_words,
};
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{day, int, is_id, items, money, text};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use serde::Deserialize;

const STYLE: &str = include_str!("assets/console.css");

/// A balance under this many pesos' worth of fees is warned about (`GET /v1/balance`).
const LOW_BALANCE_CENTS: i64 = 5_000_000;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(home))
        .route("/console/customers", get(customers))
        .route("/console/customers/{id}", get(customer))
        .route(
            "/console/assets/console.css",
            get(|| async { crate::http::pages::asset("text/css; charset=utf-8", STYLE) }),
        )
}

struct FailedRow {
    date: String,
    customer_id: String,
    customer: String,
    amount: String,
    reason: String,
}

#[derive(Template)]
#[template(path = "api/console/templates/home.html")]
struct HomePage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    chrome: Chrome,
    mrr: String,
    active: i64,
    balance: String,
    balance_low: bool,
    range_warnings: Vec<String>,
    dian_waiting: Vec<String>,
    mrr_chart: String,
    movements_chart: String,
    month: String,
    months: Vec<(String, String)>,
    movements: Vec<(String, String)>,
    failed: Vec<FailedRow>,
}

async fn home(
    State(state): State<AppState>,
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
) -> Response {
    match home_page(&state, &api, &caller).await {
        Ok(response) => response,
        Err(err) => failed(&caller, err),
    }
}

async fn home_page(
    state: &AppState,
    api: &InnerApi,
    caller: &ConsoleCaller,
) -> Result<Response, ApiError> {
    let locale = locale_of(caller);
    let t = Tr(locale);
    let revenue = crate::api::dashboard::revenue::revenue(
        state,
        std::slice::from_ref(&*caller.account),
        None,
        locale,
    )
    .await?;
    let this_month = crate::domain::time::from_millis(caller.now_ms)
        .with_timezone(&crate::domain::dian::COLOMBIA)
        .format("%Y-%m")
        .to_string();
    let summary = api
        .get(caller, &format!("/v1/revenue/summary?month={this_month}"))
        .await?;
    let balance = api.get(caller, "/v1/balance").await?;
    let available = int(&balance, "available_cents");
    let ranges = api
        .get(caller, "/v1/account/invoicing/numbering-ranges")
        .await?;
    let range_warnings = items(&ranges)
        .iter()
        .filter(|range| range["warning"].as_bool() == Some(true))
        .map(|range| {
            format!(
                "{} {} ({}: {}, {}: {})",
                t.get("range_near_end"),
                text(range, "prefix"),
                t.get("remaining"),
                int(range, "remaining"),
                t.get("valid_to"),
                day(&text(range, "valid_to"), locale),
            )
        })
        .collect();
    let dian_waiting = state
        .filing
        .waiting()
        .await?
        .into_iter()
        .filter(|(group, _)| group.account_id == caller.account.id)
        .map(|(group, _)| {
            format!(
                "{}: {} ({})",
                t.get("documents_waiting"),
                group.count,
                t.get(group.waiting.as_str())
            )
        })
        .collect();
    let week_ago = caller.now_ms - 7 * 86_400_000;
    let failed_charges = api
        .get(caller, "/v1/charges?status=declined&limit=100")
        .await?;
    let mut failed = Vec::new();
    for charge in items(&failed_charges) {
        if super::view::ms(&text(&charge, "created_at")) < week_ago {
            continue;
        }
        let customer_id = text(&charge, "customer_id");
        let customer = if is_id(&customer_id) {
            api.get(caller, &format!("/v1/customers/{customer_id}"))
                .await
                .map(|c| text(&c, "name"))
                .unwrap_or_else(|_| customer_id.clone())
        } else {
            customer_id.clone()
        };
        failed.push(FailedRow {
            date: day(&text(&charge, "created_at"), locale),
            customer_id,
            customer,
            amount: money(int(&charge, "amount_cents"), locale),
            reason: decline_words(
                t,
                &text(&charge, "decline_code"),
                &text(&charge, "processor_status"),
            ),
        });
        if failed.len() == 20 {
            break;
        }
    }
    let (mrr_chart, movements_chart, month, months, movements) = match revenue {
        Some(view) => (
            view.mrr_chart,
            view.movements_chart,
            view.month,
            view.months,
            view.movements,
        ),
        None => Default::default(),
    };
    let body = HomePage {
        lang: t.code(),
        t,
        title: t.get("home_title"),
        chrome: Chrome::of(caller, t, "home"),
        mrr: money(int(&summary, "mrr_end_cents"), locale),
        active: int(&summary, "active_subscriptions"),
        balance: money(available, locale),
        balance_low: available < LOW_BALANCE_CENTS,
        range_warnings,
        dian_waiting,
        mrr_chart,
        movements_chart,
        month,
        months,
        movements,
        failed,
    };
    Ok(page(StatusCode::OK, body.render()))
}

/// A decline in the merchant's words: the decline's own when we know it, else the
/// processor's status.
fn decline_words(t: Tr, code: &str, status: &str) -> String {
    let key = format!("decline_{code}");
    match t.find(&key) {
        Some(words) => words.to_owned(),
        None if !code.is_empty() => code.to_owned(),
        None => status.to_owned(),
    }
}

#[derive(Deserialize)]
struct SearchQuery {
    q: Option<String>,
}

struct CustomerRow {
    id: String,
    name: String,
    email: String,
    tax_id: String,
    since: String,
}

#[derive(Template)]
#[template(path = "api/console/templates/customers.html")]
struct CustomersPage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    chrome: Chrome,
    q: String,
    rows: Vec<CustomerRow>,
}

/// Customers whose e-mail, name, legal name or tax id holds what was typed (at most 50), or
/// the newest 50.
async fn customers(
    State(state): State<AppState>,
    caller: ConsoleCaller,
    Query(search): Query<SearchQuery>,
) -> Response {
    let t = Tr(locale_of(&caller));
    let q: String = search
        .q
        .unwrap_or_default()
        .trim()
        .chars()
        .take(100)
        .collect();
    let found = state
        .store
        .search_customers(&caller.account.id, &q, 50)
        .await;
    let rows = match found {
        Ok(rows) => rows,
        Err(err) => return ApiError::from(err).into_response(),
    };
    let locale = locale_of(&caller);
    let body = CustomersPage {
        lang: t.code(),
        t,
        title: t.get("nav_customers"),
        chrome: Chrome::of(&caller, t, "customers"),
        q,
        rows: rows
            .into_iter()
            .map(|c| CustomerRow {
                tax_id: c.tax_id_number.clone().unwrap_or_default(),
                since: crate::documents::sheet::date(c.created_at, locale),
                id: c.id.into_string(),
                name: c.name,
                email: c.email,
            })
            .collect(),
    };
    page(StatusCode::OK, body.render())
}

#[derive(Template)]
#[template(path = "api/console/templates/customer.html")]
struct CustomerPage {
    lang: &'static str,
    t: Tr,
    title: String,
    chrome: Chrome,
    name: String,
    email: String,
    tax_id: String,
    phone: String,
    subscriptions: Vec<SubRow>,
    methods: Vec<String>,
    documents: Vec<DocRow>,
    notices: Vec<(String, String, String, String)>,
}

async fn customer(
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    Path(id): Path<String>,
) -> Response {
    if !is_id(&id) {
        let t = Tr(locale_of(&caller));
        return problem(
            &caller,
            StatusCode::NOT_FOUND,
            t.get("no_such_customer"),
            "/console/customers",
        );
    }
    match customer_page(&api, &caller, &id).await {
        Ok(response) => response,
        Err(err) => failed(&caller, err),
    }
}

async fn customer_page(
    api: &InnerApi,
    caller: &ConsoleCaller,
    id: &str,
) -> Result<Response, ApiError> {
    let locale = locale_of(caller);
    let t = Tr(locale);
    let customer = api.get(caller, &format!("/v1/customers/{id}")).await?;
    let subs = api
        .get(
            caller,
            &format!("/v1/subscriptions?customer_id={id}&limit=100"),
        )
        .await?;
    let plans = super::subscription::plan_names(api, caller).await?;
    let subscriptions = items(&subs)
        .iter()
        .map(|sub| {
            let (status, status_class) = status_words(t, &text(sub, "status"));
            let plan_id = text(sub, "plan_id");
            SubRow {
                id: text(sub, "id"),
                plan: plans.get(&plan_id).cloned().unwrap_or(plan_id),
                status,
                status_class,
                next: day(&text(sub, "next_charge_date"), locale),
            }
        })
        .collect();
    let methods = items(
        &api.get(
            caller,
            &format!("/v1/customers/{id}/payment-methods?limit=100"),
        )
        .await?,
    )
    .iter()
    .map(|m| method_words(t, m))
    .collect();
    let invoices = items(
        &api.get(caller, &format!("/v1/invoices?customer_id={id}&limit=100"))
            .await?,
    );
    let mut documents: Vec<DocRow> = invoices
        .iter()
        .map(|doc| doc_row(t, locale, doc, false))
        .collect();
    // Credit notes are found by their invoices (the newest twenty's).
    for invoice in invoices
        .iter()
        .filter(|invoice| is_id(&text(invoice, "id")))
        .take(20)
    {
        let notes = api
            .get(
                caller,
                &format!(
                    "/v1/credit-notes?invoice_id={}&limit=100",
                    text(invoice, "id")
                ),
            )
            .await?;
        documents.extend(
            items(&notes)
                .iter()
                .map(|doc| doc_row(t, locale, doc, true)),
        );
    }
    let notices = items(
        &api.get(caller, &format!("/v1/notices?customer_id={id}&limit=100"))
            .await?,
    )
    .iter()
    .map(|n| {
        let kind = text(n, "kind");
        let status = text(n, "status");
        (
            day(&text(n, "created_at"), locale),
            t.find(&format!("notice_{kind}"))
                .unwrap_or(&kind)
                .to_owned(),
            text(n, "channel"),
            t.find(&format!("notice_status_{status}"))
                .unwrap_or(&status)
                .to_owned(),
        )
    })
    .collect();
    let name = text(&customer, "name");
    let body = CustomerPage {
        lang: t.code(),
        t,
        title: name.clone(),
        chrome: Chrome::of(caller, t, "customers"),
        name,
        email: text(&customer, "email"),
        tax_id: text(&customer["tax_id"], "number"),
        phone: text(&customer, "phone"),
        subscriptions,
        methods,
        documents,
        notices,
    };
    Ok(page(StatusCode::OK, body.render()))
}
