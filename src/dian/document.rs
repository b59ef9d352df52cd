//! What an electronic document says, as plain values: the input of `ubl::write`. A sales
//! invoice (type 01, numbered from a DIAN numbering range) or a credit note (type 91, its own
//! series, naming the invoice it corrects), with the seller, the buyer as the invoice keeps
//! them, the lines with their IVA split in cents, the software and the environment. The
//! unique code (CUFE or CUDE) and the SoftwareSecurityCode follow from these values
//! (`crate::domain::dian`); nothing here does I/O.

use crate::domain::dian::{
    CodeFields, CodeKey, Environment, issue_date_time, software_security_code,
};
use crate::domain::tax::{TaxCode, TaxRegime};
use crate::domain::tax_id::{TaxIdKind, nit_check_digit};
use chrono::{DateTime, NaiveDate, Utc};

/// An address: the line, the DANE municipality code, optionally its names, and the country.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    pub line: String,
    /// DANE's five digits (`11001` Bogotá); its first two are the department's.
    pub city_code: String,
    pub city_name: Option<String>,
    pub department_name: Option<String>,
    /// ISO 3166-1 alpha-2 (`CO`).
    pub country: String,
}

/// The seller (`AccountingSupplierParty`), from the account's invoicing settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seller {
    pub legal_name: String,
    /// Digits only, without the check digit.
    pub nit: String,
    pub address: Address,
    pub tax_regime: TaxRegime,
    pub email: Option<String>,
}

impl Seller {
    pub fn check_digit(&self) -> Option<u8> {
        nit_check_digit(&self.nit)
    }
}

/// The buyer (`AccountingCustomerParty`) as the invoice keeps them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buyer {
    /// The legal name, or the person's name.
    pub name: String,
    pub id_kind: TaxIdKind,
    /// Without the check digit.
    pub id_number: String,
    pub email: Option<String>,
    pub address: Option<Address>,
}

/// The final consumer's identification number (`consumidor final`).
pub const FINAL_CONSUMER: &str = "222222222222";

impl Buyer {
    /// The final consumer: an invoice to a customer without a tax identity.
    pub fn final_consumer(email: Option<String>) -> Self {
        Self {
            name: "Consumidor final".into(),
            id_kind: TaxIdKind::Cc,
            id_number: FINAL_CONSUMER.into(),
            email,
            address: None,
        }
    }

    /// DIAN's code of the kind of document (table 13.2.1 of the annex).
    pub fn id_scheme(&self) -> &'static str {
        match self.id_kind {
            TaxIdKind::Ti => "12",
            TaxIdKind::Cc => "13",
            TaxIdKind::Ce => "22",
            TaxIdKind::Nit => "31",
            TaxIdKind::Pp => "41",
            TaxIdKind::Die => "42",
        }
    }

    pub fn check_digit(&self) -> Option<u8> {
        (self.id_kind == TaxIdKind::Nit)
            .then(|| nit_check_digit(&self.id_number))
            .flatten()
    }

    /// A natural person (`2`) or a legal one (`1`, a NIT), as `AdditionalAccountID` says.
    pub fn organization_code(&self) -> &'static str {
        if self.id_kind == TaxIdKind::Nit {
            "1"
        } else {
            "2"
        }
    }
}

/// One line: tax-inclusive amount, split into base and IVA (CONTRACT §11).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub description: String,
    pub quantity: i64,
    pub amount_cents: i64,
    pub taxable_base_cents: i64,
    pub tax_cents: i64,
    pub tax_code: TaxCode,
}

/// A numbering range DIAN authorised (its resolution).
#[derive(Clone, PartialEq, Eq)]
pub struct NumberingRange {
    pub resolution_number: String,
    pub prefix: String,
    pub from: i64,
    pub to: i64,
    pub valid_from: NaiveDate,
    pub valid_to: NaiveDate,
    pub technical_key: String,
}

impl std::fmt::Debug for NumberingRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NumberingRange")
            .field("resolution_number", &self.resolution_number)
            .field("prefix", &self.prefix)
            .field("from", &self.from)
            .field("to", &self.to)
            .field("valid_from", &self.valid_from)
            .field("valid_to", &self.valid_to)
            .field("technical_key", &"<redacted>")
            .finish()
    }
}

/// The software DIAN registered for the seller: its id and PIN (a secret).
#[derive(Clone, PartialEq, Eq)]
pub struct Software {
    pub id: String,
    pub pin: String,
    /// The NIT of who provides the software (`SoftwareProvider/ProviderID`), without check
    /// digit: the seller's own when `None`.
    pub provider_nit: Option<String>,
}

impl std::fmt::Debug for Software {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Software")
            .field("id", &self.id)
            .field("pin", &"<redacted>")
            .field("provider_nit", &self.provider_nit)
            .finish()
    }
}

/// The invoice a credit note corrects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvoiceReference {
    pub number: String,
    pub cufe: String,
    pub issue_date: NaiveDate,
}

/// Why a credit note is issued (`DiscrepancyResponse/ResponseCode`, annex table 13.2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Correction {
    /// `1`: part of the goods returned or of the service not accepted.
    PartialReturn,
    /// `2`: the invoice annulled.
    Annulment,
    /// `3`: a rebate or discount.
    Discount,
    /// `4`: a price adjustment.
    PriceAdjustment,
    /// `5`: other.
    Other,
}

impl Correction {
    pub fn code(self) -> &'static str {
        match self {
            Correction::PartialReturn => "1",
            Correction::Annulment => "2",
            Correction::Discount => "3",
            Correction::PriceAdjustment => "4",
            Correction::Other => "5",
        }
    }
}

/// Which document, with what only it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A sales invoice numbered `range.prefix` + `consecutive`.
    Invoice {
        range: NumberingRange,
        consecutive: i64,
    },
    /// A credit note numbered in its own series.
    CreditNote {
        number: String,
        invoice: InvoiceReference,
        correction: Correction,
        reason: String,
    },
}

/// An electronic document, ready to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub kind: Kind,
    pub issued_at: DateTime<Utc>,
    pub seller: Seller,
    pub buyer: Buyer,
    pub lines: Vec<Line>,
    pub software: Software,
    pub environment: Environment,
    pub note: Option<String>,
}

/// A document's sums: the lines' bases, their IVA, the payable total, and the base of the
/// lines that carry IVA (excluded lines carry none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sums {
    pub line_extension: i64,
    pub taxable: i64,
    pub tax: i64,
    pub payable: i64,
}

impl Document {
    /// `cbc:ID`: prefix and consecutive, no padding (`SETP990000001`).
    pub fn number(&self) -> String {
        match &self.kind {
            Kind::Invoice { range, consecutive } => format!("{}{consecutive}", range.prefix),
            Kind::CreditNote { number, .. } => number.clone(),
        }
    }

    pub fn is_invoice(&self) -> bool {
        matches!(self.kind, Kind::Invoice { .. })
    }

    pub fn sums(&self) -> Sums {
        self.lines.iter().fold(Sums::default(), |sum, line| Sums {
            line_extension: sum.line_extension + line.taxable_base_cents,
            taxable: sum.taxable
                + if line.tax_code == TaxCode::IvaExcluded {
                    0
                } else {
                    line.taxable_base_cents
                },
            tax: sum.tax + line.tax_cents,
            payable: sum.payable + line.amount_cents,
        })
    }

    /// `IssueDate` and `IssueTime`, in Colombia's time.
    pub fn issue_date_time(&self) -> (String, String) {
        issue_date_time(self.issued_at)
    }

    /// The CUFE of an invoice (with the range's technical key) or the CUDE of a credit note
    /// (with the software's PIN).
    pub fn unique_code(&self) -> String {
        let (date, time) = self.issue_date_time();
        let number = self.number();
        let sums = self.sums();
        let fields = CodeFields {
            number: &number,
            issue_date: &date,
            issue_time: &time,
            line_extension_cents: sums.line_extension,
            iva_cents: sums.tax,
            inc_cents: 0,
            ica_cents: 0,
            payable_cents: sums.payable,
            seller_nit: &self.seller.nit,
            buyer_id: &self.buyer.id_number,
            environment: self.environment,
        };
        match &self.kind {
            Kind::Invoice { range, .. } => fields.code(CodeKey::TechnicalKey(&range.technical_key)),
            Kind::CreditNote { .. } => fields.code(CodeKey::SoftwarePin(&self.software.pin)),
        }
    }

    pub fn software_security_code(&self) -> String {
        software_security_code(&self.software.id, &self.software.pin, &self.number())
    }

    /// What makes a document impossible to write: no line, a line whose base and IVA do not
    /// add up to its amount, a quantity below one, a NIT that is not digits.
    pub fn check(&self) -> Result<(), String> {
        if self.lines.is_empty() {
            return Err("a document has at least one line".into());
        }
        for (index, line) in self.lines.iter().enumerate() {
            if line.quantity < 1 {
                return Err(format!("line {}: the quantity is at least 1", index + 1));
            }
            if line.taxable_base_cents + line.tax_cents != line.amount_cents {
                return Err(format!(
                    "line {}: base and IVA do not add up to the amount",
                    index + 1
                ));
            }
        }
        if self.seller.check_digit().is_none() {
            return Err("the seller's NIT is 1 to 15 digits".into());
        }
        Ok(())
    }
}
