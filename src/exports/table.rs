//! The CSV of an account's invoices and credit notes issued in a range of Colombian days
//! (`GET /v1/exports/invoices.csv`, CONTRACT §16): a header row, then one row per document in
//! issue order, columns `HEADER`. Amounts are pesos with a dot and two decimals
//! (`money::pesos`), `issued_at` is Colombian local time (`calendar::local_time`), and the
//! IVA is split by rate from the document's own sums: an invoice's `tax_breakdown`, a credit
//! note's lines. For both, `subtotal` is the taxable base of every line (exempt and excluded
//! included), so `subtotal + iva_19 + iva_5 = total` exactly (`Split`'s test), and
//! `exempt`, `excluded` are the parts of `subtotal` at those codes.
//!
//! Quoting is the `csv` crate's. Rows are written a page at a time (`PAGE`) into the sink.

use super::{ExportError, Issued, IssuedDocuments, Sink};
use crate::domain::calendar::{Window, local_time};
use crate::domain::money::{CURRENCY, pesos};
use crate::domain::tax::TaxCode;
use crate::domain::tax_id::nit_check_digit;
use crate::ids::{AccountId, DocumentId, InvoiceId};
use crate::store::Store;
use crate::store::credit_notes::{CreditLine, CreditNote};
use crate::store::invoices::{Invoice, Party, TaxEntry};
use crate::store::issued::DianSummary;
use std::collections::HashMap;

/// The columns, in order, as the header names them.
pub const HEADER: [&str; 18] = [
    "type",
    "number",
    "issued_at",
    "customer_name",
    "tax_id_type",
    "tax_id_number",
    "check_digit",
    "subtotal",
    "iva_19",
    "iva_5",
    "exempt",
    "excluded",
    "total",
    "currency",
    "dian_status",
    "cufe_or_cude",
    "invoice_number",
    "charge_id",
];

/// How many documents are read and written at a time.
pub const PAGE: usize = 500;

/// A document's amounts by IVA treatment, in cents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub subtotal: i64,
    pub iva_19: i64,
    pub iva_5: i64,
    pub exempt: i64,
    pub excluded: i64,
}

impl Split {
    /// The sums of `parts` (tax code, taxable base, IVA).
    pub fn of(parts: impl IntoIterator<Item = (TaxCode, i64, i64)>) -> Self {
        let mut split = Split::default();
        for (code, base, tax) in parts {
            split.subtotal += base;
            match code {
                TaxCode::Iva19 => split.iva_19 += tax,
                TaxCode::Iva5 => split.iva_5 += tax,
                TaxCode::IvaExempt => split.exempt += base,
                TaxCode::IvaExcluded => split.excluded += base,
            }
        }
        split
    }

    /// What the document comes to: its bases and its IVA.
    pub fn total(&self) -> i64 {
        self.subtotal + self.iva_19 + self.iva_5
    }
}

fn unreadable(id: impl ToString) -> impl FnOnce(serde_json::Error) -> ExportError {
    move |source| ExportError::Unreadable {
        id: id.to_string(),
        source,
    }
}

fn party_of(invoice: &Invoice) -> Result<Party, ExportError> {
    serde_json::from_str(&invoice.customer).map_err(unreadable(&invoice.id))
}

/// The number a document is known by: its DIAN number when it has one (none yet: empty), else
/// its own.
fn number_of(own: &str, dian: Option<&DianSummary>) -> String {
    match dian {
        Some(doc) => doc.number.clone().unwrap_or_default(),
        None => own.to_owned(),
    }
}

/// The customer's columns: the name printed on the document (the legal name when given), the
/// tax id's type and number, and a NIT's check digit.
fn customer_columns(party: &Party) -> [String; 4] {
    let check_digit = if party.tax_id.kind == "NIT" {
        nit_check_digit(&party.tax_id.number).map_or_else(String::new, |d| d.to_string())
    } else {
        String::new()
    };
    [
        as_text(party.legal_name.as_deref().unwrap_or(party.name.as_str())),
        as_text(&party.tax_id.kind),
        as_text(&party.tax_id.number),
        check_digit,
    ]
}

/// A customer's words as a spreadsheet's text: one that a spreadsheet would take for a formula
/// (it starts with `=`, `+`, `-`, `@`, a tab or a carriage return: OWASP's CSV injection) gets
/// a leading apostrophe, which Excel, LibreOffice and Google Sheets read as "text" and do not
/// show. Only the customer's fields: the amounts are ours and never negative.
fn as_text(value: &str) -> String {
    match value.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{value}"),
        _ => value.to_owned(),
    }
}

fn amount_columns(split: Split, total: i64) -> [String; 6] {
    [
        pesos(split.subtotal),
        pesos(split.iva_19),
        pesos(split.iva_5),
        pesos(split.exempt),
        pesos(split.excluded),
        pesos(total),
    ]
}

/// An invoice's row.
pub fn invoice_row(
    invoice: &Invoice,
    dian: Option<&DianSummary>,
) -> Result<Vec<String>, ExportError> {
    let entries: Vec<TaxEntry> =
        serde_json::from_str(&invoice.tax_breakdown).map_err(unreadable(&invoice.id))?;
    let split = Split::of(
        entries
            .iter()
            .map(|e| (e.tax_code, e.taxable_base_cents, e.tax_cents)),
    );
    let mut row = vec![
        "invoice".to_owned(),
        number_of(&invoice.number, dian),
        local_time(invoice.issued_at),
    ];
    row.extend(customer_columns(&party_of(invoice)?));
    row.extend(amount_columns(split, invoice.total_cents));
    row.extend([
        CURRENCY.to_owned(),
        dian.map_or_else(String::new, |d| d.status.as_str().to_owned()),
        dian.and_then(|d| d.unique_code.clone()).unwrap_or_default(),
        String::new(),
        invoice
            .charge_id
            .as_ref()
            .map_or_else(String::new, |id| id.to_string()),
    ]);
    Ok(row)
}

/// A credit note's row: its customer is its invoice's, named in `invoice_number`.
pub fn credit_note_row(
    note: &CreditNote,
    dian: Option<&DianSummary>,
    invoice: &Invoice,
    invoice_dian: Option<&DianSummary>,
) -> Result<Vec<String>, ExportError> {
    let lines: Vec<CreditLine> = serde_json::from_str(&note.lines).map_err(unreadable(&note.id))?;
    let split = Split::of(
        lines
            .iter()
            .map(|l| (l.tax_code, l.taxable_base_cents, l.tax_cents)),
    );
    let mut row = vec![
        "credit_note".to_owned(),
        number_of(&note.number, dian),
        local_time(note.issued_at),
    ];
    row.extend(customer_columns(&party_of(invoice)?));
    row.extend(amount_columns(split, note.total_cents));
    row.extend([
        CURRENCY.to_owned(),
        dian.map_or_else(String::new, |d| d.status.as_str().to_owned()),
        dian.and_then(|d| d.unique_code.clone()).unwrap_or_default(),
        number_of(&invoice.number, invoice_dian),
        note.charge_id.to_string(),
    ]);
    Ok(row)
}

/// The rows of `batch`, read with what they need: the electronic documents of the batch and of
/// its credit notes' invoices, and those invoices.
async fn rows_of(
    store: &Store,
    account: &AccountId,
    batch: &[Issued],
) -> Result<Vec<Vec<String>>, ExportError> {
    let invoice_ids: Vec<InvoiceId> = batch
        .iter()
        .filter_map(|doc| match doc {
            Issued::CreditNote(note) => Some(note.invoice_id.clone()),
            Issued::Invoice(_) => None,
        })
        .collect();
    let invoices: HashMap<InvoiceId, Invoice> =
        store.invoices_by_ids(account, &invoice_ids).await?;
    let mut ids: Vec<DocumentId> = invoice_ids.into_iter().map(DocumentId::from).collect();
    ids.extend(batch.iter().map(|doc| match doc {
        Issued::Invoice(invoice) => DocumentId::from(invoice.id.clone()),
        Issued::CreditNote(note) => DocumentId::from(note.id.clone()),
    }));
    let dian = store.dian_summaries(account, &ids).await?;
    batch
        .iter()
        .map(|doc| match doc {
            Issued::Invoice(invoice) => {
                invoice_row(invoice, dian.get(&DocumentId::from(invoice.id.clone())))
            }
            Issued::CreditNote(note) => {
                let invoice = invoices
                    .get(&note.invoice_id)
                    .ok_or_else(|| ExportError::Orphan(note.id.clone()))?;
                credit_note_row(
                    note,
                    dian.get(&DocumentId::from(note.id.clone())),
                    invoice,
                    dian.get(&DocumentId::from(invoice.id.clone())),
                )
            }
        })
        .collect()
}

/// `records` as CSV bytes (the `csv` crate's quoting: a field with a comma, a quote or a line
/// break is quoted, its quotes doubled).
fn csv_bytes<'a>(records: impl IntoIterator<Item = &'a [String]>) -> Result<Vec<u8>, ExportError> {
    let mut writer = ::csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    for record in records {
        writer.write_record(record)?;
    }
    writer
        .into_inner()
        .map_err(|err| ExportError::Csv(err.into_error().into()))
}

/// Writes the CSV of `account`'s documents issued in `window` into `sink`, a page at a time,
/// until the last or until the client goes away.
pub async fn write(
    store: Store,
    account: AccountId,
    window: Window,
    sink: Sink,
) -> Result<(), ExportError> {
    let header: Vec<String> = HEADER.iter().map(|name| (*name).to_owned()).collect();
    let mut chunk = csv_bytes([header.as_slice()])?;
    let mut documents = IssuedDocuments::new(store.clone(), account.clone(), window, PAGE as u64);
    loop {
        let batch = documents.next_batch(PAGE).await?;
        if batch.is_empty() {
            break;
        }
        let rows = rows_of(&store, &account, &batch).await?;
        chunk.extend(csv_bytes(rows.iter().map(Vec::as_slice))?);
        if sink.send(Ok(std::mem::take(&mut chunk))).await.is_err() {
            return Ok(());
        }
    }
    if !chunk.is_empty() {
        let _gone = sink.send(Ok(chunk)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_split_puts_each_code_in_its_column() {
        let split = Split::of([
            (TaxCode::Iva19, 2_521_008, 478_992),
            (TaxCode::Iva5, 952_381, 47_619),
            (TaxCode::IvaExempt, 10_000, 0),
            (TaxCode::IvaExcluded, 1_000_001, 0),
        ]);
        assert_eq!(
            split,
            Split {
                subtotal: 2_521_008 + 952_381 + 10_000 + 1_000_001,
                iva_19: 478_992,
                iva_5: 47_619,
                exempt: 10_000,
                excluded: 1_000_001,
            }
        );
        assert_eq!(split.total(), 3_000_000 + 1_000_000 + 10_000 + 1_000_001);
    }

    proptest! {
        /// Lines split by the contract's rule add up: subtotal + IVA 19 + IVA 5 is what the
        /// lines cost, whatever their codes.
        #[test]
        fn subtotal_and_iva_make_the_total(lines in proptest::collection::vec((0usize..4, 0i64..100_000_000), 0..8)) {
            let codes = [TaxCode::Iva19, TaxCode::Iva5, TaxCode::IvaExempt, TaxCode::IvaExcluded];
            let parts: Vec<(TaxCode, i64, i64)> = lines.iter().map(|(code, amount)| {
                let split = codes[*code].split(*amount);
                (codes[*code], split.base, split.tax)
            }).collect();
            let split = Split::of(parts);
            prop_assert_eq!(split.total(), lines.iter().map(|(_, amount)| amount).sum::<i64>());
            prop_assert!(split.exempt + split.excluded <= split.subtotal);
        }
    }

    #[test]
    fn fields_with_commas_quotes_or_lines_are_quoted() {
        let row = vec![
            "invoice".to_owned(),
            "Núñez & Cía, S.A.S.".to_owned(),
            "say \"hola\"".to_owned(),
            "two\nlines".to_owned(),
        ];
        let bytes = csv_bytes([row.as_slice()]).expect("csv");
        assert_eq!(
            String::from_utf8(bytes).expect("utf-8"),
            "invoice,\"Núñez & Cía, S.A.S.\",\"say \"\"hola\"\"\",\"two\nlines\"\n"
        );
    }
}

#[cfg(test)]
mod formula_tests {
    use super::as_text;

    #[test]
    fn a_customers_name_a_spreadsheet_would_run_is_kept_as_text() {
        assert_eq!(
            as_text("=HYPERLINK(\"http://x\")"),
            "'=HYPERLINK(\"http://x\")"
        );
        assert_eq!(as_text("+57 300"), "'+57 300");
        assert_eq!(as_text("-1"), "'-1");
        assert_eq!(as_text("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(as_text("Ana Gómez"), "Ana Gómez");
        assert_eq!(as_text(""), "");
    }
}
