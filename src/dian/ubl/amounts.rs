//! The money of a document: its IVA (`cac:TaxTotal`, one `cac:TaxSubtotal` per rate; an
//! excluded line carries no IVA at all, an exempt one IVA at 0 %), its totals
//! (`cac:LegalMonetaryTotal`) and its lines (`cac:InvoiceLine` or `cac:CreditNoteLine`). Every
//! amount is written from cents (`crate::domain::dian::amount`).

use super::Out;
use crate::dian::document::{Document, Line};
use crate::domain::tax::TaxCode;
use std::io;

/// A rate in basis points as DIAN's `cbc:Percent` (`1900` → `19.00`).
fn percent(rate_bps: i64) -> String {
    format!("{}.{:02}", rate_bps / 100, rate_bps % 100)
}

/// The document's IVA: one subtotal per rate present, summing its lines.
pub(super) fn write_tax_totals(out: &mut Out, lines: &[Line]) -> io::Result<()> {
    let taxed: Vec<&Line> = lines
        .iter()
        .filter(|l| l.tax_code != TaxCode::IvaExcluded)
        .collect();
    if taxed.is_empty() {
        return Ok(());
    }
    let mut rates: Vec<i64> = taxed.iter().map(|l| l.tax_code.rate_bps()).collect();
    rates.sort_unstable_by(|a, b| b.cmp(a));
    rates.dedup();
    out.open("cac:TaxTotal", &[])?;
    out.money("cbc:TaxAmount", taxed.iter().map(|l| l.tax_cents).sum())?;
    for rate in rates {
        let of_rate = taxed.iter().filter(|l| l.tax_code.rate_bps() == rate);
        let (base, tax) = of_rate.fold((0, 0), |(b, t), l| {
            (b + l.taxable_base_cents, t + l.tax_cents)
        });
        write_subtotal(out, base, tax, rate)?;
    }
    out.close("cac:TaxTotal")
}

fn write_subtotal(out: &mut Out, base: i64, tax: i64, rate_bps: i64) -> io::Result<()> {
    out.open("cac:TaxSubtotal", &[])?;
    out.money("cbc:TaxableAmount", base)?;
    out.money("cbc:TaxAmount", tax)?;
    out.open("cac:TaxCategory", &[])?;
    out.leaf("cbc:Percent", &[], &percent(rate_bps))?;
    out.open("cac:TaxScheme", &[])?;
    out.leaf("cbc:ID", &[], "01")?;
    out.leaf("cbc:Name", &[], "IVA")?;
    out.close("cac:TaxScheme")?;
    out.close("cac:TaxCategory")?;
    out.close("cac:TaxSubtotal")
}

pub(super) fn write_monetary_total(out: &mut Out, document: &Document) -> io::Result<()> {
    let sums = document.sums();
    out.open("cac:LegalMonetaryTotal", &[])?;
    out.money("cbc:LineExtensionAmount", sums.line_extension)?;
    out.money("cbc:TaxExclusiveAmount", sums.taxable)?;
    out.money("cbc:TaxInclusiveAmount", sums.line_extension + sums.tax)?;
    out.money("cbc:PayableAmount", sums.payable)?;
    out.close("cac:LegalMonetaryTotal")
}

pub(super) fn write_lines(out: &mut Out, document: &Document) -> io::Result<()> {
    let (element, quantity) = if document.is_invoice() {
        ("cac:InvoiceLine", "cbc:InvoicedQuantity")
    } else {
        ("cac:CreditNoteLine", "cbc:CreditedQuantity")
    };
    for (index, line) in document.lines.iter().enumerate() {
        out.open(element, &[])?;
        out.leaf("cbc:ID", &[], &(index + 1).to_string())?;
        // 94: a unit (DIAN's list of units of measure, UN/ECE rec. 20).
        out.leaf(quantity, &[("unitCode", "94")], &line.quantity.to_string())?;
        out.money("cbc:LineExtensionAmount", line.taxable_base_cents)?;
        if line.tax_code != TaxCode::IvaExcluded {
            out.open("cac:TaxTotal", &[])?;
            out.money("cbc:TaxAmount", line.tax_cents)?;
            write_subtotal(
                out,
                line.taxable_base_cents,
                line.tax_cents,
                line.tax_code.rate_bps(),
            )?;
            out.close("cac:TaxTotal")?;
        }
        out.open("cac:Item", &[])?;
        out.leaf("cbc:Description", &[], &line.description)?;
        out.close("cac:Item")?;
        out.open("cac:Price", &[])?;
        out.leaf(
            "cbc:PriceAmount",
            &[("currencyID", "COP")],
            &unit_price(line.taxable_base_cents, line.quantity),
        )?;
        out.leaf("cbc:BaseQuantity", &[("unitCode", "94")], "1")?;
        out.close("cac:Price")?;
        out.close(element)?;
    }
    Ok(())
}

/// The base of one unit: exact to the cent when the quantity divides the base, else to six
/// decimals (truncated), what UBL's amounts allow.
fn unit_price(base_cents: i64, quantity: i64) -> String {
    let quantity = quantity.max(1);
    if base_cents % quantity == 0 {
        return crate::domain::dian::amount(base_cents / quantity);
    }
    let micro = i128::from(base_cents) * 10_000 / i128::from(quantity);
    format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_price_is_exact_when_the_quantity_divides_the_base() {
        assert_eq!(unit_price(100_000, 1), "1000.00");
        assert_eq!(unit_price(100_000, 4), "250.00");
        assert_eq!(unit_price(100_000, 3), "333.333333");
        assert_eq!(percent(1_900), "19.00");
        assert_eq!(percent(0), "0.00");
    }
}
