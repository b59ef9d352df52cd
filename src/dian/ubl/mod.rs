//! The UBL 2.1 XML of a `Document`, as DIAN's Anexo Técnico 1.9 lays it out: an `Invoice`
//! (type 01) or a `CreditNote` (type 91), the DIAN extensions in the first `ext:UBLExtension`
//! and the second left empty for the signature (`crate::dian::signature` fills it). Elements
//! follow the order of UBL's schemas, which `xmllint --schema` checks in the tests.
//!
//! - `extensions`: `sts:DianExtensions`.
//! - `parties`: the seller and the buyer.
//! - `amounts`: IVA totals, the monetary totals and the lines.

mod amounts;
mod extensions;
mod parties;

use super::document::{Document, Kind};
use crate::domain::dian::amount;
use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use std::io;

pub const INVOICE_NS: &str = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2";
pub const CREDIT_NOTE_NS: &str = "urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2";
pub const CAC: &str = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2";
pub const CBC: &str = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2";
pub const EXT: &str = "urn:oasis:names:specification:ubl:schema:xsd:CommonExtensionComponents-2";
pub const STS: &str = "dian:gov:co:facturaelectronica:Structures-2-1";
pub const DS: &str = "http://www.w3.org/2000/09/xmldsig#";
pub const XADES: &str = "http://uri.etsi.org/01903/v1.3.2#";
pub const XADES141: &str = "http://uri.etsi.org/01903/v1.4.1#";

/// The empty second extension the signature goes into: written as this exact text once.
pub const SIGNATURE_SLOT: &str = "<ext:UBLExtension><ext:ExtensionContent/></ext:UBLExtension>";

/// The UBL XML of `document`, unsigned (its signature slot empty), UTF-8 with a declaration.
pub fn write(document: &Document) -> Result<String, WriteError> {
    document.check().map_err(WriteError::Invalid)?;
    let mut out = Out::new();
    write_document(&mut out, document)?;
    String::from_utf8(out.finish()).map_err(|_| WriteError::Invalid("not UTF-8".into()))
}

/// Why a document could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the document cannot be written: {0}")]
    Invalid(String),
    #[error("writing the XML failed")]
    Io(#[from] io::Error),
}

fn write_document(out: &mut Out, document: &Document) -> io::Result<()> {
    let invoice = document.is_invoice();
    let root = if invoice { "Invoice" } else { "CreditNote" };
    out.raw(Event::Decl(BytesDecl::new(
        "1.0",
        Some("UTF-8"),
        Some("no"),
    )))?;
    out.open(
        root,
        &[
            ("xmlns", if invoice { INVOICE_NS } else { CREDIT_NOTE_NS }),
            ("xmlns:cac", CAC),
            ("xmlns:cbc", CBC),
            ("xmlns:ds", DS),
            ("xmlns:ext", EXT),
            ("xmlns:sts", STS),
            ("xmlns:xades", XADES),
            ("xmlns:xades141", XADES141),
        ],
    )?;
    out.open("ext:UBLExtensions", &[])?;
    out.open("ext:UBLExtension", &[])?;
    out.open("ext:ExtensionContent", &[])?;
    extensions::write(out, document)?;
    out.close("ext:ExtensionContent")?;
    out.close("ext:UBLExtension")?;
    out.slot()?;
    out.close("ext:UBLExtensions")?;

    let (date, time) = document.issue_date_time();
    let environment = document.environment.code();
    out.leaf("cbc:UBLVersionID", &[], "UBL 2.1")?;
    // 10: a standard sales invoice; 20: a credit note that references an electronic invoice.
    out.leaf(
        "cbc:CustomizationID",
        &[],
        if invoice { "10" } else { "20" },
    )?;
    out.leaf(
        "cbc:ProfileID",
        &[],
        if invoice {
            "DIAN 2.1: Factura Electrónica de Venta"
        } else {
            "DIAN 2.1: Nota Crédito de Factura Electrónica de Venta"
        },
    )?;
    out.leaf("cbc:ProfileExecutionID", &[], environment)?;
    out.leaf("cbc:ID", &[], &document.number())?;
    out.leaf(
        "cbc:UUID",
        &[
            ("schemeID", environment),
            (
                "schemeName",
                if invoice {
                    "CUFE-SHA384"
                } else {
                    "CUDE-SHA384"
                },
            ),
        ],
        &document.unique_code(),
    )?;
    out.leaf("cbc:IssueDate", &[], &date)?;
    out.leaf("cbc:IssueTime", &[], &time)?;
    if invoice {
        out.leaf("cbc:InvoiceTypeCode", &[], "01")?;
    } else {
        out.leaf("cbc:CreditNoteTypeCode", &[], "91")?;
    }
    if let Some(note) = &document.note {
        out.leaf("cbc:Note", &[], note)?;
    }
    out.leaf("cbc:DocumentCurrencyCode", &[], "COP")?;
    out.leaf(
        "cbc:LineCountNumeric",
        &[],
        &document.lines.len().to_string(),
    )?;
    if let Kind::CreditNote {
        invoice: reference,
        correction,
        reason,
        ..
    } = &document.kind
    {
        out.open("cac:DiscrepancyResponse", &[])?;
        out.leaf("cbc:ReferenceID", &[], &reference.number)?;
        out.leaf("cbc:ResponseCode", &[], correction.code())?;
        out.leaf("cbc:Description", &[], reason)?;
        out.close("cac:DiscrepancyResponse")?;
        out.open("cac:BillingReference", &[])?;
        out.open("cac:InvoiceDocumentReference", &[])?;
        out.leaf("cbc:ID", &[], &reference.number)?;
        out.leaf(
            "cbc:UUID",
            &[("schemeName", "CUFE-SHA384")],
            &reference.cufe,
        )?;
        out.leaf(
            "cbc:IssueDate",
            &[],
            &reference.issue_date.format("%Y-%m-%d").to_string(),
        )?;
        out.close("cac:InvoiceDocumentReference")?;
        out.close("cac:BillingReference")?;
    }
    parties::write_seller(out, document)?;
    parties::write_buyer(out, document)?;
    out.open("cac:PaymentMeans", &[])?;
    // 1: paid at once (contado); 48: by credit card, how a subscription is charged.
    out.leaf("cbc:ID", &[], "1")?;
    out.leaf("cbc:PaymentMeansCode", &[], "48")?;
    out.leaf("cbc:PaymentDueDate", &[], &date)?;
    out.close("cac:PaymentMeans")?;
    amounts::write_tax_totals(out, &document.lines)?;
    amounts::write_monetary_total(out, document)?;
    amounts::write_lines(out, document)?;
    out.close(root)?;
    Ok(())
}

/// A quick-xml writer with the few shapes UBL needs. Everything it writes is escaped by
/// quick-xml.
pub(crate) struct Out {
    writer: Writer<Vec<u8>>,
}

impl Out {
    pub(crate) fn new() -> Self {
        Self {
            writer: Writer::new(Vec::new()),
        }
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        self.writer.into_inner()
    }

    fn raw(&mut self, event: Event<'_>) -> io::Result<()> {
        self.writer.write_event(event)
    }

    pub(crate) fn open(&mut self, name: &str, attributes: &[(&str, &str)]) -> io::Result<()> {
        let mut start = BytesStart::new(name);
        for attribute in attributes {
            start.push_attribute(*attribute);
        }
        self.writer.write_event(Event::Start(start))
    }

    pub(crate) fn close(&mut self, name: &str) -> io::Result<()> {
        self.writer.write_event(Event::End(BytesEnd::new(name)))
    }

    /// `<name attributes>text</name>`.
    pub(crate) fn leaf(
        &mut self,
        name: &str,
        attributes: &[(&str, &str)],
        text: &str,
    ) -> io::Result<()> {
        self.open(name, attributes)?;
        self.writer.write_event(Event::Text(BytesText::new(text)))?;
        self.close(name)
    }

    /// `<name/>` with attributes.
    pub(crate) fn empty(&mut self, name: &str, attributes: &[(&str, &str)]) -> io::Result<()> {
        let mut start = BytesStart::new(name);
        for attribute in attributes {
            start.push_attribute(*attribute);
        }
        self.writer.write_event(Event::Empty(start))
    }

    /// An amount in pesos with its currency (`currencyID="COP"`).
    pub(crate) fn money(&mut self, name: &str, cents: i64) -> io::Result<()> {
        self.leaf(name, &[("currencyID", "COP")], &amount(cents))
    }

    fn slot(&mut self) -> io::Result<()> {
        self.writer
            .get_mut()
            .extend_from_slice(SIGNATURE_SLOT.as_bytes());
        Ok(())
    }
}
