//! What `/v1/revenue` reads (CONTRACT §16): the MRR ledger's movements, a page at a time, and
//! a month's summary, every figure one SQL aggregate over the account's rows of the month (the
//! work of a request is bounded by its indexes, never by loading the rows).

use super::entities::{charge_attempt, credit_note, invoice, mrr_movement, subscription};
use super::mrr::MrrMovement;
use super::{Page, PageRequest, Store, StoreResult, fetch_page};
use crate::domain::charge_status::ChargeStatus;
use crate::domain::mrr::{MovementReason, MovementType};
use crate::domain::subscription::Status;
use crate::ids::{AccountId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::sea_query::{Alias, Expr, ExprTrait, Func, Query, SimpleExpr};
use sea_orm::{ColumnTrait, PaginatorTrait, QueryFilter, QuerySelect};

/// Optional filters of the movement list; `from`/`to` bound `occurred_at` (ms, inclusive).
#[derive(Clone, Debug, Default)]
pub struct MovementFilter {
    pub subscription_id: Option<SubscriptionId>,
    pub kind: Option<MovementType>,
    pub from: Option<i64>,
    pub to: Option<i64>,
}

/// A month's figures (`GET /v1/revenue/summary`), in cents unless counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub mrr_start_cents: i64,
    pub mrr_end_cents: i64,
    pub new_cents: i64,
    pub expansion_cents: i64,
    pub contraction_cents: i64,
    pub churn_voluntary_cents: i64,
    pub churn_failed_payment_cents: i64,
    pub reactivation_cents: i64,
    pub active_subscriptions: i64,
    pub recovered_charges: i64,
    pub failed_charges: i64,
    pub invoiced_cents: i64,
    pub iva_cents: i64,
    pub credited_cents: i64,
}

/// `SUM(column)` as a BIGINT, 0 over no rows (PostgreSQL sums BIGINT as NUMERIC).
fn sum_of(column: impl sea_orm::sea_query::IntoColumnRef) -> SimpleExpr {
    Func::coalesce([
        Func::cast_as(Func::sum(Expr::col(column)), Alias::new("BIGINT")).into(),
        Expr::value(0i64),
    ])
    .into()
}

impl Store {
    /// The account's movements, newest first.
    pub async fn list_movements(
        &self,
        account: &AccountId,
        filter: &MovementFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<MrrMovement>> {
        use mrr_movement::Column;
        let mut select = mrr_movement::Entity::scoped(account);
        if let Some(subscription) = &filter.subscription_id {
            select = select.filter(Column::SubscriptionId.eq(subscription));
        }
        if let Some(kind) = filter.kind {
            select = select.filter(Column::Kind.eq(kind));
        }
        if let Some(from) = filter.from {
            select = select.filter(Column::OccurredAt.gte(from));
        }
        if let Some(to) = filter.to {
            select = select.filter(Column::OccurredAt.lte(to));
        }
        fetch_page(self.conn(), select, Column::Id, page).await
    }

    /// The account's MRR just before each of `instants` (ms): the sum of its movements until
    /// then, one aggregate each.
    pub async fn mrr_at(&self, account: &AccountId, instants: &[i64]) -> StoreResult<Vec<i64>> {
        let mut mrr = Vec::with_capacity(instants.len());
        for at in instants {
            mrr.push(self.movement_sum(account, (None, *at), None, None).await?);
        }
        Ok(mrr)
    }

    /// The sum of the deltas of the account's movements in `[from, to)` of `kind` (any with
    /// `None`) and `reason` (any with `None`).
    async fn movement_sum(
        &self,
        account: &AccountId,
        (from, to): (Option<i64>, i64),
        kind: Option<MovementType>,
        reason: Option<MovementReason>,
    ) -> StoreResult<i64> {
        use mrr_movement::Column;
        let mut select = mrr_movement::Entity::scoped(account)
            .select_only()
            .expr(sum_of(Column::MrrDeltaCents))
            .filter(Column::OccurredAt.lt(to));
        if let Some(from) = from {
            select = select.filter(Column::OccurredAt.gte(from));
        }
        if let Some(kind) = kind {
            select = select.filter(Column::Kind.eq(kind));
        }
        if let Some(reason) = reason {
            select = select.filter(Column::Reason.eq(reason));
        }
        Ok(select
            .into_tuple::<i64>()
            .one(self.conn())
            .await?
            .unwrap_or(0))
    }

    /// The summary of the month `[start, end)` (account clock, ms) as of `now`: the MRR figures
    /// from the ledger (so `mrr_end` = `mrr_start` + the month's movements, exactly), the
    /// charges, invoices and credit notes of the month. `active_subscriptions` counts those
    /// `active` or `past_due` now when the month is the current one (or later), else those
    /// whose MRR after their last movement before the month's end was more than 0.
    pub async fn revenue_summary(
        &self,
        account: &AccountId,
        (start, end): (i64, i64),
        now: i64,
    ) -> StoreResult<Summary> {
        let month = (Some(start), end);
        let by_kind = |kind| self.movement_sum(account, month, Some(kind), None);
        let mrr_start_cents = self
            .movement_sum(account, (None, start), None, None)
            .await?;
        let new_cents = by_kind(MovementType::New).await?;
        let expansion_cents = by_kind(MovementType::Expansion).await?;
        let reactivation_cents = by_kind(MovementType::Reactivation).await?;
        let contraction_cents = -by_kind(MovementType::Contraction).await?;
        let churn =
            |reason| self.movement_sum(account, month, Some(MovementType::Churn), Some(reason));
        let churn_voluntary_cents = -churn(MovementReason::Voluntary).await?;
        let churn_failed_payment_cents = -churn(MovementReason::FailedPayment).await?;
        let mrr_end_cents = mrr_start_cents + new_cents + expansion_cents + reactivation_cents
            - contraction_cents
            - churn_voluntary_cents
            - churn_failed_payment_cents;
        let active_subscriptions = if now < end {
            self.active_now(account).await?
        } else {
            self.active_by_ledger(account, end).await?
        };
        let (failed_charges, recovered_charges) =
            self.charges_of_month(account, (start, end)).await?;
        let (invoiced_cents, iva_cents) = self.invoiced(account, (start, end)).await?;
        let credited_cents = credit_note::Entity::scoped(account)
            .select_only()
            .expr(sum_of(credit_note::Column::TotalCents))
            .filter(credit_note::Column::IssuedAt.gte(start))
            .filter(credit_note::Column::IssuedAt.lt(end))
            .into_tuple::<i64>()
            .one(self.conn())
            .await?
            .unwrap_or(0);
        Ok(Summary {
            mrr_start_cents,
            mrr_end_cents,
            new_cents,
            expansion_cents,
            contraction_cents,
            churn_voluntary_cents,
            churn_failed_payment_cents,
            reactivation_cents,
            active_subscriptions,
            recovered_charges,
            failed_charges,
            invoiced_cents,
            iva_cents,
            credited_cents,
        })
    }

    async fn active_now(&self, account: &AccountId) -> StoreResult<i64> {
        let count = subscription::Entity::scoped(account)
            .filter(subscription::Column::Status.is_in([Status::Active, Status::PastDue]))
            .count(self.conn())
            .await?;
        Ok(i64::try_from(count).unwrap_or(i64::MAX))
    }

    /// Subscriptions whose movements before `end` add up to more than 0 (the MRR after their
    /// last one), in one grouped aggregate.
    async fn active_by_ledger(&self, account: &AccountId, end: i64) -> StoreResult<i64> {
        use mrr_movement::Column;
        let count = mrr_movement::Entity::scoped(account)
            .select_only()
            .column(Column::SubscriptionId)
            .filter(Column::OccurredAt.lt(end))
            .group_by(Column::SubscriptionId)
            .having(Func::sum(Expr::col(Column::MrrDeltaCents)).gt(0))
            .count(self.conn())
            .await?;
        Ok(i64::try_from(count).unwrap_or(i64::MAX))
    }

    /// The month's declined charges, and its approved charges of a subscription's period that
    /// an earlier declined charge of the same period had failed to collect.
    async fn charges_of_month(
        &self,
        account: &AccountId,
        (start, end): (i64, i64),
    ) -> StoreResult<(i64, i64)> {
        use charge_attempt::Column;
        let in_month = || {
            Column::FinalizedAt
                .gte(start)
                .and(Column::FinalizedAt.lt(end))
        };
        let failed = charge_attempt::Entity::scoped(account)
            .filter(Column::Status.eq(ChargeStatus::Declined))
            .filter(in_month())
            .count(self.conn())
            .await?;
        // A declined charge of the same subscription and period, finalized before it.
        let earlier = Alias::new("earlier");
        let mut declined_before = Query::select();
        declined_before
            .expr(Expr::value(1))
            .from_as(charge_attempt::Entity, earlier.clone())
            .and_where(
                Expr::col((earlier.clone(), Column::SubscriptionId))
                    .equals((charge_attempt::Entity, Column::SubscriptionId)),
            )
            .and_where(
                Expr::col((earlier.clone(), Column::PeriodStart))
                    .equals((charge_attempt::Entity, Column::PeriodStart)),
            )
            .and_where(Expr::col((earlier.clone(), Column::Status)).eq(ChargeStatus::Declined))
            .and_where(
                Expr::col((earlier, Column::FinalizedAt))
                    .lt(Expr::col((charge_attempt::Entity, Column::FinalizedAt))),
            );
        let recovered = charge_attempt::Entity::scoped(account)
            .filter(Column::Status.eq(ChargeStatus::Approved))
            .filter(Column::SubscriptionId.is_not_null())
            .filter(Column::PeriodStart.is_not_null())
            .filter(in_month())
            .filter(Expr::exists(declined_before))
            .count(self.conn())
            .await?;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Ok((count(failed), count(recovered)))
    }

    /// The totals and IVA of the invoices issued in the month.
    async fn invoiced(
        &self,
        account: &AccountId,
        (start, end): (i64, i64),
    ) -> StoreResult<(i64, i64)> {
        let select = invoice::Entity::scoped(account)
            .select_only()
            .expr(sum_of(invoice::Column::TotalCents))
            .expr(sum_of(invoice::Column::TaxCents))
            .filter(invoice::Column::IssuedAt.gte(start))
            .filter(invoice::Column::IssuedAt.lt(end));
        Ok(select
            .into_tuple::<(i64, i64)>()
            .one(self.conn())
            .await?
            .unwrap_or((0, 0)))
    }
}
