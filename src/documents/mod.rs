//! What a customer is handed about money (CONTRACT §11): an invoice's or a credit note's PDF
//! (`pdf`) and the invoice's hosted page (`page`), both drawn from one `Sheet` (`sheet`): the
//! document as a person reads it, in Spanish or English (`text`). With DIAN on, the sheet is
//! the electronic document's printed representation (`electronic`), its QR code drawn as
//! vector shapes (`qr`).
//!
//! The API serves the PDFs behind the API key (`api::invoices`); the hosted page and its
//! downloads need only the invoice's unguessable token.

pub mod charts;
pub mod electronic;
mod page;
pub mod pdf;
pub mod qr;
pub mod sheet;
pub mod text;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sheet::Sheet;

pub use page::router;

/// `sheet` as a PDF download named by its number (`FV-12.pdf`, `SETP990000001.pdf`). Drawn on
/// the blocking pool: laying out and compressing a page takes milliseconds of CPU that would
/// otherwise hold an async worker (and every request queued behind it).
pub async fn pdf_response(sheet: Sheet) -> Response {
    let file_stem = sheet.file_stem.clone();
    let drawn = tokio::task::spawn_blocking(move || pdf::render(&sheet)).await;
    let bytes = match drawn {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(err)) => {
            tracing::error!(error = %err, number = %file_stem, "a PDF could not be drawn");
            return (StatusCode::INTERNAL_SERVER_ERROR, "Internal error").into_response();
        }
        Err(err) => {
            tracing::error!(error = %err, number = %file_stem, "drawing a PDF panicked");
            return (StatusCode::INTERNAL_SERVER_ERROR, "Internal error").into_response();
        }
    };
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/pdf"),
    );
    // The number is the series' prefix and digits (`FV-12`, `SETP990000001`): safe in a
    // header as it is.
    if let Ok(value) = HeaderValue::from_str(&format!("inline; filename=\"{file_stem}.pdf\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}
