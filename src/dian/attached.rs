//! The AttachedDocument of an accepted invoice (CONTRACT §12a; the Anexo Técnico's container
//! for delivery to the buyer): a UBL 2.1 `AttachedDocument` whose `cac:Attachment` carries the
//! signed invoice exactly as DIAN accepted it, and whose `cac:ParentDocumentLineReference`
//! carries DIAN's `ApplicationResponse` for it (kept from DIAN's answer) with the result of
//! DIAN's validation. Both are embedded as text (`CDATA`), as the annex has them; the container
//! itself is valid against `UBL-AttachedDocument-2.1.xsd`. It is not signed here: DIAN's
//! ApplicationResponse inside it is DIAN's word, and the invoice inside it is signed.

use super::document::Document;
use crate::domain::dian::COLOMBIA;
use chrono::{DateTime, Utc};
use quick_xml::escape::escape;

const ATTACHED_NS: &str = "urn:oasis:names:specification:ubl:schema:xsd:AttachedDocument-2";
const CAC: &str = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2";
const CBC: &str = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2";
/// DIAN, the validator the annex names.
const VALIDATOR: &str = "Unidad Especial Dirección de Impuestos y Aduanas Nacionales";

/// An accepted invoice's parts: the document it stands for, its signed XML, DIAN's
/// ApplicationResponse, and when DIAN accepted it.
pub struct Accepted<'a> {
    pub document: &'a Document,
    pub signed_xml: &'a str,
    pub application_response: &'a str,
    pub accepted_at: DateTime<Utc>,
}

/// Text inside `CDATA`: a `]]>` in it (none in well-formed documents' text, but never
/// assumed) is split across two sections.
fn cdata(text: &str) -> String {
    format!("<![CDATA[{}]]>", text.replace("]]>", "]]]]><![CDATA[>"))
}

/// A party as the AttachedDocument names it: its name and tax id.
fn party(name: &str, id: &str, scheme: &str) -> String {
    format!(
        concat!(
            "<cac:PartyTaxScheme><cbc:RegistrationName>{name}</cbc:RegistrationName>",
            r#"<cbc:CompanyID schemeAgencyID="195" schemeName="{scheme}">{id}</cbc:CompanyID>"#,
            "<cbc:TaxLevelCode>R-99-PN</cbc:TaxLevelCode>",
            "<cac:TaxScheme><cbc:ID>01</cbc:ID><cbc:Name>IVA</cbc:Name></cac:TaxScheme>",
            "</cac:PartyTaxScheme>"
        ),
        name = escape(name),
        id = escape(id),
        scheme = scheme,
    )
}

/// The AttachedDocument of `accepted`.
pub fn attached_document(accepted: &Accepted<'_>) -> String {
    let document = accepted.document;
    let number = document.number();
    let (issue_date, issue_time) = document.issue_date_time();
    let validated = accepted.accepted_at.with_timezone(&COLOMBIA);
    let environment = document.environment.code();
    format!(
        concat!(
            r#"<?xml version="1.0" encoding="UTF-8"?>"#,
            r#"<AttachedDocument xmlns="{ns}" xmlns:cac="{cac}" xmlns:cbc="{cbc}">"#,
            "<cbc:UBLVersionID>UBL 2.1</cbc:UBLVersionID>",
            "<cbc:CustomizationID>Documentos adjuntos</cbc:CustomizationID>",
            "<cbc:ProfileID>Factura Electrónica de Venta</cbc:ProfileID>",
            "<cbc:ProfileExecutionID>{environment}</cbc:ProfileExecutionID>",
            "<cbc:ID>{number}</cbc:ID>",
            "<cbc:IssueDate>{issue_date}</cbc:IssueDate>",
            "<cbc:IssueTime>{issue_time}</cbc:IssueTime>",
            "<cbc:DocumentType>Contenedor de Factura Electrónica</cbc:DocumentType>",
            "<cbc:ParentDocumentID>{number}</cbc:ParentDocumentID>",
            "<cac:SenderParty>{seller}</cac:SenderParty>",
            "<cac:ReceiverParty>{buyer}</cac:ReceiverParty>",
            "<cac:Attachment><cac:ExternalReference>",
            "<cbc:MimeCode>text/xml</cbc:MimeCode><cbc:EncodingCode>UTF-8</cbc:EncodingCode>",
            "<cbc:Description>{invoice}</cbc:Description>",
            "</cac:ExternalReference></cac:Attachment>",
            "<cac:ParentDocumentLineReference><cbc:LineID>1</cbc:LineID>",
            "<cac:DocumentReference><cbc:ID>{number}</cbc:ID>",
            r#"<cbc:UUID schemeName="CUFE-SHA384">{cufe}</cbc:UUID>"#,
            "<cbc:IssueDate>{issue_date}</cbc:IssueDate>",
            "<cbc:DocumentType>ApplicationResponse</cbc:DocumentType>",
            "<cac:Attachment><cac:ExternalReference>",
            "<cbc:MimeCode>text/xml</cbc:MimeCode><cbc:EncodingCode>UTF-8</cbc:EncodingCode>",
            "<cbc:Description>{response}</cbc:Description>",
            "</cac:ExternalReference></cac:Attachment>",
            "<cac:ResultOfVerification><cbc:ValidatorID>{validator}</cbc:ValidatorID>",
            "<cbc:ValidationResultCode>02</cbc:ValidationResultCode>",
            "<cbc:ValidationDate>{validation_date}</cbc:ValidationDate>",
            "<cbc:ValidationTime>{validation_time}-05:00</cbc:ValidationTime>",
            "</cac:ResultOfVerification>",
            "</cac:DocumentReference></cac:ParentDocumentLineReference>",
            "</AttachedDocument>"
        ),
        ns = ATTACHED_NS,
        cac = CAC,
        cbc = CBC,
        environment = environment,
        number = escape(number.as_str()),
        issue_date = issue_date,
        issue_time = issue_time,
        seller = party(&document.seller.legal_name, &document.seller.nit, "31"),
        buyer = party(
            &document.buyer.name,
            &document.buyer.id_number,
            document.buyer.id_scheme()
        ),
        invoice = cdata(accepted.signed_xml),
        cufe = escape(document.unique_code().as_str()),
        response = cdata(accepted.application_response),
        validator = VALIDATOR,
        validation_date = validated.format("%Y-%m-%d"),
        validation_time = validated.format("%H:%M:%S"),
    )
}
