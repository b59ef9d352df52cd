//! DIAN's unique codes (CONTRACT §12, Anexo Técnico 1.9): the CUFE of a sales invoice, the
//! CUDE of a credit note, the SoftwareSecurityCode, and the formats they are computed from
//! (amounts from integer cents with two decimals, dates and times in Colombia's -05:00). Pure:
//! the XML that carries these values, and its signature, are `crate::dian`'s.
//!
//! The seed of a CUFE or CUDE is the concatenation, with no separator, of: the document's
//! number, its `IssueDate`, its `IssueTime` (`HH:MM:SS-05:00`), the sum of its lines before
//! tax, `01` and the IVA, `04` and the INC, `03` and the ICA, the total payable, the seller's
//! NIT and the buyer's identification number (both without check digit), the range's
//! technical key (a CUFE) or the software PIN (a CUDE), and the environment (`1` production,
//! `2` test). The code is the lowercase hex SHA-384 of that seed, read as UTF-8.

use chrono::{DateTime, FixedOffset, NaiveDate, Utc};
use sha2::{Digest, Sha384};

super::vocabulary! {
    /// DIAN's environment a document is issued in (`ProfileExecutionID`, `TipoAmbiente`).
    pub enum Environment {
        /// Producción: the document has fiscal effect.
        Production => "production",
        /// Habilitación (pruebas).
        Test => "test",
    }
}

impl Environment {
    /// DIAN's code: `1` production, `2` test.
    pub fn code(self) -> &'static str {
        match self {
            Environment::Production => "1",
            Environment::Test => "2",
        }
    }

    /// The environment of DIAN's code, `None` for any other string.
    pub fn from_code(code: &str) -> Option<Self> {
        match code {
            "1" => Some(Environment::Production),
            "2" => Some(Environment::Test),
            _ => None,
        }
    }

    /// The address of DIAN's public page of a document, which its QR code points to.
    pub fn qr_url(self, cufe: &str) -> String {
        let host = match self {
            Environment::Production => "catalogo-vpfe.dian.gov.co",
            Environment::Test => "catalogo-vpfe-hab.dian.gov.co",
        };
        format!("https://{host}/document/searchqr?documentkey={cufe}")
    }
}

/// An amount of cents as DIAN writes it: pesos, a point and exactly two decimals, no
/// thousands separator (`119000` → `1190.00`). Cents are exact, so "truncated to two
/// decimals" is this and nothing is rounded.
pub fn amount(cents: i64) -> String {
    super::money::pesos(cents)
}

/// Colombia's offset from UTC, all year (no daylight saving time); checked when compiling.
pub const COLOMBIA: FixedOffset = match FixedOffset::west_opt(5 * 3_600) {
    Some(offset) => offset,
    None => panic!("five hours west of UTC is a valid offset"),
};

/// An instant as a document's `IssueDate` (`YYYY-MM-DD`) and `IssueTime` (`HH:MM:SS-05:00`),
/// both in Colombia's time.
pub fn issue_date_time(at: DateTime<Utc>) -> (String, String) {
    let local = at.with_timezone(&COLOMBIA);
    (
        local.format("%Y-%m-%d").to_string(),
        local.format("%H:%M:%S-05:00").to_string(),
    )
}

/// Which unique code a document carries, with the secret that goes into its seed.
#[derive(Clone, Copy)]
pub enum CodeKey<'a> {
    /// A sales invoice's CUFE: the numbering range's technical key.
    TechnicalKey(&'a str),
    /// A credit or debit note's CUDE: the software's PIN.
    SoftwarePin(&'a str),
}

impl std::fmt::Debug for CodeKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The PIN is a secret; the technical key is not shown either, to keep it simple.
        f.write_str(match self {
            CodeKey::TechnicalKey(_) => "TechnicalKey(..)",
            CodeKey::SoftwarePin(_) => "SoftwarePin(..)",
        })
    }
}

/// What a CUFE or CUDE is computed from, as the document states it.
#[derive(Clone, Debug)]
pub struct CodeFields<'a> {
    /// `cbc:ID`: prefix and consecutive number (`SETP990000001`).
    pub number: &'a str,
    /// `cbc:IssueDate`, `YYYY-MM-DD`.
    pub issue_date: &'a str,
    /// `cbc:IssueTime`, `HH:MM:SS-05:00`.
    pub issue_time: &'a str,
    /// `LegalMonetaryTotal/LineExtensionAmount`: the lines before tax.
    pub line_extension_cents: i64,
    /// The document's IVA (tax scheme `01`).
    pub iva_cents: i64,
    /// Its INC (`04`); zero for what this service sells.
    pub inc_cents: i64,
    /// Its ICA (`03`); zero for what this service sells.
    pub ica_cents: i64,
    /// `LegalMonetaryTotal/PayableAmount`.
    pub payable_cents: i64,
    /// The seller's NIT, without check digit.
    pub seller_nit: &'a str,
    /// The buyer's identification number, without check digit.
    pub buyer_id: &'a str,
    pub environment: Environment,
}

impl CodeFields<'_> {
    /// The concatenation that is hashed (the module's doc).
    pub fn seed(&self, key: CodeKey<'_>) -> String {
        let key = match key {
            CodeKey::TechnicalKey(key) | CodeKey::SoftwarePin(key) => key,
        };
        [
            self.number,
            self.issue_date,
            self.issue_time,
            &amount(self.line_extension_cents),
            "01",
            &amount(self.iva_cents),
            "04",
            &amount(self.inc_cents),
            "03",
            &amount(self.ica_cents),
            &amount(self.payable_cents),
            self.seller_nit,
            self.buyer_id,
            key,
            self.environment.code(),
        ]
        .concat()
    }

    /// The CUFE (with a technical key) or the CUDE (with a software PIN).
    pub fn code(&self, key: CodeKey<'_>) -> String {
        sha384_hex(&self.seed(key))
    }
}

/// `sts:SoftwareSecurityCode`: SHA-384 of the software id, its PIN and the document's number.
pub fn software_security_code(software_id: &str, pin: &str, number: &str) -> String {
    sha384_hex(&[software_id, pin, number].concat())
}

fn sha384_hex(text: &str) -> String {
    let digest = Sha384::digest(text.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

super::vocabulary! {
    /// Where an electronic document stands with DIAN (`dian.status`, CONTRACT §12).
    pub enum DianStatus {
        /// No valid range had a number left when it was issued: not numbered yet.
        AwaitingRange => "awaiting_range",
        /// Numbered, its CUFE or CUDE fixed; being signed, sent, or asked about.
        Pending => "pending",
        /// DIAN validated it.
        Accepted => "accepted",
        /// DIAN refused it, with its messages.
        Rejected => "rejected",
    }
}

super::vocabulary! {
    /// Why a document that is neither accepted nor rejected waits for an operator (`dian.waiting`,
    /// CONTRACT §12a): each names what the operator can do about it.
    pub enum DianWaiting {
        /// No valid range has a number left on its date: add a range.
        AwaitingRange => "awaiting_range",
        /// Numbering it failed (a database fault): it is numbered again at each filing pass.
        NumberingFailed => "numbering_failed",
        /// A credit note whose invoice DIAN rejected: it is not sent to certain rejection; the
        /// invoice must be corrected first.
        InvoiceRejected => "invoice_rejected",
        /// DIAN was turned off for the account, or its certificate cannot be used: restore the
        /// account's DIAN settings (the software PIN, the certificate).
        Settings => "settings",
    }
}

super::vocabulary! {
    /// Which electronic document a row is.
    pub enum DianDocumentKind {
        /// A sales invoice (type 01), numbered from a numbering range.
        Invoice => "invoice",
        /// A credit note (type 91), numbered in its own series.
        CreditNote => "credit_note",
    }
}

/// Whether `prefix` is what DIAN authorises: 1 to 4 ASCII letters or digits.
pub fn is_range_prefix(prefix: &str) -> bool {
    (1..=4).contains(&prefix.len()) && prefix.chars().all(|c| c.is_ascii_alphanumeric())
}

/// How much of a numbering range is used and how long it has left, for operators.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeUse {
    /// Numbers taken over numbers in the range, 0 to 1.
    pub used: f64,
    /// Whole days from `today` to the range's last valid day (negative once it ended).
    pub days_left: i64,
}

impl RangeUse {
    /// A range `from..=to` whose next number is `next`, valid until `valid_to`, on `today`.
    pub fn of(from: i64, to: i64, next: i64, valid_to: NaiveDate, today: NaiveDate) -> Self {
        let size = (to - from + 1).max(1);
        let taken = (next - from).clamp(0, size);
        Self {
            used: taken as f64 / size as f64,
            days_left: (valid_to - today).num_days(),
        }
    }

    /// Operators are warned at 90 % used or 30 days before the range ends (CONTRACT §12).
    pub fn needs_warning(&self) -> bool {
        self.used >= 0.9 || self.days_left <= 30
    }
}

/// The date in Colombia of an instant (what a range's dates are compared with).
pub fn colombian_date(at: DateTime<Utc>) -> NaiveDate {
    at.with_timezone(&COLOMBIA).date_naive()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// The example of the Anexo Técnico 1.9 (§11.2, the CUFE of a sales invoice), as
    /// reference implementations reproduce it.
    fn annex_invoice() -> CodeFields<'static> {
        CodeFields {
            number: "323200000129",
            issue_date: "2019-01-16",
            issue_time: "10:53:10-05:00",
            line_extension_cents: 150_000_000,
            iva_cents: 28_500_000,
            inc_cents: 0,
            ica_cents: 0,
            payable_cents: 178_500_000,
            seller_nit: "700085371",
            buyer_id: "800199436",
            environment: Environment::Production,
        }
    }

    #[test]
    fn the_cufe_of_the_annex_example_is_the_published_one() {
        let fields = annex_invoice();
        let key = CodeKey::TechnicalKey("693ff6f2a553c3646a063436fd4dd9ded0311471");
        assert_eq!(
            fields.seed(key),
            "3232000001292019-01-1610:53:10-05:001500000.0001285000.00040.00030.00\
             1785000.00700085371800199436693ff6f2a553c3646a063436fd4dd9ded03114711"
        );
        assert_eq!(
            fields.code(key),
            "8bb918b19ba22a694f1da11c643b5e9de39adf60311cf179179e9b33381030bc\
             d4c3c3f156c506ed5908f9276f5bd9b4"
        );
    }

    #[test]
    fn the_cude_of_the_annex_credit_note_example_is_the_published_one() {
        let fields = CodeFields {
            number: "8110007871",
            issue_date: "2019-01-12",
            issue_time: "07:00:00-05:00",
            line_extension_cents: 500_000,
            iva_cents: 95_000,
            inc_cents: 0,
            ica_cents: 0,
            payable_cents: 595_000,
            seller_nit: "900373076",
            buyer_id: "8355990",
            environment: Environment::Production,
        };
        assert_eq!(
            fields.code(CodeKey::SoftwarePin("12301")),
            "907e4444decc9e59c160a2fb3b6659b33dc5b632a5008922b9a62f83f757b1c4\
             48e47f5867f2b50dbdb96f48c7681168"
        );
    }

    /// Computed outside this code, from the literal seed:
    /// `python3 -c 'import hashlib; print(hashlib.sha384(b"SETP9900000012026-03-01\
    /// 14:00:05-05:001000.0001190.00040.00030.001190.00900123456222222222222fc8e…2").hexdigest())'`.
    #[test]
    fn a_test_invoice_to_the_final_consumer_has_the_cufe_python_computes() {
        let (date, time) = issue_date_time(Utc.with_ymd_and_hms(2026, 3, 1, 19, 0, 5).unwrap());
        let fields = CodeFields {
            number: "SETP990000001",
            issue_date: &date,
            issue_time: &time,
            line_extension_cents: 100_000,
            iva_cents: 19_000,
            inc_cents: 0,
            ica_cents: 0,
            payable_cents: 119_000,
            seller_nit: "900123456",
            buyer_id: "222222222222",
            environment: Environment::Test,
        };
        let key = CodeKey::TechnicalKey("fc8eac422eba16e22ffd8c6f94b3f40a6e38162c");
        assert_eq!(
            fields.code(key),
            "45e8da0713a190e505ec3b10e33cce88325a757759aff21e5625a568724059b2\
             7d1717b540e01116d0c2188cd07be154"
        );
    }

    #[test]
    fn the_software_security_code_hashes_id_pin_and_number() {
        // python3: hashlib.sha384(b"a1b2c3" b"12345" b"SETP990000001").hexdigest()
        assert_eq!(
            software_security_code("a1b2c3", "12345", "SETP990000001"),
            "1a9e0f686af12339814ade6595a9ba13529c59e961f36c30a52fa5cc8925eace\
             04971c6519f5ff9526447f1832653e28"
        );
    }

    #[test]
    fn amounts_have_two_decimals_from_cents() {
        for (cents, written) in [
            (0, "0.00"),
            (5, "0.05"),
            (10, "0.10"),
            (119_000, "1190.00"),
            (178_500_000, "1785000.00"),
            (12_345_678_901, "123456789.01"),
            (-250, "-2.50"),
        ] {
            assert_eq!(amount(cents), written, "{cents} cents");
        }
    }

    #[test]
    fn colombia_is_five_hours_behind_utc_across_midnight() {
        let (date, time) = issue_date_time(Utc.with_ymd_and_hms(2026, 1, 1, 3, 4, 5).unwrap());
        assert_eq!(
            (date.as_str(), time.as_str()),
            ("2025-12-31", "22:04:05-05:00")
        );
        let (date, time) = issue_date_time(Utc.with_ymd_and_hms(2026, 7, 1, 5, 0, 0).unwrap());
        assert_eq!(
            (date.as_str(), time.as_str()),
            ("2026-07-01", "00:00:00-05:00")
        );
    }

    #[test]
    fn the_qr_points_at_the_environments_catalogue() {
        assert_eq!(
            Environment::Test.qr_url("abc"),
            "https://catalogo-vpfe-hab.dian.gov.co/document/searchqr?documentkey=abc"
        );
        assert!(
            Environment::Production
                .qr_url("abc")
                .starts_with("https://catalogo-vpfe.dian")
        );
        assert_eq!(Environment::from_code("2"), Some(Environment::Test));
        assert_eq!(Environment::from_code("3"), None);
    }

    #[test]
    fn a_range_warns_at_ninety_percent_used_or_thirty_days_left() {
        let day = |d: u32| NaiveDate::from_ymd_opt(2026, 12, d).unwrap_or_default();
        let next_year = NaiveDate::from_ymd_opt(2027, 12, 31).unwrap_or_default();
        let fresh = RangeUse::of(1, 100, 1, next_year, day(1));
        assert_eq!(fresh.used, 0.0);
        assert!(!fresh.needs_warning());
        assert!(RangeUse::of(1, 100, 91, next_year, day(1)).needs_warning());
        assert!(!RangeUse::of(1, 100, 90, next_year, day(1)).needs_warning());
        let ending = RangeUse::of(1, 100, 1, day(31), day(2));
        assert_eq!(ending.days_left, 29);
        assert!(ending.needs_warning());
        assert_eq!(RangeUse::of(1, 100, 101, day(31), day(1)).used, 1.0);
    }

    #[test]
    fn a_prefix_is_one_to_four_letters_or_digits() {
        for good in ["S", "SETP", "A1", "9999"] {
            assert!(is_range_prefix(good), "{good}");
        }
        for bad in ["", "SETPX", "FV-", "Ñ", "A B"] {
            assert!(!is_range_prefix(bad), "{bad}");
        }
    }
}
