//! The electronic document on what a customer is handed (CONTRACT §12): the "representación
//! gráfica" of an invoice or credit note issued while DIAN was on. Its `dian_documents` row
//! turns a `Sheet` into an electronic one: the title ("Factura electrónica de venta", "Nota
//! crédito electrónica"), the DIAN number (or that it awaits one), the CUFE or CUDE, the URL
//! its QR code carries (the API's `qr_url`, from the same `Environment::qr_url`) and, for an
//! invoice, its range's numbering authorisation. A document without a row is left as it was.
//!
//! `invoice_sheet` and `credit_note_sheet` read what a sheet needs; the PDF's and the hosted
//! page's handlers (`api::invoices`, `page`) all go through them, so they never disagree.

use super::sheet::{Electronic, Sheet, Unreadable};
use super::text::{self, Locale};
use crate::ids::DocumentId;
use crate::store::accounts::{Account, Seller};
use crate::store::credit_notes::CreditNote;
use crate::store::dian::{DianDocument, DianRange};
use crate::store::invoices::Invoice;
use crate::store::{Store, StoreError};

/// A sheet that could not be drawn: its rows did not read back, or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum SheetError {
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Sheet {
    /// `self` (an invoice's sheet) as the electronic invoice `doc`, numbered from `range`.
    pub fn electronic_invoice(mut self, doc: &DianDocument, range: Option<&DianRange>) -> Self {
        let t = self.t;
        self.heading = t.electronic_invoice.to_owned();
        self.electronic(doc, "CUFE");
        if let (Some(range), Some(dian)) = (range, self.dian.as_mut()) {
            dian.authorization = Some(authorization(range, self.locale));
        }
        self
    }

    /// `self` (a credit note's sheet) as the electronic credit note `doc`, of the invoice
    /// whose document is `invoice_doc` (named by its DIAN number when it has one).
    pub fn electronic_credit_note(
        mut self,
        doc: &DianDocument,
        invoice_doc: Option<&DianDocument>,
    ) -> Self {
        let t = self.t;
        self.heading = t.electronic_credit_note.to_owned();
        if let Some(number) = invoice_doc.and_then(|doc| doc.number.as_deref()) {
            self.reference = Some(format!("{} {number}", t.against_invoice));
        }
        self.electronic(doc, "CUDE");
        self
    }

    fn electronic(&mut self, doc: &DianDocument, code_label: &'static str) {
        let t = self.t;
        // The seller as the document was numbered and signed (its issuer), not as the row
        // or the account says: the printed representation shows what DIAN received.
        if let Ok(issuer) = serde_json::from_str::<Seller>(&doc.issuer) {
            self.seller = super::sheet::seller_lines(issuer, &self.seller.name);
        }
        match &doc.number {
            Some(number) => {
                // The electronic document's issue date (a document numbered after waiting for
                // a range, or re-dated when signed, is issued later than its invoice).
                self.issued_on = super::sheet::date(doc.issued_at, self.locale);
                self.number = number.clone();
                self.file_stem = number.clone();
                self.title = format!("{} {number}", self.heading);
            }
            None => {
                self.number = t.awaiting_number.to_owned();
                self.title = format!("{} · {}", self.heading, t.awaiting_number);
            }
        }
        self.dian = Some(Electronic {
            code_label,
            qr_url: doc
                .unique_code
                .as_deref()
                .map(|code| doc.environment.qr_url(code)),
            code: doc.unique_code.clone(),
            authorization: None,
            numbered: doc.number.is_some(),
        });
    }
}

/// A range's authorisation as Colombian invoices print it, its dates as DIAN writes them.
pub fn authorization(range: &DianRange, locale: Locale) -> String {
    let (resolution, prefix, from, to) = (
        &range.resolution_number,
        &range.prefix,
        range.range_from,
        range.range_to,
    );
    let (valid_from, valid_to) = (&range.valid_from, &range.valid_to);
    match locale {
        Locale::Es => format!(
            "Autorización de numeración de facturación DIAN No. {resolution} del {valid_from}, \
             prefijo {prefix} del {from} al {to}, vigencia hasta {valid_to}"
        ),
        Locale::En => format!(
            "DIAN invoice numbering authorisation No. {resolution} of {valid_from}, \
             prefix {prefix} from {from} to {to}, valid until {valid_to}"
        ),
    }
}

/// `invoice`'s sheet in `locale`, electronic when DIAN numbered (or is to number) it.
pub async fn invoice_sheet(
    store: &Store,
    invoice: &Invoice,
    account: &Account,
    locale: Locale,
) -> Result<Sheet, SheetError> {
    let sheet = Sheet::of_invoice(invoice, account, locale)?;
    let id = DocumentId::from(invoice.id.clone());
    let docs = store
        .dian_documents(&invoice.account_id, std::slice::from_ref(&id))
        .await?;
    let Some(doc) = docs.get(&id) else {
        return Ok(sheet);
    };
    let range = match &doc.range_id {
        Some(range) => store.dian_range(&invoice.account_id, range).await?,
        None => None,
    };
    Ok(sheet.electronic_invoice(doc, range.as_ref()))
}

/// `note`'s sheet (it credits `invoice`) in `locale`, electronic when it has a DIAN row.
pub async fn credit_note_sheet(
    store: &Store,
    note: &CreditNote,
    invoice: &Invoice,
    account: &Account,
    locale: Locale,
) -> Result<Sheet, SheetError> {
    let sheet = Sheet::of_credit_note(note, invoice, account, locale)?;
    let note_id = DocumentId::from(note.id.clone());
    let invoice_id = DocumentId::from(invoice.id.clone());
    let docs = store
        .dian_documents(&note.account_id, &[note_id.clone(), invoice_id.clone()])
        .await?;
    Ok(match docs.get(&note_id) {
        Some(doc) => sheet.electronic_credit_note(doc, docs.get(&invoice_id)),
        None => sheet,
    })
}

/// The number a list shows for a document: its DIAN number, that it awaits one, or (DIAN
/// off when it was issued) its own.
pub fn listed_number(own: &str, doc: Option<&DianDocument>, locale: Locale) -> String {
    match doc {
        Some(doc) => doc
            .number
            .clone()
            .unwrap_or_else(|| text::of(locale).awaiting_number.to_owned()),
        None => own.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AccountId, NumberingRangeId};

    #[test]
    fn the_authorisation_reads_as_dian_prints_it() {
        let range = DianRange {
            id: NumberingRangeId::generate(),
            account_id: AccountId::given("acct_x"),
            resolution_number: "18760000001".into(),
            prefix: "SETP".into(),
            range_from: 990_000_000,
            range_to: 995_000_000,
            valid_from: "2019-01-19".into(),
            valid_to: "2030-01-19".into(),
            technical_key: String::from("fc8eac422eba16e22ffd8c6f94b3f40a6e38162c").into(),
            next_number: 990_000_000,
            created_at: 0,
        };
        assert_eq!(
            authorization(&range, Locale::Es),
            "Autorización de numeración de facturación DIAN No. 18760000001 del 2019-01-19, \
             prefijo SETP del 990000000 al 995000000, vigencia hasta 2030-01-19"
        );
        assert_eq!(
            authorization(&range, Locale::En),
            "DIAN invoice numbering authorisation No. 18760000001 of 2019-01-19, prefix SETP \
             from 990000000 to 995000000, valid until 2030-01-19"
        );
    }
}

/// Why an invoice has no AttachedDocument to give.
#[derive(Debug)]
pub enum NotAttached {
    /// No such invoice of the account.
    NoInvoice,
    /// DIAN was off when it was issued.
    NoDocument,
    /// DIAN has not accepted it (yet): its status.
    NotAccepted(crate::domain::dian::DianStatus),
    /// Accepted before DIAN's ApplicationResponse was kept (migration 000022).
    NoResponse,
}

/// The AttachedDocument of `account`'s invoice `id` (CONTRACT §12a): the signed invoice as DIAN
/// accepted it and DIAN's ApplicationResponse, in the container the buyer receives. The API,
/// the hosted invoice and the receipt all give this one.
pub async fn attached_document(
    store: &Store,
    account: &crate::ids::AccountId,
    id: &crate::ids::InvoiceId,
) -> Result<Result<String, NotAttached>, StoreError> {
    use crate::store::dian::documents::AttachedParts;
    let Some(parts) = store.dian_attached_parts(account, id).await? else {
        return Ok(Err(NotAttached::NoInvoice));
    };
    Ok(match parts {
        AttachedParts::Ready {
            document,
            signed_xml,
            application_response,
            accepted_at,
        } => Ok(crate::dian::attached::attached_document(
            &crate::dian::attached::Accepted {
                document: &document,
                signed_xml: &signed_xml,
                application_response: &application_response,
                accepted_at: crate::domain::time::from_millis(accepted_at),
            },
        )),
        AttachedParts::NoDocument => Err(NotAttached::NoDocument),
        AttachedParts::NotAccepted(status) => Err(NotAttached::NotAccepted(status)),
        AttachedParts::NoResponse => Err(NotAttached::NoResponse),
    })
}
