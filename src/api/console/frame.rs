//! What every signed-in page of the console shares: the frame around it (`Chrome`), the
//! person's language, the console's headers, the page a refusal or an error is, and the rows
//! several pages draw from the API's answers.

use super::Role;
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{day, int, money, text};
use crate::checkout::i18n::Locale;
use crate::http::error::ApiError;
use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;

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

/// A card or Nequi account as a person reads it.
pub fn method_words(t: Tr, method: &Value) -> String {
    let last4 = text(method, "last4");
    match (text(method, "brand"), last4.is_empty()) {
        (brand, false) if !brand.is_empty() => format!("{brand} •••• {last4}"),
        (_, false) => format!("{} •••• {last4}", t.get("nequi")),
        _ => t.get("card").to_owned(),
    }
}
