//! The `dian::document::Document` a row stands for: an invoice or a credit note, with the
//! seller and software as they were at numbering (`Issuer`), the buyer and lines as the row
//! keeps them. Numbering computes the CUFE or CUDE from it; submission signs it. Built the same
//! way both times, so the code in the signed XML is the one fixed at numbering. The parts of an
//! accepted invoice's AttachedDocument (`AttachedParts`) are read here too.

use super::super::entities::credit_note::Model as CreditNote;
use super::super::entities::invoice::Model as Invoice;
use super::super::invoice_rows::{CreditLine, InvoiceLine, Party};
use super::super::{StoreError, StoreResult};
use super::Issuer;
use crate::dian::document::{
    Address, Buyer, Correction, Document, InvoiceReference, Kind, Line, NumberingRange, Seller,
    Software,
};
use crate::domain::dian::{Environment, colombian_date};
use crate::domain::tax::TaxRegime;
use crate::domain::tax_id::TaxIdKind;
use crate::domain::time::from_millis;

/// What a credit note corrects: its invoice's DIAN number, code and issue instant (the number
/// and code are empty while the invoice awaits a range: a CUDE does not depend on them).
pub(crate) struct Corrected<'a> {
    pub number: &'a str,
    pub cufe: &'a str,
    pub issued_at: i64,
    /// Whether the credit note gives back the whole invoice (an annulment).
    pub whole: bool,
}

pub(crate) fn seller_of(issuer: &Issuer) -> StoreResult<Seller> {
    let regime = TaxRegime::parse(&issuer.tax_regime).ok_or_else(|| {
        StoreError::invariant(format!("a DIAN issuer's tax regime {}", issuer.tax_regime))
    })?;
    Ok(Seller {
        legal_name: issuer.legal_name.clone(),
        nit: issuer.nit.clone(),
        address: address_of(&issuer.address)
            .ok_or_else(|| StoreError::invariant("a DIAN issuer without an address".to_owned()))?,
        tax_regime: regime,
        email: None,
    })
}

fn address_of(value: &serde_json::Value) -> Option<Address> {
    Some(Address {
        line: value.get("line")?.as_str()?.to_owned(),
        city_code: value.get("city_code")?.as_str()?.to_owned(),
        city_name: None,
        department_name: None,
        country: value.get("country")?.as_str()?.to_owned(),
    })
}

fn buyer_of(party: &Party) -> Buyer {
    let email = (!party.email.is_empty()).then(|| party.email.clone());
    let kind = TaxIdKind::parse(&party.tax_id.kind);
    match kind {
        Some(kind) if party.tax_id.number != crate::dian::document::FINAL_CONSUMER => Buyer {
            name: party
                .legal_name
                .clone()
                .filter(|name| !name.trim().is_empty())
                .unwrap_or_else(|| party.name.clone()),
            id_kind: kind,
            id_number: party.tax_id.number.clone(),
            email,
            address: party.address.as_ref().and_then(address_of),
        },
        _ => Buyer::final_consumer(email),
    }
}

fn parse<T: serde::de::DeserializeOwned>(raw: &str, what: &str) -> StoreResult<T> {
    serde_json::from_str(raw).map_err(|err| StoreError::invariant(format!("{what}: {err}")))
}

/// The sales invoice `invoice`, numbered `consecutive` of `range`.
pub(crate) fn invoice_document(
    invoice: &Invoice,
    issuer: &Issuer,
    environment: Environment,
    range: NumberingRange,
    consecutive: i64,
    pin: &str,
) -> StoreResult<Document> {
    let party: Party = parse(&invoice.customer, "an invoice's customer")?;
    let lines: Vec<InvoiceLine> = parse(&invoice.lines, "an invoice's lines")?;
    Ok(Document {
        kind: Kind::Invoice { range, consecutive },
        issued_at: from_millis(invoice.issued_at),
        seller: seller_of(issuer)?,
        buyer: buyer_of(&party),
        lines: lines
            .iter()
            .map(|line| Line {
                description: line.line.description.clone(),
                quantity: line.line.quantity.max(1),
                amount_cents: line.line.amount_cents,
                taxable_base_cents: line.taxable_base_cents,
                tax_cents: line.tax_cents,
                tax_code: line.line.tax_code,
            })
            .collect(),
        software: software_of(issuer, pin),
        environment,
        note: None,
    })
}

/// The credit note `note` numbered `number`, correcting `invoice` (`corrected`).
pub(crate) fn credit_note_document(
    note: &CreditNote,
    invoice: &Invoice,
    corrected: &Corrected<'_>,
    issuer: &Issuer,
    environment: Environment,
    number: &str,
    pin: &str,
) -> StoreResult<Document> {
    let party: Party = parse(&invoice.customer, "an invoice's customer")?;
    let lines: Vec<CreditLine> = parse(&note.lines, "a credit note's lines")?;
    let correction = if corrected.whole {
        Correction::Annulment
    } else {
        Correction::PartialReturn
    };
    Ok(Document {
        kind: Kind::CreditNote {
            number: number.to_owned(),
            invoice: InvoiceReference {
                number: corrected.number.to_owned(),
                cufe: corrected.cufe.to_owned(),
                issue_date: colombian_date(from_millis(corrected.issued_at)),
            },
            correction,
            reason: "Reembolso".to_owned(),
        },
        issued_at: from_millis(note.issued_at),
        seller: seller_of(issuer)?,
        buyer: buyer_of(&party),
        lines: lines
            .iter()
            .map(|line| Line {
                description: line.description.clone(),
                quantity: 1,
                amount_cents: line.amount_cents,
                taxable_base_cents: line.taxable_base_cents,
                tax_cents: line.tax_cents,
                tax_code: line.tax_code,
            })
            .collect(),
        software: software_of(issuer, pin),
        environment,
        note: None,
    })
}

fn software_of(issuer: &Issuer, pin: &str) -> Software {
    Software {
        id: issuer.software_id.clone(),
        pin: pin.to_owned(),
        provider_nit: None,
    }
}

/// What an invoice's AttachedDocument (`dian::attached`) is made of, or why it has none.
pub enum AttachedParts {
    /// The invoice has no electronic document (DIAN was off when it was issued).
    NoDocument,
    /// DIAN has not accepted it (yet): its status.
    NotAccepted(crate::domain::dian::DianStatus),
    /// Accepted before DIAN's ApplicationResponse was kept (migration 000022).
    NoResponse,
    Ready {
        document: Box<Document>,
        signed_xml: String,
        application_response: String,
        /// When its acceptance was recorded (milliseconds).
        accepted_at: i64,
    },
}

impl super::super::Store {
    /// The parts of `account`'s invoice `id`'s AttachedDocument; `None` when there is no such
    /// invoice.
    pub async fn dian_attached_parts(
        &self,
        account: &crate::ids::AccountId,
        id: &crate::ids::InvoiceId,
    ) -> StoreResult<Option<AttachedParts>> {
        use super::super::entities::{dian_document, dian_range, invoice};
        use crate::store::Scoped;
        use sea_orm::EntityTrait;
        let conn = self.conn();
        let Some(invoice) = invoice::Entity::find_scoped(account, id.clone())
            .one(conn)
            .await?
        else {
            return Ok(None);
        };
        let Some(row) =
            dian_document::Entity::find_scoped(account, crate::ids::DocumentId::from(id.clone()))
                .one(conn)
                .await?
        else {
            return Ok(Some(AttachedParts::NoDocument));
        };
        let range = match &row.range_id {
            Some(range) => {
                dian_range::Entity::find_by_id(range.clone())
                    .one(conn)
                    .await?
            }
            None => None,
        };
        attached_parts_of(&invoice, row, range).map(Some)
    }
}

/// The parts of `invoice`'s AttachedDocument from its electronic document `row` and the range
/// `range` it was numbered from (read by the caller: an export reads them a page at a time).
pub fn attached_parts_of(
    invoice: &Invoice,
    row: super::DianDocument,
    range: Option<super::DianRange>,
) -> StoreResult<AttachedParts> {
    use crate::domain::dian::DianStatus;
    if row.status != DianStatus::Accepted {
        return Ok(AttachedParts::NotAccepted(row.status));
    }
    let (Some(range), Some(sequence), Some(signed_xml), Some(application_response)) =
        (range, row.sequence, row.xml, row.application_response)
    else {
        return Ok(AttachedParts::NoResponse);
    };
    let issuer: Issuer = parse(&row.issuer, "a DIAN issuer")?;
    // The software's PIN makes no part of an invoice's CUFE or of what the container
    // names: the signed invoice inside it carries its SoftwareSecurityCode.
    let mut document = invoice_document(
        invoice,
        &issuer,
        row.environment,
        range.numbering_range(),
        sequence,
        "",
    )?;
    document.issued_at = from_millis(row.issued_at);
    Ok(AttachedParts::Ready {
        document: Box::new(document),
        signed_xml,
        application_response,
        accepted_at: row.updated_at,
    })
}
