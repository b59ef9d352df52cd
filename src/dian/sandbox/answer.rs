//! The ApplicationResponse the sandbox DIAN answers an accepted document with, as DIAN does
//! (`XmlBase64Bytes` of `SendBillSync` and `GetStatus`): a UBL 2.1 `ApplicationResponse` from
//! DIAN (NIT 800197268) to the seller, response code `02` ("validated by DIAN"), naming the
//! document's number and CUFE or CUDE. DIAN signs its own; the sandbox's is not signed, and
//! nothing of ours checks a signature on it: it is kept and handed on to the buyer inside the
//! AttachedDocument (`dian::attached`).

use crate::dian::ubl::{CAC, CBC};
use crate::domain::dian::COLOMBIA;
use chrono::{DateTime, Utc};
use quick_xml::escape::escape;
use sha2::{Digest, Sha384};

/// DIAN's own NIT, the ApplicationResponse's sender.
const DIAN_NIT: &str = "800197268";
const APPLICATION_RESPONSE_NS: &str =
    "urn:oasis:names:specification:ubl:schema:xsd:ApplicationResponse-2";

/// DIAN's ApplicationResponse accepting the document `number` (key `key`) of `seller_nit`,
/// validated at `at`.
pub fn application_response(
    seller_nit: &str,
    number: &str,
    key: &str,
    invoice: bool,
    at: DateTime<Utc>,
) -> String {
    let local = at.with_timezone(&COLOMBIA);
    let scheme = if invoice {
        "CUFE-SHA384"
    } else {
        "CUDE-SHA384"
    };
    let own_key: String = Sha384::digest(format!("{key}{DIAN_NIT}{}", at.timestamp_millis()))
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let party = |nit: &str| {
        format!(
            "<cac:PartyTaxScheme><cbc:CompanyID schemeAgencyID=\"195\" schemeName=\"31\">{}</cbc:CompanyID><cac:TaxScheme><cbc:ID>01</cbc:ID><cbc:Name>IVA</cbc:Name></cac:TaxScheme></cac:PartyTaxScheme>",
            escape(nit)
        )
    };
    format!(
        concat!(
            r#"<?xml version="1.0" encoding="UTF-8"?>"#,
            r#"<ApplicationResponse xmlns="{ns}" xmlns:cac="{cac}" xmlns:cbc="{cbc}">"#,
            "<cbc:UBLVersionID>UBL 2.1</cbc:UBLVersionID>",
            "<cbc:CustomizationID>1</cbc:CustomizationID>",
            "<cbc:ProfileID>DIAN 2.1</cbc:ProfileID>",
            "<cbc:ProfileExecutionID>2</cbc:ProfileExecutionID>",
            "<cbc:ID>{id}</cbc:ID>",
            r#"<cbc:UUID schemeName="CUDE-SHA384">{own_key}</cbc:UUID>"#,
            "<cbc:IssueDate>{date}</cbc:IssueDate>",
            "<cbc:IssueTime>{time}-05:00</cbc:IssueTime>",
            "<cac:SenderParty>{dian}</cac:SenderParty>",
            "<cac:ReceiverParty>{seller}</cac:ReceiverParty>",
            "<cac:DocumentResponse>",
            "<cac:Response><cbc:ResponseCode>02</cbc:ResponseCode>",
            "<cbc:Description>Documento validado por la DIAN</cbc:Description></cac:Response>",
            "<cac:DocumentReference><cbc:ID>{number}</cbc:ID>",
            r#"<cbc:UUID schemeName="{scheme}">{key}</cbc:UUID></cac:DocumentReference>"#,
            "</cac:DocumentResponse>",
            "</ApplicationResponse>"
        ),
        ns = APPLICATION_RESPONSE_NS,
        cac = CAC,
        cbc = CBC,
        id = at.timestamp_millis(),
        own_key = own_key,
        date = local.format("%Y-%m-%d"),
        time = local.format("%H:%M:%S"),
        dian = party(DIAN_NIT),
        seller = party(seller_nit),
        number = escape(number),
        scheme = scheme,
        key = escape(key),
    )
}
