//! Invoices and credit notes (CONTRACT §11): read-only; every approved charge has exactly one
//! invoice, issued in the transaction that settled it (`store::invoices`), and every approved
//! refund one credit note, issued in the transaction that approved it (`store::credit_notes`).

use crate::documents::electronic;
use crate::documents::text::Locale;
use crate::domain::money::CURRENCY;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiQuery;
use crate::http::list::{ListOut, page_request};
use crate::http::state::AppState;
use crate::ids::{
    AccountId, AddonId, ChargeAttemptId, CreditNoteId, CustomerId, DocumentId, InvoiceId, PlanId,
    SubscriptionId,
};
use crate::store::accounts::Account;
use crate::store::credit_notes::{CreditLine, CreditNote, CreditNoteFilter};
use crate::store::dian::DianDocument;
use crate::store::invoices::{Invoice, InvoiceFilter, InvoiceLine, Party, TaxEntry};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_invoices))
        .routes(routes!(get_invoice))
        .routes(routes!(get_invoice_pdf))
        .routes(routes!(list_credit_notes))
        .routes(routes!(get_credit_note))
        .routes(routes!(get_credit_note_pdf))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InvoiceListQuery {
    pub customer_id: Option<String>,
    pub subscription_id: Option<String>,
    pub charge_id: Option<String>,
    /// Issued on or after this Colombian calendar day (`YYYY-MM-DD`, from its 00:00 −05:00).
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format = Date, example = "2026-11-01")]
    pub issued_from: Option<String>,
    /// Issued on or before this Colombian calendar day (`YYYY-MM-DD`, until its 24:00 −05:00).
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format = Date, example = "2026-11-30")]
    pub issued_to: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// One line: its tax-inclusive amount split into the taxable base and the IVA.
#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceLineOut {
    pub description: String,
    pub quantity: i64,
    /// What the customer pays for the line, after its discount.
    pub amount_cents: i64,
    /// What a discount took off the line (0 without one).
    pub discount_cents: i64,
    #[schema(schema_with = super::openapi::schemas::tax_code)]
    pub tax_code: String,
    pub tax_rate_bps: i64,
    pub taxable_base_cents: i64,
    pub tax_cents: i64,
    #[schema(format = DateTime)]
    pub period_start: Option<String>,
    #[schema(format = DateTime)]
    pub period_end: Option<String>,
    pub plan_id: Option<String>,
    pub addon_id: Option<String>,
}

impl From<InvoiceLine> for InvoiceLineOut {
    fn from(line: InvoiceLine) -> Self {
        let at = |ms: Option<i64>| ms.map(|ms| rfc3339(from_millis(ms)));
        Self {
            description: line.line.description,
            quantity: line.line.quantity,
            amount_cents: line.line.amount_cents,
            discount_cents: line.line.discount_cents,
            tax_code: line.line.tax_code.as_str().to_owned(),
            tax_rate_bps: line.tax_rate_bps,
            taxable_base_cents: line.taxable_base_cents,
            tax_cents: line.tax_cents,
            period_start: at(line.line.period_start),
            period_end: at(line.line.period_end),
            plan_id: line.line.plan_id.map(PlanId::into_string),
            addon_id: line.line.addon_id.map(AddonId::into_string),
        }
    }
}

/// One entry per tax code present on the invoice.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaxBreakdownOut {
    #[schema(schema_with = super::openapi::schemas::tax_code)]
    pub tax_code: String,
    pub rate_bps: i64,
    pub taxable_base_cents: i64,
    pub tax_cents: i64,
}

/// The customer as they were when the invoice was issued.
#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceCustomerOut {
    pub name: String,
    pub email: String,
    /// Without one given, the final consumer (`consumidor final`): CC 222222222222.
    pub tax_id: TaxIdOut,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaxIdOut {
    /// CC, CE, NIT, PP, TI or DIE.
    #[serde(rename = "type")]
    pub kind: String,
    pub number: String,
}

/// An invoice: one per approved charge, numbered without gaps in the account's series.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "in_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b",
    "number": "FV-1",
    "status": "paid",
    "charge_id": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
    "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "currency": "COP",
    "lines": [{
        "description": "Plan Pro",
        "quantity": 1,
        "amount_cents": 4990000,
        "discount_cents": 0,
        "tax_code": "iva_19",
        "tax_rate_bps": 1900,
        "taxable_base_cents": 4193277,
        "tax_cents": 796723,
        "period_start": "2026-11-24T09:15:42.318Z",
        "period_end": "2026-12-24T09:15:42.318Z",
        "plan_id": "plan_0193a1f4c0d17e2f8a9b0c1d2e3f4a5b",
        "addon_id": null
    }],
    "subtotal_cents": 4193277,
    "tax_cents": 796723,
    "total_cents": 4990000,
    "discount_cents": 0,
    "tax_breakdown": [{"tax_code": "iva_19", "rate_bps": 1900, "taxable_base_cents": 4193277, "tax_cents": 796723}],
    "issued_at": "2026-11-24T09:15:43.020Z",
    "customer": {"name": "Ana Gómez", "email": "ana@example.co", "tax_id": {"type": "CC", "number": "222222222222"}},
    "dian": null,
    "pdf_url": "https://billing.example.co/v1/invoices/in_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b/pdf",
    "hosted_url": "https://billing.example.co/invoices/inv_0193a1f9c4d57e6f8a9b0c1d2e3f4a5bQ7m2Kx9PzR4tW8yB3nD6fH1jL5vC0sEa"
})))]
pub struct InvoiceOut {
    pub id: String,
    /// With DIAN on, the DIAN number (`SETP990000001`), null while it awaits a range.
    pub number: Option<String>,
    /// Always `paid`: only an approved charge (or a period whose total was 0) is invoiced.
    pub status: String,
    /// The approved charge it documents; null for a period whose total was 0 (CONTRACT §14).
    pub charge_id: Option<String>,
    pub subscription_id: Option<String>,
    pub customer_id: String,
    pub currency: String,
    pub lines: Vec<InvoiceLineOut>,
    pub subtotal_cents: i64,
    pub tax_cents: i64,
    pub total_cents: i64,
    /// What discounts took off its lines.
    pub discount_cents: i64,
    pub tax_breakdown: Vec<TaxBreakdownOut>,
    #[schema(format = DateTime)]
    pub issued_at: String,
    pub customer: InvoiceCustomerOut,
    /// The electronic invoice's state with DIAN; null while DIAN is off.
    pub dian: Option<super::dian::InvoiceDianOut>,
    /// The PDF, with the API key (`GET /v1/invoices/{id}/pdf`).
    pub pdf_url: String,
    /// The page to send the customer: no API key, an unguessable URL, the invoice and its
    /// credit notes with their PDFs.
    pub hosted_url: String,
}

impl InvoiceOut {
    /// `invoice` as the API answers it, its URLs under `public_url`.
    pub(in crate::api) fn of(invoice: Invoice, public_url: &str) -> Result<Self, ApiError> {
        let broken = |err: serde_json::Error| ApiError::Internal(Box::new(err));
        let lines: Vec<InvoiceLine> = serde_json::from_str(&invoice.lines).map_err(broken)?;
        let entries: Vec<TaxEntry> =
            serde_json::from_str(&invoice.tax_breakdown).map_err(broken)?;
        let party: Party = serde_json::from_str(&invoice.customer).map_err(broken)?;
        Ok(Self {
            lines: lines.into_iter().map(InvoiceLineOut::from).collect(),
            tax_breakdown: entries
                .into_iter()
                .map(|entry| TaxBreakdownOut {
                    tax_code: entry.tax_code.as_str().to_owned(),
                    rate_bps: entry.rate_bps,
                    taxable_base_cents: entry.taxable_base_cents,
                    tax_cents: entry.tax_cents,
                })
                .collect(),
            customer: InvoiceCustomerOut {
                name: party.name,
                email: party.email,
                tax_id: TaxIdOut {
                    kind: party.tax_id.kind,
                    number: party.tax_id.number,
                },
            },
            issued_at: rfc3339(from_millis(invoice.issued_at)),
            pdf_url: format!("{public_url}/v1/invoices/{}/pdf", invoice.id),
            hosted_url: format!("{public_url}/invoices/{}", invoice.hosted_token),
            id: invoice.id.into_string(),
            number: Some(invoice.number),
            status: "paid".to_owned(),
            charge_id: invoice.charge_id.map(ChargeAttemptId::into_string),
            subscription_id: invoice.subscription_id.map(SubscriptionId::into_string),
            customer_id: invoice.customer_id.into_string(),
            currency: CURRENCY.to_owned(),
            subtotal_cents: invoice.subtotal_cents,
            tax_cents: invoice.tax_cents,
            total_cents: invoice.total_cents,
            discount_cents: invoice.discount_cents,
            dian: None,
        })
    }

    /// With its electronic document: the DIAN number and the `dian` object.
    pub(in crate::api) fn with_dian(mut self, doc: Option<&DianDocument>) -> Self {
        if let Some(doc) = doc {
            self.number = doc.number.clone();
            self.dian = Some(super::dian::InvoiceDianOut::of(doc));
        }
        self
    }
}

/// The account's invoices, newest first; `issued_from` and `issued_to` keep those issued in a
/// range of Colombian calendar days (both included).
#[utoipa::path(get, path = "/v1/invoices", tag = "invoices", params(InvoiceListQuery),
    responses((status = 200, body = ListOut<InvoiceOut>), (status = 400, body = ErrorBody)))]
async fn list_invoices(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<InvoiceListQuery>,
) -> ApiResult<Json<ListOut<InvoiceOut>>> {
    let page = page_request(query.limit, query.cursor.clone())?;
    let filter = InvoiceFilter {
        customer_id: query.customer_id.map(CustomerId::given),
        subscription_id: query.subscription_id.map(SubscriptionId::given),
        charge_id: query.charge_id.map(ChargeAttemptId::given),
        issued: super::exports::issued_bounds(
            query.issued_from.as_deref(),
            query.issued_to.as_deref(),
        )?,
    };
    let account = caller.account_id();
    let page = state.store.list_invoices(account, &filter, &page).await?;
    let ids: Vec<DocumentId> = page.items.iter().map(|i| i.id.clone().into()).collect();
    let docs = state.store.dian_documents(account, &ids).await?;
    let public_url = state.config.public_url();
    Ok(Json(ListOut::try_from_page(
        page,
        |i| i.id.to_string(),
        |invoice| {
            let doc = docs.get(&DocumentId::from(invoice.id.clone()));
            Ok::<_, ApiError>(InvoiceOut::of(invoice, &public_url)?.with_dian(doc))
        },
    )?))
}

/// One invoice.
#[utoipa::path(get, path = "/v1/invoices/{id}", tag = "invoices",
    responses((status = 200, body = InvoiceOut), (status = 404, body = ErrorBody)))]
async fn get_invoice(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<InvoiceOut>> {
    let id = InvoiceId::given(id);
    let invoice = state
        .store
        .invoice(caller.account_id(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No invoice with id `{id}`.")).param("id"))?;
    let id = DocumentId::from(id);
    let docs = state
        .store
        .dian_documents(caller.account_id(), std::slice::from_ref(&id))
        .await?;
    Ok(Json(
        InvoiceOut::of(invoice, &state.config.public_url())?.with_dian(docs.get(&id)),
    ))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PdfQuery {
    /// The document's language: Spanish (`es`, the default) or English (`en`).
    #[param(pattern = "^(es|en)$")]
    pub lang: Option<String>,
}

/// A PDF document (A4, fonts embedded), as bytes.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary, example = "%PDF-1.7 …")]
pub struct PdfFile(pub Vec<u8>);

/// An invoice's PDF: seller, customer, number, date, lines, the IVA breakdown and the totals in
/// pesos; with DIAN on, the electronic invoice's representation (its DIAN number, CUFE, QR code
/// and numbering authorisation).
#[utoipa::path(get, path = "/v1/invoices/{id}/pdf", tag = "invoices", params(PdfQuery),
    responses((status = 200, content_type = "application/pdf", body = PdfFile,
        description = "The invoice's PDF."), (status = 404, body = ErrorBody)))]
async fn get_invoice_pdf(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PdfQuery>,
) -> ApiResult<Response> {
    let id = InvoiceId::given(id);
    let account = caller.account_id();
    let invoice =
        state.store.invoice(account, &id).await?.ok_or_else(|| {
            ApiError::not_found(format!("No invoice with id `{id}`.")).param("id")
        })?;
    let seller = seller(&state, account).await?;
    let sheet = electronic::invoice_sheet(&state.store, &invoice, &seller, locale(&query)?)
        .await
        .map_err(|err| ApiError::Internal(Box::new(err)))?;
    Ok(crate::documents::pdf_response(sheet).await)
}

/// A credit note's PDF, as an invoice's, naming the invoice it credits.
#[utoipa::path(get, path = "/v1/credit-notes/{id}/pdf", tag = "invoices", params(PdfQuery),
    responses((status = 200, content_type = "application/pdf", body = PdfFile,
        description = "The credit note's PDF."), (status = 404, body = ErrorBody)))]
async fn get_credit_note_pdf(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PdfQuery>,
) -> ApiResult<Response> {
    let id = CreditNoteId::given(id);
    let account = caller.account_id();
    let note = state
        .store
        .credit_note(account, &id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No credit note with id `{id}`.")).param("id")
        })?;
    let invoice = state
        .store
        .invoice(account, &note.invoice_id)
        .await?
        .ok_or_else(|| {
            ApiError::Internal(format!("credit note {id} without its invoice").into())
        })?;
    let seller = seller(&state, account).await?;
    let sheet =
        electronic::credit_note_sheet(&state.store, &note, &invoice, &seller, locale(&query)?)
            .await
            .map_err(|err| ApiError::Internal(Box::new(err)))?;
    Ok(crate::documents::pdf_response(sheet).await)
}

/// `?lang=`: Spanish unless English is asked for.
fn locale(query: &PdfQuery) -> ApiResult<Locale> {
    match query.lang.as_deref() {
        None | Some("es") => Ok(Locale::Es),
        Some("en") => Ok(Locale::En),
        Some(_) => Err(ApiError::bad_request("`lang` must be `es` or `en`.").param("lang")),
    }
}

async fn seller(state: &AppState, account: &AccountId) -> ApiResult<Account> {
    state
        .store
        .account(account)
        .await?
        .ok_or_else(|| ApiError::Internal("the caller's account is gone".into()))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CreditNoteListQuery {
    pub invoice_id: Option<String>,
    pub charge_id: Option<String>,
    /// Issued on or after this Colombian calendar day (`YYYY-MM-DD`, from its 00:00 −05:00).
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format = Date, example = "2026-11-01")]
    pub issued_from: Option<String>,
    /// Issued on or before this Colombian calendar day (`YYYY-MM-DD`, until its 24:00 −05:00).
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format = Date, example = "2026-11-30")]
    pub issued_to: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// The part of one invoice line a credit note gives back, split as the invoice's line is.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreditLineOut {
    /// The invoice line's position in its `lines` (0 first).
    pub invoice_line: usize,
    pub description: String,
    pub amount_cents: i64,
    #[schema(schema_with = super::openapi::schemas::tax_code)]
    pub tax_code: String,
    pub tax_rate_bps: i64,
    pub taxable_base_cents: i64,
    pub tax_cents: i64,
}

impl From<CreditLine> for CreditLineOut {
    fn from(line: CreditLine) -> Self {
        Self {
            invoice_line: line.invoice_line,
            description: line.description,
            amount_cents: line.amount_cents,
            tax_code: line.tax_code.as_str().to_owned(),
            tax_rate_bps: line.tax_rate_bps,
            taxable_base_cents: line.taxable_base_cents,
            tax_cents: line.tax_cents,
        }
    }
}

/// A credit note: one per approved refund, against the refunded charge's invoice.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "cn_0193a1fb2c3d7e4f8a5b6c7d8e9f0a1b",
    "number": "NC-1",
    "invoice_id": "in_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b",
    "refund_id": "re_0193a1fe5f6a7b7c8d8e9f0a1b2c3d4e",
    "charge_id": "ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f",
    "lines": [{
        "invoice_line": 0,
        "description": "Plan Pro",
        "amount_cents": 1000000,
        "tax_code": "iva_19",
        "tax_rate_bps": 1900,
        "taxable_base_cents": 840336,
        "tax_cents": 159664
    }],
    "subtotal_cents": 840336,
    "tax_cents": 159664,
    "total_cents": 1000000,
    "issued_at": "2026-11-25T10:00:00.120Z",
    "dian": null,
    "pdf_url": "https://billing.example.co/v1/credit-notes/cn_0193a1fb2c3d7e4f8a5b6c7d8e9f0a1b/pdf"
})))]
pub struct CreditNoteOut {
    pub id: String,
    /// With DIAN on, the DIAN number (`NC1`).
    pub number: String,
    pub invoice_id: String,
    pub refund_id: String,
    pub charge_id: String,
    pub lines: Vec<CreditLineOut>,
    pub subtotal_cents: i64,
    pub tax_cents: i64,
    /// The refund's amount.
    pub total_cents: i64,
    #[schema(format = DateTime)]
    pub issued_at: String,
    /// The electronic credit note's state with DIAN; null while DIAN is off.
    pub dian: Option<super::dian::CreditNoteDianOut>,
    /// The PDF, with the API key (`GET /v1/credit-notes/{id}/pdf`).
    pub pdf_url: String,
}

impl CreditNoteOut {
    /// `note` as the API answers it, its URL under `public_url`.
    pub(in crate::api) fn of(note: CreditNote, public_url: &str) -> Result<Self, ApiError> {
        let lines: Vec<CreditLine> =
            serde_json::from_str(&note.lines).map_err(|err| ApiError::Internal(Box::new(err)))?;
        Ok(Self {
            lines: lines.into_iter().map(CreditLineOut::from).collect(),
            issued_at: rfc3339(from_millis(note.issued_at)),
            pdf_url: format!("{public_url}/v1/credit-notes/{}/pdf", note.id),
            id: note.id.into_string(),
            number: note.number,
            invoice_id: note.invoice_id.into_string(),
            refund_id: note.refund_id.into_string(),
            charge_id: note.charge_id.into_string(),
            subtotal_cents: note.subtotal_cents,
            tax_cents: note.tax_cents,
            total_cents: note.total_cents,
            dian: None,
        })
    }

    /// With its electronic document: the DIAN number and the `dian` object.
    pub(in crate::api) fn with_dian(mut self, doc: Option<&DianDocument>) -> Self {
        if let Some(doc) = doc {
            if let Some(number) = &doc.number {
                self.number = number.clone();
            }
            self.dian = Some(super::dian::CreditNoteDianOut::of(doc));
        }
        self
    }
}

/// The account's credit notes, newest first; `issued_from` and `issued_to` keep those issued
/// in a range of Colombian calendar days (both included).
#[utoipa::path(get, path = "/v1/credit-notes", tag = "invoices", params(CreditNoteListQuery),
    responses((status = 200, body = ListOut<CreditNoteOut>), (status = 400, body = ErrorBody)))]
async fn list_credit_notes(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<CreditNoteListQuery>,
) -> ApiResult<Json<ListOut<CreditNoteOut>>> {
    let page = page_request(query.limit, query.cursor.clone())?;
    let filter = CreditNoteFilter {
        invoice_id: query.invoice_id.map(InvoiceId::given),
        charge_id: query.charge_id.map(ChargeAttemptId::given),
        issued: super::exports::issued_bounds(
            query.issued_from.as_deref(),
            query.issued_to.as_deref(),
        )?,
    };
    let account = caller.account_id();
    let page = state
        .store
        .list_credit_notes(account, &filter, &page)
        .await?;
    let ids: Vec<DocumentId> = page.items.iter().map(|n| n.id.clone().into()).collect();
    let docs = state.store.dian_documents(account, &ids).await?;
    let public_url = state.config.public_url();
    Ok(Json(ListOut::try_from_page(
        page,
        |n| n.id.to_string(),
        |note| {
            let doc = docs.get(&DocumentId::from(note.id.clone()));
            Ok::<_, ApiError>(CreditNoteOut::of(note, &public_url)?.with_dian(doc))
        },
    )?))
}

/// One credit note.
#[utoipa::path(get, path = "/v1/credit-notes/{id}", tag = "invoices",
    responses((status = 200, body = CreditNoteOut), (status = 404, body = ErrorBody)))]
async fn get_credit_note(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<CreditNoteOut>> {
    let id = CreditNoteId::given(id);
    let note = state
        .store
        .credit_note(caller.account_id(), &id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("No credit note with id `{id}`.")).param("id")
        })?;
    let id = DocumentId::from(id);
    let docs = state
        .store
        .dian_documents(caller.account_id(), std::slice::from_ref(&id))
        .await?;
    Ok(Json(
        CreditNoteOut::of(note, &state.config.public_url())?.with_dian(docs.get(&id)),
    ))
}
