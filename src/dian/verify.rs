//! Checking an XML signature the way a receiver does, for the sandbox DIAN (a document's
//! XAdES-EPES signature, a request's WS-Security one) and for our own tests: every reference's
//! digest recomputed from the document as received, the `ds:SignedInfo` canonicalized and its
//! RSA-SHA256 value checked against the certificate the signature carries (in `ds:X509Data`, or
//! the `wsse:BinarySecurityToken` its `wsse:SecurityTokenReference` names). Only SHA-256
//! digests, RSA-SHA256 and the two canonical forms are accepted: what DIAN's policy allows
//! and what we send.

use super::certificate::CertificateInfo;
use super::signature::{ENVELOPED, RSA_SHA256, SHA256, digest};
use super::ubl::DS;
use super::xml::c14n::{EXCLUSIVE, INCLUSIVE, Method, canonicalize};
use super::xml::tree::Tree;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

const WSSE: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";

/// The most references a signature may list: DIAN's documents sign three, a WS-Security
/// header one or two. Each costs a canonicalization of the document.
const MAX_REFERENCES: usize = 8;
/// The most transforms a reference may list (DIAN's: the enveloped-signature one and a
/// canonicalization).
const MAX_TRANSFORMS: usize = 4;
/// The most prefixes an exclusive canonicalization's `PrefixList` may name.
const MAX_INCLUSIVE_PREFIXES: usize = 32;

/// Why a signature does not hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    #[error("there is no ds:Signature")]
    Missing,
    #[error("the signature is malformed: {0}")]
    Malformed(String),
    #[error("the algorithm {0} is not accepted")]
    Algorithm(String),
    #[error("the reference {0} does not resolve")]
    Unresolved(String),
    #[error("the digest of the reference {0} does not match")]
    Digest(String),
    #[error("the signature value does not verify with the certificate")]
    Value,
}

/// A signature that holds: its element, the certificate it was made with, and the
/// references it covers (`""` for the whole document, else the Id without `#`).
#[derive(Debug)]
pub struct Verified {
    pub signature: usize,
    pub certificate: CertificateInfo,
    pub certificate_der: Vec<u8>,
    pub references: Vec<String>,
}

/// Verifies the first `ds:Signature` of `tree` (below `within` when given).
pub fn verify(tree: &Tree, within: Option<usize>) -> Result<Verified, Fault> {
    let signature = tree
        .descendants(within.unwrap_or(tree.root()))
        .find(|&e| tree.is(e, DS, "Signature"))
        .ok_or(Fault::Missing)?;
    let malformed = |what: &str| Fault::Malformed(what.to_owned());
    let signed_info = tree
        .child(signature, DS, "SignedInfo")
        .ok_or_else(|| malformed("no SignedInfo"))?;
    let c14n_at = tree
        .child(signed_info, DS, "CanonicalizationMethod")
        .ok_or_else(|| malformed("no CanonicalizationMethod"))?;
    let signed_info_method = method(tree, c14n_at)?;
    let algorithm = tree
        .child(signed_info, DS, "SignatureMethod")
        .and_then(|m| tree.attribute(m, "Algorithm"))
        .unwrap_or_default();
    if algorithm != RSA_SHA256 {
        return Err(Fault::Algorithm(algorithm.to_owned()));
    }

    // The signature over `SignedInfo` first: only then are its references, each a
    // canonicalization of part of the document, worth computing, and only a few of them.
    let certificate_der = signing_certificate(tree, signature)?;
    let certificate =
        CertificateInfo::read(&certificate_der).map_err(|err| Fault::Malformed(err.to_string()))?;
    let value = tree
        .child(signature, DS, "SignatureValue")
        .map(|v| tree.text(v))
        .ok_or_else(|| malformed("no SignatureValue"))?;
    let value = decode(&value)?;
    let canonical = canonicalize(tree, signed_info, &signed_info_method, None)
        .map_err(|err| Fault::Malformed(err.to_string()))?;
    if !certificate.verifies(&canonical, &value) {
        return Err(Fault::Value);
    }

    let listed: Vec<usize> = tree.children(signed_info, DS, "Reference").collect();
    if listed.is_empty() {
        return Err(malformed("no Reference"));
    }
    if listed.len() > MAX_REFERENCES {
        return Err(malformed("too many references"));
    }
    let mut references = Vec::new();
    for reference in listed {
        let uri = tree
            .attribute(reference, "URI")
            .unwrap_or_default()
            .to_owned();
        check_reference(tree, reference, &uri, signature)?;
        references.push(uri.trim_start_matches('#').to_owned());
    }
    Ok(Verified {
        signature,
        certificate,
        certificate_der,
        references,
    })
}

fn check_reference(
    tree: &Tree,
    reference: usize,
    uri: &str,
    signature: usize,
) -> Result<(), Fault> {
    let target = if uri.is_empty() {
        tree.root()
    } else {
        let id = uri
            .strip_prefix('#')
            .ok_or_else(|| Fault::Unresolved(uri.to_owned()))?;
        tree.by_id(id)
            .ok_or_else(|| Fault::Unresolved(uri.to_owned()))?
    };
    let mut excluded = None;
    let mut canonical_method = Method::Inclusive;
    if let Some(transforms) = tree.child(reference, DS, "Transforms") {
        if tree.children(transforms, DS, "Transform").count() > MAX_TRANSFORMS {
            return Err(Fault::Malformed("too many transforms".into()));
        }
        for transform in tree.children(transforms, DS, "Transform") {
            match tree.attribute(transform, "Algorithm").unwrap_or_default() {
                ENVELOPED => excluded = Some(signature),
                INCLUSIVE | EXCLUSIVE => canonical_method = method(tree, transform)?,
                other => return Err(Fault::Algorithm(other.to_owned())),
            }
        }
    }
    let digest_method = tree
        .child(reference, DS, "DigestMethod")
        .and_then(|m| tree.attribute(m, "Algorithm"))
        .unwrap_or_default();
    if digest_method != SHA256 {
        return Err(Fault::Algorithm(digest_method.to_owned()));
    }
    let expected = tree
        .child(reference, DS, "DigestValue")
        .map(|v| tree.text(v))
        .unwrap_or_default();
    let canonical = canonicalize(tree, target, &canonical_method, excluded)
        .map_err(|err| Fault::Malformed(err.to_string()))?;
    if digest(&canonical) != expected.trim() {
        return Err(Fault::Digest(if uri.is_empty() {
            "\"\"".into()
        } else {
            uri.to_owned()
        }));
    }
    Ok(())
}

/// The canonical form a `ds:CanonicalizationMethod` or `ds:Transform` names, with an exclusive
/// one's `InclusiveNamespaces PrefixList`.
fn method(tree: &Tree, element: usize) -> Result<Method, Fault> {
    match tree.attribute(element, "Algorithm").unwrap_or_default() {
        INCLUSIVE => Ok(Method::Inclusive),
        EXCLUSIVE => {
            let prefixes = tree
                .child_elements(element)
                .find_map(|c| tree.attribute(c, "PrefixList"))
                .unwrap_or_default();
            if prefixes.split_whitespace().count() > MAX_INCLUSIVE_PREFIXES {
                return Err(Fault::Malformed("too many inclusive prefixes".into()));
            }
            Ok(Method::Exclusive(
                prefixes.split_whitespace().map(str::to_owned).collect(),
            ))
        }
        other => Err(Fault::Algorithm(other.to_owned())),
    }
}

/// The DER of the certificate in the signature's `ds:KeyInfo`.
fn signing_certificate(tree: &Tree, signature: usize) -> Result<Vec<u8>, Fault> {
    let key_info = tree
        .child(signature, DS, "KeyInfo")
        .ok_or_else(|| Fault::Malformed("no KeyInfo".into()))?;
    if let Some(certificate) = tree.path(key_info, &[(DS, "X509Data"), (DS, "X509Certificate")]) {
        return decode(&tree.text(certificate));
    }
    let token = tree
        .path(
            key_info,
            &[(WSSE, "SecurityTokenReference"), (WSSE, "Reference")],
        )
        .and_then(|r| tree.attribute(r, "URI"))
        .and_then(|uri| uri.strip_prefix('#'))
        .and_then(|id| tree.by_id(id))
        .ok_or_else(|| Fault::Malformed("KeyInfo names no certificate".into()))?;
    decode(&tree.text(token))
}

fn decode(text: &str) -> Result<Vec<u8>, Fault> {
    let compact: String = text.split_whitespace().collect();
    STANDARD
        .decode(compact)
        .map_err(|_| Fault::Malformed("not base64".into()))
}
