//! The accountant's pages: invoices and credit notes by day and DIAN status with their
//! downloads, the month's exports, and (for admins) the account's settings as the API has them.
//! Downloads are the API's own answers passed on as they are.

use super::frame::{Chrome, DocRow, doc_row, failed, locale_of, page, problem};
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{day, int, is_id, items, query, text};
use super::{InnerApi, Role};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use askama::Template;
use axum::extract::{Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use serde::Deserialize;
use serde_json::Value;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/invoices", get(invoices))
        .route("/console/documents/{kind}/{id}/{format}", get(download))
        .route("/console/exports", get(exports))
        .route("/console/exports/download", get(export_download))
        .route("/console/settings", get(settings))
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
    /// Whether the notices' test message form goes here.
    pub test_email: bool,
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
    /// The test message form's Idempotency-Key.
    key: String,
    email: String,
}

/// The account's invoicing, DIAN, notices and portal settings as they are, and its people.
/// Only an admin opens it (settings are theirs).
async fn settings(Extension(api): Extension<InnerApi>, caller: ConsoleCaller) -> Response {
    settings_page(&api, &caller, None).await
}

/// The settings page, with `flash` (what a test message came to) on top.
pub async fn settings_page(
    api: &InnerApi,
    caller: &ConsoleCaller,
    flash: Option<(String, bool)>,
) -> Response {
    let t = Tr(locale_of(caller));
    if !caller.role.may(Role::Admin) {
        return problem(
            caller,
            StatusCode::FORBIDDEN,
            t.get("admins_only"),
            "/console",
        );
    }
    match settings_sections(api, caller, t).await {
        Ok((sections, people)) => {
            let mut chrome = Chrome::of(caller, t, "settings");
            if let Some((message, bad)) = flash {
                chrome.flash = Some(message);
                chrome.flash_bad = bad;
            }
            let body = SettingsPage {
                lang: t.code(),
                t,
                title: t.get("nav_settings"),
                chrome,
                sections,
                people,
                key: crate::secrets::random_token("con_", 24),
                email: caller.user.email.clone(),
            };
            page(StatusCode::OK, body.render())
        }
        Err(err) => failed(caller, err),
    }
}

/// The settings page's sections (invoicing and DIAN, notices, portal) and the account's
/// people, read from the API.
pub async fn settings_sections(
    api: &InnerApi,
    caller: &ConsoleCaller,
    t: Tr,
) -> Result<(Vec<SettingsSection>, Vec<(String, &'static str, String)>), ApiError> {
    let locale = locale_of(caller);
    let yes_no = |on: bool| t.get(if on { "on" } else { "off" }).to_owned();
    let invoicing = api.get(caller, "/v1/account/invoicing").await?;
    let dian = &invoicing["dian"];
    let mut dian_lines = vec![
        (t.get("legal_name"), text(&invoicing, "legal_name")),
        ("NIT", text(&invoicing["nit"], "number")),
        (t.get("tax_regime"), text(&invoicing, "tax_regime")),
        ("DIAN", yes_no(dian["enabled"].as_bool() == Some(true))),
    ];
    let mut warnings = Vec::new();
    if !dian.is_null() {
        dian_lines.push((t.get("environment"), text(dian, "environment")));
        dian_lines.push((
            t.get("certificate_expires"),
            day(&text(&dian["certificate"], "expires_at"), locale),
        ));
    }
    let ranges = api
        .get(caller, "/v1/account/invoicing/numbering-ranges")
        .await?;
    for range in items(&ranges) {
        dian_lines.push((
            t.get("numbering_range"),
            format!(
                "{} {}–{} · {} {} · {} {}",
                text(&range, "prefix"),
                int(&range, "from"),
                int(&range, "to"),
                t.get("remaining"),
                int(&range, "remaining"),
                t.get("valid_to"),
                day(&text(&range, "valid_to"), locale)
            ),
        ));
        if range["warning"].as_bool() == Some(true) {
            warnings.push(format!(
                "{} {}",
                t.get("range_near_end"),
                text(&range, "prefix")
            ));
        }
    }
    let notices = api.get(caller, "/v1/account/notices").await?;
    let portal = api.get(caller, "/v1/account/portal").await?;
    let sections = vec![
        SettingsSection {
            title: t.get("invoicing_and_dian"),
            test_email: false,
            lines: dian_lines,
            warnings,
        },
        SettingsSection {
            title: t.get("notices"),
            test_email: true,
            lines: vec![
                (
                    "E-mail",
                    yes_no(notices["email"]["enabled"].as_bool() == Some(true)),
                ),
                (t.get("sender"), text(&notices["email"], "from_address")),
                (
                    "WhatsApp",
                    yes_no(notices["whatsapp"]["enabled"].as_bool() == Some(true)),
                ),
                (t.get("language"), text(&notices, "locale")),
            ],
            warnings: Vec::new(),
        },
        SettingsSection {
            title: t.get("portal"),
            test_email: false,
            lines: vec![
                (
                    t.get("portal_cancel"),
                    yes_no(portal["cancel"]["enabled"].as_bool() == Some(true)),
                ),
                (
                    t.get("portal_switch"),
                    yes_no(portal["plan_switch"]["enabled"].as_bool() == Some(true)),
                ),
                (
                    t.get("portal_method"),
                    yes_no(portal["payment_method_update"]["enabled"].as_bool() == Some(true)),
                ),
                (
                    t.get("portal_invoices"),
                    yes_no(portal["invoice_history"]["enabled"].as_bool() == Some(true)),
                ),
            ],
            warnings: Vec::new(),
        },
    ];
    let people = items(&api.get(caller, "/v1/console-users").await?)
        .iter()
        .map(|person| {
            let role = text(person, "role");
            let status = text(person, "status");
            (
                text(person, "email"),
                t.get(match role.as_str() {
                    "admin" => "role_admin",
                    "support" => "role_support",
                    _ => "role_accountant",
                }),
                t.find(&format!("person_{status}"))
                    .unwrap_or(&status)
                    .to_owned(),
            )
        })
        .collect();
    Ok((sections, people))
}
