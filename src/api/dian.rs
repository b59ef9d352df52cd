//! DIAN electronic invoicing in the API (CONTRACT §12): the `dian` part of the seller's
//! settings (`PATCH /v1/account/invoicing` reads it, checks the certificate, and stores the PIN,
//! the certificate and its password as secrets; `GET` answers it without them), the `dian`
//! object of invoices and credit notes, and `GET /v1/invoices/{id}/xml` and
//! `GET /v1/credit-notes/{id}/xml`: the signed document exactly as sent to DIAN, or 409 while
//! there is none (DIAN off when it was issued, awaiting a range, or not signed yet); and
//! `GET /v1/invoices/{id}/attached-document`: the AttachedDocument of an accepted invoice
//! (CONTRACT §12a), the signed invoice and DIAN's ApplicationResponse in one container for the
//! buyer, or 409 while DIAN has not accepted it.

use crate::dian::certificate::Certificate;
use crate::domain::dian::Environment;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::state::AppState;
use crate::ids::{CreditNoteId, DocumentId, InvoiceId};
use crate::store::accounts::{Account, Seller};
use crate::store::dian::{DianDocument, DianSecrets, DianSettings};
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_invoice_xml))
        .routes(routes!(get_credit_note_xml))
        .routes(routes!(get_invoice_attached_document))
}

/// `dian` of `PATCH /v1/account/invoicing`: turns DIAN on (or replaces its settings).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DianIn {
    /// `test` (habilitación) or `production`.
    #[schema(pattern = "^(test|production)$")]
    pub environment: String,
    /// The software's id DIAN registered.
    #[schema(max_length = 100)]
    pub software_id: String,
    /// The software's PIN: stored as a secret, never returned.
    #[schema(max_length = 100)]
    pub software_pin: String,
    pub certificate: CertificateIn,
}

/// The signing certificate: a PKCS#12 file (PBES2-AES or legacy 3DES) holding an RSA key.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CertificateIn {
    /// The `.p12` file, base64.
    pub p12_base64: String,
    pub password: String,
}

impl std::fmt::Debug for DianIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DianIn")
            .field("environment", &self.environment)
            .field("software_id", &self.software_id)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CertificateIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CertificateIn(..)")
    }
}

/// The account's DIAN settings, without its secrets.
#[derive(Debug, Serialize, ToSchema)]
pub struct DianSettingsOut {
    #[schema(pattern = "^(test|production)$")]
    pub environment: String,
    pub software_id: String,
    /// Always true: `dian` is null while DIAN is off.
    pub enabled: bool,
    pub certificate: CertificateOut,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CertificateOut {
    pub subject: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
}

impl DianSettingsOut {
    pub(in crate::api) fn of(account: &Account) -> Option<Self> {
        let settings = account.dian_settings()?;
        Some(Self {
            environment: settings.environment.as_str().to_owned(),
            software_id: settings.software_id,
            enabled: true,
            certificate: CertificateOut {
                subject: settings.certificate_subject,
                expires_at: rfc3339(from_millis(settings.certificate_not_after)),
            },
        })
    }
}

fn text_field(value: &str, param: &str) -> ApiResult<String> {
    let value = value.trim();
    if value.is_empty() || value.len() > 100 {
        return Err(
            ApiError::bad_request(format!("{param} must have 1 to 100 characters.")).param(param),
        );
    }
    Ok(value.to_owned())
}

/// Checks `body` (the certificate opens with its password, holds an RSA key, has not
/// expired) and the seller (`seller`, as the same request leaves it): what to store.
pub(in crate::api) async fn parse_dian(
    body: &DianIn,
    seller: &Seller,
    now_ms: i64,
) -> ApiResult<(DianSettings, DianSecrets)> {
    let environment = Environment::parse(&body.environment).ok_or_else(|| {
        ApiError::bad_request("dian.environment must be `test` or `production`.")
            .param("dian.environment")
    })?;
    let software_id = text_field(&body.software_id, "dian.software_id")?;
    let software_pin = text_field(&body.software_pin, "dian.software_pin")?;
    let certificate = Certificate::read_off_the_workers(
        body.certificate.p12_base64.clone(),
        body.certificate.password.clone(),
    )
    .await
    .map_err(|err| {
        ApiError::bad_request(format!("dian.certificate: {err}.")).param("dian.certificate")
    })?;
    if certificate.not_after() * 1000 < now_ms {
        return Err(
            ApiError::bad_request("dian.certificate: the certificate has expired.")
                .param("dian.certificate"),
        );
    }
    let missing: Vec<&str> = [
        ("legal_name", seller.legal_name.is_none()),
        ("nit", seller.nit.is_none()),
        ("address", seller.address.is_none()),
        ("tax_regime", seller.tax_regime.is_none()),
    ]
    .into_iter()
    .filter_map(|(name, absent)| absent.then_some(name))
    .collect();
    if !missing.is_empty() {
        return Err(ApiError::bad_request(format!(
            "DIAN needs the seller's {} first (in this request or before).",
            missing.join(", ")
        ))
        .param("dian"));
    }
    Ok((
        DianSettings {
            environment,
            software_id,
            certificate_subject: certificate.subject().to_owned(),
            certificate_not_after: certificate.not_after() * 1000,
        },
        DianSecrets {
            software_pin,
            p12_base64: body.certificate.p12_base64.split_whitespace().collect(),
            password: body.certificate.password.clone(),
        },
    ))
}

/// An invoice's electronic document.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "status": "accepted",
    "cufe": "8bb918b19ba22a694f1da11c643b5e9de39adf60311cf179179e9b33381030bcd4c3c3f156c506ed5908f9276f5bd9b4",
    "qr_url": "https://catalogo-vpfe-hab.dian.gov.co/document/searchqr?documentkey=8bb918b19ba22a694f1da11c643b5e9de39adf60311cf179179e9b33381030bcd4c3c3f156c506ed5908f9276f5bd9b4",
    "messages": ["La Factura electrónica SETP990000001, ha sido autorizada."]
})))]
pub struct InvoiceDianOut {
    /// `awaiting_range` (no number yet), `pending`, `accepted` or `rejected`.
    #[schema(pattern = "^(awaiting_range|pending|accepted|rejected)$")]
    pub status: String,
    /// The CUFE (SHA-384, hex), fixed when the invoice is numbered; null while awaiting a range.
    pub cufe: Option<String>,
    /// DIAN's page of the document, which its QR code points to.
    pub qr_url: Option<String>,
    /// What DIAN said (its rules, for a rejection).
    pub messages: Vec<String>,
    /// Why it waits for an operator, while neither accepted nor rejected: `awaiting_range`
    /// (add a numbering range), `numbering_failed` (numbered again at the next filing pass),
    /// `settings` (restore the account's DIAN settings); null while it is on its way or done.
    #[schema(pattern = "^(awaiting_range|numbering_failed|invoice_rejected|settings)$")]
    pub waiting: Option<String>,
    /// The number it had before it was numbered again (its range ended before it could be
    /// sent); null otherwise.
    pub replaced_number: Option<String>,
}

/// A credit note's electronic document.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "status": "pending",
    "cude": "907e4444decb9fe0fb8b8c8e3b4c2a8bcc1a1d4d5c5ac3de0f5b6e0b1d1a11680f3ad2c0ab13db1c7a9e24f09c3b81168",
    "qr_url": "https://catalogo-vpfe-hab.dian.gov.co/document/searchqr?documentkey=907e4444decb9fe0fb8b8c8e3b4c2a8bcc1a1d4d5c5ac3de0f5b6e0b1d1a11680f3ad2c0ab13db1c7a9e24f09c3b81168",
    "messages": []
})))]
pub struct CreditNoteDianOut {
    /// `pending`, `accepted` or `rejected`.
    #[schema(pattern = "^(awaiting_range|pending|accepted|rejected)$")]
    pub status: String,
    /// The CUDE (SHA-384, hex), fixed when the credit note is numbered.
    pub cude: Option<String>,
    pub qr_url: Option<String>,
    pub messages: Vec<String>,
    /// Why it waits for an operator: `invoice_rejected` (DIAN rejected its invoice: it is not
    /// sent to certain rejection), `settings` (restore the account's DIAN settings); null
    /// while it is on its way or done.
    #[schema(pattern = "^(awaiting_range|numbering_failed|invoice_rejected|settings)$")]
    pub waiting: Option<String>,
}

fn messages_of(doc: &DianDocument) -> Vec<String> {
    doc.messages
        .as_deref()
        .and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or_default()
}

impl InvoiceDianOut {
    pub(in crate::api) fn of(doc: &DianDocument) -> Self {
        Self {
            status: doc.status.as_str().to_owned(),
            qr_url: doc
                .unique_code
                .as_deref()
                .map(|code| doc.environment.qr_url(code)),
            cufe: doc.unique_code.clone(),
            messages: messages_of(doc),
            waiting: doc.waiting.map(|w| w.as_str().to_owned()),
            replaced_number: doc.replaced_number.clone(),
        }
    }
}

impl CreditNoteDianOut {
    pub(in crate::api) fn of(doc: &DianDocument) -> Self {
        Self {
            status: doc.status.as_str().to_owned(),
            qr_url: doc
                .unique_code
                .as_deref()
                .map(|code| doc.environment.qr_url(code)),
            cude: doc.unique_code.clone(),
            messages: messages_of(doc),
            waiting: doc.waiting.map(|w| w.as_str().to_owned()),
        }
    }
}

/// A signed UBL 2.1 document, as bytes.
#[derive(ToSchema)]
#[schema(value_type = String, example = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Invoice …")]
pub struct XmlFile(pub String);

async fn xml_of(
    state: &AppState,
    caller: &Caller,
    id: &DocumentId,
    what: &str,
) -> ApiResult<Response> {
    let not_signed = || {
        ApiError::conflict(format!(
            "The {what} has no signed electronic document yet (DIAN was off when it was issued, it awaits a numbering range, or it is being signed)."
        ))
    };
    let xml = state
        .store
        .dian_xml(caller.account_id(), id)
        .await?
        .ok_or_else(not_signed)?
        .ok_or_else(not_signed)?;
    Ok(([(header::CONTENT_TYPE, "application/xml")], xml).into_response())
}

/// The invoice's electronic document exactly as sent to DIAN (UBL 2.1, signed).
#[utoipa::path(get, path = "/v1/invoices/{id}/xml", tag = "invoices",
    responses((status = 200, content_type = "application/xml", body = XmlFile,
        description = "The signed document."), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "No signed document yet: DIAN was off when it was issued, it awaits a numbering range, or it is being signed.")))]
async fn get_invoice_xml(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let id = InvoiceId::given(id);
    if state
        .store
        .invoice(caller.account_id(), &id)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found(format!("No invoice with id `{id}`.")).param("id"));
    }
    xml_of(&state, &caller, &id.into(), "invoice").await
}

/// The credit note's electronic document exactly as sent to DIAN (UBL 2.1, signed).
#[utoipa::path(get, path = "/v1/credit-notes/{id}/xml", tag = "invoices",
    responses((status = 200, content_type = "application/xml", body = XmlFile,
        description = "The signed document."), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "No signed document yet: DIAN was off when its invoice was issued, or it is being signed.")))]
async fn get_credit_note_xml(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let id = CreditNoteId::given(id);
    if state
        .store
        .credit_note(caller.account_id(), &id)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found(format!("No credit note with id `{id}`.")).param("id"));
    }
    xml_of(&state, &caller, &id.into(), "credit note").await
}

/// A UBL 2.1 AttachedDocument, as bytes.
#[derive(ToSchema)]
#[schema(value_type = String, example = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><AttachedDocument …")]
pub struct AttachedDocumentFile(pub String);

/// The AttachedDocument of an invoice DIAN accepted (UBL 2.1, valid against
/// `UBL-AttachedDocument-2.1.xsd`): the signed invoice as DIAN accepted it and DIAN's
/// ApplicationResponse for it, the container DIAN's annex says the buyer receives.
#[utoipa::path(get, path = "/v1/invoices/{id}/attached-document", tag = "invoices",
    responses((status = 200, content_type = "application/xml", body = AttachedDocumentFile,
        description = "The AttachedDocument."), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "DIAN has not accepted the invoice (it has no electronic document, awaits a range, is pending or was rejected).")))]
async fn get_invoice_attached_document(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    use crate::documents::electronic::{NotAttached, attached_document};
    let id = InvoiceId::given(id);
    let xml = match attached_document(&state.store, caller.account_id(), &id).await? {
        Ok(xml) => xml,
        Err(NotAttached::NoInvoice) => {
            return Err(ApiError::not_found(format!("No invoice with id `{id}`.")).param("id"));
        }
        Err(NotAttached::NoDocument) => {
            return Err(ApiError::conflict(
                "The invoice has no electronic document (DIAN was off when it was issued).",
            ));
        }
        Err(NotAttached::NotAccepted(status)) => {
            return Err(ApiError::conflict(format!(
                "DIAN has not accepted the invoice: its electronic document is {status}."
            )));
        }
        Err(NotAttached::NoResponse) => {
            return Err(ApiError::conflict(
                "DIAN accepted the invoice before its ApplicationResponse was kept; there is no AttachedDocument to give.",
            ));
        }
    };
    Ok(([(header::CONTENT_TYPE, "application/xml")], xml).into_response())
}
