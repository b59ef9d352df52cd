//! What a customer is handed about money (CONTRACT §11): an invoice's or a credit note's PDF
//! (`pdf`) and the invoice's hosted page (`page`), both drawn from one `Sheet` (`sheet`): the
//! document as a person reads it, in Spanish or English (`text`).
//!
//! The API serves the PDFs behind the API key (`api::invoices`); the hosted page and its
//! downloads need only the invoice's unguessable token.

mod page;
pub mod pdf;
pub mod sheet;
pub mod text;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sheet::Sheet;

pub use page::router;

/// `sheet` as a PDF download named by its number (`FV-12.pdf`).
pub fn pdf_response(sheet: &Sheet) -> Response {
    let bytes = match pdf::render(sheet) {
        Ok(bytes) => bytes,
        Err(err) => {
            tracing::error!(error = %err, number = %sheet.number, "a PDF could not be drawn");
            return (StatusCode::INTERNAL_SERVER_ERROR, "Internal error").into_response();
        }
    };
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/pdf"),
    );
    // The number is the series' prefix and digits (`FV-12`): safe in a header as it is.
    if let Ok(value) = HeaderValue::from_str(&format!("inline; filename=\"{}.pdf\"", sheet.number))
    {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}
