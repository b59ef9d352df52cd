//! `sts:DianExtensions`, the first `ext:UBLExtension`: the numbering range (an invoice's
//! `InvoiceControl`; a credit note has none), the country, the software and its security
//! code, DIAN as the authorization provider, and the QR code's address.
//!
//! `ProviderID` and `AuthorizationProviderID` carry the NIT's check digit in `schemeID` and
//! the NIT's document code (`31`) in `schemeName`, as the annex prescribes and as documents
//! DIAN accepts carry them; `DIAN_UBL_Structures.xsd` lists document codes as `schemeID`'s
//! values instead (docs/dian.md, "The schemas").

use super::Out;
use crate::dian::document::{Document, Kind};
use crate::domain::tax_id::nit_check_digit;
use std::io;

/// `schemeAgencyName` of DIAN's identifiers.
pub const DIAN_AGENCY: &str = "CO, DIAN (Dirección de Impuestos y Aduanas Nacionales)";
/// DIAN's own NIT, the authorization provider of every document; its check digit is 4.
pub const DIAN_NIT: &str = "800197268";

pub(super) fn write(out: &mut Out, document: &Document) -> io::Result<()> {
    out.open("sts:DianExtensions", &[])?;
    if let Kind::Invoice { range, .. } = &document.kind {
        out.open("sts:InvoiceControl", &[])?;
        out.leaf("sts:InvoiceAuthorization", &[], &range.resolution_number)?;
        out.open("sts:AuthorizationPeriod", &[])?;
        out.leaf(
            "cbc:StartDate",
            &[],
            &range.valid_from.format("%Y-%m-%d").to_string(),
        )?;
        out.leaf(
            "cbc:EndDate",
            &[],
            &range.valid_to.format("%Y-%m-%d").to_string(),
        )?;
        out.close("sts:AuthorizationPeriod")?;
        out.open("sts:AuthorizedInvoices", &[])?;
        if !range.prefix.is_empty() {
            out.leaf("sts:Prefix", &[], &range.prefix)?;
        }
        out.leaf("sts:From", &[], &range.from.to_string())?;
        out.leaf("sts:To", &[], &range.to.to_string())?;
        out.close("sts:AuthorizedInvoices")?;
        out.close("sts:InvoiceControl")?;
    }
    out.open("sts:InvoiceSource", &[])?;
    out.leaf(
        "cbc:IdentificationCode",
        &[
            ("listAgencyID", "6"),
            (
                "listAgencyName",
                "United Nations Economic Commission for Europe",
            ),
            (
                "listSchemeURI",
                "urn:oasis:names:specification:ubl:codelist:gc:CountryIdentificationCode-2.1",
            ),
        ],
        "CO",
    )?;
    out.close("sts:InvoiceSource")?;

    let provider = document
        .software
        .provider_nit
        .as_deref()
        .unwrap_or(&document.seller.nit);
    let provider_check = nit_check_digit(provider)
        .map(|d| d.to_string())
        .unwrap_or_default();
    out.open("sts:SoftwareProvider", &[])?;
    out.leaf(
        "sts:ProviderID",
        &[
            ("schemeAgencyID", "195"),
            ("schemeAgencyName", DIAN_AGENCY),
            ("schemeID", &provider_check),
            ("schemeName", "31"),
        ],
        provider,
    )?;
    out.leaf(
        "sts:SoftwareID",
        &[("schemeAgencyID", "195"), ("schemeAgencyName", DIAN_AGENCY)],
        &document.software.id,
    )?;
    out.close("sts:SoftwareProvider")?;
    out.leaf(
        "sts:SoftwareSecurityCode",
        &[("schemeAgencyID", "195"), ("schemeAgencyName", DIAN_AGENCY)],
        &document.software_security_code(),
    )?;
    out.open("sts:AuthorizationProvider", &[])?;
    out.leaf(
        "sts:AuthorizationProviderID",
        &[
            ("schemeAgencyID", "195"),
            ("schemeAgencyName", DIAN_AGENCY),
            ("schemeID", "4"),
            ("schemeName", "31"),
        ],
        DIAN_NIT,
    )?;
    out.close("sts:AuthorizationProvider")?;
    out.leaf(
        "sts:QRCode",
        &[],
        &document.environment.qr_url(&document.unique_code()),
    )?;
    out.close("sts:DianExtensions")
}
