//! The requests of DIAN's web service (`WcfDianCustomerServices.svc`, SOAP 1.2): the body of
//! `SendBillSync` (`fileName`, `contentFile`: the document zipped, base64) or `GetStatus`
//! (`trackId`), in an envelope whose header carries WS-Security as DIAN asks for it: a
//! `wsu:Timestamp`, the certificate as a `wsse:BinarySecurityToken`, `wsa:Action` and a
//! `wsa:To` signed with RSA-SHA256 over its exclusive canonical form (`InclusiveNamespaces`
//! `soap wcf`; the `SignedInfo` with `wsa soap wcf`), the key named by a
//! `wsse:SecurityTokenReference`. Also reading a request, for the sandbox.

use crate::dian::certificate::{Certificate, CertificateError};
use crate::dian::signature::{RSA_SHA256, SHA256, digest};
use crate::dian::xml::c14n::{EXCLUSIVE, Method, canonicalize};
use crate::dian::xml::tree::{ReadError, Tree};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use quick_xml::escape::escape;

pub const SOAP12: &str = "http://www.w3.org/2003/05/soap-envelope";
pub const WCF: &str = "http://wcf.dian.colombia";
pub const WSA: &str = "http://www.w3.org/2005/08/addressing";
pub const WSSE: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
pub const WSU: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd";
const X509V3: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3";
const BASE64_BINARY: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary";

/// How long a request's timestamp says it is good for.
const TIME_TO_LIVE: Duration = Duration::seconds(60);

/// One call of the web service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Validate one document now: the ZIP's name and its bytes, base64.
    SendBillSync {
        file_name: String,
        content_file: String,
    },
    /// Ask about a document by its track id (its CUFE or CUDE).
    GetStatus { track_id: String },
}

impl Operation {
    pub fn name(&self) -> &'static str {
        match self {
            Operation::SendBillSync { .. } => "SendBillSync",
            Operation::GetStatus { .. } => "GetStatus",
        }
    }

    /// `wsa:Action` and the media type's `action`.
    pub fn action(&self) -> String {
        format!("{WCF}/IWcfDianCustomerServices/{}", self.name())
    }

    fn body(&self) -> String {
        match self {
            Operation::SendBillSync {
                file_name,
                content_file,
            } => format!(
                "<wcf:SendBillSync><wcf:fileName>{}</wcf:fileName><wcf:contentFile>{}</wcf:contentFile></wcf:SendBillSync>",
                escape(file_name),
                escape(content_file)
            ),
            Operation::GetStatus { track_id } => format!(
                "<wcf:GetStatus><wcf:trackId>{}</wcf:trackId></wcf:GetStatus>",
                escape(track_id)
            ),
        }
    }
}

/// The signed envelope of `operation` addressed `to` (the service's address), at `now`.
pub fn request(
    operation: &Operation,
    to: &str,
    certificate: &Certificate,
    now: DateTime<Utc>,
) -> Result<String, CertificateError> {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let created = now.to_rfc3339_opts(SecondsFormat::Millis, true);
    let expires = (now + TIME_TO_LIVE).to_rfc3339_opts(SecondsFormat::Millis, true);
    let to_id = format!("ID-{suffix}");
    let token_id = format!("X509-{suffix}");
    let envelope = |signature: &str| {
        format!(
            r#"<soap:Envelope xmlns:soap="{SOAP12}" xmlns:wcf="{WCF}"><soap:Header xmlns:wsa="{WSA}"><wsse:Security xmlns:wsse="{WSSE}" xmlns:wsu="{WSU}"><wsu:Timestamp wsu:Id="TS-{suffix}"><wsu:Created>{created}</wsu:Created><wsu:Expires>{expires}</wsu:Expires></wsu:Timestamp><wsse:BinarySecurityToken EncodingType="{BASE64_BINARY}" ValueType="{X509V3}" wsu:Id="{token_id}">{}</wsse:BinarySecurityToken>{signature}</wsse:Security><wsa:Action>{}</wsa:Action><wsa:To xmlns:wsu="{WSU}" wsu:Id="{to_id}">{}</wsa:To></soap:Header><soap:Body>{}</soap:Body></soap:Envelope>"#,
            certificate.base64(),
            operation.action(),
            escape(to),
            operation.body()
        )
    };
    let read =
        |text: &str| Tree::parse(text).map_err(|err| CertificateError::X509(err.to_string()));
    let draft = read(&envelope(""))?;
    let to_at = draft.by_id(&to_id).ok_or(CertificateError::Sign)?;
    let to_method = Method::Exclusive(vec!["soap".into(), "wcf".into()]);
    let to_digest =
        digest(&canonicalize(&draft, to_at, &to_method, None).map_err(|_| CertificateError::Sign)?);
    let signed_info = format!(
        r##"<ds:SignedInfo><ds:CanonicalizationMethod Algorithm="{EXCLUSIVE}"><ec:InclusiveNamespaces xmlns:ec="{EXCLUSIVE}" PrefixList="wsa soap wcf"/></ds:CanonicalizationMethod><ds:SignatureMethod Algorithm="{RSA_SHA256}"/><ds:Reference URI="#{to_id}"><ds:Transforms><ds:Transform Algorithm="{EXCLUSIVE}"><ec:InclusiveNamespaces xmlns:ec="{EXCLUSIVE}" PrefixList="soap wcf"/></ds:Transform></ds:Transforms><ds:DigestMethod Algorithm="{SHA256}"/><ds:DigestValue>{to_digest}</ds:DigestValue></ds:Reference></ds:SignedInfo>"##
    );
    let signature = |value: &str| {
        format!(
            r##"<ds:Signature xmlns:ds="http://www.w3.org/2000/09/xmldsig#" Id="SIG-{suffix}">{signed_info}<ds:SignatureValue>{value}</ds:SignatureValue><ds:KeyInfo Id="KI-{suffix}"><wsse:SecurityTokenReference wsu:Id="STR-{suffix}"><wsse:Reference URI="#{token_id}" ValueType="{X509V3}"/></wsse:SecurityTokenReference></ds:KeyInfo></ds:Signature>"##
        )
    };
    let draft = read(&envelope(&signature("")))?;
    let signed_info_at = draft
        .descendants(draft.root())
        .find(|&e| draft.is(e, crate::dian::ubl::DS, "SignedInfo"))
        .ok_or(CertificateError::Sign)?;
    let method = Method::Exclusive(vec!["wsa".into(), "soap".into(), "wcf".into()]);
    let canonical =
        canonicalize(&draft, signed_info_at, &method, None).map_err(|_| CertificateError::Sign)?;
    let value = STANDARD.encode(certificate.sign_sha256(&canonical)?);
    Ok(envelope(&signature(&value)))
}

/// A request as the sandbox reads it.
#[derive(Debug)]
pub struct Received {
    pub tree: Tree,
    pub operation: Operation,
    /// `wsa:To`'s text.
    pub to: Option<String>,
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("the request is not a SOAP 1.2 envelope with a known operation")]
    Shape,
}

pub fn read_request(text: &str) -> Result<Received, RequestError> {
    let tree = Tree::parse(text)?;
    if !tree.is(tree.root(), SOAP12, "Envelope") {
        return Err(RequestError::Shape);
    }
    let body = tree
        .child(tree.root(), SOAP12, "Body")
        .ok_or(RequestError::Shape)?;
    let call = tree
        .child_elements(body)
        .next()
        .ok_or(RequestError::Shape)?;
    let field = |name: &str| {
        tree.child(call, WCF, name)
            .map(|e| tree.text(e).trim().to_owned())
    };
    let operation = match tree.expanded(call) {
        (WCF, "SendBillSync") => Operation::SendBillSync {
            file_name: field("fileName").unwrap_or_default(),
            content_file: field("contentFile").ok_or(RequestError::Shape)?,
        },
        (WCF, "GetStatus") => Operation::GetStatus {
            track_id: field("trackId").ok_or(RequestError::Shape)?,
        },
        _ => return Err(RequestError::Shape),
    };
    let to = tree
        .path(tree.root(), &[(SOAP12, "Header"), (WSA, "To")])
        .map(|e| tree.text(e));
    Ok(Received {
        tree,
        operation,
        to,
    })
}
