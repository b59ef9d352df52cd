//! The prepaid balance: two counters on the account row and the ledger that explains them.
//!
//! Every movement is one conditional UPDATE of the counters plus one ledger row, in one
//! transaction. The conditions (`available >= amount`) and the CHECK constraints make an
//! overdraft impossible however many requests race.

use super::entities::{account, balance_transaction};
use super::{Page, PageRequest, Store, StoreResult, fetch_page};
use crate::ids::{AccountId, BalanceTransactionId, ChargeAttemptId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    sea_query::{Expr, ExprTrait},
};

pub use balance_transaction::Model as BalanceTransaction;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Balance {
    pub available_cents: i64,
    pub reserved_cents: i64,
}

impl Store {
    pub async fn balance(&self, account: &AccountId) -> StoreResult<Option<Balance>> {
        balance_of(self.conn(), account).await
    }

    /// Adds `amount_cents` (> 0) to the available balance; `None` for an unknown account.
    pub async fn top_up(
        &self,
        account: &AccountId,
        amount_cents: i64,
        now_ms: i64,
    ) -> StoreResult<Option<Balance>> {
        Ok(self
            .top_up_and_wake(account, amount_cents, now_ms, now_ms)
            .await?
            .map(|(balance, _)| balance))
    }

    /// `top_up`, and in the same transaction sets the timer of every subscription paused for
    /// want of balance to `clock_ms` (the account's clock), so that their actors resume the
    /// ones the new balance covers: queued work in rows, which a client hanging up or a crash
    /// cannot lose. Returns the balance and the ids woken.
    ///
    /// It locks the account's row, then the subscriptions it wakes; an actor's transaction may
    /// take one of those subscriptions before the account (PostgreSQL then aborts one of the
    /// two). A top-up chosen as the deadlock's victim committed nothing and runs again.
    pub async fn top_up_and_wake(
        &self,
        account: &AccountId,
        amount_cents: i64,
        now_ms: i64,
        clock_ms: i64,
    ) -> StoreResult<Option<(Balance, Vec<SubscriptionId>)>> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self
                .top_up_and_wake_once(account, amount_cents, now_ms, clock_ms)
                .await
            {
                Err(err) if err.is_deadlock() && tries < 5 => {
                    tracing::debug!(tries, "a top-up met a deadlock and runs again");
                }
                done => return done,
            }
        }
    }

    async fn top_up_and_wake_once(
        &self,
        account: &AccountId,
        amount_cents: i64,
        now_ms: i64,
        clock_ms: i64,
    ) -> StoreResult<Option<(Balance, Vec<SubscriptionId>)>> {
        let txn = self.begin().await?;
        let updated = account::Entity::update_many()
            .col_expr(
                account::Column::AvailableCents,
                Expr::col(account::Column::AvailableCents).add(amount_cents),
            )
            .filter(account::Column::Id.eq(account))
            .exec(txn.conn())
            .await?;
        if updated.rows_affected == 0 {
            return Ok(None);
        }
        let row = ledger_row(account, "top_up", amount_cents, None, "Top-up", now_ms);
        insert_ledger_row(txn.conn(), row).await?;
        let woken = txn.wake_paused_for_balance(account, clock_ms).await?;
        let balance = balance_of(txn.conn(), account).await?;
        txn.commit().await?;
        Ok(balance.map(|balance| (balance, woken)))
    }

    pub async fn list_balance_transactions(
        &self,
        account: &AccountId,
        page: &PageRequest,
    ) -> StoreResult<Page<BalanceTransaction>> {
        let select = balance_transaction::Entity::scoped(account);
        fetch_page(self.conn(), select, balance_transaction::Column::Id, page).await
    }
}

pub(crate) async fn balance_of<C: ConnectionTrait>(
    conn: &C,
    account: &AccountId,
) -> StoreResult<Option<Balance>> {
    Ok(account::Entity::find_by_id(account.clone())
        .one(conn)
        .await?
        .map(|row| Balance {
            available_cents: row.available_cents,
            reserved_cents: row.reserved_cents,
        }))
}

pub(crate) async fn insert_ledger_row<C: ConnectionTrait>(
    conn: &C,
    row: BalanceTransaction,
) -> StoreResult<BalanceTransaction> {
    Ok(row.into_active_model().reset_all().insert(conn).await?)
}

/// A new ledger row: its id made now.
pub(crate) fn ledger_row(
    account: &AccountId,
    kind: &str,
    amount_cents: i64,
    charge_attempt_id: Option<ChargeAttemptId>,
    description: &str,
    now_ms: i64,
) -> BalanceTransaction {
    BalanceTransaction {
        id: BalanceTransactionId::generate(),
        account_id: account.clone(),
        kind: kind.to_owned(),
        amount_cents,
        charge_attempt_id,
        description: description.to_owned(),
        created_at: now_ms,
    }
}
