//! What people read in the console: home, customers (search), a customer, invoices and credit
//! notes, exports, settings. Each page is drawn from the API's own answers (`InnerApi`), so a
//! figure here is the figure an integrator reads; the home's revenue is the dashboard's
//! section (`dashboard::revenue`), in the person's language.

use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{day, int, is_id, items, money, query, text};
use super::{InnerApi, Role};
use crate::checkout::i18n::Locale;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use serde::Deserialize;
use serde_json::Value;

const STYLE: &str = include_str!("assets/console.css");

/// A balance under this many pesos' worth of fees is warned about (`GET /v1/balance`).
const LOW_BALANCE_CENTS: i64 = 50_000_00;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(home))
        .route("/console/customers", get(customers))
        .route("/console/customers/{id}", get(customer))
        .route("/console/invoices", get(invoices))
        .route("/console/documents/{kind}/{id}/{format}", get(download))
        .route("/console/exports", get(exports))
        .route("/console/exports/download", get(export_download))
        .route("/console/settings", get(settings))
        .route(
            "/console/assets/console.css",
            get(|| async { crate::http::pages::asset("text/css; charset=utf-8", STYLE) }),
        )
}

/// What every signed-in page shows around its content.
pub struct Chrome {
    pub merchant: String,
    pub email: String,
    pub role: &'static str,
    pub csrf: String,
    pub section: &'static str,
    pub flash: Option<String>,
    pub flash_bad: bool,
}

impl Chrome {
    pub fn of(caller: &ConsoleCaller, t: Tr, section: &'static str) -> Self {
        Chrome {
            merchant: caller.account.name.clone(),
            email: caller.user.email.clone(),
            role: t.get(match caller.role {
                Role::Admin => "role_admin",
                Role::Support => "role_support",
                Role::Accountant => "role_accountant",
            }),
            csrf: caller.csrf().to_owned(),
            section,
            flash: None,
            flash_bad: false,
        }
    }
}

/// The person's language.
pub fn locale_of(caller: &ConsoleCaller) -> Locale {
    if caller.user.locale == "en" {
        Locale::En
    } else {
        Locale::Es
    }
}

/// A rendered page, with the console's headers.
pub fn page(status: StatusCode, html: askama::Result<String>) -> Response {
    match html {
        Ok(html) => super::session::harden((status, Html(html)).into_response()),
        Err(err) => {
            tracing::error!(error = %err, "console template failed");
            ApiError::Internal("console template".into()).into_response()
        }
    }
}

/// An error page for a person: what went wrong, in their words, and a way back.
pub fn problem(caller: &ConsoleCaller, status: StatusCode, message: &str, back: &str) -> Response {
    let t = Tr(locale_of(caller));
    let title = t.get(match status {
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        _ => "problem",
    });
    let body = MessagePage {
        lang: t.code(),
        t,
        title,
        chrome: Chrome::of(caller, t, ""),
        message: message.to_owned(),
        back: back.to_owned(),
    };
    page(status, body.render())
}

/// An `ApiError` met while drawing a page, as a page (a 404 of the API is the object's).
pub fn failed(caller: &ConsoleCaller, err: ApiError) -> Response {
    match err {
        ApiError::InvalidRequest {
            status, message, ..
        } => problem(caller, status, &message, "/console"),
        other => other.into_response(),
    }
}

#[derive(Template)]
#[template(path = "api/console/templates/message.html")]
struct MessagePage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    chrome: Chrome,
    message: String,
    back: String,
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

/// A row of a subscriptions table.
pub struct SubRow {
    pub id: String,
    pub plan: String,
    pub status: String,
    pub status_class: &'static str,
    pub next: String,
}

/// A document with its downloads.
pub struct DocRow {
    pub number: String,
    pub date: String,
    pub customer_id: String,
    pub customer: String,
    pub total: String,
    pub dian: String,
    pub downloads: Vec<(String, String)>,
}

/// How a subscription's status reads, and the badge's class.
pub fn status_words(t: Tr, status: &str) -> (String, &'static str) {
    let class = match status {
        "past_due" | "paused_insufficient_balance" => "bad",
        "canceled" | "paused" => "off",
        _ => "",
    };
    let key = format!("status_{status}");
    (t.find(&key).unwrap_or(status).to_owned(), class)
}

/// An invoice or credit note of the API as a row, with its downloads through the console.
pub fn doc_row(t: Tr, locale: Locale, doc: &Value, credit_note: bool) -> DocRow {
    let id = text(doc, "id");
    let kind = if credit_note {
        "credit-notes"
    } else {
        "invoices"
    };
    let dian_status = text(&doc["dian"], "status");
    let number = match text(&doc["dian"], "number") {
        n if !n.is_empty() => n,
        _ => text(doc, "number"),
    };
    let mut downloads = vec![(
        "PDF".to_owned(),
        format!("/console/documents/{kind}/{id}/pdf"),
    )];
    if dian_status == "accepted" {
        downloads.push((
            "XML".to_owned(),
            format!("/console/documents/{kind}/{id}/xml"),
        ));
        if !credit_note {
            downloads.push((
                "AttachedDocument".to_owned(),
                format!("/console/documents/{kind}/{id}/attached-document"),
            ));
        }
    }
    DocRow {
        number: if credit_note {
            format!("{} {number}", t.get("credit_note"))
        } else {
            number
        },
        date: day(&text(doc, "issued_at"), locale),
        customer_id: text(doc, "customer_id"),
        customer: text(&doc["customer"], "name"),
        total: money(int(doc, "total_cents"), locale),
        dian: if dian_status.is_empty() {
            t.get("dian_off").to_owned()
        } else {
            t.find(&format!("dian_{dian_status}"))
                .unwrap_or(&dian_status)
                .to_owned()
        },
        downloads,
    }
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

/// A card or Nequi account as a person reads it.
pub fn method_words(t: Tr, method: &Value) -> String {
    let last4 = text(method, "last4");
    match (text(method, "brand"), last4.is_empty()) {
        (brand, false) if !brand.is_empty() => format!("{brand} •••• {last4}"),
        (_, false) => format!("{} •••• {last4}", t.get("nequi")),
        _ => t.get("card").to_owned(),
    }
}

#[derive(Deserialize)]
struct InvoiceQuery {
    from: Option<String>,
    to: Option<String>,
    kind: Option<String>,
    dian: Option<String>,
    cursor: Option<String>,
}

#[derive(Template)]
#[template(path = "api/console/templates/invoices.html")]
struct InvoicesPage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    chrome: Chrome,
    from: String,
    to: String,
    kind: String,
    dian: String,
    dian_choices: Vec<(&'static str, &'static str)>,
    rows: Vec<DocRow>,
    next: Option<String>,
}

/// Whether `raw` is a `YYYY-MM-DD` day (anything else is dropped from the filter).
fn is_day(raw: &str) -> bool {
    chrono::NaiveDate::parse_from_str(raw, "%Y-%m-%d").is_ok()
}

async fn invoices(
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    Query(filter): Query<InvoiceQuery>,
) -> Response {
    let locale = locale_of(&caller);
    let t = Tr(locale);
    let from = filter.from.filter(|d| is_day(d)).unwrap_or_default();
    let to = filter.to.filter(|d| is_day(d)).unwrap_or_default();
    let credit_notes = filter.kind.as_deref() == Some("credit_notes");
    let dian = filter
        .dian
        .filter(|d| ["accepted", "pending", "rejected", "off"].contains(&d.as_str()))
        .unwrap_or_default();
    let cursor = filter.cursor.filter(|c| c.len() <= 200).unwrap_or_default();
    let path = format!(
        "/v1/{}?{}",
        if credit_notes {
            "credit-notes"
        } else {
            "invoices"
        },
        query(&[
            ("issued_from", &from),
            ("issued_to", &to),
            ("limit", "100"),
            ("cursor", &cursor)
        ])
    );
    let list = match api.get(&caller, &path).await {
        Ok(list) => list,
        Err(err) => return failed(&caller, err),
    };
    let rows = items(&list)
        .iter()
        .filter(|doc| {
            let status = text(&doc["dian"], "status");
            match dian.as_str() {
                "" => true,
                "off" => status.is_empty(),
                "pending" => !status.is_empty() && status != "accepted" && status != "rejected",
                other => status == other,
            }
        })
        .map(|doc| doc_row(t, locale, doc, credit_notes))
        .collect();
    let kind = if credit_notes {
        "credit_notes"
    } else {
        "invoices"
    };
    let next = list["next_cursor"].as_str().map(|cursor| {
        format!(
            "/console/invoices?{}",
            query(&[
                ("from", &from),
                ("to", &to),
                ("kind", kind),
                ("dian", &dian),
                ("cursor", cursor)
            ])
        )
    });
    let body = InvoicesPage {
        lang: t.code(),
        t,
        title: t.get("nav_invoices"),
        chrome: Chrome::of(&caller, t, "invoices"),
        from,
        to,
        kind: kind.to_owned(),
        dian,
        dian_choices: vec![
            ("", t.get("dian_any")),
            ("accepted", t.get("dian_accepted")),
            ("pending", t.get("dian_pending")),
            ("rejected", t.get("dian_rejected")),
            ("off", t.get("dian_off")),
        ],
        rows,
        next,
    };
    page(StatusCode::OK, body.render())
}

/// A document's PDF, XML or AttachedDocument, as the API answers it.
async fn download(
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    Path((kind, id, format)): Path<(String, String, String)>,
) -> Response {
    let known = matches!(kind.as_str(), "invoices" | "credit-notes")
        && matches!(format.as_str(), "pdf" | "xml" | "attached-document")
        && !(kind == "credit-notes" && format == "attached-document")
        && is_id(&id);
    if !known {
        let t = Tr(locale_of(&caller));
        return problem(
            &caller,
            StatusCode::NOT_FOUND,
            t.get("not_found"),
            "/console/invoices",
        );
    }
    passed_on(&api, &caller, &format!("/v1/{kind}/{id}/{format}")).await
}

/// The API's answer to a GET, passed to the browser as it is (a file to download).
async fn passed_on(api: &InnerApi, caller: &ConsoleCaller, path: &str) -> Response {
    match api
        .send(caller, axum::http::Method::GET, path, None, None)
        .await
    {
        Ok(response) if response.status().is_success() => {
            let (mut parts, body) = response.into_parts();
            parts.headers.insert(
                header::CACHE_CONTROL,
                axum::http::HeaderValue::from_static("no-store"),
            );
            Response::from_parts(parts, body)
        }
        Ok(response) => {
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024)
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            problem(caller, status, &super::view::message_of(&body), "/console")
        }
        Err(err) => err.into_response(),
    }
}

#[derive(Template)]
#[template(path = "api/console/templates/exports.html")]
struct ExportsPage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    chrome: Chrome,
    month: String,
}

async fn exports(caller: ConsoleCaller) -> Response {
    let t = Tr(locale_of(&caller));
    let local = crate::domain::time::from_millis(caller.now_ms)
        .with_timezone(&crate::domain::dian::COLOMBIA);
    let body = ExportsPage {
        lang: t.code(),
        t,
        title: t.get("nav_exports"),
        chrome: Chrome::of(&caller, t, "exports"),
        month: local.format("%Y-%m").to_string(),
    };
    page(StatusCode::OK, body.render())
}

#[derive(Deserialize)]
struct ExportQuery {
    month: String,
    format: String,
}

/// A month's CSV (invoices and credit notes) or its ZIP of documents, as the API exports it.
async fn export_download(
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    Query(export): Query<ExportQuery>,
) -> Response {
    let t = Tr(locale_of(&caller));
    let Some((year, month)) = export
        .month
        .split_once('-')
        .and_then(|(y, m)| Some((y.parse::<i32>().ok()?, m.parse::<u32>().ok()?)))
        .filter(|(y, m)| (2000..=9999).contains(y) && (1..=12).contains(m))
    else {
        return problem(
            &caller,
            StatusCode::BAD_REQUEST,
            t.get("bad_month"),
            "/console/exports",
        );
    };
    let last = (28..=31)
        .rev()
        .find(|d| chrono::NaiveDate::from_ymd_opt(year, month, *d).is_some())
        .unwrap_or(28);
    let path = match export.format.as_str() {
        "csv" => format!(
            "/v1/exports/invoices.csv?from={year:04}-{month:02}-01&to={year:04}-{month:02}-{last:02}"
        ),
        "zip" => format!("/v1/exports/documents.zip?month={year:04}-{month:02}"),
        _ => {
            return problem(
                &caller,
                StatusCode::BAD_REQUEST,
                t.get("bad_format"),
                "/console/exports",
            );
        }
    };
    passed_on(&api, &caller, &path).await
}

pub struct SettingsSection {
    pub title: &'static str,
    pub lines: Vec<(&'static str, String)>,
    pub warnings: Vec<String>,
}

#[derive(Template)]
#[template(path = "api/console/templates/settings.html")]
struct SettingsPage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    chrome: Chrome,
    sections: Vec<SettingsSection>,
    people: Vec<(String, &'static str, String)>,
}

/// The account's invoicing, DIAN, notices and portal settings as they are, and its people.
/// Only an admin opens it (settings are theirs).
async fn settings(Extension(api): Extension<InnerApi>, caller: ConsoleCaller) -> Response {
    let t = Tr(locale_of(&caller));
    if !caller.role.may(Role::Admin) {
        return problem(
            &caller,
            StatusCode::FORBIDDEN,
            t.get("admins_only"),
            "/console",
        );
    }
    match super::subscription::settings_sections(&api, &caller, t).await {
        Ok((sections, people)) => {
            let body = SettingsPage {
                lang: t.code(),
                t,
                title: t.get("nav_settings"),
                chrome: Chrome::of(&caller, t, "settings"),
                sections,
                people,
            };
            page(StatusCode::OK, body.render())
        }
        Err(err) => failed(&caller, err),
    }
}
