//! Submission's rows: claiming due documents (a lease per row, `FOR UPDATE SKIP LOCKED` on
//! PostgreSQL, so several nodes share the work and a node that dies lets its claims lapse),
//! recording the signed XML, noting a send before it goes out (so that after an unknown answer
//! the document is asked about, not sent again blindly), and recording DIAN's answer: the
//! status and messages, and for an invoice `invoice.dian_accepted` or `invoice.dian_rejected`
//! in the same transaction. Every write is conditional on the claim it was made under.

use super::super::entities::invoice::Model as Invoice;
use super::super::entities::{
    account, credit_note, dian_document, dian_range, invoice, subscription,
};
use super::super::outbox::event_row;
use super::super::{Store, StoreError, StoreResult};
use super::documents::{Corrected, credit_note_document, invoice_document};
use super::{DianDocument, DianSecrets, Issuer};
use crate::dian::document::Document;
use crate::domain::dian::{DianDocumentKind, DianStatus, DianWaiting};
use crate::domain::event_type::EventType;
use crate::ids::{AccountId, DocumentId};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait, Func, LockBehavior, LockType, Query};
use sea_orm::{ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QuerySelect};

/// A document's new issue instant (milliseconds) and CUFE or CUDE, when it is signed on a later
/// Colombian date than it was numbered: DIAN accepts a document only on the day it was issued
/// (rule FAD09e), and one not yet signed has never been sent.
#[derive(Clone, Copy, Debug)]
pub struct Redated<'a> {
    /// The new issue instant; `None` when only the code changed (a credit note's CUDE signed
    /// with the software's new PIN).
    pub issued_at: Option<i64>,
    pub unique_code: &'a str,
}

/// A document claimed for one attempt.
pub struct Claimed {
    pub row: DianDocument,
    /// Whether its account is a sandbox account (sent to the sandbox DIAN).
    pub sandbox: bool,
    pub prepared: Prepared,
}

/// What a claimed document is ready for.
pub enum Prepared {
    /// The document as it is signed, with the account's secrets.
    Ready {
        document: Box<Document>,
        secrets: DianSecrets,
    },
    /// A credit note whose invoice DIAN has not answered about yet: later.
    WaitsForInvoice,
    /// A credit note whose invoice DIAN rejected: DIAN would refuse it for certain.
    InvoiceRejected,
    /// DIAN was turned off for the account since: why.
    Settings(String),
    /// It cannot be built (a row missing): why.
    Broken(String),
}

impl Store {
    /// Claims up to `limit` pending documents due by `due_by` (of `account` only, when given),
    /// for `lease_ms` from `now`, under `claim`; each with what it needs to be signed and sent.
    pub async fn claim_dian_documents(
        &self,
        account: Option<&AccountId>,
        claim: &str,
        due_by: i64,
        now: i64,
        lease_ms: i64,
        limit: u64,
    ) -> StoreResult<Vec<Claimed>> {
        let conn = self.writer();
        let mut due = Query::select();
        due.column(dian_document::Column::Id)
            .from(dian_document::Entity)
            .and_where(dian_document::Column::Status.eq(DianStatus::Pending))
            .and_where(dian_document::Column::NextAt.lte(due_by))
            .and_where(
                dian_document::Column::ClaimedUntil
                    .is_null()
                    .or(dian_document::Column::ClaimedUntil.lt(now)),
            )
            .order_by(dian_document::Column::NextAt, sea_orm::Order::Asc)
            .limit(limit);
        if let Some(account) = account {
            due.and_where(dian_document::Entity::of(account).into());
        }
        if conn.get_database_backend() == DbBackend::Postgres {
            due.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        }
        let rows = dian_document::Entity::update_many()
            .col_expr(dian_document::Column::Claim, Expr::value(claim))
            .col_expr(
                dian_document::Column::ClaimedUntil,
                Expr::value(now + lease_ms),
            )
            .filter(dian_document::Column::Id.in_subquery(due))
            .exec_with_returning(conn)
            .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            let sandbox = account::Entity::find_by_id(row.account_id.clone())
                .select_only()
                .column(account::Column::Sandbox)
                .into_tuple::<bool>()
                .one(self.conn())
                .await?
                .unwrap_or(false);
            let prepared = match self.prepare(&row).await {
                Ok(prepared) => prepared,
                Err(err) => Prepared::Broken(err.to_string()),
            };
            claimed.push(Claimed {
                row,
                sandbox,
                prepared,
            });
        }
        Ok(claimed)
    }

    async fn prepare(&self, row: &DianDocument) -> StoreResult<Prepared> {
        let conn = self.conn();
        let Some(account) = account::Entity::find_by_id(row.account_id.clone())
            .one(conn)
            .await?
        else {
            return Ok(Prepared::Broken("no account".into()));
        };
        let Some(secrets) = account.dian_secrets() else {
            return Ok(Prepared::Settings("DIAN is off for the account".into()));
        };
        let issuer: Issuer = serde_json::from_str(&row.issuer)
            .map_err(|err| StoreError::invariant(format!("DIAN issuer: {err}")))?;
        let number = row.number.clone().unwrap_or_default();
        let document = match row.kind {
            DianDocumentKind::Invoice => {
                let DocumentId::Invoice(invoice_id) = &row.id else {
                    return Ok(Prepared::Broken("no invoice".into()));
                };
                let Some(invoice) = invoice::Entity::find_by_id(invoice_id.clone())
                    .one(conn)
                    .await?
                else {
                    return Ok(Prepared::Broken("no invoice".into()));
                };
                let range = match &row.range_id {
                    Some(id) => dian_range::Entity::find_by_id(id.clone()).one(conn).await?,
                    None => None,
                };
                let (Some(range), Some(sequence)) = (range, row.sequence) else {
                    return Ok(Prepared::Broken("no range".into()));
                };
                invoice_document(
                    &invoice,
                    &issuer,
                    row.environment,
                    range.numbering_range(),
                    sequence,
                    &secrets.software_pin,
                )?
            }
            DianDocumentKind::CreditNote => {
                let DocumentId::CreditNote(note_id) = &row.id else {
                    return Ok(Prepared::Broken("no credit note".into()));
                };
                let Some(note) = credit_note::Entity::find_by_id(note_id.clone())
                    .one(conn)
                    .await?
                else {
                    return Ok(Prepared::Broken("no credit note".into()));
                };
                let Some(invoice_id) = row.invoice_id.clone() else {
                    return Ok(Prepared::Broken("no invoice".into()));
                };
                let invoice: Option<Invoice> = invoice::Entity::find_by_id(invoice_id.clone())
                    .one(conn)
                    .await?;
                let invoice_doc =
                    dian_document::Entity::find_by_id(DocumentId::Invoice(invoice_id))
                        .one(conn)
                        .await?;
                let (Some(invoice), Some(invoice_doc)) = (invoice, invoice_doc) else {
                    return Ok(Prepared::Broken("no invoice".into()));
                };
                match invoice_doc.status {
                    DianStatus::AwaitingRange | DianStatus::Pending => {
                        return Ok(Prepared::WaitsForInvoice);
                    }
                    DianStatus::Rejected => return Ok(Prepared::InvoiceRejected),
                    DianStatus::Accepted => {}
                }
                credit_note_document(
                    &note,
                    &invoice,
                    &Corrected {
                        number: invoice_doc.number.as_deref().unwrap_or_default(),
                        cufe: invoice_doc.unique_code.as_deref().unwrap_or_default(),
                        issued_at: invoice_doc.issued_at,
                        whole: note.total_cents == invoice.total_cents,
                    },
                    &issuer,
                    row.environment,
                    &number,
                    &secrets.software_pin,
                )?
            }
        };
        // The document's own issue instant: its invoice's or credit note's, unless it was
        // re-dated when signed (`Redated`).
        let mut document = document;
        document.issued_at = crate::domain::time::from_millis(row.issued_at);
        // A credit note's CUDE is made with the software's PIN, which may have changed since
        // it was numbered: it is made again when it is signed (`filing`). An invoice's CUFE is
        // made with its range's technical key, and must still be the one fixed at numbering.
        if row.kind == DianDocumentKind::Invoice
            && document.unique_code() != row.unique_code.clone().unwrap_or_default()
        {
            return Ok(Prepared::Broken(
                "the document no longer gives the code fixed at numbering".into(),
            ));
        }
        Ok(Prepared::Ready {
            document: Box::new(document),
            secrets,
        })
    }

    /// How many of `account`'s pending documents due by `due_by` another pass holds now.
    pub async fn dian_documents_held(
        &self,
        account: &AccountId,
        due_by: i64,
        now: i64,
    ) -> StoreResult<u64> {
        use sea_orm::PaginatorTrait;
        Ok(dian_document::Entity::scoped(account)
            .filter(dian_document::Column::Status.eq(DianStatus::Pending))
            .filter(dian_document::Column::NextAt.lte(due_by))
            .filter(dian_document::Column::ClaimedUntil.gte(now))
            .count(self.conn())
            .await?)
    }

    /// Keeps the signed XML of `id`, with the issue instant and code it was re-dated to when it
    /// is signed on a later day than it was numbered, or the code a new software PIN gives it
    /// (`Redated`); in one statement, so a document is never stored half re-dated. Signed
    /// again only while DIAN holds no document of it (never sent, or DIAN said so).
    pub async fn record_dian_signature(
        &self,
        id: &DocumentId,
        claim: &str,
        xml: &str,
        redated: Option<Redated<'_>>,
    ) -> StoreResult<bool> {
        let mut update = dian_document::Entity::update_many()
            .col_expr(dian_document::Column::Xml, Expr::value(xml));
        if let Some(redated) = redated {
            if let Some(issued_at) = redated.issued_at {
                update = update.col_expr(dian_document::Column::IssuedAt, Expr::value(issued_at));
            }
            update = update.col_expr(
                dian_document::Column::UniqueCode,
                Expr::value(redated.unique_code),
            );
        }
        let updated = update
            .filter(dian_document::Column::Id.eq(id))
            .filter(dian_document::Column::Claim.eq(claim))
            .filter(dian_document::Column::Status.eq(DianStatus::Pending))
            .exec(self.writer())
            .await?;
        Ok(updated.rows_affected == 1)
    }

    /// Notes that `id` is being sent now, before it goes out; false when the claim lapsed.
    pub async fn record_dian_send(
        &self,
        id: &DocumentId,
        claim: &str,
        now: i64,
    ) -> StoreResult<bool> {
        let updated = dian_document::Entity::update_many()
            .col_expr(dian_document::Column::SentAt, Expr::value(now))
            .col_expr(
                dian_document::Column::Attempts,
                Expr::col(dian_document::Column::Attempts).add(1),
            )
            .col_expr(dian_document::Column::UpdatedAt, Expr::value(now))
            .filter(dian_document::Column::Id.eq(id))
            .filter(dian_document::Column::Claim.eq(claim))
            .exec(self.writer())
            .await?;
        Ok(updated.rows_affected == 1)
    }

    /// Releases the claim of `id`, to be tried again at `next_at`; `waiting` names what it
    /// waits for from an operator, and since when (the account's time; an earlier start is
    /// kept), or `None` while it is simply on its way.
    pub async fn retry_dian_later(
        &self,
        id: &DocumentId,
        claim: &str,
        next_at: i64,
        waiting: Option<(DianWaiting, i64)>,
    ) -> StoreResult<()> {
        let mut update = dian_document::Entity::update_many()
            .col_expr(dian_document::Column::NextAt, Expr::value(next_at))
            .col_expr(
                dian_document::Column::Claim,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                dian_document::Column::ClaimedUntil,
                Expr::value(Option::<i64>::None),
            );
        update = match waiting {
            Some((waiting, since)) => update
                .col_expr(dian_document::Column::Waiting, Expr::value(waiting))
                .col_expr(
                    dian_document::Column::WaitingSince,
                    Func::coalesce([
                        Expr::col(dian_document::Column::WaitingSince),
                        Expr::value(since),
                    ])
                    .into(),
                ),
            None => update
                .col_expr(
                    dian_document::Column::Waiting,
                    Expr::value(Option::<DianWaiting>::None),
                )
                .col_expr(
                    dian_document::Column::WaitingSince,
                    Expr::value(Option::<i64>::None),
                ),
        };
        update
            .filter(dian_document::Column::Id.eq(id))
            .filter(dian_document::Column::Claim.eq(claim))
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// Records DIAN's answer about `id` (accepted or rejected, with its messages, and DIAN's
    /// ApplicationResponse of an accepted one), and for an invoice its event, in one
    /// transaction; false when the claim lapsed or it was recorded.
    #[allow(clippy::too_many_arguments)]
    pub async fn record_dian_outcome(
        &self,
        id: &DocumentId,
        claim: &str,
        status: DianStatus,
        messages: &[String],
        application_response: Option<&str>,
        event_at: i64,
        now: i64,
    ) -> StoreResult<bool> {
        let messages = serde_json::to_string(messages)
            .map_err(|err| StoreError::invariant(format!("DIAN messages: {err}")))?;
        let txn = self.begin().await?;
        let updated = dian_document::Entity::update_many()
            .col_expr(dian_document::Column::Status, Expr::value(status))
            .col_expr(dian_document::Column::Messages, Expr::value(messages))
            .col_expr(
                dian_document::Column::ApplicationResponse,
                Expr::value(application_response.map(str::to_owned)),
            )
            .col_expr(
                dian_document::Column::Waiting,
                Expr::value(Option::<DianWaiting>::None),
            )
            .col_expr(
                dian_document::Column::WaitingSince,
                Expr::value(Option::<i64>::None),
            )
            .col_expr(
                dian_document::Column::NextAt,
                Expr::value(Option::<i64>::None),
            )
            .col_expr(
                dian_document::Column::Claim,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                dian_document::Column::ClaimedUntil,
                Expr::value(Option::<i64>::None),
            )
            .col_expr(dian_document::Column::UpdatedAt, Expr::value(now))
            .filter(dian_document::Column::Id.eq(id))
            .filter(dian_document::Column::Claim.eq(claim))
            .filter(dian_document::Column::Status.eq(DianStatus::Pending))
            .exec_with_returning(txn.conn())
            .await?;
        let Some(row) = updated.into_iter().next() else {
            return Ok(false);
        };
        if row.kind == DianDocumentKind::Invoice {
            let event_type = match status {
                DianStatus::Accepted => Some(EventType::InvoiceDianAccepted),
                DianStatus::Rejected => Some(EventType::InvoiceDianRejected),
                DianStatus::Pending | DianStatus::AwaitingRange => None,
            };
            let invoice = match id {
                DocumentId::Invoice(id) => {
                    invoice::Entity::find_by_id(id.clone())
                        .one(txn.conn())
                        .await?
                }
                DocumentId::CreditNote(_) => None,
            };
            if let (Some(event_type), Some(invoice)) = (event_type, invoice) {
                let data = invoice_event_data(txn.conn(), &invoice).await?;
                txn.insert_event(event_row(
                    &invoice.account_id,
                    invoice.subscription_id.as_ref(),
                    event_type,
                    data,
                    event_at,
                ))
                .await?;
            }
        }
        txn.commit().await?;
        Ok(true)
    }

    /// The signed XML of `account`'s invoice or credit note `id`; `Ok(None)` when it has no
    /// electronic document, `Ok(Some(None))` before it is signed.
    pub async fn dian_xml(
        &self,
        account: &AccountId,
        id: &DocumentId,
    ) -> StoreResult<Option<Option<String>>> {
        Ok(dian_document::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?
            .map(|doc| doc.xml))
    }
}

/// The `data` of `invoice.created` (and of the DIAN events, which repeat it): the
/// subscription's id and metadata, the invoice, its total.
async fn invoice_event_data<C: ConnectionTrait>(
    conn: &C,
    invoice: &Invoice,
) -> StoreResult<serde_json::Value> {
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
    Ok(serde_json::json!({
        "subscription_id": invoice.subscription_id,
        "metadata": metadata.unwrap_or(serde_json::Value::Null),
        "invoice_id": invoice.id,
        "amount_in_cents": invoice.total_cents,
    }))
}
