//! An invoice's row, before it is numbered: the customer as they are at issue, the lines with
//! their IVA split, the sums and the breakdown, and the hosted page's token. Built for an
//! approved charge (`invoices::draft_in`) or for a period whose total was 0, which has no charge
//! (`StoreTxn::issue_free_invoice`, CONTRACT §14).

use super::entities::customer;
use super::entities::invoice::Model as Invoice;
use super::{StoreError, StoreResult};
use crate::domain::tax::{TaxCode, Taxed, breakdown, totals};
use crate::ids::{
    AccountId, AddonId, ChargeAttemptId, CustomerId, InvoiceId, PlanId, SubscriptionId,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The series of sales invoices.
pub const INVOICE_SERIES: &str = "invoice";

/// One line of what a charge is for, decided with its amount (`NewCharge::lines`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftLine {
    pub description: String,
    pub quantity: i64,
    /// Tax-inclusive: what the customer pays for the line, after its discount.
    pub amount_cents: i64,
    /// What a discount took off the line (CONTRACT §14); 0 without one.
    #[serde(default)]
    pub discount_cents: i64,
    pub tax_code: TaxCode,
    pub period_start: Option<i64>,
    pub period_end: Option<i64>,
    pub plan_id: Option<PlanId>,
    pub addon_id: Option<AddonId>,
}

/// An invoice's line: the draft and its split.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceLine {
    #[serde(flatten)]
    pub line: DraftLine,
    pub tax_rate_bps: i64,
    pub taxable_base_cents: i64,
    pub tax_cents: i64,
}

/// One entry of an invoice's IVA breakdown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaxEntry {
    pub tax_code: TaxCode,
    pub rate_bps: i64,
    pub taxable_base_cents: i64,
    pub tax_cents: i64,
}

/// Whom an invoice is made out to, as they were at issue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Party {
    pub name: String,
    pub email: String,
    pub tax_id: TaxId,
    pub legal_name: Option<String>,
    pub address: Option<serde_json::Value>,
}

/// A tax identity; without one, the final consumer (`consumidor final`, 222222222222).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaxId {
    #[serde(rename = "type")]
    pub kind: String,
    pub number: String,
}

impl TaxId {
    pub fn final_consumer() -> Self {
        Self {
            kind: "CC".into(),
            number: "222222222222".into(),
        }
    }
}

/// One line of a credit note: the part of one invoice line it gives back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditLine {
    /// The invoice line's position (0 first).
    pub invoice_line: usize,
    pub description: String,
    pub amount_cents: i64,
    pub tax_code: TaxCode,
    pub tax_rate_bps: i64,
    pub taxable_base_cents: i64,
    pub tax_cents: i64,
}

/// What an invoice documents.
pub(super) struct Billed<'a> {
    pub account_id: &'a AccountId,
    /// `None` for a period of nothing.
    pub charge_id: Option<&'a ChargeAttemptId>,
    pub subscription_id: Option<&'a SubscriptionId>,
    pub customer_id: &'a CustomerId,
    pub lines: Vec<DraftLine>,
    pub issued_at: i64,
    /// Set for a period of nothing (the one invoice of that period).
    pub period_start: Option<i64>,
    /// The account's invoicing data now (JSON of `store::accounts::Seller`), kept on the row as
    /// the seller at issue.
    pub seller: Option<String>,
}

/// The customer as an invoice is made out to them: without a tax id, the final consumer.
fn party_of(customer: Option<&customer::Model>, billed: &Billed<'_>) -> Party {
    // A charge's customer is never deleted; were it missing, the money still settles and the
    // invoice is made out to the final consumer (the error is logged for operators).
    let Some(customer) = customer else {
        tracing::error!(charge = ?billed.charge_id, customer = %billed.customer_id, "an invoice of no customer; made out to the final consumer");
        return Party {
            name: String::new(),
            email: String::new(),
            tax_id: TaxId::final_consumer(),
            legal_name: None,
            address: None,
        };
    };
    Party {
        name: customer.name.clone(),
        email: customer.email.clone(),
        tax_id: match (&customer.tax_id_type, &customer.tax_id_number) {
            (Some(kind), Some(number)) => TaxId {
                kind: kind.clone(),
                number: number.clone(),
            },
            _ => TaxId::final_consumer(),
        },
        legal_name: customer.legal_name.clone(),
        address: customer
            .address
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok()),
    }
}

/// The invoice of `billed`, not yet numbered (`number_in` numbers it).
pub(super) fn invoice_row(
    billed: Billed<'_>,
    customers: &HashMap<CustomerId, customer::Model>,
) -> StoreResult<Invoice> {
    let party = party_of(customers.get(billed.customer_id), &billed);
    let taxed: Vec<Taxed> = billed
        .lines
        .iter()
        .map(|line| Taxed::new(line.tax_code, line.amount_cents))
        .collect();
    let sums = totals(&taxed);
    let discount_cents = billed.lines.iter().map(|l| l.discount_cents).sum();
    let lines: Vec<InvoiceLine> = billed
        .lines
        .into_iter()
        .zip(&taxed)
        .map(|(line, taxed)| InvoiceLine {
            tax_rate_bps: line.tax_code.rate_bps(),
            taxable_base_cents: taxed.split.base,
            tax_cents: taxed.split.tax,
            line,
        })
        .collect();
    let entries: Vec<TaxEntry> = breakdown(&taxed)
        .into_iter()
        .map(|(code, split)| TaxEntry {
            tax_code: code,
            rate_bps: code.rate_bps(),
            taxable_base_cents: split.base,
            tax_cents: split.tax,
        })
        .collect();
    let id = InvoiceId::generate();
    let hosted_token = hosted_token_of(&id);
    Ok(Invoice {
        id,
        account_id: billed.account_id.clone(),
        series: INVOICE_SERIES.to_owned(),
        sequence: 0,
        number: String::new(),
        charge_id: billed.charge_id.cloned(),
        subscription_id: billed.subscription_id.cloned(),
        customer_id: billed.customer_id.clone(),
        customer: to_json(&party)?,
        lines: to_json(&lines)?,
        tax_breakdown: to_json(&entries)?,
        subtotal_cents: sums.subtotal,
        tax_cents: sums.tax,
        total_cents: sums.total,
        hosted_token,
        issued_at: billed.issued_at,
        discount_cents,
        period_start: billed.period_start,
        seller: billed.seller,
    })
}

/// The hosted page's token of invoice `id`: `inv_`, the id's time-ordered hex, then 32 random
/// letters and digits (about 190 bits, what makes it unguessable). Tokens issued one after
/// another sort in issue order, so their unique index grows at its end like the ids' instead of
/// dirtying a random page per invoice: a renewal batch's commit writes a page for every one of
/// those (about a third of an invoice's insert on SQLite, `benches/README.md`).
fn hosted_token_of(id: &InvoiceId) -> String {
    let ordered = id.as_str().trim_start_matches(InvoiceId::PREFIX);
    crate::secrets::random_token(&format!("inv_{ordered}"), 32)
}

/// JSON of an invoice's part.
fn to_json<T: Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value)
        .map_err(|err| StoreError::invariant(format!("an invoice's JSON: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosted_tokens_sort_in_issue_order_and_end_in_32_random_characters() {
        let ids: Vec<InvoiceId> = (0..200).map(|_| InvoiceId::generate()).collect();
        let tokens: Vec<String> = ids.iter().map(hosted_token_of).collect();
        let mut sorted = tokens.clone();
        sorted.sort();
        assert_eq!(sorted, tokens, "tokens sort as their invoices were issued");
        for (id, token) in ids.iter().zip(&tokens) {
            let ordered = id
                .as_str()
                .strip_prefix(InvoiceId::PREFIX)
                .unwrap_or_default();
            let rest = token.strip_prefix("inv_").unwrap_or_default();
            assert!(rest.starts_with(ordered), "{token} begins with {id}'s hex");
            let secret = &rest[ordered.len()..];
            assert_eq!(secret.len(), 32);
            assert!(secret.chars().all(|c| c.is_ascii_alphanumeric()));
        }
        // The same id twice still gives two tokens: the random part is what is secret.
        assert_ne!(hosted_token_of(&ids[0]), hosted_token_of(&ids[0]));
    }
}
