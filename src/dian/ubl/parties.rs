//! The seller (`cac:AccountingSupplierParty`) and the buyer (`cac:AccountingCustomerParty`):
//! name, address with its DANE code, tax scheme with the NIT (check digit in `schemeID`, the
//! kind of document in `schemeName`), legal entity and contact. The `CompanyID` written in
//! `cac:PartyTaxScheme` is what the CUFE's NitOFE and NumAdq are computed from.

use super::Out;
use super::extensions::DIAN_AGENCY;
use crate::dian::document::{Address, Document, Kind};
use crate::domain::tax::TaxRegime;
use std::io;

pub(super) fn write_seller(out: &mut Out, document: &Document) -> io::Result<()> {
    let seller = &document.seller;
    let check = seller
        .check_digit()
        .map(|d| d.to_string())
        .unwrap_or_default();
    let company_id: [(&str, &str); 4] = [
        ("schemeAgencyID", "195"),
        ("schemeAgencyName", DIAN_AGENCY),
        ("schemeID", &check),
        ("schemeName", "31"),
    ];
    let (regime, scheme_id, scheme_name) = match seller.tax_regime {
        TaxRegime::ResponsableIva => ("48", "01", "IVA"),
        TaxRegime::NoResponsableIva => ("49", "ZZ", "No aplica"),
    };
    out.open("cac:AccountingSupplierParty", &[])?;
    // 1: a legal person (persona jurídica), which a NIT names.
    out.leaf("cbc:AdditionalAccountID", &[], "1")?;
    out.open("cac:Party", &[])?;
    out.open("cac:PartyName", &[])?;
    out.leaf("cbc:Name", &[], &seller.legal_name)?;
    out.close("cac:PartyName")?;
    out.open("cac:PhysicalLocation", &[])?;
    write_address(out, "cac:Address", &seller.address)?;
    out.close("cac:PhysicalLocation")?;
    out.open("cac:PartyTaxScheme", &[])?;
    out.leaf("cbc:RegistrationName", &[], &seller.legal_name)?;
    out.leaf("cbc:CompanyID", &company_id, &seller.nit)?;
    // R-99-PN: no other fiscal responsibility declared; the list is the IVA regime.
    out.leaf("cbc:TaxLevelCode", &[("listName", regime)], "R-99-PN")?;
    write_address(out, "cac:RegistrationAddress", &seller.address)?;
    write_tax_scheme(out, scheme_id, scheme_name)?;
    out.close("cac:PartyTaxScheme")?;
    out.open("cac:PartyLegalEntity", &[])?;
    out.leaf("cbc:RegistrationName", &[], &seller.legal_name)?;
    out.leaf("cbc:CompanyID", &company_id, &seller.nit)?;
    if let Kind::Invoice { range, .. } = &document.kind {
        out.open("cac:CorporateRegistrationScheme", &[])?;
        out.leaf("cbc:ID", &[], &range.prefix)?;
        out.close("cac:CorporateRegistrationScheme")?;
    }
    out.close("cac:PartyLegalEntity")?;
    if let Some(email) = &seller.email {
        out.open("cac:Contact", &[])?;
        out.leaf("cbc:ElectronicMail", &[], email)?;
        out.close("cac:Contact")?;
    }
    out.close("cac:Party")?;
    out.close("cac:AccountingSupplierParty")
}

pub(super) fn write_buyer(out: &mut Out, document: &Document) -> io::Result<()> {
    let buyer = &document.buyer;
    let check = buyer.check_digit().map(|d| d.to_string());
    let mut company_id: Vec<(&str, &str)> =
        vec![("schemeAgencyID", "195"), ("schemeAgencyName", DIAN_AGENCY)];
    if let Some(check) = &check {
        company_id.push(("schemeID", check));
    }
    company_id.push(("schemeName", buyer.id_scheme()));
    out.open("cac:AccountingCustomerParty", &[])?;
    out.leaf("cbc:AdditionalAccountID", &[], buyer.organization_code())?;
    out.open("cac:Party", &[])?;
    out.open("cac:PartyName", &[])?;
    out.leaf("cbc:Name", &[], &buyer.name)?;
    out.close("cac:PartyName")?;
    if let Some(address) = &buyer.address {
        out.open("cac:PhysicalLocation", &[])?;
        write_address(out, "cac:Address", address)?;
        out.close("cac:PhysicalLocation")?;
    }
    out.open("cac:PartyTaxScheme", &[])?;
    out.leaf("cbc:RegistrationName", &[], &buyer.name)?;
    out.leaf("cbc:CompanyID", &company_id, &buyer.id_number)?;
    out.leaf("cbc:TaxLevelCode", &[("listName", "49")], "R-99-PN")?;
    if let Some(address) = &buyer.address {
        write_address(out, "cac:RegistrationAddress", address)?;
    }
    write_tax_scheme(out, "ZZ", "No aplica")?;
    out.close("cac:PartyTaxScheme")?;
    out.open("cac:PartyLegalEntity", &[])?;
    out.leaf("cbc:RegistrationName", &[], &buyer.name)?;
    out.leaf("cbc:CompanyID", &company_id, &buyer.id_number)?;
    out.close("cac:PartyLegalEntity")?;
    if let Some(email) = &buyer.email {
        out.open("cac:Contact", &[])?;
        out.leaf("cbc:ElectronicMail", &[], email)?;
        out.close("cac:Contact")?;
    }
    out.close("cac:Party")?;
    out.close("cac:AccountingCustomerParty")
}

fn write_tax_scheme(out: &mut Out, id: &str, name: &str) -> io::Result<()> {
    out.open("cac:TaxScheme", &[])?;
    out.leaf("cbc:ID", &[], id)?;
    out.leaf("cbc:Name", &[], name)?;
    out.close("cac:TaxScheme")
}

/// An address under `element`: DANE code, names when known, department code, line, country.
fn write_address(out: &mut Out, element: &str, address: &Address) -> io::Result<()> {
    out.open(element, &[])?;
    out.leaf("cbc:ID", &[], &address.city_code)?;
    if let Some(city) = &address.city_name {
        out.leaf("cbc:CityName", &[], city)?;
    }
    if let Some(department) = &address.department_name {
        out.leaf("cbc:CountrySubentity", &[], department)?;
    }
    let department_code = address.city_code.get(..2).unwrap_or_default();
    out.leaf("cbc:CountrySubentityCode", &[], department_code)?;
    out.open("cac:AddressLine", &[])?;
    out.leaf("cbc:Line", &[], &address.line)?;
    out.close("cac:AddressLine")?;
    out.open("cac:Country", &[])?;
    out.leaf("cbc:IdentificationCode", &[], &address.country)?;
    if address.country == "CO" {
        out.leaf("cbc:Name", &[("languageID", "es")], "Colombia")?;
    }
    out.close("cac:Country")?;
    out.close(element)
}
