//! Our documents checked by tools we did not write: `xmllint` against DIAN's schemas (facho
//! 0.2.1's copy, `BILLING_DIAN_XSD_DIR`) and `xmlsec1 --verify` on the signature, for an
//! invoice to the final consumer, one to a company with every tax code, and a credit note,
//! signed with certificates from PKCS#12 files in both encryptions.

use super::fixtures::{self, Generated, PASSWORD};
use crate::dian::certificate::Certificate;
use crate::dian::document::Document;
use crate::dian::signature::{POLICY_DIGEST, digest, sign};
use crate::dian::ubl::{self, STS};
use crate::dian::xml::c14n::{Method, canonicalize};
use crate::dian::xml::tree::Tree;
use chrono::Utc;
use std::path::Path;
use std::process::Command;

fn signed(document: &Document, certificate: &Certificate) -> String {
    let unsigned = ubl::write(document).expect("writes");
    sign(&unsigned, certificate, Utc::now()).expect("signs")
}

fn documents() -> Vec<(&'static str, Document)> {
    let invoice = fixtures::invoice(990_000_001);
    let note = fixtures::credit_note(&invoice);
    vec![
        ("invoice", invoice),
        ("invoice-company", fixtures::invoice_to_company(990_000_002)),
        ("credit-note", note),
    ]
}

/// `xmllint --noout --schema` with a schema importing the document's UBL schema and XAdES, so
/// that the signature's parts are checked too (UBL's extension content is `lax`).
fn xmllint(xsd: &Path, dir: &Path, document: &Path, credit_note: bool) -> (bool, String) {
    let (namespace, file) = if credit_note {
        (ubl::CREDIT_NOTE_NS, "maindoc/UBL-CreditNote-2.1.xsd")
    } else {
        (ubl::INVOICE_NS, "maindoc/UBL-Invoice-2.1.xsd")
    };
    let wrapper = format!(
        r#"<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema" targetNamespace="urn:billing:test">
  <xsd:import namespace="{namespace}" schemaLocation="{}"/>
  <xsd:import namespace="http://uri.etsi.org/01903/v1.3.2#" schemaLocation="{}"/>
</xsd:schema>"#,
        xsd.join(file).display(),
        xsd.join("common/UBL-XAdESv132-2.1.xsd").display()
    );
    let schema = fixtures::write(dir, &format!("wrapper-{credit_note}.xsd"), &wrapper);
    run_xmllint(&schema, document)
}

fn run_xmllint(schema: &Path, document: &Path) -> (bool, String) {
    let output = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(schema)
        .arg(document)
        .output()
        .expect("xmllint runs");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    eprintln!("xmllint: {}", said.trim());
    (output.status.success(), said)
}

#[test]
fn signed_documents_validate_against_dians_ubl_schemas() {
    let (Some(_), Some(xsd), Some(generated)) = (
        fixtures::tool("xmllint"),
        fixtures::xsd_dir(),
        fixtures::generate_certificate(),
    ) else {
        return;
    };
    let certificate = generated.certificate();
    for (name, document) in documents() {
        let path = fixtures::write(
            &generated.dir,
            &format!("{name}.xml"),
            &signed(&document, &certificate),
        );
        let (valid, said) = xmllint(&xsd, &generated.dir, &path, !document.is_invoice());
        assert!(valid, "{name} is not valid: {said}");
    }
}

/// `sts:DianExtensions` read alone against `DIAN_UBL_Structures.xsd`: valid except for the
/// one place the annex and the schema disagree. The schema lists document codes as
/// `schemeID`'s values of `ProviderID` and `AuthorizationProviderID`, where the annex (and
/// every document DIAN accepts) puts the NIT's check digit (docs/dian.md, "The schemas").
#[test]
fn the_dian_extensions_follow_dians_structures_schema_but_for_the_check_digits() {
    let (Some(_), Some(xsd), Some(generated)) = (
        fixtures::tool("xmllint"),
        fixtures::xsd_dir(),
        fixtures::generate_certificate(),
    ) else {
        return;
    };
    let certificate = generated.certificate();
    for (name, document) in documents() {
        let text = signed(&document, &certificate);
        let tree = Tree::parse(&text).expect("reads");
        let extensions = tree
            .descendants(0)
            .find(|&e| tree.is(e, STS, "DianExtensions"))
            .expect("DianExtensions");
        let alone = canonicalize(&tree, extensions, &Method::Inclusive, None).expect("c14n");
        let path = fixtures::write(
            &generated.dir,
            &format!("{name}-extensions.xml"),
            &String::from_utf8(alone).expect("utf8"),
        );
        let (valid, said) = run_xmllint(&xsd.join("maindoc/DIAN_UBL_Structures.xsd"), &path);
        let unexpected: Vec<&str> = said
            .lines()
            .filter(|line| line.contains("error") || line.contains("Schemas validity"))
            .filter(|line| !(line.contains("attribute 'schemeID'") && line.contains("ProviderID")))
            .filter(|line| !line.contains("fails to validate"))
            .collect();
        assert!(unexpected.is_empty(), "{name}: {unexpected:?}");
        let check_digit_errors = said
            .lines()
            .filter(|l| l.contains("attribute 'schemeID'"))
            .count();
        assert_eq!(check_digit_errors, 2, "{name}: {said}");
        assert!(!valid || check_digit_errors == 0);
    }
}

fn xmlsec1_verify(generated: &Generated, document: &Path) -> (bool, String) {
    let output = Command::new("xmlsec1")
        .arg("--verify")
        .arg("--trusted-pem")
        .arg(&generated.pem)
        .args(["--id-attr:Id", "http://www.w3.org/2000/09/xmldsig#:KeyInfo"])
        .args([
            "--id-attr:Id",
            "http://uri.etsi.org/01903/v1.3.2#:SignedProperties",
        ])
        .arg(document)
        .output()
        .expect("xmlsec1 runs");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    eprintln!("xmlsec1: {}", said.trim());
    (output.status.success(), said)
}

#[test]
fn xmlsec1_verifies_the_signature_made_with_either_pkcs12_encryption() {
    let (Some(_), Some(generated)) = (fixtures::tool("xmlsec1"), fixtures::generate_certificate())
    else {
        return;
    };
    for (encryption, p12) in [
        ("aes", &generated.aes_p12),
        ("legacy", &generated.legacy_p12),
    ] {
        let certificate = Certificate::from_pkcs12(p12, PASSWORD).expect("reads the PKCS#12");
        for (name, document) in documents() {
            let text = signed(&document, &certificate);
            let path = fixtures::write(&generated.dir, &format!("{name}-{encryption}.xml"), &text);
            let (verified, said) = xmlsec1_verify(&generated, &path);
            assert!(verified, "{name} signed with the {encryption} file: {said}");
            // One character changed anywhere signed, and the signature no longer holds.
            let tampered = text.replacen("Plan ", "Plan-", 1);
            let path = fixtures::write(
                &generated.dir,
                &format!("{name}-{encryption}-x.xml"),
                &tampered,
            );
            assert!(
                !xmlsec1_verify(&generated, &path).0,
                "{name}: a changed document verifies"
            );
        }
    }
}

#[test]
fn the_policy_digest_is_the_sha256_of_dians_policy_document() {
    let Some(xsd) = fixtures::xsd_dir() else {
        return;
    };
    let pdf = xsd.join("../politicadefirmav2.pdf");
    let bytes = std::fs::read(&pdf).expect("facho's data holds politicadefirmav2.pdf");
    assert_eq!(digest(&bytes), POLICY_DIGEST);
}
