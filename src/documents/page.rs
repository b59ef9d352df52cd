//! The hosted invoice (CONTRACT §11, `hosted_url`): `GET /invoices/{token}`, the page an
//! integrator sends a customer, with the invoice's PDF at `/invoices/{token}/pdf` and its credit
//! notes' at `/invoices/{token}/credit-notes/{id}/pdf`. No API key: the token (random, 32
//! characters, unique) is the customer's only credential, as a checkout session's id is on the
//! hosted checkout; it opens this one invoice and its credit notes, nothing else. The page loads
//! nothing from elsewhere, runs no script, and may not be framed. With DIAN, it is the
//! electronic invoice's representation (`electronic`): its QR code an inline `<svg>` drawn
//! with presentation attributes only, which the page's `style-src 'self'` lets through. The
//! PDFs are drawn off the async workers, at most `PDFS_PER_MINUTE` a minute per invoice.
//! Once DIAN accepted it, the invoice's XML is at `/invoices/{token}/xml` (the AttachedDocument
//! the buyer receives, CONTRACT §12a) and an accepted credit note's signed XML at
//! `/invoices/{token}/credit-notes/{id}/xml` (CONTRACT §13: the customer gets PDF and XML).

use super::electronic;
use super::qr::Qr;
use super::sheet::Sheet;
use super::text::Locale;
use crate::http::state::AppState;
use crate::ids::{CreditNoteId, DocumentId};
use crate::store::accounts::Account;
use crate::store::invoices::Invoice;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;

const STYLE: &str = include_str!("assets/invoice.css");

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .route("/invoices/{token}", get(show_page))
        .route("/invoices/{token}/pdf", get(invoice_pdf))
        .route(
            "/invoices/{token}/credit-notes/{id}/pdf",
            get(credit_note_pdf),
        )
        .route("/invoices/{token}/xml", get(invoice_xml))
        .route(
            "/invoices/{token}/credit-notes/{id}/xml",
            get(credit_note_xml),
        )
        .route(
            "/documents/invoice.css",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/css; charset=utf-8"),
                        (header::CACHE_CONTROL, "public, max-age=300"),
                        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                    ],
                    STYLE,
                )
            }),
        )
}

#[derive(Deserialize)]
struct PageQuery {
    lang: Option<String>,
}

/// One of the invoice's credit notes, as the page lists it.
struct NoteLink {
    title: String,
    issued_on: String,
    total: String,
    href: String,
    /// Its signed XML, once DIAN accepted it.
    xml_href: Option<String>,
}

/// An electronic document's QR code, inline: its side in modules (quiet zone included), the
/// path of its dark modules, and the URL it encodes.
struct QrView {
    side: usize,
    path: String,
    url: String,
}

#[derive(Template)]
#[template(path = "documents/templates/invoice.html")]
struct InvoicePage<'a> {
    sheet: &'a Sheet,
    pdf_href: String,
    /// The AttachedDocument, once DIAN accepted the invoice.
    xml_href: Option<String>,
    credit_notes: Vec<NoteLink>,
    qr: Option<QrView>,
}

fn locale(query: &PageQuery, headers: &HeaderMap) -> Locale {
    let accept = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok());
    Locale::choose(query.lang.as_deref(), accept)
}

/// The invoice at `token` and its seller's account; `None` for an unknown token.
async fn found(state: &AppState, token: &str) -> Result<Option<(Invoice, Account)>, Response> {
    // A token is `inv_` and 64 letters or digits (32 before issue 34's benchmark work: those
    // pages still open): anything else is not looked up.
    let shaped = token.strip_prefix("inv_").is_some_and(|rest| {
        matches!(rest.len(), 32 | 64) && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    if !shaped {
        return Ok(None);
    }
    let store = &state.store;
    let Some(invoice) = store
        .invoice_by_hosted_token(token)
        .await
        .map_err(internal)?
    else {
        return Ok(None);
    };
    let account = store.account(&invoice.account_id).await.map_err(internal)?;
    Ok(account.map(|account| (invoice, account)))
}

async fn show_page(
    State(state): State<AppState>,
    Path(token): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let locale = locale(&query, &headers);
    let (invoice, account) = match found(&state, &token).await {
        Ok(Some(found)) => found,
        Ok(None) => return not_found(),
        Err(response) => return response,
    };
    let sheet = match electronic::invoice_sheet(&state.store, &invoice, &account, locale).await {
        Ok(sheet) => sheet,
        Err(err) => return internal(err),
    };
    let notes = match state.store.credit_notes_of_invoice(&invoice.id).await {
        Ok(notes) => notes,
        Err(err) => return internal(err),
    };
    let ids: Vec<DocumentId> = notes
        .iter()
        .map(|note| note.id.clone().into())
        .chain(std::iter::once(invoice.id.clone().into()))
        .collect();
    let docs = match state.store.dian_documents(&invoice.account_id, &ids).await {
        Ok(docs) => docs,
        Err(err) => return internal(err),
    };
    let lang = locale.code();
    let t = super::text::of(locale);
    let credit_notes = notes
        .iter()
        .map(|note| {
            let doc = docs.get(&DocumentId::from(note.id.clone()));
            let kind = match doc {
                Some(_) => t.electronic_credit_note,
                None => t.credit_note,
            };
            (
                note,
                format!(
                    "{kind} {}",
                    electronic::listed_number(&note.number, doc, locale)
                ),
            )
        })
        .map(|(note, title)| NoteLink {
            title,
            issued_on: super::sheet::date(note.issued_at, locale),
            total: super::sheet::money(note.total_cents, locale),
            href: format!("/invoices/{token}/credit-notes/{}/pdf?lang={lang}", note.id),
            xml_href: accepted(docs.get(&DocumentId::from(note.id.clone())))
                .then(|| format!("/invoices/{token}/credit-notes/{}/xml", note.id)),
        })
        .collect();
    let qr = sheet
        .dian
        .as_ref()
        .and_then(|dian| dian.qr_url.as_deref())
        .and_then(|url| {
            let qr = Qr::encode(url)?;
            Some(QrView {
                side: qr.side(),
                path: qr.svg_path(),
                url: url.to_owned(),
            })
        });
    let page = InvoicePage {
        sheet: &sheet,
        pdf_href: format!("/invoices/{token}/pdf?lang={lang}"),
        xml_href: accepted(docs.get(&DocumentId::from(invoice.id.clone())))
            .then(|| format!("/invoices/{token}/xml")),
        credit_notes,
        qr,
    };
    match page.render() {
        Ok(html) => secured((StatusCode::OK, Html(html)).into_response()),
        Err(err) => internal(err),
    }
}

async fn invoice_pdf(
    State(state): State<AppState>,
    Path(token): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let locale = locale(&query, &headers);
    match found(&state, &token).await {
        Ok(Some((invoice, account))) => {
            if let Err(limited) = limit_drawing(&state, &token).await {
                return limited;
            }
            match electronic::invoice_sheet(&state.store, &invoice, &account, locale).await {
                Ok(sheet) => secured(super::pdf_response(sheet).await),
                Err(err) => internal(err),
            }
        }
        Ok(None) => not_found(),
        Err(response) => response,
    }
}

/// PDFs drawn for one hosted invoice (its own and its credit notes') in any minute. A customer
/// opens a few; anyone holding the link could otherwise keep the service drawing for ever.
pub const PDFS_PER_MINUTE: u64 = 20;

/// Counts one PDF of the invoice at `token` against `PDFS_PER_MINUTE`: 429 past it. The window
/// is keyed by the token's hash, not the token: on PostgreSQL windows are rows, and the token
/// is the customer's credential.
async fn limit_drawing(state: &AppState, token: &str) -> Result<(), Response> {
    let key = format!("hosted-pdf:{}", crate::secrets::sha256_hex(token));
    state
        .limiter
        .take(&key, PDFS_PER_MINUTE)
        .await
        .map_err(|err| secured(err.into_response()))
}

async fn credit_note_pdf(
    State(state): State<AppState>,
    Path((token, id)): Path<(String, String)>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let id = CreditNoteId::given(id);
    let locale = locale(&query, &headers);
    let (invoice, account) = match found(&state, &token).await {
        Ok(Some(found)) => found,
        Ok(None) => return not_found(),
        Err(response) => return response,
    };
    let account_id = &invoice.account_id;
    let note = match state.store.credit_note(account_id, &id).await {
        // Only a credit note of this invoice: the token opens nothing else.
        Ok(Some(note)) if note.invoice_id == invoice.id => note,
        Ok(_) => return not_found(),
        Err(err) => return internal(err),
    };
    if let Err(limited) = limit_drawing(&state, &token).await {
        return limited;
    }
    match electronic::credit_note_sheet(&state.store, &note, &invoice, &account, locale).await {
        Ok(sheet) => secured(super::pdf_response(sheet).await),
        Err(err) => internal(err),
    }
}

/// Whether DIAN accepted the document: only then is its XML the customer's to keep.
fn accepted(doc: Option<&crate::store::dian::DianDocument>) -> bool {
    doc.is_some_and(|doc| doc.status == crate::domain::dian::DianStatus::Accepted)
}

/// An XML file to keep, named `name`.
fn xml_file(name: &str, xml: String) -> Response {
    secured(
        (
            [
                (header::CONTENT_TYPE, "application/xml".to_owned()),
                (
                    header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{name}.xml\""),
                ),
            ],
            xml,
        )
            .into_response(),
    )
}

/// The AttachedDocument of the invoice at `token`, once DIAN accepted it; 404 otherwise (the
/// page offers it only then).
async fn invoice_xml(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    let invoice = match found(&state, &token).await {
        Ok(Some((invoice, _))) => invoice,
        Ok(None) => return not_found(),
        Err(response) => return response,
    };
    match electronic::attached_document(&state.store, &invoice.account_id, &invoice.id).await {
        Ok(Ok(xml)) => xml_file(&invoice.number, xml),
        Ok(Err(_)) => not_found(),
        Err(err) => internal(err),
    }
}

/// The signed XML of one of the invoice's credit notes, once DIAN accepted it.
async fn credit_note_xml(
    State(state): State<AppState>,
    Path((token, id)): Path<(String, String)>,
) -> Response {
    let id = CreditNoteId::given(id);
    let invoice = match found(&state, &token).await {
        Ok(Some((invoice, _))) => invoice,
        Ok(None) => return not_found(),
        Err(response) => return response,
    };
    let account_id = &invoice.account_id;
    let note = match state.store.credit_note(account_id, &id).await {
        Ok(Some(note)) if note.invoice_id == invoice.id => note,
        Ok(_) => return not_found(),
        Err(err) => return internal(err),
    };
    let doc_id = DocumentId::from(note.id.clone());
    let docs = match state
        .store
        .dian_documents(account_id, std::slice::from_ref(&doc_id))
        .await
    {
        Ok(docs) => docs,
        Err(err) => return internal(err),
    };
    let Some(doc) = docs.get(&doc_id).filter(|doc| accepted(Some(doc))) else {
        return not_found();
    };
    match &doc.xml {
        Some(xml) => xml_file(&note.number, xml.clone()),
        None => not_found(),
    }
}

/// What every answer of these routes carries: nothing loaded from elsewhere, no script, no
/// framing, not cached by anyone between, and no token leaked to another site by a Referer.
fn secured(response: Response) -> Response {
    crate::http::pages::harden(
        response,
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'none'; \
         base-uri 'none'; frame-ancestors 'none'",
    )
}

fn not_found() -> Response {
    secured(
        (
            StatusCode::NOT_FOUND,
            Html("<!doctype html><title>404</title><p>Not found / No encontrada</p>"),
        )
            .into_response(),
    )
}

fn internal(err: impl std::fmt::Display) -> Response {
    tracing::error!(error = %err, "hosted invoice failed");
    (StatusCode::INTERNAL_SERVER_ERROR, "Internal error").into_response()
}
