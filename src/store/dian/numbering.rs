//! Numbering electronic documents inside the transaction that writes them (CONTRACT §12).
//! An invoice of an account with DIAN on takes the next number of a range valid on its issue
//! date in Colombia (a conditional `UPDATE … SET next_number = next_number + n WHERE
//! next_number + n - 1 <= range_to AND valid_from <= date <= valid_to RETURNING`), and its
//! CUFE is computed then; with no number left it awaits a range, and adding one numbers the
//! waiting invoices in issue order. A credit note takes the next of its own series (`NC`) and
//! its CUDE. `UNIQUE (account_id, prefix, sequence)` keeps each number once.
//!
//! The callers run these in a savepoint of their own and carry on without it when it fails:
//! nothing about DIAN may fail the transaction that settles a charge or a refund.

use super::super::entities::credit_note::Model as CreditNote;
use super::super::entities::invoice::Model as Invoice;
use super::super::entities::{account, dian_document, dian_range, invoice};
use super::super::series::take_numbers;
use super::super::{StoreError, StoreResult};
use super::documents::{Corrected, credit_note_document, invoice_document};
use super::{CREDIT_NOTE_PREFIX, CREDIT_NOTE_SERIES, DianDocument, DianRange, Issuer};
use crate::domain::dian::{DianDocumentKind, DianStatus, DianWaiting, Environment, colombian_date};
use crate::domain::time::from_millis;
use crate::ids::{AccountId, DocumentId};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder,
};
use std::collections::HashMap;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub(super) fn date_of(issued_at: i64) -> String {
    colombian_date(from_millis(issued_at))
        .format("%Y-%m-%d")
        .to_string()
}

fn to_json<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|err| StoreError::invariant(format!("DIAN JSON: {err}")))
}

/// Takes up to `need` numbers of `account`'s ranges valid on `date`, in order: the range
/// that ends first, then the next. Fewer (or none) when the ranges run out.
async fn take_range_numbers<C: ConnectionTrait>(
    conn: &C,
    account: &AccountId,
    date: &str,
    mut need: i64,
) -> StoreResult<Vec<(DianRange, i64)>> {
    let mut taken = Vec::new();
    // Each pass takes from one range, or finds it taken meanwhile (PostgreSQL) and reads again.
    for _ in 0..16 {
        if need <= 0 {
            break;
        }
        let candidate = dian_range::Entity::scoped(account)
            .filter(dian_range::Column::ValidFrom.lte(date))
            .filter(dian_range::Column::ValidTo.gte(date))
            .filter(
                Expr::col(dian_range::Column::NextNumber)
                    .lte(Expr::col(dian_range::Column::RangeTo)),
            )
            .order_by_asc(dian_range::Column::ValidTo)
            .order_by_asc(dian_range::Column::Id)
            .one(conn)
            .await?;
        let Some(range) = candidate else { break };
        let count = std::cmp::Ord::max(
            std::cmp::Ord::min(need, range.range_to - range.next_number + 1),
            1,
        );
        let moved = dian_range::Entity::update_many()
            .col_expr(
                dian_range::Column::NextNumber,
                Expr::col(dian_range::Column::NextNumber).add(count),
            )
            .filter(dian_range::Column::Id.eq(range.id.as_str()))
            .filter(
                Expr::col(dian_range::Column::NextNumber)
                    .add(count - 1)
                    .lte(Expr::col(dian_range::Column::RangeTo)),
            )
            .filter(dian_range::Column::ValidFrom.lte(date))
            .filter(dian_range::Column::ValidTo.gte(date))
            .exec_with_returning(conn)
            .await?;
        let Some(row) = moved.into_iter().next() else {
            continue;
        };
        let first = row.next_number - count;
        taken.extend((first..row.next_number).map(|number| (row.clone(), number)));
        need -= count;
    }
    Ok(taken)
}

/// A numbered invoice's document row, or one awaiting a range.
fn invoice_row(
    invoice: &Invoice,
    issuer: &Issuer,
    environment: Environment,
    numbered: Option<(&DianRange, i64)>,
    now: i64,
) -> StoreResult<DianDocument> {
    let mut row = DianDocument {
        id: invoice.id.clone().into(),
        account_id: invoice.account_id.clone(),
        kind: DianDocumentKind::Invoice,
        invoice_id: None,
        status: DianStatus::AwaitingRange,
        environment,
        issuer: to_json(issuer)?,
        issued_at: invoice.issued_at,
        prefix: None,
        sequence: None,
        number: None,
        range_id: None,
        unique_code: None,
        xml: None,
        messages: None,
        sent_at: None,
        attempts: 0,
        next_at: None,
        claim: None,
        claimed_until: None,
        updated_at: now,
        waiting: Some(DianWaiting::AwaitingRange),
        waiting_since: Some(invoice.issued_at),
        application_response: None,
        replaced_number: None,
    };
    if let Some((range, consecutive)) = numbered {
        number_row(&mut row, invoice, issuer, range, consecutive)?;
    }
    Ok(row)
}

/// Gives `row` (an invoice's) its number of `range` and its CUFE: it is pending from now.
fn number_row(
    row: &mut DianDocument,
    invoice: &Invoice,
    issuer: &Issuer,
    range: &DianRange,
    consecutive: i64,
) -> StoreResult<()> {
    let mut document = invoice_document(
        invoice,
        issuer,
        row.environment,
        range.numbering_range(),
        consecutive,
        "",
    )?;
    // The document's issue instant: its invoice's, or when it was numbered after waiting.
    document.issued_at = from_millis(row.issued_at);
    row.status = DianStatus::Pending;
    row.waiting = None;
    row.waiting_since = None;
    row.prefix = Some(range.prefix.clone());
    row.sequence = Some(consecutive);
    row.number = Some(document.number());
    row.range_id = Some(range.id.clone());
    row.unique_code = Some(document.unique_code());
    row.next_at = Some(row.updated_at);
    Ok(())
}

/// The accounts among `ids` with DIAN on, with their issuer and environment.
pub(crate) async fn dian_accounts<'a, C: ConnectionTrait>(
    conn: &C,
    ids: impl Iterator<Item = &'a AccountId>,
) -> StoreResult<HashMap<AccountId, (Issuer, Environment)>> {
    let mut ids: Vec<&AccountId> = ids.collect();
    ids.sort_unstable();
    ids.dedup();
    let accounts = account::Entity::find()
        .filter(account::Column::Id.is_in(ids))
        .filter(account::Column::Dian.is_not_null())
        .all(conn)
        .await?;
    let mut found = HashMap::new();
    for account in accounts {
        match account.dian_issuer() {
            Some(issuer) => {
                found.insert(account.id.clone(), issuer);
            }
            None => {
                tracing::error!(account = %account.id, "DIAN is on but the seller's settings are incomplete: invoices go without electronic documents");
            }
        }
    }
    Ok(found)
}

/// Numbers the invoices `invoices` (just written) of the accounts in `accounts` (those with
/// DIAN on, `dian_accounts`), in issue order, and writes their document rows.
pub(crate) async fn number_invoices_in<C: ConnectionTrait>(
    conn: &C,
    invoices: &[&Invoice],
    accounts: &HashMap<AccountId, (Issuer, Environment)>,
) -> StoreResult<()> {
    let now = now_ms();
    let mut ordered: Vec<&Invoice> = invoices
        .iter()
        .copied()
        .filter(|invoice| accounts.contains_key(&invoice.account_id))
        .collect();
    ordered.sort_by(|a, b| {
        (&a.account_id, a.issued_at, &a.id).cmp(&(&b.account_id, b.issued_at, &b.id))
    });
    let mut rows = Vec::with_capacity(ordered.len());
    // Runs of one account and one date take their numbers together.
    for run in ordered.chunk_by(|a, b| {
        a.account_id == b.account_id && date_of(a.issued_at) == date_of(b.issued_at)
    }) {
        let Some(first) = run.first() else { continue };
        let Some((issuer, environment)) = accounts.get(&first.account_id) else {
            continue;
        };
        let numbers = take_range_numbers(
            conn,
            &first.account_id,
            &date_of(first.issued_at),
            run.len() as i64,
        )
        .await?;
        for (index, invoice) in run.iter().enumerate() {
            let numbered = numbers.get(index).map(|(range, n)| (range, *n));
            rows.push(invoice_row(invoice, issuer, *environment, numbered, now)?);
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    dian_document::Entity::insert_many(
        rows.into_iter()
            .map(|row| row.into_active_model().reset_all()),
    )
    .exec_without_returning(conn)
    .await?;
    Ok(())
}

/// Numbers `account`'s invoices awaiting a range, in issue order, as electronic documents
/// issued `issued_at` (the account's instant now: DIAN accepts a document only on its issue
/// date, and these are signed from now), from the ranges valid on that date; none valid, they
/// keep waiting.
pub(crate) async fn number_waiting_in<C: ConnectionTrait>(
    conn: &C,
    account: &AccountId,
    issued_at: i64,
) -> StoreResult<u64> {
    let waiting = dian_document::Entity::scoped(account)
        .filter(dian_document::Column::Status.eq(DianStatus::AwaitingRange))
        .order_by_asc(dian_document::Column::IssuedAt)
        .order_by_asc(dian_document::Column::Id)
        .all(conn)
        .await?;
    if waiting.is_empty() {
        return Ok(0);
    }
    let invoices: HashMap<DocumentId, Invoice> = invoice::Entity::find()
        .filter(invoice::Column::Id.is_in(waiting.iter().map(|doc| &doc.id)))
        .all(conn)
        .await?
        .into_iter()
        .map(|invoice| (invoice.id.clone().into(), invoice))
        .collect();
    let now = now_ms();
    let mut numbered = 0;
    for mut row in waiting {
        let Some(invoice) = invoices.get(&row.id) else {
            continue;
        };
        let issuer: Issuer = serde_json::from_str(&row.issuer)
            .map_err(|err| StoreError::invariant(format!("DIAN issuer: {err}")))?;
        let taken = take_range_numbers(conn, account, &date_of(issued_at), 1).await?;
        // All of them are numbered on the same date: none left for one, none for the rest.
        let Some((range, consecutive)) = taken.into_iter().next() else {
            break;
        };
        row.issued_at = issued_at;
        row.updated_at = now;
        number_row(&mut row, invoice, &issuer, &range, consecutive)?;
        let id = row.id.clone();
        let updated = dian_document::Entity::update_many()
            .set(row.into_active_model().reset_all())
            .filter(dian_document::Column::Id.eq(id.as_str()))
            .filter(dian_document::Column::Status.eq(DianStatus::AwaitingRange))
            .exec(conn)
            .await?;
        if updated.rows_affected != 1 {
            return Err(StoreError::Conflict(format!(
                "the document of invoice {id}"
            )));
        }
        numbered += 1;
    }
    Ok(numbered)
}

/// Numbers the credit note `note` of `invoice` in the credit notes' series with its CUDE, when
/// its invoice is an electronic document; nothing otherwise (DIAN was off at the invoice).
pub(crate) async fn number_credit_note_in<C: ConnectionTrait>(
    conn: &C,
    note: &CreditNote,
    invoice: &Invoice,
) -> StoreResult<()> {
    let Some(invoice_doc) = dian_document::Entity::find_by_id(invoice.id.clone())
        .one(conn)
        .await?
    else {
        return Ok(());
    };
    let Some(account) = account::Entity::find_by_id(note.account_id.clone())
        .one(conn)
        .await?
    else {
        return Ok(());
    };
    let (Some((issuer, environment)), Some(secrets)) =
        (account.dian_issuer(), account.dian_secrets())
    else {
        tracing::warn!(credit_note = %note.id, "the invoice is electronic but DIAN is off now: the credit note has no electronic document");
        return Ok(());
    };
    let sequence = take_numbers(
        conn,
        &note.account_id,
        CREDIT_NOTE_SERIES,
        CREDIT_NOTE_PREFIX,
        1,
    )
    .await?;
    let number = format!("{CREDIT_NOTE_PREFIX}{sequence}");
    let corrected = Corrected {
        number: invoice_doc.number.as_deref().unwrap_or_default(),
        cufe: invoice_doc.unique_code.as_deref().unwrap_or_default(),
        issued_at: invoice.issued_at,
        whole: note.total_cents == invoice.total_cents,
    };
    let document = credit_note_document(
        note,
        invoice,
        &corrected,
        &issuer,
        environment,
        &number,
        &secrets.software_pin,
    )?;
    let now = now_ms();
    let row = DianDocument {
        id: note.id.clone().into(),
        account_id: note.account_id.clone(),
        kind: DianDocumentKind::CreditNote,
        invoice_id: Some(invoice.id.clone()),
        status: DianStatus::Pending,
        environment,
        issuer: to_json(&issuer)?,
        issued_at: note.issued_at,
        prefix: Some(CREDIT_NOTE_PREFIX.to_owned()),
        sequence: Some(sequence),
        number: Some(number),
        range_id: None,
        unique_code: Some(document.unique_code()),
        xml: None,
        messages: None,
        sent_at: None,
        attempts: 0,
        next_at: Some(now),
        claim: None,
        claimed_until: None,
        updated_at: now,
        waiting: None,
        waiting_since: None,
        application_response: None,
        replaced_number: None,
    };
    row.into_active_model().reset_all().insert(conn).await?;
    Ok(())
}

/// The savepoint DIAN's numbering runs in (plain SQL: the callers' connection is any
/// `ConnectionTrait` inside a transaction, on SQLite and PostgreSQL alike).
const SAVEPOINT: &str = "SAVEPOINT dian_numbering";

async fn end_savepoint<C: ConnectionTrait>(conn: &C, keep: bool) -> StoreResult<()> {
    if !keep {
        conn.execute_unprepared("ROLLBACK TO SAVEPOINT dian_numbering")
            .await?;
    }
    conn.execute_unprepared("RELEASE SAVEPOINT dian_numbering")
        .await?;
    Ok(())
}

/// `number_invoices_in` in a savepoint of `conn`'s transaction: a failure is logged and rolled
/// back alone, and the invoices stay written, each with a document waiting to be numbered
/// (`numbering_failed`): the filing loop numbers it at its next pass, and operators see it
/// meanwhile. Only when even that cannot be written do they go without documents (the audit
/// finds them).
pub(crate) async fn number_invoices_guarded<C: ConnectionTrait>(
    conn: &C,
    invoices: &[&Invoice],
    accounts: &HashMap<AccountId, (Issuer, Environment)>,
) -> StoreResult<()> {
    conn.execute_unprepared(SAVEPOINT).await?;
    let numbered = number_invoices_in(conn, invoices, accounts).await;
    let Err(err) = &numbered else {
        return end_savepoint(conn, true).await;
    };
    tracing::error!(error = ?err, "numbering invoices for DIAN failed; they wait to be numbered at the next filing pass");
    metrics::counter!("dian_numbering_failures_total").increment(1);
    end_savepoint(conn, false).await?;
    conn.execute_unprepared(SAVEPOINT).await?;
    let waiting = waiting_rows_in(conn, invoices, accounts).await;
    if let Err(err) = &waiting {
        tracing::error!(error = ?err, "recording invoices' DIAN documents as waiting failed; they were written without electronic documents");
    }
    end_savepoint(conn, waiting.is_ok()).await
}

/// The document rows of `invoices` as waiting to be numbered after a failed numbering.
async fn waiting_rows_in<C: ConnectionTrait>(
    conn: &C,
    invoices: &[&Invoice],
    accounts: &HashMap<AccountId, (Issuer, Environment)>,
) -> StoreResult<()> {
    let now = now_ms();
    let mut rows = Vec::new();
    for invoice in invoices {
        let Some((issuer, environment)) = accounts.get(&invoice.account_id) else {
            continue;
        };
        let mut row = invoice_row(invoice, issuer, *environment, None, now)?;
        row.waiting = Some(DianWaiting::NumberingFailed);
        rows.push(row.into_active_model().reset_all());
    }
    if rows.is_empty() {
        return Ok(());
    }
    dian_document::Entity::insert_many(rows)
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

/// `number_credit_note_in` in a savepoint, as `number_invoices_guarded`.
pub(crate) async fn number_credit_note_guarded<C: ConnectionTrait>(
    conn: &C,
    note: &CreditNote,
    invoice: &Invoice,
) -> StoreResult<()> {
    conn.execute_unprepared(SAVEPOINT).await?;
    let numbered = number_credit_note_in(conn, note, invoice).await;
    if let Err(err) = &numbered {
        tracing::error!(credit_note = %note.id, error = ?err, "numbering a credit note for DIAN failed; it was written without its electronic document");
    }
    end_savepoint(conn, numbered.is_ok()).await
}
