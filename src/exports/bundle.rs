//! The ZIP of an account's documents of one Colombian month (`GET
//! /v1/exports/documents.zip`, CONTRACT §16): every invoice and credit note issued in it, in
//! issue order, as its PDF (`invoices/<number>.pdf`, `credit-notes/<number>.pdf`, the same
//! bytes `GET /v1/invoices/{id}/pdf` answers in Spanish) and, when it has an electronic
//! document, its signed XML (`<number>.xml`, exactly as sent to DIAN) and, for an invoice DIAN
//! accepted, its AttachedDocument (`<number>-attached.xml`, as
//! `GET /v1/invoices/{id}/attached-document` answers). DIAN defines no AttachedDocument for a
//! credit note here (the API has none either).
//!
//! One document at a time: its rows are read with its page (`PAGE`), then its PDF is drawn,
//! its AttachedDocument written and its files added to the archive in one task on the blocking
//! pool (`tokio::task::spawn_blocking`, as the PDF endpoint draws), which hands the archive
//! back with the bytes to send. The sink's bound stalls the next document until the client
//! has read the earlier ones.

use super::archive::{Archive, Method};
use super::{ExportError, Issued, IssuedDocuments, Sink};
use crate::dian::attached::{Accepted, attached_document};
use crate::documents::sheet::Sheet;
use crate::documents::text::Locale;
use crate::domain::calendar::Window;
use crate::domain::dian::COLOMBIA;
use crate::domain::time::from_millis;
use crate::ids::{AccountId, DocumentId, InvoiceId, NumberingRangeId};
use crate::store::Store;
use crate::store::accounts::Account;
use crate::store::dian::documents::{AttachedParts, attached_parts_of};
use crate::store::dian::{DianDocument, DianRange};
use crate::store::invoices::Invoice;
use chrono::NaiveDateTime;
use std::collections::HashMap;

/// How many documents' rows are read at a time: their signed XML and DIAN's answers come with
/// them, tens of kilobytes each.
pub const PAGE: usize = 20;

/// One document ready to draw: its sheet, its files' folder and the XMLs that go beside its
/// PDF.
struct Ready {
    folder: &'static str,
    sheet: Sheet,
    signed_xml: Option<String>,
    attached: Option<AttachedParts>,
    modified: NaiveDateTime,
}

/// The rows a page of documents needs, read once for the page.
struct PageRows {
    /// The electronic documents of the page and of its credit notes' invoices.
    dian: HashMap<DocumentId, DianDocument>,
    /// Its credit notes' invoices.
    invoices: HashMap<InvoiceId, Invoice>,
}

async fn page_rows(
    store: &Store,
    account: &AccountId,
    batch: &[Issued],
) -> Result<PageRows, ExportError> {
    let invoice_ids: Vec<InvoiceId> = batch
        .iter()
        .filter_map(|doc| match doc {
            Issued::CreditNote(note) => Some(note.invoice_id.clone()),
            Issued::Invoice(_) => None,
        })
        .collect();
    let invoices = store.invoices_by_ids(account, &invoice_ids).await?;
    let mut ids: Vec<DocumentId> = invoice_ids.into_iter().map(DocumentId::from).collect();
    ids.extend(batch.iter().map(|doc| match doc {
        Issued::Invoice(invoice) => DocumentId::from(invoice.id.clone()),
        Issued::CreditNote(note) => DocumentId::from(note.id.clone()),
    }));
    let dian = store.dian_documents(account, &ids).await?;
    Ok(PageRows { dian, invoices })
}

/// The local time a file of the archive says it was modified: when its document was issued,
/// in Colombia.
fn modified(issued_at: i64) -> NaiveDateTime {
    from_millis(issued_at)
        .with_timezone(&COLOMBIA)
        .naive_local()
}

/// `doc` ready to draw, with its sheet made electronic when it has a DIAN document.
fn ready(
    doc: Issued,
    seller: &Account,
    rows: &mut PageRows,
    ranges: &HashMap<NumberingRangeId, DianRange>,
) -> Result<Ready, ExportError> {
    match doc {
        Issued::Invoice(invoice) => {
            let sheet = Sheet::of_invoice(&invoice, seller, Locale::Es)?;
            // Cloned, not taken: a credit note of the same page names this invoice's number.
            let Some(row) = rows
                .dian
                .get(&DocumentId::from(invoice.id.clone()))
                .cloned()
            else {
                return Ok(Ready {
                    folder: "invoices",
                    sheet,
                    signed_xml: None,
                    attached: None,
                    modified: modified(invoice.issued_at),
                });
            };
            let range = row.range_id.as_ref().and_then(|id| ranges.get(id)).cloned();
            let sheet = sheet.electronic_invoice(&row, range.as_ref());
            let signed_xml = row.xml.clone();
            let attached = attached_parts_of(&invoice, row, range)?;
            Ok(Ready {
                folder: "invoices",
                sheet,
                signed_xml,
                attached: Some(attached),
                modified: modified(invoice.issued_at),
            })
        }
        Issued::CreditNote(note) => {
            let invoice = rows
                .invoices
                .get(&note.invoice_id)
                .ok_or_else(|| ExportError::Orphan(note.id.clone()))?;
            let sheet = Sheet::of_credit_note(&note, invoice, seller, Locale::Es)?;
            let invoice_doc = rows.dian.get(&DocumentId::from(invoice.id.clone()));
            let (sheet, signed_xml) = match rows.dian.get(&DocumentId::from(note.id.clone())) {
                Some(row) => (
                    sheet.electronic_credit_note(row, invoice_doc),
                    row.xml.clone(),
                ),
                None => (sheet, None),
            };
            Ok(Ready {
                folder: "credit-notes",
                sheet,
                signed_xml,
                attached: None,
                modified: modified(note.issued_at),
            })
        }
    }
}

/// Draws `ready`'s PDF and adds its files to `archive`: the bytes to send. CPU-bound: runs on
/// the blocking pool.
fn draw(archive: &mut Archive, ready: Ready) -> Result<Vec<u8>, ExportError> {
    let pdf = crate::documents::pdf::render(&ready.sheet)?;
    let stem = format!("{}/{}", ready.folder, ready.sheet.file_stem);
    let mut bytes = archive.add(&format!("{stem}.pdf"), &pdf, Method::Stored, ready.modified)?;
    if let Some(xml) = &ready.signed_xml {
        bytes.extend(archive.add(
            &format!("{stem}.xml"),
            xml.as_bytes(),
            Method::Deflated,
            ready.modified,
        )?);
    }
    if let Some(AttachedParts::Ready {
        document,
        signed_xml,
        application_response,
        accepted_at,
    }) = &ready.attached
    {
        let container = attached_document(&Accepted {
            document: document.as_ref(),
            signed_xml,
            application_response,
            accepted_at: from_millis(*accepted_at),
        });
        bytes.extend(archive.add(
            &format!("{stem}-attached.xml"),
            container.as_bytes(),
            Method::Deflated,
            ready.modified,
        )?);
    }
    Ok(bytes)
}

/// Writes the ZIP of `account`'s documents issued in `window` into `sink`, one document at a
/// time, until the last (then the archive's directory) or until the client goes away.
pub async fn write(
    store: Store,
    seller: Account,
    window: Window,
    sink: Sink,
) -> Result<(), ExportError> {
    let account = seller.id.clone();
    let ranges: HashMap<NumberingRangeId, DianRange> = store
        .dian_ranges(&account)
        .await?
        .into_iter()
        .map(|range| (range.id.clone(), range))
        .collect();
    let mut documents = IssuedDocuments::new(store.clone(), account.clone(), window, PAGE as u64);
    let mut archive = Archive::new();
    loop {
        let batch = documents.next_batch(PAGE).await?;
        if batch.is_empty() {
            break;
        }
        let mut rows = page_rows(&store, &account, &batch).await?;
        for doc in batch {
            let ready = ready(doc, &seller, &mut rows, &ranges)?;
            let (back, drawn) = tokio::task::spawn_blocking(move || {
                let drawn = draw(&mut archive, ready);
                (archive, drawn)
            })
            .await?;
            archive = back;
            if sink.send(Ok(drawn?)).await.is_err() {
                return Ok(());
            }
        }
    }
    let tail = tokio::task::spawn_blocking(move || archive.finish()).await?;
    let _gone = sink.send(Ok(tail)).await;
    Ok(())
}
