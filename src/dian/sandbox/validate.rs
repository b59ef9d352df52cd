//! What the sandbox DIAN checks in a document, in DIAN's order, each failure a rule as DIAN
//! words it (`Regla: FAD06, Rechazo: …`): the structure (the elements DIAN requires, read
//! without an XSD: full schema validation is the tests' `xmllint`), the signature (digests,
//! value, XAdES properties and policy), the signing time against the issue time, the number
//! against a range it was told of (invoices), the CUFE or CUDE recomputed, and the
//! SoftwareSecurityCode. Rule codes follow the annex's groups (`FA…` invoices, `CA…` credit
//! notes, `ZB01` schema, `ZE02` signature); see docs/dian.md for the list.

use super::Registry;
use crate::dian::signature::{POLICY_DIGEST, POLICY_URL, SIGNED_PROPERTIES_TYPE, digest};
use crate::dian::ubl::{CAC, CBC, CREDIT_NOTE_NS, DS, EXT, INVOICE_NS, STS, XADES};
use crate::dian::verify::verify;
use crate::dian::xml::tree::Tree;
use crate::domain::dian::{CodeFields, CodeKey, Environment, software_security_code};
use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime};

/// A document that passed: what the sandbox remembers of it.
#[derive(Clone, Debug)]
pub struct Passed {
    pub key: String,
    pub number: String,
    pub seller_nit: String,
    pub invoice: bool,
}

/// A refusal: the number and key when they could be read, and the rules broken.
#[derive(Clone, Debug)]
pub struct Refused {
    pub key: Option<String>,
    pub rules: Vec<String>,
}

fn refuse(key: Option<&str>, rule: impl Into<String>) -> Refused {
    Refused {
        key: key.map(str::to_owned),
        rules: vec![rule.into()],
    }
}

const SCHEMA: &str = "Regla: ZB01, Rechazo: Fallo en el esquema XML del archivo";

/// Whether `c` is a character XML 1.0 allows in a document (its `Char` production): no C0
/// control but tab, newline and carriage return, and neither U+FFFE nor U+FFFF. A document
/// with another is not well-formed, whatever a lenient reader makes of it, and DIAN refuses it.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Checks `xml` against what DIAN refuses, with the ranges and software `registry` knows.
pub fn check(xml: &str, registry: &Registry) -> Result<Passed, Refused> {
    if let Some(at) = xml.find(|c| !is_xml_char(c)) {
        return Err(refuse(
            None,
            format!("{SCHEMA}: carácter no permitido en XML 1.0 en la posición {at}."),
        ));
    }
    let tree = Tree::parse(xml).map_err(|err| refuse(None, format!("{SCHEMA}: {err}.")))?;
    let root = tree.root();
    let invoice = match tree.expanded(root) {
        (INVOICE_NS, "Invoice") => true,
        (CREDIT_NOTE_NS, "CreditNote") => false,
        _ => {
            return Err(refuse(
                None,
                format!("{SCHEMA}: no es Invoice ni CreditNote."),
            ));
        }
    };
    let group = if invoice { "FA" } else { "CA" };
    let required = |path: &[(&str, &str)]| -> Result<String, Refused> {
        tree.path(root, path)
            .map(|e| tree.text(e).trim().to_owned())
            .ok_or_else(|| {
                let name = path.iter().map(|(_, l)| *l).collect::<Vec<_>>().join("/");
                refuse(None, format!("{SCHEMA}: falta {name}."))
            })
    };
    let number = required(&[(CBC, "ID")])?;
    let key = required(&[(CBC, "UUID")])?;
    let issue_date = required(&[(CBC, "IssueDate")])?;
    let issue_time = required(&[(CBC, "IssueTime")])?;
    let type_code = if invoice {
        "InvoiceTypeCode"
    } else {
        "CreditNoteTypeCode"
    };
    let expected_type = if invoice { "01" } else { "91" };
    if required(&[(CBC, type_code)])? != expected_type {
        return Err(refuse(
            Some(&key),
            format!("Regla: {group}D13, Rechazo: {type_code} no es {expected_type}."),
        ));
    }
    let environment = Environment::from_code(&required(&[(CBC, "ProfileExecutionID")])?)
        .ok_or_else(|| {
            refuse(
                Some(&key),
                format!("Regla: {group}B06, Rechazo: ProfileExecutionID no es 1 ni 2."),
            )
        })?;
    let party_id = |party: &str| {
        required(&[
            (CAC, party),
            (CAC, "Party"),
            (CAC, "PartyTaxScheme"),
            (CBC, "CompanyID"),
        ])
    };
    let seller_nit = party_id("AccountingSupplierParty")?;
    let buyer_id = party_id("AccountingCustomerParty")?;
    let money = |name: &str| -> Result<i64, Refused> {
        cents(&required(&[(CAC, "LegalMonetaryTotal"), (CBC, name)])?)
            .ok_or_else(|| refuse(Some(&key), format!("{SCHEMA}: {name} no es un valor.")))
    };
    let line_extension = money("LineExtensionAmount")?;
    let payable = money("PayableAmount")?;
    let line = if invoice {
        "InvoiceLine"
    } else {
        "CreditNoteLine"
    };
    if tree.child(root, CAC, line).is_none() {
        return Err(refuse(Some(&key), format!("{SCHEMA}: falta {line}.")));
    }
    let extensions: Vec<usize> = tree
        .child(root, EXT, "UBLExtensions")
        .map(|e| tree.children(e, EXT, "UBLExtension").collect())
        .unwrap_or_default();
    let dian = extensions
        .first()
        .and_then(|&e| tree.path(e, &[(EXT, "ExtensionContent"), (STS, "DianExtensions")]))
        .ok_or_else(|| refuse(Some(&key), format!("{SCHEMA}: falta sts:DianExtensions.")))?;
    let dian_field = |path: &[(&str, &str)]| -> Result<String, Refused> {
        tree.path(dian, path)
            .map(|e| tree.text(e).trim().to_owned())
            .ok_or_else(|| {
                let name = path.iter().map(|(_, l)| *l).collect::<Vec<_>>().join("/");
                refuse(
                    Some(&key),
                    format!("{SCHEMA}: falta sts:DianExtensions/{name}."),
                )
            })
    };
    let software_id = dian_field(&[(STS, "SoftwareProvider"), (STS, "SoftwareID")])?;
    let security_code = dian_field(&[(STS, "SoftwareSecurityCode")])?;
    dian_field(&[(STS, "InvoiceSource")])?;
    dian_field(&[
        (STS, "AuthorizationProvider"),
        (STS, "AuthorizationProviderID"),
    ])?;
    dian_field(&[(STS, "QRCode")])?;
    if !invoice {
        required(&[
            (CAC, "BillingReference"),
            (CAC, "InvoiceDocumentReference"),
            (CBC, "UUID"),
        ])?;
    }

    // The signature, in the second extension.
    let signature_extension = extensions.get(1).copied().ok_or_else(|| {
        refuse(
            Some(&key),
            "Regla: ZE02, Rechazo: El documento no está firmado.",
        )
    })?;
    let signed_at = check_signature(&tree, signature_extension).map_err(|why| {
        refuse(
            Some(&key),
            format!("Regla: ZE02, Rechazo: Valor de la firma inválido: {why}."),
        )
    })?;
    let issued_at = NaiveDateTime::parse_from_str(
        &format!("{issue_date}T{issue_time}"),
        "%Y-%m-%dT%H:%M:%S-05:00",
    )
    .ok()
    .and_then(|local| {
        local
            .and_local_timezone(crate::domain::dian::COLOMBIA)
            .single()
    })
    .ok_or_else(|| {
        refuse(
            Some(&key),
            format!("Regla: {group}D09, Rechazo: IssueDate o IssueTime inválidos."),
        )
    })?;
    // As DIAN (FAD09e): signed on the Colombian date of issue, and not before it (a clock
    // five minutes behind is let through).
    let gap = signed_at.signed_duration_since(issued_at);
    let signing_date = signed_at
        .with_timezone(&crate::domain::dian::COLOMBIA)
        .date_naive();
    if gap < -Duration::minutes(5) || signing_date != issued_at.date_naive() {
        return Err(refuse(
            Some(&key),
            format!(
                "Regla: {group}D09e, Rechazo: La fecha de la firma ({signed_at}) no corresponde a la emisión del documento."
            ),
        ));
    }

    // The numbering range (an invoice's), then the unique code.
    let technical_key = if invoice {
        let resolution = dian_field(&[(STS, "InvoiceControl"), (STS, "InvoiceAuthorization")])?;
        let range = registry
            .range(&seller_nit, &resolution, &number)
            .ok_or_else(|| refuse(Some(&key), "Regla: FAB05c, Rechazo: El número de la factura no corresponde a una resolución de numeración autorizada al emisor."))?;
        let consecutive: i64 = number[range.prefix.len()..].parse().unwrap_or(-1);
        if consecutive < range.from || consecutive > range.to {
            return Err(refuse(
                Some(&key),
                "Regla: FAB10b, Rechazo: El número de la factura no está dentro del rango de numeración autorizado.",
            ));
        }
        let date = NaiveDate::parse_from_str(&issue_date, "%Y-%m-%d").ok();
        if date.is_none_or(|d| d < range.valid_from || d > range.valid_to) {
            return Err(refuse(
                Some(&key),
                "Regla: FAB07b, Rechazo: La fecha de emisión no está dentro de la vigencia de la resolución de numeración.",
            ));
        }
        Some(range.technical_key)
    } else {
        None
    };
    let pin = registry.pin(&software_id).ok_or_else(|| {
        refuse(
            Some(&key),
            format!("Regla: {group}B24b, Rechazo: El software {software_id} no está habilitado."),
        )
    })?;
    let fields = CodeFields {
        number: &number,
        issue_date: &issue_date,
        issue_time: &issue_time,
        line_extension_cents: line_extension,
        iva_cents: tax_of(&tree, "01"),
        inc_cents: tax_of(&tree, "04"),
        ica_cents: tax_of(&tree, "03"),
        payable_cents: payable,
        seller_nit: &seller_nit,
        buyer_id: &buyer_id,
        environment,
    };
    let expected = match &technical_key {
        Some(technical) => fields.code(CodeKey::TechnicalKey(technical)),
        None => fields.code(CodeKey::SoftwarePin(&pin)),
    };
    if expected != key {
        let (rule, name) = if invoice {
            ("FAD06", "CUFE")
        } else {
            ("CAD06", "CUDE")
        };
        return Err(refuse(
            Some(&key),
            format!("Regla: {rule}, Rechazo: Valor del {name} no está calculado correctamente."),
        ));
    }
    if software_security_code(&software_id, &pin, &number) != security_code {
        return Err(refuse(
            Some(&key),
            format!(
                "Regla: {group}B27b, Rechazo: El SoftwareSecurityCode no está calculado correctamente."
            ),
        ));
    }
    Ok(Passed {
        key,
        number,
        seller_nit,
        invoice,
    })
}

/// The signature below `extension` holds and is DIAN's XAdES-EPES; answers its signing time.
fn check_signature(tree: &Tree, extension: usize) -> Result<DateTime<chrono::FixedOffset>, String> {
    let verified = verify(tree, Some(extension)).map_err(|fault| fault.to_string())?;
    let signature = verified.signature;
    let properties = tree
        .descendants(signature)
        .find(|&e| tree.is(e, XADES, "SignedProperties"))
        .ok_or("no hay xades:SignedProperties")?;
    let properties_id = tree.attribute(properties, "Id").unwrap_or_default();
    let signed_info = tree
        .child(signature, DS, "SignedInfo")
        .ok_or("no hay SignedInfo")?;
    let covers_properties = tree.children(signed_info, DS, "Reference").any(|r| {
        tree.attribute(r, "Type") == Some(SIGNED_PROPERTIES_TYPE)
            && tree.attribute(r, "URI") == Some(&format!("#{properties_id}"))
    });
    if !covers_properties || !verified.references.iter().any(String::is_empty) {
        return Err("las referencias no cubren el documento y las propiedades firmadas".into());
    }
    let text = |path: &[(&str, &str)]| {
        tree.path(properties, path)
            .map(|e| tree.text(e).trim().to_owned())
    };
    let signed = [(XADES, "SignedSignatureProperties")];
    let policy = [
        &signed[..],
        &[
            (XADES, "SignaturePolicyIdentifier"),
            (XADES, "SignaturePolicyId"),
        ],
    ]
    .concat();
    if text(
        &[
            &policy[..],
            &[(XADES, "SigPolicyId"), (XADES, "Identifier")],
        ]
        .concat(),
    )
    .as_deref()
        != Some(POLICY_URL)
        || text(
            &[
                &policy[..],
                &[(XADES, "SigPolicyHash"), (DS, "DigestValue")],
            ]
            .concat(),
        )
        .as_deref()
            != Some(POLICY_DIGEST)
    {
        return Err("la política de firma no es la de la DIAN".into());
    }
    let cert_digest = [
        &signed[..],
        &[
            (XADES, "SigningCertificate"),
            (XADES, "Cert"),
            (XADES, "CertDigest"),
            (DS, "DigestValue"),
        ],
    ]
    .concat();
    if text(&cert_digest) != Some(digest(&verified.certificate_der)) {
        return Err("el certificado firmante no es el de SigningCertificate".into());
    }
    let signing_time =
        text(&[&signed[..], &[(XADES, "SigningTime")]].concat()).ok_or("no hay SigningTime")?;
    DateTime::parse_from_rfc3339(&signing_time).map_err(|_| "SigningTime no es una fecha".into())
}

/// The document's tax of scheme `scheme` (`01` IVA, `04` INC, `03` ICA): the sum of its
/// top-level `cac:TaxTotal`s whose subtotals are of that scheme.
fn tax_of(tree: &Tree, scheme: &str) -> i64 {
    tree.children(tree.root(), CAC, "TaxTotal")
        .filter(|&total| {
            tree.children(total, CAC, "TaxSubtotal").any(|sub| {
                tree.path(
                    sub,
                    &[(CAC, "TaxCategory"), (CAC, "TaxScheme"), (CBC, "ID")],
                )
                .is_some_and(|id| tree.text(id).trim() == scheme)
            })
        })
        .filter_map(|total| {
            tree.child(total, CBC, "TaxAmount")
                .and_then(|a| cents(&tree.text(a)))
        })
        .sum()
}

/// `1190.00` → 119000 cents; more decimals are truncated, as DIAN's CUFE reads them.
pub fn cents(text: &str) -> Option<i64> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let two: String = fraction.chars().chain("00".chars()).take(2).collect();
    whole
        .parse::<i64>()
        .ok()?
        .checked_mul(100)?
        .checked_add(two.parse().ok()?)
}
