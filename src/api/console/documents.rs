//! The accountant's pages: invoices and credit notes by day and DIAN status with their
//! downloads, and the month's exports. Downloads are the API's own answers passed on as they
//! are.

use super::InnerApi;
use super::frame::{Chrome, DocRow, doc_row, failed, locale_of, page, problem};
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{is_id, items, query, text};
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
