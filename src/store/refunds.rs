//! Refunds of approved charges, and the charges an integrator lists.
//!
//! A refund's money moves in two steps, each one transaction, like a charge's fee:
//! 1. `begin_refund`: reserve the amount on the charge (`refunding_cents`), only if the charge is
//!    approved, has no refund in flight and `refunded + amount <= amount_cents` (a conditional
//!    update; the table's CHECK and the `refunds_one_in_flight` index hold it whatever the code
//!    does), and insert the refund `pending`.
//! 2. `settle_refund_in`: move the refund from `pending` to `approved` or `declined` with a
//!    conditional update; only the caller whose update matched moves the reservation (into
//!    `refunded_cents` when approved, back to nothing otherwise). Later reports change nothing.
//!
//! A refund the processor refused for certain is `discard_refund`ed: the row goes and the
//! reservation with it, so a refused request leaves no trace.
//!
//! Between the two steps a refund is sent to the processor once: `mark_refund_posted` sets
//! `posted_at` just before, only while it is pending and unsent. A refund never sent (its
//! request cut off after step 1) is closed by `close_unposted_refund`, only while it is still
//! unsent; one of the two conditional updates wins, so a refund closed as unsent is never
//! sent. A refund that was sent is never closed by time: only the processor's answer settles it,
//! or an operator who closes one the processor never shows (`close_unshown_refund`), once no
//! post of ours can still reach the processor.
//!
//! Every write here goes through a `StoreTxn` (on SQLite the one writer and its group commit):
//! a write on the read pool would meet `SQLITE_BUSY` beside the writer under a burst.

use super::entities::{charge_attempt, refund};
use super::txn::StoreTxn;
use super::{Page, PageRequest, Store, StoreError, StoreResult, fetch_page};
use crate::domain::charge_status::{ChargeStatus, RefundStatus};
use crate::ids::{
    AccountId, ChargeAttemptId, CustomerId, RefundId, SubscriptionId, WebhookEndpointId,
};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};

pub use refund::Model as Refund;

use super::charges::ChargeAttempt;

/// Why a refund could not begin.
#[derive(Debug, thiserror::Error)]
pub enum BeginRefundError {
    #[error("no such charge")]
    NotFound,
    #[error("only an approved charge can be refunded; this one is {0}")]
    NotApproved(&'static str),
    #[error("the charge has been refunded in full")]
    NothingLeft,
    #[error("at most {remaining} cents of this charge can still be refunded")]
    OverRemaining { remaining: i64 },
    #[error("a refund of this charge is in progress")]
    InFlight,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A refund to begin.
#[derive(Clone, Debug)]
pub struct NewRefund {
    pub account: AccountId,
    pub charge_id: ChargeAttemptId,
    /// None: whatever is left to refund.
    pub amount_cents: Option<i64>,
    pub reason: Option<String>,
    pub now_ms: i64,
    /// When the reconciler first asks about it, in real time, should the request that made it
    /// never get to (a crash between recording and posting).
    pub recheck_at_ms: i64,
}

/// Filters of `GET /v1/charges`.
#[derive(Clone, Debug, Default)]
pub struct ChargeFilter {
    pub subscription_id: Option<SubscriptionId>,
    pub customer_id: Option<CustomerId>,
    pub status: Option<String>,
}

/// The outcome of `settle_refund_in` for the one caller that applied it.
#[derive(Clone, Debug)]
pub struct SettledRefund {
    pub refund: Refund,
    pub charge: ChargeAttempt,
    /// The endpoints given deliveries of the credit note's event, to wake after the commit.
    pub touched: Vec<WebhookEndpointId>,
}

impl Store {
    /// Reserves the refund's amount on its charge and records the refund `pending`, in one
    /// transaction (see the module doc). Answers the refund and the charge as it was read.
    pub async fn begin_refund(
        &self,
        new: NewRefund,
    ) -> Result<(Refund, ChargeAttempt), BeginRefundError> {
        let unit = self.begin().await?;
        let txn = unit.conn();
        let charge = charge_attempt::Entity::find_scoped(&new.account, new.charge_id.clone())
            .one(txn)
            .await
            .map_err(StoreError::from)?
            .ok_or(BeginRefundError::NotFound)?;
        if !charge.is(ChargeStatus::Approved) {
            return Err(BeginRefundError::NotApproved(charge.status.as_str()));
        }
        if charge.refunding_cents > 0 {
            return Err(BeginRefundError::InFlight);
        }
        let remaining = charge.amount_cents - charge.refunded_cents;
        if remaining <= 0 {
            return Err(BeginRefundError::NothingLeft);
        }
        let amount = new.amount_cents.unwrap_or(remaining);
        if amount > remaining {
            return Err(BeginRefundError::OverRemaining { remaining });
        }
        let reserved = charge_attempt::Entity::update_many()
            .col_expr(charge_attempt::Column::RefundingCents, amount.into())
            .filter(charge_attempt::Column::Id.eq(&charge.id))
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Approved))
            .filter(charge_attempt::Column::RefundingCents.eq(0))
            .filter(
                Expr::col(charge_attempt::Column::RefundedCents)
                    .add(amount)
                    .lte(Expr::col(charge_attempt::Column::AmountCents)),
            )
            .exec(txn)
            .await
            .map_err(StoreError::from)?;
        if reserved.rows_affected == 0 {
            // Another refund began between the read and the update.
            return Err(BeginRefundError::InFlight);
        }
        let row = refund::ActiveModel {
            id: Set(RefundId::generate()),
            account_id: Set(new.account),
            charge_id: Set(charge.id.clone()),
            amount_cents: Set(amount),
            reason: Set(new.reason),
            status: Set(RefundStatus::Pending),
            processor_refund_id: Set(None),
            processor_status: Set(None),
            processor_message: Set(None),
            attempts: Set(0),
            recheck_at: Set(Some(new.recheck_at_ms)),
            posted_at: Set(None),
            created_at: Set(new.now_ms),
            // Real time, not the account's test clock: the reconciler measures ages with it.
            updated_at: Set(chrono::Utc::now().timestamp_millis()),
            finalized_at: Set(None),
        };
        let refund = match row.insert(txn).await.map_err(StoreError::from) {
            Ok(refund) => refund,
            Err(err) if err.is_unique_violation() => return Err(BeginRefundError::InFlight),
            Err(err) => return Err(err.into()),
        };
        unit.commit().await?;
        Ok((refund, charge))
    }

    /// Forgets a refund the processor refused for certain, and frees its reservation: the
    /// request leaves no trace. Only while it is pending.
    pub async fn discard_refund(&self, refund: &Refund) -> StoreResult<()> {
        let unit = self.begin().await?;
        let deleted = refund::Entity::delete_many()
            .filter(refund::Column::Id.eq(&refund.id))
            .filter(refund::Column::Status.eq(RefundStatus::Pending))
            .exec(unit.conn())
            .await?;
        if deleted.rows_affected == 1 {
            release(unit.conn(), &refund.charge_id, refund.amount_cents, false).await?;
        }
        unit.commit().await?;
        Ok(())
    }

    pub async fn refund(&self, account: &AccountId, id: &RefundId) -> StoreResult<Option<Refund>> {
        Ok(refund::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// A charge's refunds, newest first.
    pub async fn refunds_of_charge(
        &self,
        account: &AccountId,
        charge_id: &ChargeAttemptId,
        page: &PageRequest,
    ) -> StoreResult<Page<Refund>> {
        let select = refund::Entity::scoped(account).filter(refund::Column::ChargeId.eq(charge_id));
        fetch_page(self.conn(), select, refund::Column::Id, page).await
    }

    /// The processor ids of a charge's other refunds: what a lookup among the transaction's
    /// refunds must not take for the one in flight.
    pub async fn known_processor_refunds(
        &self,
        charge_id: &ChargeAttemptId,
    ) -> StoreResult<Vec<String>> {
        Ok(refund::Entity::find()
            .filter(refund::Column::ChargeId.eq(charge_id))
            .filter(refund::Column::ProcessorRefundId.is_not_null())
            .all(self.conn())
            .await?
            .into_iter()
            .filter_map(|r| r.processor_refund_id)
            .collect())
    }

    /// Notes that the refund's one post is about to be sent, only while it is pending and was
    /// never sent: false when the reconciler closed it as unsent first (it must not be sent).
    pub async fn mark_refund_posted(&self, id: &RefundId, now_ms: i64) -> StoreResult<bool> {
        let txn = self.begin().await?;
        let marked = refund::Entity::update_many()
            .col_expr(refund::Column::PostedAt, Some(now_ms).into())
            .col_expr(refund::Column::UpdatedAt, now_ms.into())
            .filter(refund::Column::Id.eq(id))
            .filter(refund::Column::Status.eq(RefundStatus::Pending))
            .filter(refund::Column::PostedAt.is_null())
            .exec(txn.conn())
            .await?;
        txn.commit().await?;
        Ok(marked.rows_affected == 1)
    }

    /// Ends a pending refund that was never sent to the processor `declined`, and frees its
    /// reservation, only while it is still unsent (see the module doc). True when it did.
    pub async fn close_unposted_refund(&self, id: &RefundId, now_ms: i64) -> StoreResult<bool> {
        let txn = self.begin().await?;
        let closed = refund::Entity::update_many()
            .col_expr(refund::Column::Status, RefundStatus::Declined.into())
            .col_expr(
                refund::Column::ProcessorMessage,
                Some(
                    "The refund was never sent to the processor; nothing was refunded.".to_owned(),
                )
                .into(),
            )
            .col_expr(refund::Column::RecheckAt, Option::<i64>::None.into())
            .col_expr(refund::Column::UpdatedAt, now_ms.into())
            .col_expr(refund::Column::FinalizedAt, Some(now_ms).into())
            .filter(refund::Column::Id.eq(id))
            .filter(refund::Column::Status.eq(RefundStatus::Pending))
            .filter(refund::Column::PostedAt.is_null())
            .exec_with_returning(txn.conn())
            .await?;
        let Some(refund) = closed.into_iter().next() else {
            return Ok(false);
        };
        release(txn.conn(), &refund.charge_id, refund.amount_cents, false).await?;
        txn.commit().await?;
        metrics::counter!("refund_outcomes_total", "outcome" => "declined").increment(1);
        Ok(true)
    }

    /// Closes `declined` a refund the processor never showed, for an operator (`reason` kept as
    /// its message): only while it is pending, was posted before `posted_before_ms` and has no
    /// processor id (a conditional update; the amount's reservation goes with it). False when
    /// it is not such a refund (any more).
    pub async fn close_unshown_refund(
        &self,
        id: &RefundId,
        posted_before_ms: i64,
        reason: &str,
        now_ms: i64,
    ) -> StoreResult<Option<Refund>> {
        let txn = self.begin().await?;
        let closed = refund::Entity::update_many()
            .col_expr(refund::Column::Status, RefundStatus::Declined.into())
            .col_expr(
                refund::Column::ProcessorMessage,
                Some(reason.to_owned()).into(),
            )
            .col_expr(refund::Column::RecheckAt, Option::<i64>::None.into())
            .col_expr(refund::Column::UpdatedAt, now_ms.into())
            .col_expr(refund::Column::FinalizedAt, Some(now_ms).into())
            .filter(refund::Column::Id.eq(id))
            .filter(refund::Column::Status.eq(RefundStatus::Pending))
            .filter(refund::Column::ProcessorRefundId.is_null())
            .filter(refund::Column::PostedAt.lt(posted_before_ms))
            .exec_with_returning(txn.conn())
            .await?;
        let Some(refund) = closed.into_iter().next() else {
            return Ok(None);
        };
        release(txn.conn(), &refund.charge_id, refund.amount_cents, false).await?;
        txn.commit().await?;
        metrics::counter!("refund_outcomes_total", "outcome" => "declined").increment(1);
        Ok(Some(refund))
    }

    /// A refund by its id alone, for an operator.
    pub async fn refund_by_id(&self, id: &RefundId) -> StoreResult<Option<Refund>> {
        Ok(refund::Entity::find_by_id(id.clone())
            .one(self.conn())
            .await?)
    }

    /// Notes the processor's id and status of a still-pending refund.
    pub async fn record_processor_refund(
        &self,
        id: &RefundId,
        processor_refund_id: &str,
        processor_status: &str,
        now_ms: i64,
    ) -> StoreResult<()> {
        let txn = self.begin().await?;
        refund::Entity::update_many()
            .col_expr(
                refund::Column::ProcessorRefundId,
                processor_refund_id.into(),
            )
            .col_expr(refund::Column::ProcessorStatus, processor_status.into())
            .col_expr(refund::Column::UpdatedAt, now_ms.into())
            .filter(refund::Column::Id.eq(id))
            .filter(refund::Column::Status.eq(RefundStatus::Pending))
            .exec(txn.conn())
            .await?;
        txn.commit().await
    }

    /// When to ask the processor next about a pending refund, and why it is still open.
    pub async fn schedule_refund_recheck(
        &self,
        id: &RefundId,
        attempts: i32,
        at_ms: i64,
        reason: &str,
    ) -> StoreResult<()> {
        let txn = self.begin().await?;
        refund::Entity::update_many()
            .col_expr(refund::Column::Attempts, attempts.into())
            .col_expr(refund::Column::RecheckAt, Some(at_ms).into())
            .col_expr(
                refund::Column::ProcessorMessage,
                Some(reason.to_owned()).into(),
            )
            .filter(refund::Column::Id.eq(id))
            .filter(refund::Column::Status.eq(RefundStatus::Pending))
            .exec(txn.conn())
            .await?;
        txn.commit().await
    }

    /// Pending refunds whose next question is due, soonest first.
    pub async fn refunds_due(&self, now_ms: i64, limit: u64) -> StoreResult<Vec<Refund>> {
        Ok(refund::Entity::find()
            .filter(refund::Column::Status.eq(RefundStatus::Pending))
            .filter(refund::Column::RecheckAt.lte(now_ms))
            .order_by_asc(refund::Column::RecheckAt)
            .limit(limit)
            .all(self.conn())
            .await?)
    }

    /// An account's charges, newest first, filtered.
    pub async fn list_charges(
        &self,
        account: &AccountId,
        filter: &ChargeFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<ChargeAttempt>> {
        let mut select = charge_attempt::Entity::scoped(account);
        if let Some(subscription) = &filter.subscription_id {
            select = select.filter(charge_attempt::Column::SubscriptionId.eq(subscription));
        }
        if let Some(customer) = &filter.customer_id {
            select = select.filter(charge_attempt::Column::CustomerId.eq(customer));
        }
        if let Some(status) = &filter.status {
            select = select.filter(charge_attempt::Column::Status.eq(status));
        }
        fetch_page(self.conn(), select, charge_attempt::Column::Id, page).await
    }
}

impl StoreTxn {
    /// Settles a pending refund with the processor's final `raw_status`; see
    /// `settle_refund_in`.
    pub async fn settle_refund(
        &self,
        id: &RefundId,
        raw_status: &str,
        message: Option<&str>,
        processor_refund_id: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<Option<SettledRefund>> {
        let settled = settle_refund_in(
            self.conn(),
            id,
            raw_status,
            message,
            processor_refund_id,
            now_ms,
        )
        .await?;
        if let Some(settled) = &settled {
            self.touch(settled.touched.iter().cloned());
        }
        Ok(settled)
    }
}

/// Moves a pending refund to `approved` (APPROVED) or `declined` (any other final status) and
/// its charge's reservation with it. `None` when it was not pending (already settled by
/// another report, or discarded) or the status is not final.
pub(crate) async fn settle_refund_in<C: ConnectionTrait>(
    conn: &C,
    id: &RefundId,
    raw_status: &str,
    message: Option<&str>,
    processor_refund_id: Option<&str>,
    now_ms: i64,
) -> StoreResult<Option<SettledRefund>> {
    let status = match raw_status {
        "APPROVED" => RefundStatus::Approved,
        "DECLINED" | "ERROR" | "VOIDED" => RefundStatus::Declined,
        _ => return Ok(None),
    };
    // A decline always says why, in the processor's words when it gave any.
    let message = match (status, message) {
        (RefundStatus::Declined, None) => Some(format!("The processor answered {raw_status}.")),
        (_, message) => message.map(str::to_owned),
    };
    let mut update = refund::Entity::update_many()
        .col_expr(refund::Column::Status, status.into())
        .col_expr(refund::Column::ProcessorStatus, raw_status.into())
        .col_expr(refund::Column::ProcessorMessage, message.into())
        .col_expr(refund::Column::RecheckAt, Option::<i64>::None.into())
        .col_expr(refund::Column::UpdatedAt, now_ms.into())
        .col_expr(refund::Column::FinalizedAt, Some(now_ms).into());
    if let Some(processor_id) = processor_refund_id {
        update = update.col_expr(refund::Column::ProcessorRefundId, processor_id.into());
    }
    let applied = update
        .filter(refund::Column::Id.eq(id))
        .filter(refund::Column::Status.eq(RefundStatus::Pending))
        .exec_with_returning(conn)
        .await?;
    let Some(refund) = applied.into_iter().next() else {
        return Ok(None);
    };
    let charge = release(
        conn,
        &refund.charge_id,
        refund.amount_cents,
        status == RefundStatus::Approved,
    )
    .await?;
    // Its credit note, in the same transaction (`store::credit_notes`).
    let touched = if status == RefundStatus::Approved {
        super::credit_notes::issue_in(conn, &refund).await?
    } else {
        Vec::new()
    };
    metrics::counter!("refund_outcomes_total", "outcome" => status.as_str()).increment(1);
    Ok(Some(SettledRefund {
        refund,
        charge,
        touched,
    }))
}

/// Ends a charge's reservation of `amount`: into `refunded_cents` when the refund was
/// approved, back to nothing otherwise.
async fn release<C: ConnectionTrait>(
    conn: &C,
    charge_id: &ChargeAttemptId,
    amount: i64,
    approved: bool,
) -> StoreResult<ChargeAttempt> {
    let mut update = charge_attempt::Entity::update_many().col_expr(
        charge_attempt::Column::RefundingCents,
        Expr::col(charge_attempt::Column::RefundingCents).sub(amount),
    );
    if approved {
        update = update.col_expr(
            charge_attempt::Column::RefundedCents,
            Expr::col(charge_attempt::Column::RefundedCents).add(amount),
        );
    }
    let rows = update
        .filter(charge_attempt::Column::Id.eq(charge_id))
        .exec_with_returning(conn)
        .await?;
    rows.into_iter().next().ok_or_else(|| {
        StoreError::invariant(format!("refund of charge {charge_id}, which is not there"))
    })
}

#[cfg(test)]
mod tests {
    use super::NewRefund;
    use crate::domain::charge_purpose::ChargePurpose;
    use crate::store::charges::NewCharge;
    use crate::store::prefetch::fixture::shop;
    use std::time::Duration;

    const NOW: i64 = 1_700_000_000_000;

    /// Issue 32, item 4: a refund's notes (the processor's id, the next question) are writes,
    /// so they queue for SQLite's one writer like every unit. On the read pool they met
    /// `SQLITE_BUSY` once the writer had held the database longer than the busy timeout
    /// (30 s), as it does through a long burst of group commits; here one unit holds it that
    /// long.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refunds_notes_wait_for_the_writer_however_long_it_is_held() {
        let shop = shop(NOW).await;
        let charge = shop
            .store
            .begin_charge(NewCharge {
                account: shop.account.clone(),
                subscription_id: None,
                customer_id: shop.sub.customer_id.clone(),
                payment_method_id: shop.sub.default_payment_method_id.clone(),
                amount_cents: 10_000,
                fee_cents: 100,
                purpose: ChargePurpose::Manual,
                period_start: None,
                pending_change: None,
                now_ms: NOW,
                lines: Vec::new(),
            })
            .await
            .expect("charge");
        shop.store
            .settle_charge(&charge.id, "APPROVED", None, Some("tx-1"), NOW)
            .await
            .expect("settle");
        let (refund, _) = shop
            .store
            .begin_refund(NewRefund {
                account: shop.account.clone(),
                charge_id: charge.id.clone(),
                amount_cents: None,
                reason: None,
                now_ms: NOW,
                recheck_at_ms: NOW,
            })
            .await
            .expect("refund");
        // A unit that has written holds SQLite's write lock until it commits.
        let holder = shop.store.begin().await.expect("begin");
        holder
            .settle_refund(
                &crate::ids::RefundId::generate(),
                "APPROVED",
                None,
                None,
                NOW,
            )
            .await
            .expect("a write");
        let (store, id) = (shop.store.clone(), refund.id.clone());
        let notes = tokio::spawn(async move {
            store
                .record_processor_refund(&id, "r-1", "PENDING", NOW)
                .await?;
            store
                .schedule_refund_recheck(&id, 1, NOW + 5_000, "pending at the processor")
                .await
        });
        // Past the busy timeout: not a wait for anything to happen, the writer held that long.
        tokio::time::sleep(Duration::from_secs(31)).await;
        holder.commit().await.expect("commit");
        notes
            .await
            .expect("task")
            .expect("the notes wait for the writer, never SQLITE_BUSY");
        let stored = shop
            .store
            .refund(&shop.account, &refund.id)
            .await
            .expect("read")
            .expect("refund");
        assert_eq!(stored.processor_refund_id.as_deref(), Some("r-1"));
        assert_eq!((stored.attempts, stored.recheck_at), (1, Some(NOW + 5_000)));
        shop.remove();
    }
}
