//! What the tests share: sample documents (an invoice to the final consumer, one to a NIT with
//! three tax codes, a credit note), certificates made by `openssl` in a fresh folder, and the
//! external tools' lookup with the skip-or-fail rule.

use crate::dian::certificate::Certificate;
use crate::dian::document::{
    Address, Buyer, Correction, Document, InvoiceReference, Kind, Line, NumberingRange, Seller,
    Software,
};
use crate::domain::dian::Environment;
use crate::domain::tax::{TaxCode, TaxRegime};
use crate::domain::tax_id::TaxIdKind;
use chrono::{NaiveDate, TimeZone, Utc};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const PASSWORD: &str = "clave-de-prueba";

/// A folder of its own under the system's temporary directory.
pub fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("billing-dian-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// `Some(path)` of a program on PATH; otherwise skips (prints why, answers `None`) or, with
/// `BILLING_REQUIRE_DIAN_TOOLS=1`, fails.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        skip(&format!("`{name}` is not installed"));
    }
    found
}

/// DIAN's XSD folder (`maindoc/`, `common/`), from `BILLING_DIAN_XSD_DIR`.
pub fn xsd_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("BILLING_DIAN_XSD_DIR").map(PathBuf::from);
    match dir {
        Some(dir) if dir.join("maindoc/UBL-Invoice-2.1.xsd").is_file() => Some(dir),
        _ => {
            skip("BILLING_DIAN_XSD_DIR does not name DIAN's XSD folder (facho 0.2.1's)");
            None
        }
    }
}

fn skip(reason: &str) {
    if std::env::var("BILLING_REQUIRE_DIAN_TOOLS").as_deref() == Ok("1") {
        panic!("{reason}, and BILLING_REQUIRE_DIAN_TOOLS=1");
    }
    eprintln!("skipped: {reason}");
}

/// A self-signed certificate made for this run: its PEM, and PKCS#12 files encrypted the
/// default way (PBES2, AES-256) and the legacy way (`-legacy`: 3DES key, RC2 certificate).
pub struct Generated {
    pub dir: PathBuf,
    pub pem: PathBuf,
    pub aes_p12: Vec<u8>,
    pub legacy_p12: Vec<u8>,
}

pub fn generate_certificate() -> Option<Generated> {
    let openssl = tool("openssl")?;
    let dir = scratch();
    let run = |args: &[&str]| {
        let status = Command::new(&openssl)
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("openssl runs");
        assert!(
            status.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "key.pem",
        "-out",
        "cert.pem",
        "-days",
        "2",
        // A 64-bit serial, as the CAs that issue DIAN's certificates use: libxml2 reads
        // `xs:integer` up to 24 digits, and openssl's default 20 random bytes are 48.
        "-set_serial",
        "8133765940878140376",
        "-subj",
        "/C=CO/O=Tienda Ejemplo S.A.S./CN=Tienda Ejemplo, firma",
    ]);
    let pass = format!("pass:{PASSWORD}");
    run(&[
        "pkcs12", "-export", "-inkey", "key.pem", "-in", "cert.pem", "-out", "aes.p12", "-passout",
        &pass,
    ]);
    run(&[
        "pkcs12",
        "-export",
        "-legacy",
        "-inkey",
        "key.pem",
        "-in",
        "cert.pem",
        "-out",
        "legacy.p12",
        "-passout",
        &pass,
    ]);
    let read = |name: &str| std::fs::read(dir.join(name)).expect("p12 written");
    Some(Generated {
        pem: dir.join("cert.pem"),
        aes_p12: read("aes.p12"),
        legacy_p12: read("legacy.p12"),
        dir,
    })
}

impl Drop for Generated {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Generated {
    pub fn certificate(&self) -> Certificate {
        Certificate::from_pkcs12(&self.aes_p12, PASSWORD).expect("the AES PKCS#12 reads")
    }
}

pub fn seller() -> Seller {
    Seller {
        legal_name: "Tienda Ejemplo S.A.S.".into(),
        nit: "900123456".into(),
        address: Address {
            line: "Carrera 7 # 71-21".into(),
            city_code: "11001".into(),
            city_name: Some("Bogotá, D.C.".into()),
            department_name: Some("Bogotá".into()),
            country: "CO".into(),
        },
        tax_regime: TaxRegime::ResponsableIva,
        email: Some("facturas@tienda.example".into()),
    }
}

pub fn software() -> Software {
    Software {
        id: "56f2ae4e-9812-4fad-9255-08fcfcd5ccb0".into(),
        pin: "12345".into(),
        provider_nit: None,
    }
}

pub fn range() -> NumberingRange {
    NumberingRange {
        resolution_number: "18760000001".into(),
        prefix: "SETP".into(),
        from: 990_000_000,
        to: 995_000_000,
        valid_from: NaiveDate::from_ymd_opt(2019, 1, 19).expect("date"),
        valid_to: NaiveDate::from_ymd_opt(2030, 1, 19).expect("date"),
        technical_key: "fc8eac422eba16e22ffd8c6f94b3f40a6e38162c".into(),
    }
}

pub fn line(description: &str, amount: i64, tax_code: TaxCode) -> Line {
    let split = tax_code.split(amount);
    Line {
        description: description.into(),
        quantity: 1,
        amount_cents: amount,
        taxable_base_cents: split.base,
        tax_cents: split.tax,
        tax_code,
    }
}

/// An invoice of one 19 % line to the final consumer, numbered `SETP` + `consecutive`.
pub fn invoice(consecutive: i64) -> Document {
    Document {
        kind: Kind::Invoice {
            range: range(),
            consecutive,
        },
        issued_at: Utc
            .with_ymd_and_hms(2026, 3, 1, 19, 0, 5)
            .single()
            .expect("instant"),
        seller: seller(),
        buyer: Buyer::final_consumer(Some("cliente@example.com".into())),
        lines: vec![line("Plan Pro, marzo 2026", 119_000, TaxCode::Iva19)],
        software: software(),
        environment: Environment::Test,
        note: None,
    }
}

/// An invoice to a company (a NIT with an address) with one line of each tax code.
pub fn invoice_to_company(consecutive: i64) -> Document {
    let mut document = invoice(consecutive);
    document.buyer = Buyer {
        name: "Cliente Empresa S.A.S.".into(),
        id_kind: TaxIdKind::Nit,
        id_number: "800199436".into(),
        email: Some("compras@cliente.example".into()),
        address: Some(Address {
            line: "Calle 10 # 5-51".into(),
            city_code: "05001".into(),
            city_name: None,
            department_name: None,
            country: "CO".into(),
        }),
    };
    document.lines = vec![
        line("Plan Empresa", 238_000, TaxCode::Iva19),
        line("Soporte <prioritario> & SLA", 52_500, TaxCode::Iva5),
        line("Capacitación", 10_000, TaxCode::IvaExempt),
        line("Libro digital", 33_333, TaxCode::IvaExcluded),
    ];
    document.note = Some("Período 2026-03-01 a 2026-03-31".into());
    document
}

/// A credit note refunding all of `invoice`, numbered `NC1`.
pub fn credit_note(invoice: &Document) -> Document {
    let mut note = invoice.clone();
    note.kind = Kind::CreditNote {
        number: "NC1".into(),
        invoice: InvoiceReference {
            number: invoice.number(),
            cufe: invoice.unique_code(),
            issue_date: NaiveDate::from_ymd_opt(2026, 3, 1).expect("date"),
        },
        correction: Correction::Annulment,
        reason: "Reembolso del cargo".into(),
    };
    note.issued_at = Utc
        .with_ymd_and_hms(2026, 3, 5, 15, 30, 0)
        .single()
        .expect("instant");
    note
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("written");
    path
}
