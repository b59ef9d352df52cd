//! Documents that wait (CONTRACT §12a): numbering the invoices waiting for a range whenever a
//! range may have become usable (each filing pass, so each Colombian midnight and each
//! test-clock advance), holding a document that waits for an operator where it can be seen
//! (`dian_documents.waiting`), numbering again an invoice whose range ended before it could
//! be sent, and the counts the gauges and the dashboard show.

use super::super::entities::{account, dian_document, dian_range};
use super::super::{Store, StoreResult};
use super::numbering::{date_of, number_waiting_in};
use crate::domain::dian::{DianStatus, DianWaiting};
use crate::ids::{AccountId, DocumentId};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait, Func, LockType};
use sea_orm::{ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QuerySelect};

/// Documents of one account waiting for one reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingGroup {
    pub account_id: AccountId,
    pub waiting: DianWaiting,
    pub count: u64,
    /// When the oldest started waiting (the account's time).
    pub oldest_since: i64,
}

/// Locks `account`'s row (PostgreSQL) for the rest of the transaction: numbering from an
/// account's ranges is one writer at a time, so each waiting invoice is numbered once.
pub(super) async fn lock_account<C: ConnectionTrait>(
    conn: &C,
    account: &AccountId,
) -> StoreResult<()> {
    if conn.get_database_backend() == DbBackend::Postgres {
        account::Entity::find_by_id(account.clone())
            .select_only()
            .column(account::Column::Id)
            .lock(LockType::NoKeyUpdate)
            .into_tuple::<String>()
            .one(conn)
            .await?;
    }
    Ok(())
}

impl Store {
    /// The accounts with invoices waiting for a number (`account` only, when given).
    pub async fn accounts_awaiting_numbers(
        &self,
        account: Option<&AccountId>,
    ) -> StoreResult<Vec<AccountId>> {
        let mut query = dian_document::Entity::find()
            .select_only()
            .column(dian_document::Column::AccountId)
            .distinct()
            .filter(dian_document::Column::Status.eq(DianStatus::AwaitingRange));
        if let Some(account) = account {
            query = query.filter(dian_document::Entity::of(account));
        }
        Ok(query.into_tuple::<AccountId>().all(self.conn()).await?)
    }

    /// Numbers `account`'s waiting invoices as issued at `now_ms` (its clock), when one of its
    /// ranges is valid on that Colombian date with numbers left; how many. Read first without
    /// a transaction, so that a pass over accounts with no usable range writes nothing.
    pub async fn number_waiting(&self, account: &AccountId, now_ms: i64) -> StoreResult<u64> {
        let date = date_of(now_ms);
        let usable = dian_range::Entity::scoped(account)
            .filter(dian_range::Column::ValidFrom.lte(date.as_str()))
            .filter(dian_range::Column::ValidTo.gte(date.as_str()))
            .filter(
                Expr::col(dian_range::Column::NextNumber)
                    .lte(Expr::col(dian_range::Column::RangeTo)),
            )
            .one(self.conn())
            .await?;
        if usable.is_none() {
            return Ok(0);
        }
        let txn = self.begin().await?;
        lock_account(txn.conn(), account).await?;
        let numbered = number_waiting_in(txn.conn(), account, now_ms).await?;
        txn.commit().await?;
        Ok(numbered)
    }

    /// Holds `id` (claimed under `claim`) out of filing, waiting for `waiting` since `since`
    /// (the account's time; an earlier start is kept): nothing is sent until an operator acts.
    pub async fn park_dian_document(
        &self,
        id: &DocumentId,
        claim: &str,
        waiting: DianWaiting,
        since: i64,
    ) -> StoreResult<()> {
        dian_document::Entity::update_many()
            .col_expr(dian_document::Column::Waiting, Expr::value(waiting))
            .col_expr(
                dian_document::Column::WaitingSince,
                Func::coalesce([
                    Expr::col(dian_document::Column::WaitingSince),
                    Expr::value(since),
                ])
                .into(),
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
            .filter(dian_document::Column::Id.eq(id))
            .filter(dian_document::Column::Claim.eq(claim))
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// Gives up the number of invoice `id` (claimed under `claim`, never sent: its range ended
    /// before the date it would now be issued on) and numbers it again from a range valid on
    /// `now_ms`'s date, or leaves it awaiting one; the number it had is kept as
    /// `replaced_number`. In one transaction, with the account locked as numbering is.
    pub async fn renumber_dian_invoice(
        &self,
        id: &DocumentId,
        claim: &str,
        now_ms: i64,
    ) -> StoreResult<()> {
        let txn = self.begin().await?;
        let Some(row) = dian_document::Entity::find_by_id(id.clone())
            .one(txn.conn())
            .await?
        else {
            return Ok(());
        };
        lock_account(txn.conn(), &row.account_id).await?;
        let released = dian_document::Entity::update_many()
            .col_expr(
                dian_document::Column::Status,
                Expr::value(DianStatus::AwaitingRange),
            )
            .col_expr(
                dian_document::Column::ReplacedNumber,
                Expr::col(dian_document::Column::Number),
            )
            .col_expr(
                dian_document::Column::Prefix,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                dian_document::Column::Sequence,
                Expr::value(Option::<i64>::None),
            )
            .col_expr(
                dian_document::Column::Number,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                dian_document::Column::RangeId,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                dian_document::Column::UniqueCode,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                dian_document::Column::Xml,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                dian_document::Column::SentAt,
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
            .col_expr(
                dian_document::Column::Waiting,
                Expr::value(DianWaiting::AwaitingRange),
            )
            .col_expr(dian_document::Column::WaitingSince, Expr::value(now_ms))
            .col_expr(dian_document::Column::IssuedAt, Expr::value(now_ms))
            .filter(dian_document::Column::Id.eq(id))
            .filter(dian_document::Column::Claim.eq(claim))
            .filter(dian_document::Column::Status.eq(DianStatus::Pending))
            .filter(dian_document::Column::SentAt.is_null())
            .exec(txn.conn())
            .await?;
        if released.rows_affected == 1 {
            number_waiting_in(txn.conn(), &row.account_id, now_ms).await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// The documents waiting for an operator, by account and reason (the gauges, the
    /// dashboard).
    pub async fn dian_waiting_groups(&self) -> StoreResult<Vec<WaitingGroup>> {
        let rows: Vec<(AccountId, DianWaiting, i64, Option<i64>)> = dian_document::Entity::find()
            .select_only()
            .column(dian_document::Column::AccountId)
            .column(dian_document::Column::Waiting)
            .column_as(dian_document::Column::Id.count(), "count")
            .column_as(dian_document::Column::WaitingSince.min(), "oldest")
            .filter(dian_document::Column::Waiting.is_not_null())
            .filter(
                dian_document::Column::Status
                    .is_in([DianStatus::Pending, DianStatus::AwaitingRange]),
            )
            .group_by(dian_document::Column::AccountId)
            .group_by(dian_document::Column::Waiting)
            .into_tuple()
            .all(self.conn())
            .await?;
        Ok(rows
            .into_iter()
            .map(|(account_id, waiting, count, oldest)| WaitingGroup {
                account_id,
                waiting,
                count: u64::try_from(count).unwrap_or(0),
                oldest_since: oldest.unwrap_or(0),
            })
            .collect())
    }
}
