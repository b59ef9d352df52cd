//! An account's invoices and credit notes by issue time (CONTRACT §16): a page of those issued
//! in a `Window`, in issue order, after a key `(issued_at, id)`, read along the
//! `(account_id, issued_at, id)` indexes (migration 000031), so that an export of a month
//! reads each document once, a bounded page at a time, and never holds the month. What the
//! CSV needs of the electronic documents (`DianSummary`) is read without their XML.

use super::entities::credit_note::Model as CreditNote;
use super::entities::invoice::Model as Invoice;
use super::entities::{credit_note, dian_document, invoice};
use super::{Store, StoreResult};
use crate::domain::calendar::Window;
use crate::domain::dian::DianStatus;
use crate::ids::{AccountId, CreditNoteId, DocumentId, InvoiceId};
use crate::store::Scoped;
use sea_orm::{ColumnTrait, Condition, QueryFilter, QueryOrder, QuerySelect};
use std::collections::HashMap;

/// Bounds on `issued_at` of a list's filter (`issued_from`, `issued_to`): from the first
/// instant, before the second; either may be open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IssuedBounds {
    pub from_ms: Option<i64>,
    pub before_ms: Option<i64>,
}

/// What an export says of a document's electronic twin: its status, DIAN number and CUFE or
/// CUDE (no XML: a page of them stays small).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DianSummary {
    pub status: DianStatus,
    pub number: Option<String>,
    pub unique_code: Option<String>,
}

/// The rows after `(at, last)` in `(issued_at, id)` order: a keyset page's start.
fn issued_after<C: ColumnTrait>(
    issued_at: C,
    id: C,
    at: i64,
    last: impl Into<sea_orm::Value>,
) -> Condition {
    Condition::any()
        .add(issued_at.gt(at))
        .add(Condition::all().add(issued_at.eq(at)).add(id.gt(last)))
}

/// `condition` narrowed to `bounds` on `column`.
pub(super) fn within<C: ColumnTrait>(
    condition: Condition,
    column: C,
    bounds: IssuedBounds,
) -> Condition {
    let mut condition = condition;
    if let Some(from) = bounds.from_ms {
        condition = condition.add(column.gte(from));
    }
    if let Some(before) = bounds.before_ms {
        condition = condition.add(column.lt(before));
    }
    condition
}

impl Store {
    /// At most `limit` of `account`'s invoices issued in `window`, oldest first, after `after`
    /// (the last key of the previous page).
    pub async fn invoices_issued(
        &self,
        account: &AccountId,
        window: Window,
        after: Option<&(i64, InvoiceId)>,
        limit: u64,
    ) -> StoreResult<Vec<Invoice>> {
        use invoice::Column;
        let mut select = invoice::Entity::scoped(account)
            .filter(Column::IssuedAt.gte(window.start_ms))
            .filter(Column::IssuedAt.lt(window.end_ms));
        if let Some((at, id)) = after {
            select = select.filter(issued_after(Column::IssuedAt, Column::Id, *at, id.clone()));
        }
        Ok(select
            .order_by_asc(Column::IssuedAt)
            .order_by_asc(Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?)
    }

    /// At most `limit` of `account`'s credit notes issued in `window`, oldest first, after
    /// `after`.
    pub async fn credit_notes_issued(
        &self,
        account: &AccountId,
        window: Window,
        after: Option<&(i64, CreditNoteId)>,
        limit: u64,
    ) -> StoreResult<Vec<CreditNote>> {
        use credit_note::Column;
        let mut select = credit_note::Entity::scoped(account)
            .filter(Column::IssuedAt.gte(window.start_ms))
            .filter(Column::IssuedAt.lt(window.end_ms));
        if let Some((at, id)) = after {
            select = select.filter(issued_after(Column::IssuedAt, Column::Id, *at, id.clone()));
        }
        Ok(select
            .order_by_asc(Column::IssuedAt)
            .order_by_asc(Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?)
    }

    /// `account`'s invoices among `ids`, by id (a page of credit notes' invoices).
    pub async fn invoices_by_ids(
        &self,
        account: &AccountId,
        ids: &[InvoiceId],
    ) -> StoreResult<HashMap<InvoiceId, Invoice>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(invoice::Entity::scoped(account)
            .filter(invoice::Column::Id.is_in(ids.iter().cloned()))
            .all(self.conn())
            .await?
            .into_iter()
            .map(|invoice| (invoice.id.clone(), invoice))
            .collect())
    }

    /// The status, number and unique code of `account`'s electronic documents among `ids`.
    pub async fn dian_summaries(
        &self,
        account: &AccountId,
        ids: &[DocumentId],
    ) -> StoreResult<HashMap<DocumentId, DianSummary>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: Vec<(DocumentId, DianStatus, Option<String>, Option<String>)> =
            dian_document::Entity::scoped(account)
                .select_only()
                .column(dian_document::Column::Id)
                .column(dian_document::Column::Status)
                .column(dian_document::Column::Number)
                .column(dian_document::Column::UniqueCode)
                .filter(dian_document::Column::Id.is_in(ids.iter().cloned()))
                .into_tuple()
                .all(self.conn())
                .await?;
        Ok(rows
            .into_iter()
            .map(|(id, status, number, unique_code)| {
                (
                    id,
                    DianSummary {
                        status,
                        number,
                        unique_code,
                    },
                )
            })
            .collect())
    }
}
