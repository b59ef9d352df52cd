//! The accountant's exports (CONTRACT §16, [docs/revenue.md](../../docs/revenue.md#exports)):
//! `table`, the CSV of every invoice and credit note issued in a range of Colombian days, and
//! `bundle`, the ZIP of a Colombian month's documents (PDFs; with DIAN their signed XML and
//! AttachedDocument), written by `archive` as it goes.
//!
//! Both read the documents in issue order through `IssuedDocuments`, which merges the two tables' keyset
//! pages (`store::issued`): only a page of each is held at a time, whatever the range holds.
//! Both write into a bounded channel (`Sink`) that the HTTP layer turns into the response's
//! body, so a client that stops reading stalls only its own producer, at its next send, and
//! one that goes away ends it. Nothing here names axum; the API's handlers are `api::exports`.

pub mod archive;
pub mod bundle;
pub mod table;

use crate::domain::calendar::Window;
use crate::ids::{AccountId, CreditNoteId, InvoiceId};
use crate::store::credit_notes::CreditNote;
use crate::store::invoices::Invoice;
use crate::store::{Store, StoreError};
use std::collections::VecDeque;

/// Where an export's bytes go: the response's body, a chunk at a time. A send that fails means
/// the client went away.
pub type Sink = tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>;

/// How many chunks may wait between a producer and its client: a stalled client holds at most
/// this many (each a page of CSV rows or one document's files).
pub const CHANNEL_CHUNKS: usize = 4;

/// Why an export stopped before its end (logged; the client sees its body cut short).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("document {id} does not read back: {source}")]
    Unreadable {
        id: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("credit note {0} without its invoice")]
    Orphan(CreditNoteId),
    #[error("writing the CSV failed")]
    Csv(#[from] ::csv::Error),
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    #[error(transparent)]
    Sheet(#[from] crate::documents::sheet::Unreadable),
    #[error(transparent)]
    Render(#[from] crate::documents::pdf::RenderError),
    #[error("a document's rendering task failed")]
    Task(#[from] tokio::task::JoinError),
}

/// One document of an export.
#[derive(Clone, Debug)]
pub enum Issued {
    Invoice(Invoice),
    CreditNote(CreditNote),
}

/// An account's invoices and credit notes issued in a window, in issue order, read a page of
/// each table at a time.
pub struct IssuedDocuments {
    store: Store,
    account: AccountId,
    window: Window,
    page: u64,
    invoices: VecDeque<Invoice>,
    notes: VecDeque<CreditNote>,
    invoice_after: Option<(i64, InvoiceId)>,
    note_after: Option<(i64, CreditNoteId)>,
    invoices_done: bool,
    notes_done: bool,
}

impl IssuedDocuments {
    /// `account`'s documents issued in `window`, read `page` rows of a table at a time.
    pub fn new(store: Store, account: AccountId, window: Window, page: u64) -> Self {
        Self {
            store,
            account,
            window,
            page: page.max(1),
            invoices: VecDeque::new(),
            notes: VecDeque::new(),
            invoice_after: None,
            note_after: None,
            invoices_done: false,
            notes_done: false,
        }
    }

    async fn refill(&mut self) -> Result<(), StoreError> {
        if self.invoices.is_empty() && !self.invoices_done {
            let rows = self
                .store
                .invoices_issued(
                    &self.account,
                    self.window,
                    self.invoice_after.as_ref(),
                    self.page,
                )
                .await?;
            self.invoices_done = (rows.len() as u64) < self.page;
            self.invoice_after = rows.last().map(|last| (last.issued_at, last.id.clone()));
            self.invoices.extend(rows);
        }
        if self.notes.is_empty() && !self.notes_done {
            let rows = self
                .store
                .credit_notes_issued(
                    &self.account,
                    self.window,
                    self.note_after.as_ref(),
                    self.page,
                )
                .await?;
            self.notes_done = (rows.len() as u64) < self.page;
            self.note_after = rows.last().map(|last| (last.issued_at, last.id.clone()));
            self.notes.extend(rows);
        }
        Ok(())
    }

    /// The next document in issue order, or `None` after the last.
    pub async fn next(&mut self) -> Result<Option<Issued>, StoreError> {
        self.refill().await?;
        let invoice_first = match (self.invoices.front(), self.notes.front()) {
            (None, None) => return Ok(None),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            // Issue order: the instant, then an invoice before a credit note, then the id.
            (Some(invoice), Some(note)) => {
                (invoice.issued_at, 0u8, invoice.id.as_str())
                    <= (note.issued_at, 1u8, note.id.as_str())
            }
        };
        Ok(if invoice_first {
            self.invoices.pop_front().map(Issued::Invoice)
        } else {
            self.notes.pop_front().map(Issued::CreditNote)
        })
    }

    /// Up to `n` next documents, in issue order (empty after the last).
    pub async fn next_batch(&mut self, n: usize) -> Result<Vec<Issued>, StoreError> {
        let mut batch = Vec::with_capacity(n);
        while batch.len() < n {
            match self.next().await? {
                Some(document) => batch.push(document),
                None => break,
            }
        }
        Ok(batch)
    }
}
