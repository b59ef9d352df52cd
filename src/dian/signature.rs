//! The enveloped XAdES-EPES signature DIAN requires (Anexo Técnico 1.9 §7; policy v2), written
//! into the document's second `ext:UBLExtension`: RSA-SHA256 over the inclusive canonical
//! `ds:SignedInfo`, with three references digested with SHA-256: the whole document (the
//! enveloped-signature transform leaves the signature out), the `ds:KeyInfo` holding the
//! certificate, and the `xades:SignedProperties` (signing time, the certificate's digest and
//! issuer-serial, DIAN's policy with its digest, the role `supplier`).
//!
//! Every digest is taken over the document as it will be sent: the signature's parts are
//! spliced into the text, the text read back (`xml::tree`) and the part canonicalized in place,
//! so the namespaces it inherits from the root are the ones a verifier sees.

use super::certificate::{Certificate, CertificateError};
use super::ubl::{Out, SIGNATURE_SLOT};
use super::xml::c14n::{INCLUSIVE, Method, canonicalize};
use super::xml::tree::{ReadError, Tree};
use crate::domain::dian::COLOMBIA;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, SecondsFormat, Utc};
use sha2::{Digest, Sha256};
use std::io;

/// DIAN's signature policy, version 2.
pub const POLICY_URL: &str =
    "https://facturaelectronica.dian.gov.co/politicadefirma/v2/politicadefirmav2.pdf";
/// Base64 SHA-256 of DIAN's policy document (`politicadefirmav2.pdf`); a test recomputes it
/// from the copy in facho's package.
pub const POLICY_DIGEST: &str = "dMoMvtcG5aIzgYo0tIsSQeVJBDnUnfSOfBpxXrmor0Y=";
pub const POLICY_DESCRIPTION: &str =
    "Política de firma para facturas electrónicas de la República de Colombia";

pub const RSA_SHA256: &str = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256";
pub const SHA256: &str = "http://www.w3.org/2001/04/xmlenc#sha256";
pub const ENVELOPED: &str = "http://www.w3.org/2000/09/xmldsig#enveloped-signature";
pub const SIGNED_PROPERTIES_TYPE: &str = "http://uri.etsi.org/01903#SignedProperties";

/// Why a document could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("the document has no empty signature extension")]
    NoSlot,
    #[error("the document cannot be read back: {0}")]
    Read(#[from] ReadError),
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    #[error("writing the signature failed")]
    Io(#[from] io::Error),
}

/// `unsigned` (from `ubl::write`) with its signature, as `signing_time` and `certificate`
/// make it: the exact text to keep and send.
pub fn sign(
    unsigned: &str,
    certificate: &Certificate,
    signing_time: DateTime<Utc>,
) -> Result<String, SignError> {
    let at = unsigned.rfind(SIGNATURE_SLOT).ok_or(SignError::NoSlot)?;
    let id = format!("xmldsig-{}", uuid::Uuid::new_v4());
    let splice = |signature: &str| -> String {
        let open = "<ext:UBLExtension><ext:ExtensionContent>";
        let close = "</ext:ExtensionContent></ext:UBLExtension>";
        let rest = &unsigned[at + SIGNATURE_SLOT.len()..];
        format!("{}{open}{signature}{close}{rest}", &unsigned[..at])
    };

    // 1. The document without its signature, as the enveloped transform will see it.
    let tree = Tree::parse(unsigned)?;
    let document_digest = digest(&canonicalize(&tree, tree.root(), &Method::Inclusive, None)?);

    // 2. KeyInfo and SignedProperties, digested where they will stand.
    let parts = Parts {
        id: &id,
        certificate,
        signing_time: signing_time
            .with_timezone(&COLOMBIA)
            .to_rfc3339_opts(SecondsFormat::Millis, false),
    };
    let draft = splice(&parts.signature("", "")?);
    let tree = Tree::parse(&draft)?;
    let by_id = |suffix: &str| {
        tree.by_id(&format!("{id}{suffix}"))
            .ok_or(SignError::Read(ReadError::Empty))
    };
    let key_info_digest = digest(&canonicalize(
        &tree,
        by_id("-keyinfo")?,
        &Method::Inclusive,
        None,
    )?);
    let properties_digest = digest(&canonicalize(
        &tree,
        by_id("-signedprops")?,
        &Method::Inclusive,
        None,
    )?);

    // 3. SignedInfo with the three digests, canonicalized in place and signed.
    let digests = [document_digest, key_info_digest, properties_digest];
    let signed_info = parts.signed_info(&digests)?;
    let draft = splice(&parts.signature(&signed_info, "")?);
    let tree = Tree::parse(&draft)?;
    let signed_info_at = tree
        .descendants(tree.root())
        .find(|&e| tree.is(e, super::ubl::DS, "SignedInfo"))
        .ok_or(SignError::Read(ReadError::Empty))?;
    let canonical = canonicalize(&tree, signed_info_at, &Method::Inclusive, None)?;
    let value = STANDARD.encode(certificate.sign_sha256(&canonical)?);
    Ok(splice(&parts.signature(&signed_info, &value)?))
}

/// Base64 SHA-256.
pub fn digest(bytes: &[u8]) -> String {
    STANDARD.encode(Sha256::digest(bytes))
}

/// A reference's attributes, as `Out` takes them.
type Attributes<'a> = &'a [(&'a str, &'a str)];

struct Parts<'a> {
    id: &'a str,
    certificate: &'a Certificate,
    signing_time: String,
}

impl Parts<'_> {
    fn signed_info(&self, digests: &[String; 3]) -> io::Result<String> {
        let id = self.id;
        let mut out = Out::new();
        out.open("ds:SignedInfo", &[])?;
        out.empty("ds:CanonicalizationMethod", &[("Algorithm", INCLUSIVE)])?;
        out.empty("ds:SignatureMethod", &[("Algorithm", RSA_SHA256)])?;
        let references: [(Attributes<'_>, &[&str]); 3] = [
            (&[("Id", &format!("{id}-ref0")), ("URI", "")], &[ENVELOPED]),
            (&[("URI", &format!("#{id}-keyinfo"))], &[INCLUSIVE]),
            (
                &[
                    ("Type", SIGNED_PROPERTIES_TYPE),
                    ("URI", &format!("#{id}-signedprops")),
                ],
                &[INCLUSIVE],
            ),
        ];
        for ((attributes, transforms), value) in references.iter().zip(digests) {
            out.open("ds:Reference", attributes)?;
            out.open("ds:Transforms", &[])?;
            for transform in *transforms {
                out.empty("ds:Transform", &[("Algorithm", transform)])?;
            }
            out.close("ds:Transforms")?;
            out.empty("ds:DigestMethod", &[("Algorithm", SHA256)])?;
            out.leaf("ds:DigestValue", &[], value)?;
            out.close("ds:Reference")?;
        }
        out.close("ds:SignedInfo")?;
        Ok(String::from_utf8_lossy(&out.finish()).into_owned())
    }

    /// The whole `ds:Signature`; `signed_info` and `value` are empty in the drafts.
    fn signature(&self, signed_info: &str, value: &str) -> io::Result<String> {
        let id = self.id;
        let certificate = self.certificate;
        let mut out = Out::new();
        out.open("ds:Signature", &[("Id", id)])?;
        let mut text = String::from_utf8_lossy(&out.finish()).into_owned();
        text.push_str(signed_info);

        let mut out = Out::new();
        out.leaf(
            "ds:SignatureValue",
            &[("Id", &format!("{id}-sigvalue"))],
            value,
        )?;
        out.open("ds:KeyInfo", &[("Id", &format!("{id}-keyinfo"))])?;
        out.open("ds:X509Data", &[])?;
        out.leaf("ds:X509Certificate", &[], &certificate.base64())?;
        out.close("ds:X509Data")?;
        out.close("ds:KeyInfo")?;
        out.open("ds:Object", &[])?;
        out.open(
            "xades:QualifyingProperties",
            &[("Target", &format!("#{id}"))],
        )?;
        out.open(
            "xades:SignedProperties",
            &[("Id", &format!("{id}-signedprops"))],
        )?;
        out.open("xades:SignedSignatureProperties", &[])?;
        out.leaf("xades:SigningTime", &[], &self.signing_time)?;
        out.open("xades:SigningCertificate", &[])?;
        out.open("xades:Cert", &[])?;
        out.open("xades:CertDigest", &[])?;
        out.empty("ds:DigestMethod", &[("Algorithm", SHA256)])?;
        out.leaf("ds:DigestValue", &[], &certificate.digest_sha256())?;
        out.close("xades:CertDigest")?;
        out.open("xades:IssuerSerial", &[])?;
        out.leaf("ds:X509IssuerName", &[], certificate.issuer())?;
        out.leaf("ds:X509SerialNumber", &[], certificate.serial())?;
        out.close("xades:IssuerSerial")?;
        out.close("xades:Cert")?;
        out.close("xades:SigningCertificate")?;
        out.open("xades:SignaturePolicyIdentifier", &[])?;
        out.open("xades:SignaturePolicyId", &[])?;
        out.open("xades:SigPolicyId", &[])?;
        out.leaf("xades:Identifier", &[], POLICY_URL)?;
        out.leaf("xades:Description", &[], POLICY_DESCRIPTION)?;
        out.close("xades:SigPolicyId")?;
        out.open("xades:SigPolicyHash", &[])?;
        out.empty("ds:DigestMethod", &[("Algorithm", SHA256)])?;
        out.leaf("ds:DigestValue", &[], POLICY_DIGEST)?;
        out.close("xades:SigPolicyHash")?;
        out.close("xades:SignaturePolicyId")?;
        out.close("xades:SignaturePolicyIdentifier")?;
        out.open("xades:SignerRole", &[])?;
        out.open("xades:ClaimedRoles", &[])?;
        out.leaf("xades:ClaimedRole", &[], "supplier")?;
        out.close("xades:ClaimedRoles")?;
        out.close("xades:SignerRole")?;
        out.close("xades:SignedSignatureProperties")?;
        out.close("xades:SignedProperties")?;
        out.close("xades:QualifyingProperties")?;
        out.close("ds:Object")?;
        out.close("ds:Signature")?;
        text.push_str(&String::from_utf8_lossy(&out.finish()));
        Ok(text)
    }
}
