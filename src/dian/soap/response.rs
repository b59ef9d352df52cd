//! DIAN's answer (`DianResponse`, in `SendBillSyncResult` or `GetStatusResult`): whether the
//! document is valid, the status code and description, the rules it broke (`ErrorMessage`,
//! each `Regla: FAD06, Rechazo: …`), its key (CUFE or CUDE) and the ApplicationResponse.
//! Written by the sandbox, read by the client; `outcome` says what an answer means.

use super::envelope::{SOAP12, WCF};
use crate::dian::xml::tree::Tree;
use quick_xml::escape::escape;

const RESPONSE_NS: &str = "http://schemas.datacontract.org/2004/07/DianResponse";
const ARRAYS_NS: &str = "http://schemas.microsoft.com/2003/10/Serialization/Arrays";

/// A `DianResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DianResponse {
    pub is_valid: bool,
    /// `00` processed, `66` not found, `99` refused.
    pub status_code: String,
    pub status_description: String,
    pub status_message: String,
    pub errors: Vec<String>,
    /// The document's CUFE or CUDE: the track id `GetStatus` takes.
    pub document_key: Option<String>,
    pub xml_base64: Option<String>,
}

/// Processed and valid.
pub const ACCEPTED: &str = "00";
/// `GetStatus` of a track id DIAN does not know.
pub const NOT_FOUND: &str = "66";
/// Validated with errors: the document is refused.
pub const REFUSED: &str = "99";
/// Every status DIAN answers a refused document with (with `IsValid` false): the only ones
/// taken as a rejection (docs/dian.md).
pub const REJECTIONS: &[&str] = &[REFUSED];
/// The rule of a document DIAN already has (its number or key sent before).
pub const DUPLICATE_RULE: &str = "Regla: 90,";

impl DianResponse {
    /// The SOAP 1.2 envelope answering `operation` (`SendBillSync`, `GetStatus`).
    pub fn envelope(&self, operation: &str) -> String {
        let errors: String = self
            .errors
            .iter()
            .map(|error| format!("<c:string>{}</c:string>", escape(error.as_str())))
            .collect();
        let optional = |name: &str, value: &Option<String>| match value {
            Some(value) => format!("<b:{name}>{}</b:{name}>", escape(value.as_str())),
            None => format!("<b:{name} i:nil=\"true\"/>"),
        };
        format!(
            r#"<s:Envelope xmlns:s="{SOAP12}"><s:Body><{operation}Response xmlns="{WCF}"><{operation}Result xmlns:b="{RESPONSE_NS}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><b:ErrorMessage xmlns:c="{ARRAYS_NS}">{errors}</b:ErrorMessage><b:IsValid>{}</b:IsValid><b:StatusCode>{}</b:StatusCode><b:StatusDescription>{}</b:StatusDescription><b:StatusMessage>{}</b:StatusMessage>{}<b:XmlBytes i:nil="true"/>{}<b:XmlFileName i:nil="true"/></{operation}Result></{operation}Response></s:Body></s:Envelope>"#,
            self.is_valid,
            escape(self.status_code.as_str()),
            escape(self.status_description.as_str()),
            escape(self.status_message.as_str()),
            optional("XmlBase64Bytes", &self.xml_base64),
            optional("XmlDocumentKey", &self.document_key),
        )
    }

    /// Reads the `…Result` of an answer; `None` when the text is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let tree = Tree::parse(text).ok()?;
        if !tree.is(tree.root(), SOAP12, "Envelope") {
            return None;
        }
        let body = tree.child(tree.root(), SOAP12, "Body")?;
        let response = tree.child_elements(body).next()?;
        let result = tree.child_elements(response).next()?;
        let field = |name: &str| {
            tree.child(result, RESPONSE_NS, name)
                .map(|e| tree.text(e).trim().to_owned())
                .filter(|text| !text.is_empty())
        };
        let errors = tree
            .child(result, RESPONSE_NS, "ErrorMessage")
            .map(|list| {
                tree.children(list, ARRAYS_NS, "string")
                    .map(|s| tree.text(s))
                    .collect()
            })
            .unwrap_or_default();
        Some(Self {
            is_valid: field("IsValid")? == "true",
            status_code: field("StatusCode")?,
            status_description: field("StatusDescription").unwrap_or_default(),
            status_message: field("StatusMessage").unwrap_or_default(),
            errors,
            document_key: field("XmlDocumentKey"),
            xml_base64: field("XmlBase64Bytes"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_back_as_written() {
        let answer = DianResponse {
            is_valid: false,
            status_code: REFUSED.into(),
            status_description: "Validación contiene errores en campos mandatorios.".into(),
            status_message: String::new(),
            errors: vec![
                "Regla: FAD06, Rechazo: Valor del CUFE no está calculado correctamente.".into(),
            ],
            document_key: Some("abc".into()),
            xml_base64: None,
        };
        assert_eq!(
            DianResponse::parse(&answer.envelope("SendBillSync")),
            Some(answer)
        );
        assert_eq!(DianResponse::parse("<html>503</html>"), None);
    }
}
