//! `Sheet`: an invoice or a credit note as a person reads it, in one language, every amount and
//! date already written out; what both the PDF (`pdf`) and the hosted page (`page`) show, so
//! the two never disagree.

use super::text::{self, DocText, Locale};
use crate::domain::money::group_cents;
use crate::domain::tax::TaxCode;
use crate::store::accounts::{Account, Seller};
use crate::store::credit_notes::{CreditLine, CreditNote};
use crate::store::invoices::{Invoice, InvoiceLine, Party, TaxEntry};
use chrono::{Datelike, FixedOffset, TimeZone, Timelike};

/// Colombia's time (UTC−5 all year, no daylight saving): an invoice is dated where it is sold.
const BOGOTA_OFFSET_SECS: i32 = -5 * 3_600;

/// Whose document it is, and who it is made out to, one printable line each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartyLines {
    pub name: String,
    /// "NIT 900.123.456-8", "CC 1.020.304.050".
    pub id_line: String,
    pub address_line: Option<String>,
    pub email: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SheetLine {
    pub description: String,
    /// "1 nov 2026 – 1 dic 2026", or empty.
    pub period: String,
    pub quantity: i64,
    pub base: String,
    /// "19 %", "Exento", "Excluido".
    pub rate: String,
    pub tax: String,
    pub amount: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SheetTax {
    /// "IVA 19 %", "Excluido".
    pub label: String,
    pub base: String,
    pub tax: String,
}

/// A document, ready to print.
#[derive(Clone, Debug)]
pub struct Sheet {
    pub locale: Locale,
    pub t: &'static DocText,
    /// "Factura de venta", "Nota crédito"; electronic: "Factura electrónica de venta".
    pub heading: String,
    /// "Factura de venta FV-12", "Nota crédito NC-3".
    pub title: String,
    /// The number printed: its own (`FV-12`), or with DIAN its DIAN number (`SETP990000001`)
    /// or that it awaits one.
    pub number: String,
    /// The PDF's file name, without `.pdf`: a number, never the words of one awaited.
    pub file_stem: String,
    /// "26 de noviembre de 2026".
    pub issued_on: String,
    /// A credit note's invoice: "Sobre la factura FV-12".
    pub reference: Option<String>,
    pub seller: PartyLines,
    pub customer: PartyLines,
    pub lines: Vec<SheetLine>,
    pub breakdown: Vec<SheetTax>,
    pub subtotal: String,
    pub tax: String,
    pub total: String,
    /// With DIAN (CONTRACT §12): the electronic document (`electronic`).
    pub dian: Option<Electronic>,
}

/// What DIAN makes of a document, ready to print (filled in by `electronic`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Electronic {
    /// "CUFE" (an invoice) or "CUDE" (a credit note).
    pub code_label: &'static str,
    /// The CUFE or CUDE in full (96 hex digits); `None` while the invoice awaits a range.
    pub code: Option<String>,
    /// DIAN's page of the document: what the QR code encodes, exactly as the API answers it.
    pub qr_url: Option<String>,
    /// An invoice's numbering authorisation: "Autorización de numeración de facturación DIAN
    /// No. 18760000001 del 2019-01-19, prefijo SETP del 990000000 al 995000000, vigencia
    /// hasta 2030-01-19".
    pub authorization: Option<String>,
    /// Numbered yet? `false` while the invoice awaits a range.
    pub numbered: bool,
}

/// A stored document that does not read back (its JSON broken): never shown half.
#[derive(Debug, thiserror::Error)]
#[error("document {id} does not read back: {source}")]
pub struct Unreadable {
    id: String,
    source: serde_json::Error,
}

impl Sheet {
    /// `invoice` of `account`'s seller, in `locale`.
    pub fn of_invoice(
        invoice: &Invoice,
        account: &Account,
        locale: Locale,
    ) -> Result<Self, Unreadable> {
        let unreadable = |source| Unreadable {
            id: invoice.id.to_string(),
            source,
        };
        let lines: Vec<InvoiceLine> = serde_json::from_str(&invoice.lines).map_err(unreadable)?;
        let entries: Vec<TaxEntry> =
            serde_json::from_str(&invoice.tax_breakdown).map_err(unreadable)?;
        let party: Party = serde_json::from_str(&invoice.customer).map_err(unreadable)?;
        let t = text::of(locale);
        Ok(Self {
            locale,
            t,
            heading: t.invoice.to_owned(),
            title: format!("{} {}", t.invoice, invoice.number),
            number: invoice.number.clone(),
            file_stem: invoice.number.clone(),
            issued_on: date(invoice.issued_at, locale),
            reference: None,
            seller: seller(invoice.seller.as_deref(), account),
            customer: customer(&party, locale),
            lines: lines
                .iter()
                .map(|line| SheetLine {
                    description: line.line.description.clone(),
                    period: period(line.line.period_start, line.line.period_end, locale),
                    quantity: line.line.quantity,
                    base: money(line.taxable_base_cents, locale),
                    rate: rate(line.line.tax_code, locale),
                    tax: money(line.tax_cents, locale),
                    amount: money(line.line.amount_cents, locale),
                })
                .collect(),
            breakdown: entries
                .iter()
                .map(|entry| SheetTax {
                    label: tax_label(entry.tax_code, locale),
                    base: money(entry.taxable_base_cents, locale),
                    tax: money(entry.tax_cents, locale),
                })
                .collect(),
            subtotal: money(invoice.subtotal_cents, locale),
            tax: money(invoice.tax_cents, locale),
            total: money(invoice.total_cents, locale),
            dian: None,
        })
    }

    /// `note`, which credits `invoice`, in `locale`.
    pub fn of_credit_note(
        note: &CreditNote,
        invoice: &Invoice,
        account: &Account,
        locale: Locale,
    ) -> Result<Self, Unreadable> {
        let unreadable = |source| Unreadable {
            id: note.id.to_string(),
            source,
        };
        let lines: Vec<CreditLine> = serde_json::from_str(&note.lines).map_err(unreadable)?;
        let party: Party = serde_json::from_str(&invoice.customer).map_err(unreadable)?;
        let t = text::of(locale);
        // The breakdown of what is credited, one entry per tax code, in the order of the
        // codes' first lines (as an invoice's).
        let mut breakdown: Vec<(TaxCode, i64, i64)> = Vec::new();
        for line in &lines {
            match breakdown
                .iter_mut()
                .find(|(code, _, _)| *code == line.tax_code)
            {
                Some((_, base, tax)) => {
                    *base += line.taxable_base_cents;
                    *tax += line.tax_cents;
                }
                None => breakdown.push((line.tax_code, line.taxable_base_cents, line.tax_cents)),
            }
        }
        Ok(Self {
            locale,
            t,
            heading: t.credit_note.to_owned(),
            title: format!("{} {}", t.credit_note, note.number),
            number: note.number.clone(),
            file_stem: note.number.clone(),
            issued_on: date(note.issued_at, locale),
            reference: Some(format!("{} {}", t.against_invoice, invoice.number)),
            seller: seller(note.seller.as_deref(), account),
            customer: customer(&party, locale),
            lines: lines
                .iter()
                .map(|line| SheetLine {
                    description: line.description.clone(),
                    period: String::new(),
                    quantity: 1,
                    base: money(line.taxable_base_cents, locale),
                    rate: rate(line.tax_code, locale),
                    tax: money(line.tax_cents, locale),
                    amount: money(line.amount_cents, locale),
                })
                .collect(),
            breakdown: breakdown
                .into_iter()
                .map(|(code, base, tax)| SheetTax {
                    label: tax_label(code, locale),
                    base: money(base, locale),
                    tax: money(tax, locale),
                })
                .collect(),
            subtotal: money(note.subtotal_cents, locale),
            tax: money(note.tax_cents, locale),
            total: money(note.total_cents, locale),
            dian: None,
        })
    }
}

/// An amount as the language writes it: `$ 49.900,00` in Spanish (Colombia's way: dots group
/// thousands, a comma before the cents), `COP 49,900.00` in English; a negative one with its
/// sign first (`-$ 1.234,50`).
pub fn money(cents: i64, locale: Locale) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let magnitude = cents.unsigned_abs().min(i64::MAX as u64) as i64;
    match locale {
        Locale::Es => format!("{sign}$ {}", group_cents(magnitude, '.', ',')),
        Locale::En => format!("{sign}COP {}", group_cents(magnitude, ',', '.')),
    }
}

/// A day in Colombia's time: "26 de noviembre de 2026", "26 November 2026".
pub fn date(ms: i64, locale: Locale) -> String {
    let day = local(ms);
    let month = text::of(locale).months[day.month0() as usize];
    match locale {
        Locale::Es => format!("{} de {month} de {}", day.day(), day.year()),
        Locale::En => format!("{} {month} {}", day.day(), day.year()),
    }
}

/// An instant in Colombia's time: "26 de noviembre de 2026, 14:05", "26 November 2026, 14:05".
pub fn date_time(ms: i64, locale: Locale) -> String {
    let at = local(ms);
    format!("{}, {:02}:{:02}", date(ms, locale), at.hour(), at.minute())
}

/// A line's period, by its days: "1 nov 2026 – 1 dic 2026".
fn period(start: Option<i64>, end: Option<i64>, locale: Locale) -> String {
    let short = |ms: i64| {
        let day = local(ms);
        let month = text::of(locale).short_months[day.month0() as usize];
        format!("{} {month} {}", day.day(), day.year())
    };
    match (start, end) {
        (Some(start), Some(end)) => format!("{} – {}", short(start), short(end)),
        _ => String::new(),
    }
}

fn local(ms: i64) -> chrono::DateTime<FixedOffset> {
    let bogota = FixedOffset::east_opt(BOGOTA_OFFSET_SECS).expect("a valid offset");
    bogota.from_utc_datetime(&crate::domain::time::from_millis(ms).naive_utc())
}

fn rate(code: TaxCode, locale: Locale) -> String {
    let t = text::of(locale);
    match code {
        TaxCode::IvaExempt => t.exempt.to_owned(),
        TaxCode::IvaExcluded => t.excluded.to_owned(),
        TaxCode::Iva19 | TaxCode::Iva5 => format!("{} %", code.rate_bps() / 100),
    }
}

fn tax_label(code: TaxCode, locale: Locale) -> String {
    let t = text::of(locale);
    match code {
        TaxCode::IvaExempt => format!("IVA {}", t.exempt.to_lowercase()),
        TaxCode::IvaExcluded => t.excluded.to_owned(),
        TaxCode::Iva19 | TaxCode::Iva5 => format!("IVA {} %", code.rate_bps() / 100),
    }
}

/// Groups an identity number's digits by thousands, as Colombians print a NIT or a cédula
/// (`900.123.456`); a number with letters (a passport) is left as it is.
fn grouped(number: &str) -> String {
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return number.to_owned();
    }
    let digits: Vec<char> = number.chars().collect();
    let mut out = String::new();
    for (i, digit) in digits.iter().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('.');
        }
        out.push(*digit);
    }
    out
}

fn address_line(address: Option<&serde_json::Value>, locale: Locale) -> Option<String> {
    let address = address?;
    let line = address.get("line").and_then(|v| v.as_str())?;
    let city = address.get("city_code").and_then(|v| v.as_str());
    let country = address.get("country").and_then(|v| v.as_str());
    let mut out = line.to_owned();
    if let Some(city) = city {
        out.push_str(&format!(" · {} {city}", text::of(locale).dane));
    }
    if let Some(country) = country {
        out.push_str(&format!(" · {country}"));
    }
    Some(out)
}

/// The seller a document was issued by: the snapshot its row keeps (`snapshot`, JSON of
/// `Seller`), or for a row issued before snapshots were kept, the account's as it is now.
fn seller(snapshot: Option<&str>, account: &Account) -> PartyLines {
    let seller = snapshot
        .and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or_else(|| account.seller());
    seller_lines(seller, &account.name)
}

/// `seller`'s lines on a document; without a legal name, the account's name (`fallback`).
pub(super) fn seller_lines(seller: Seller, fallback: &str) -> PartyLines {
    let Seller {
        legal_name,
        nit,
        address,
        ..
    } = seller;
    let locale = Locale::Es;
    PartyLines {
        name: legal_name.unwrap_or_else(|| fallback.to_owned()),
        id_line: match nit.as_deref() {
            Some(nit) => match crate::domain::tax_id::nit_check_digit(nit) {
                Some(digit) => format!("NIT {}-{digit}", grouped(nit)),
                None => format!("NIT {}", grouped(nit)),
            },
            None => String::new(),
        },
        address_line: address_line(address.as_ref(), locale),
        email: None,
    }
}

fn customer(party: &Party, locale: Locale) -> PartyLines {
    let is_final_consumer = party.tax_id == crate::store::invoices::TaxId::final_consumer();
    let id_line = if is_final_consumer {
        format!("{} · CC 222222222222", text::of(locale).final_consumer)
    } else if party.tax_id.kind == "NIT" {
        match crate::domain::tax_id::nit_check_digit(&party.tax_id.number) {
            Some(digit) => format!("NIT {}-{digit}", grouped(&party.tax_id.number)),
            None => format!("NIT {}", grouped(&party.tax_id.number)),
        }
    } else {
        format!("{} {}", party.tax_id.kind, grouped(&party.tax_id.number))
    };
    PartyLines {
        name: party
            .legal_name
            .clone()
            .unwrap_or_else(|| party.name.clone()),
        id_line,
        address_line: address_line(party.address.as_ref(), locale),
        email: Some(party.email.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_written_as_colombians_write_them() {
        assert_eq!(money(0, Locale::Es), "$ 0,00");
        assert_eq!(money(5, Locale::Es), "$ 0,05");
        assert_eq!(money(4_990_000, Locale::Es), "$ 49.900,00");
        assert_eq!(money(123_456_789, Locale::Es), "$ 1.234.567,89");
        assert_eq!(money(-123_450, Locale::Es), "-$ 1.234,50");
        assert_eq!(money(-5, Locale::Es), "-$ 0,05");
        assert_eq!(money(i64::MIN, Locale::Es), "-$ 92.233.720.368.547.758,07");
        assert_eq!(money(4_990_000, Locale::En), "COP 49,900.00");
    }

    #[test]
    fn dates_are_colombian_days() {
        // 2026-11-27T03:00Z is still the 26th in Bogotá (UTC−5).
        let ms = chrono::DateTime::parse_from_rfc3339("2026-11-27T03:00:00Z")
            .expect("an instant")
            .timestamp_millis();
        assert_eq!(date(ms, Locale::Es), "26 de noviembre de 2026");
        assert_eq!(date(ms, Locale::En), "26 November 2026");
    }

    #[test]
    fn identity_numbers_are_grouped_by_thousands() {
        assert_eq!(grouped("900123456"), "900.123.456");
        assert_eq!(grouped("1020304050"), "1.020.304.050");
        assert_eq!(grouped("222222222222"), "222.222.222.222");
        assert_eq!(grouped("AB1234"), "AB1234");
    }
}
