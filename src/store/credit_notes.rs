//! Credit notes (CONTRACT §11): one per approved refund, issued by `issue_in` inside the
//! transaction that approves the refund (`refunds::settle_refund_in`), against the refunded
//! charge's invoice. The refund spreads over the invoice's lines by `domain::tax::spread` and
//! each part's base by `credit_split`, against what earlier credit notes of the invoice left:
//! a line is never credited beyond its amount, base or IVA, and credit notes that refund the
//! whole charge add up to the invoice exactly. Numbered in the `credit_note` series (`NC-1`, …)
//! by `invoices::take_numbers`, in the same transaction.

use super::entities::{credit_note, invoice, refund, subscription};
pub use super::invoice_rows::CreditLine;
use super::invoice_rows::InvoiceLine;
use super::outbox::{Event, event_row};
use super::series::take_numbers;
use super::{Page, PageRequest, Store, StoreError, StoreResult, fetch_page};
use crate::domain::charge_status::RefundStatus;
use crate::domain::event_type::EventType;
use crate::domain::tax::{Creditable, credit_split, spread};
use crate::ids::{AccountId, ChargeAttemptId, CreditNoteId, InvoiceId, WebhookEndpointId};
use crate::store::Scoped;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, QuerySelect,
};

pub use credit_note::Model as CreditNote;

/// The series of credit notes, and its prefix.
pub const CREDIT_NOTE_SERIES: &str = "credit_note";
const CREDIT_NOTE_PREFIX: &str = "NC-";

/// Filters of `GET /v1/credit-notes`.
#[derive(Debug, Default)]
pub struct CreditNoteFilter {
    pub invoice_id: Option<InvoiceId>,
    pub charge_id: Option<ChargeAttemptId>,
    /// `issued_from` and `issued_to`, as instants.
    pub issued: super::issued::IssuedBounds,
}

impl Store {
    pub async fn credit_note(
        &self,
        account: &AccountId,
        id: &CreditNoteId,
    ) -> StoreResult<Option<CreditNote>> {
        Ok(credit_note::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// Every credit note of `invoice_id`, oldest first (at most one per refund of its charge).
    pub async fn credit_notes_of_invoice(
        &self,
        invoice_id: &InvoiceId,
    ) -> StoreResult<Vec<CreditNote>> {
        Ok(credit_note::Entity::find()
            .filter(credit_note::Column::InvoiceId.eq(invoice_id))
            .order_by_asc(credit_note::Column::Sequence)
            .all(self.conn())
            .await?)
    }

    pub async fn list_credit_notes(
        &self,
        account: &AccountId,
        filter: &CreditNoteFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<CreditNote>> {
        let mut select = credit_note::Entity::scoped(account);
        if let Some(invoice) = &filter.invoice_id {
            select = select.filter(credit_note::Column::InvoiceId.eq(invoice));
        }
        if let Some(charge) = &filter.charge_id {
            select = select.filter(credit_note::Column::ChargeId.eq(charge));
        }
        select = select.filter(super::issued::within(
            sea_orm::Condition::all(),
            credit_note::Column::IssuedAt,
            filter.issued,
        ));
        fetch_page(self.conn(), select, credit_note::Column::Id, page).await
    }
}

/// What is left to credit on each line of `lines`, after the credit notes `earlier`.
fn creditable(lines: &[InvoiceLine], earlier: &[CreditNote]) -> StoreResult<Vec<Creditable>> {
    let mut left: Vec<Creditable> = lines
        .iter()
        .map(|line| Creditable {
            tax_code: line.line.tax_code,
            amount: line.line.amount_cents,
            base: line.taxable_base_cents,
            tax: line.tax_cents,
        })
        .collect();
    for note in earlier {
        let credited: Vec<CreditLine> = serde_json::from_str(&note.lines)
            .map_err(|err| StoreError::invariant(format!("credit note {}: {err}", note.id)))?;
        for line in credited {
            let Some(target) = left.get_mut(line.invoice_line) else {
                return Err(StoreError::invariant(format!(
                    "credit note {} names line {} of an invoice without it",
                    note.id, line.invoice_line
                )));
            };
            target.amount -= line.amount_cents;
            target.base -= line.taxable_base_cents;
            target.tax -= line.tax_cents;
        }
    }
    Ok(left)
}

/// Issues the credit note of `refund` (just approved, in the caller's transaction) against its
/// charge's invoice, and writes its `credit_note.created` event with the event's deliveries:
/// the endpoints given one. A charge without an invoice (approved before invoices existed)
/// gets none.
pub(crate) async fn issue_in<C: ConnectionTrait>(
    conn: &C,
    refund: &refund::Model,
) -> StoreResult<Vec<WebhookEndpointId>> {
    if refund.status != RefundStatus::Approved {
        return Err(StoreError::invariant(format!(
            "a credit note for refund {}, which is {}",
            refund.id, refund.status
        )));
    }
    let Some(invoice) = invoice::Entity::find()
        .filter(invoice::Column::ChargeId.eq(&refund.charge_id))
        .one(conn)
        .await?
    else {
        tracing::warn!(refund = %refund.id, charge = %refund.charge_id, "a refund of a charge without an invoice: no credit note");
        return Ok(Vec::new());
    };
    let lines: Vec<InvoiceLine> = serde_json::from_str(&invoice.lines)
        .map_err(|err| StoreError::invariant(format!("invoice {}: {err}", invoice.id)))?;
    let earlier = credit_note::Entity::find()
        .filter(credit_note::Column::InvoiceId.eq(&invoice.id))
        .all(conn)
        .await?;
    let left = creditable(&lines, &earlier)?;
    let amounts: Vec<i64> = left.iter().map(|line| line.amount).collect();
    let shares = spread(refund.amount_cents, &amounts).ok_or_else(|| {
        StoreError::invariant(format!(
            "refund {} of {} exceeds what invoice {} has left",
            refund.id, refund.amount_cents, invoice.id
        ))
    })?;
    let credited: Vec<CreditLine> = shares
        .into_iter()
        .enumerate()
        .filter(|(_, share)| *share > 0)
        .map(|(index, share)| {
            let split = credit_split(&left[index], share);
            CreditLine {
                invoice_line: index,
                description: lines[index].line.description.clone(),
                amount_cents: share,
                tax_code: lines[index].line.tax_code,
                tax_rate_bps: lines[index].tax_rate_bps,
                taxable_base_cents: split.base,
                tax_cents: split.tax,
            }
        })
        .collect();
    // The account's invoicing data: the note keeps its seller as at issue.
    let seller = super::entities::account::Entity::find_by_id(invoice.account_id.clone())
        .select_only()
        .column(super::entities::account::Column::Invoicing)
        .into_tuple::<Option<String>>()
        .one(conn)
        .await?
        .flatten();
    let sequence = take_numbers(
        conn,
        &invoice.account_id,
        CREDIT_NOTE_SERIES,
        CREDIT_NOTE_PREFIX,
        1,
    )
    .await?;
    let note = CreditNote {
        id: CreditNoteId::generate(),
        account_id: invoice.account_id.clone(),
        series: CREDIT_NOTE_SERIES.to_owned(),
        sequence,
        number: format!("{CREDIT_NOTE_PREFIX}{sequence}"),
        invoice_id: invoice.id.clone(),
        refund_id: refund.id.clone(),
        charge_id: refund.charge_id.clone(),
        seller,
        subtotal_cents: credited.iter().map(|l| l.taxable_base_cents).sum(),
        tax_cents: credited.iter().map(|l| l.tax_cents).sum(),
        total_cents: refund.amount_cents,
        lines: serde_json::to_string(&credited)
            .map_err(|err| StoreError::invariant(format!("a credit note's lines: {err}")))?,
        // Dated by the account's clock (`crate::clock`), as its invoice and events are: the
        // refund's `finalized_at` already is the account's instant (its test offset added
        // once, by `Refunds`), unlike a charge's, which is the machine's.
        issued_at: refund.finalized_at.unwrap_or(refund.updated_at),
    };
    note.clone()
        .into_active_model()
        .reset_all()
        .insert(conn)
        .await?;
    super::dian::numbering::number_credit_note_guarded(conn, &note, &invoice).await?;
    let event = created_event(conn, &invoice, &note).await?;
    super::fanout::write(conn, &[&event]).await
}

/// `credit_note.created`: the subscription's id and metadata, the credit note, its amount.
async fn created_event<C: ConnectionTrait>(
    conn: &C,
    invoice: &invoice::Model,
    note: &CreditNote,
) -> StoreResult<Event> {
    let metadata = match &invoice.subscription_id {
        Some(id) => subscription::Entity::find_by_id(id.clone())
            .select_only()
            .column(subscription::Column::Metadata)
            .into_tuple::<Option<String>>()
            .one(conn)
            .await?
            .flatten()
            .and_then(|raw| serde_json::from_str(&raw).ok()),
        None => None,
    };
    let data = serde_json::json!({
        "subscription_id": invoice.subscription_id,
        "metadata": metadata.unwrap_or(serde_json::Value::Null),
        "credit_note_id": note.id,
        "amount_in_cents": note.total_cents,
    });
    Ok(event_row(
        &note.account_id,
        invoice.subscription_id.as_ref(),
        EventType::CreditNoteCreated,
        data,
        note.issued_at,
    ))
}
