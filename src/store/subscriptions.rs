//! Subscriptions, their add-ons and the events outbox, and what a `StoreTxn` writes of them.

use super::charges::{
    BeginChargeError, ChargeAttempt, NewCharge, Settled, begin_charge_in, settle_charge_in,
};
use super::entities::{charge_attempt, event, invoice, subscription, subscription_addon};
use super::mrr::MrrAfter;
use super::txn::StoreTxn;
use super::{Page, PageRequest, Store, StoreResult, fetch_page};
use crate::domain::charge_status::ChargeStatus;
use crate::domain::discount::Discount;
use crate::domain::subscription::Status;
use crate::ids::{
    AccountId, AddonId, ChargeAttemptId, CustomerId, EventId, PlanId, SubscriptionId,
};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, EntityTrait, IntoActiveModel, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, Set,
};

pub use super::outbox::{Event, event_row};
pub use subscription::Model as Subscription;
pub use subscription_addon::Model as SubscriptionAddon;

/// Optional filters of the subscription list.
#[derive(Clone, Debug, Default)]
pub struct SubscriptionFilter {
    pub status: Option<Status>,
    pub customer_id: Option<CustomerId>,
    pub plan_id: Option<PlanId>,
}

/// A subscription's charges as a renewal sees them (`Store::period_charges`).
#[derive(Clone, Debug)]
pub struct PeriodCharges {
    since: i64,
    /// Whether any charge of the subscription is pending.
    pub pending: bool,
    /// The starts of the paid periods from `since` on.
    paid: Vec<i64>,
}

impl PeriodCharges {
    /// The charges a renewal looks at: pending ones, and those of a period starting at `since`
    /// or later (`from_rows` keeps the approved ones). The statement does not name the approved
    /// status: with it, a plan could find those rows through the status index (SQLite always
    /// did for several subscriptions at once, PostgreSQL while statistics lag a burst), every
    /// approved charge of every subscription read; without it, only the pending ones (charges
    /// in flight) are found by status, the rest through the subscription's own index.
    pub(super) fn rows_since(since: i64) -> Condition {
        Condition::any()
            .add(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
            .add(charge_attempt::Column::PeriodStart.gte(since))
    }

    /// From the (status, period start) of the rows `rows_since` selects: the pending ones, and
    /// the approved ones of a period starting at `since` or later (the others are passed over).
    pub(super) fn from_rows(
        since: i64,
        rows: impl Iterator<Item = (ChargeStatus, Option<i64>)>,
    ) -> Self {
        let mut charges = PeriodCharges {
            since,
            pending: false,
            paid: Vec::new(),
        };
        for (status, start) in rows {
            match (status, start) {
                (ChargeStatus::Pending, _) => charges.pending = true,
                (ChargeStatus::Approved, Some(start)) if start >= since => charges.paid.push(start),
                _ => {}
            }
        }
        charges
    }

    /// Whether the period starting at `period_start` (not before `since`) is paid.
    pub fn paid(&self, period_start: i64) -> bool {
        debug_assert!(
            period_start >= self.since,
            "asked about a period before `since`"
        );
        self.paid.contains(&period_start)
    }
}

/// The periods of `ids` from `since` on that an invoice of nothing documents (a total of 0:
/// no charge), as (subscription, period start): they are paid as much as an approved charge's.
pub(super) fn free_period_rows(
    ids: &[SubscriptionId],
    since: i64,
) -> sea_orm::Select<invoice::Entity> {
    invoice::Entity::find()
        .select_only()
        .column(invoice::Column::SubscriptionId)
        .column(invoice::Column::PeriodStart)
        .filter(invoice::Column::ChargeId.is_null())
        .filter(invoice::Column::SubscriptionId.is_in(ids))
        .filter(invoice::Column::PeriodStart.gte(since))
}

/// A row of `free_period_rows`: the subscription and the period's start.
pub(super) type FreePeriod = (Option<SubscriptionId>, Option<i64>);

/// Free periods read as the rows of approved charges (`PeriodCharges::from_rows`).
pub(super) fn free_as_paid(
    rows: Vec<FreePeriod>,
) -> impl Iterator<Item = (ChargeStatus, Option<i64>)> {
    rows.into_iter()
        .map(|(_, start)| (ChargeStatus::Approved, start))
}

impl Subscription {
    /// Its discount, if it has one.
    pub fn discount(&self) -> Option<Discount> {
        let raw = self.discount.as_deref()?;
        match serde_json::from_str(raw) {
            Ok(discount) => Some(discount),
            Err(err) => {
                tracing::error!(subscription = %self.id, error = %err, "unreadable discount");
                None
            }
        }
    }

    pub fn set_discount(&mut self, discount: Option<&Discount>) {
        self.discount = discount.and_then(|d| serde_json::to_string(d).ok());
    }

    /// The discount its current period was billed with (MRR counts it).
    pub fn period_discount(&self) -> Option<Discount> {
        serde_json::from_str(self.period_discount.as_deref()?).ok()
    }
}

impl Store {
    pub async fn subscription(
        &self,
        account: &AccountId,
        id: &SubscriptionId,
    ) -> StoreResult<Option<Subscription>> {
        Ok(subscription::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// A subscription by id alone: for the runtime, which got the id from a scoped lookup or
    /// from its own timers.
    pub async fn subscription_by_id(
        &self,
        id: &SubscriptionId,
    ) -> StoreResult<Option<Subscription>> {
        Ok(subscription::Entity::find_by_id(id.clone())
            .one(self.conn())
            .await?)
    }

    pub async fn charge_by_id(&self, id: &ChargeAttemptId) -> StoreResult<Option<ChargeAttempt>> {
        Ok(charge_attempt::Entity::find_by_id(id.clone())
            .one(self.conn())
            .await?)
    }

    pub async fn list_subscriptions(
        &self,
        account: &AccountId,
        filter: &SubscriptionFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Subscription>> {
        let mut select = subscription::Entity::scoped(account);
        if let Some(status) = &filter.status {
            select = select.filter(subscription::Column::Status.eq(*status));
        }
        if let Some(customer) = &filter.customer_id {
            select = select.filter(subscription::Column::CustomerId.eq(customer));
        }
        if let Some(plan) = &filter.plan_id {
            select = select.filter(subscription::Column::PlanId.eq(plan));
        }
        fetch_page(self.conn(), select, subscription::Column::Id, page).await
    }

    /// Subscriptions of `account` whose timer is due by `now_ms`, earliest first.
    pub async fn due_subscriptions(
        &self,
        account: &AccountId,
        now_ms: i64,
        limit: u64,
    ) -> StoreResult<Vec<Subscription>> {
        Ok(subscription::Entity::scoped(account)
            .filter(subscription::Column::DueAt.lte(now_ms))
            .order_by_asc(subscription::Column::DueAt)
            .order_by_asc(subscription::Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?)
    }

    /// One page of the timers of `account` due by `horizon_ms`, as (id, due_at), ordered by
    /// (due_at, id) and starting after `after`. Paging by the pair, not by an offset, walks a
    /// million rows due at the same instant in pages that each cost one index range scan.
    ///
    /// In a cluster `shards` names the shards this node holds, and only their rows are loaded
    /// (the shard is the id's last byte, read from the index); `None` loads every row.
    pub async fn due_timers_page(
        &self,
        account: &AccountId,
        horizon_ms: i64,
        after: Option<(i64, SubscriptionId)>,
        limit: u64,
        shards: Option<&[u16]>,
    ) -> StoreResult<Vec<(SubscriptionId, i64)>> {
        let mut select = subscription::Entity::find()
            .select_only()
            .column(subscription::Column::Id)
            .column(subscription::Column::DueAt)
            .filter(subscription::Entity::of(account))
            .filter(subscription::Column::DueAt.lte(horizon_ms));
        if let Some(shards) = shards {
            select = select.filter(super::cluster::in_shards("id", shards));
        }
        if let Some((due, id)) = after {
            // A row-value comparison, so that the page is one range of the
            // (account_id, due_at, id) index rather than a scan from the window's start.
            select = select.filter(
                Expr::tuple([
                    Expr::col(subscription::Column::DueAt),
                    Expr::col(subscription::Column::Id),
                ])
                .gt(Expr::tuple([Expr::value(due), Expr::value(id)])),
            );
        }
        Ok(select
            .order_by_asc(subscription::Column::DueAt)
            .order_by_asc(subscription::Column::Id)
            .limit(limit)
            .into_tuple::<(SubscriptionId, i64)>()
            .all(self.conn())
            .await?)
    }

    pub async fn subscription_addons(
        &self,
        subscription_id: &SubscriptionId,
    ) -> StoreResult<Vec<SubscriptionAddon>> {
        Ok(subscription_addon::Entity::find()
            .filter(subscription_addon::Column::SubscriptionId.eq(subscription_id))
            .order_by_asc(subscription_addon::Column::AttachedAt)
            .all(self.conn())
            .await?)
    }

    pub async fn count_subscriptions_for_plan(&self, plan_id: &PlanId) -> StoreResult<u64> {
        Ok(subscription::Entity::find()
            .filter(subscription::Column::PlanId.eq(plan_id))
            .count(self.conn())
            .await?)
    }

    /// The pending charge of a subscription, if one is in flight.
    pub async fn pending_charge_of(
        &self,
        subscription_id: &SubscriptionId,
    ) -> StoreResult<Option<ChargeAttempt>> {
        Ok(charge_attempt::Entity::find()
            .filter(charge_attempt::Column::SubscriptionId.eq(subscription_id))
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
            .one(self.conn())
            .await?)
    }

    /// The pending charge of a subscription that an action waits on (`pending_change`).
    pub async fn pending_change_of(
        &self,
        subscription_id: &SubscriptionId,
    ) -> StoreResult<Option<ChargeAttempt>> {
        Ok(charge_attempt::Entity::find()
            .filter(charge_attempt::Column::SubscriptionId.eq(subscription_id))
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
            .filter(charge_attempt::Column::PendingChange.is_not_null())
            .one(self.conn())
            .await?)
    }

    /// Whether a renewal for the period starting at `period_start` was already approved.
    /// In one query, what a renewal needs to know of a subscription's charges: whether one is
    /// pending, and which periods starting at `since` or later are paid.
    pub async fn period_charges(
        &self,
        subscription_id: &SubscriptionId,
        since: i64,
    ) -> StoreResult<PeriodCharges> {
        let rows: Vec<(ChargeStatus, Option<i64>)> = charge_attempt::Entity::find()
            .select_only()
            .column(charge_attempt::Column::Status)
            .column(charge_attempt::Column::PeriodStart)
            .filter(charge_attempt::Column::SubscriptionId.eq(subscription_id))
            .filter(PeriodCharges::rows_since(since))
            .into_tuple()
            .all(self.conn())
            .await?;
        let free: Vec<FreePeriod> = free_period_rows(std::slice::from_ref(subscription_id), since)
            .into_tuple()
            .all(self.conn())
            .await?;
        Ok(PeriodCharges::from_rows(
            since,
            rows.into_iter().chain(free_as_paid(free)),
        ))
    }

    pub async fn period_paid(
        &self,
        subscription_id: &SubscriptionId,
        period_start: i64,
    ) -> StoreResult<bool> {
        Ok(charge_attempt::Entity::find()
            .filter(charge_attempt::Column::SubscriptionId.eq(subscription_id))
            .filter(charge_attempt::Column::PeriodStart.eq(period_start))
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Approved))
            .count(self.conn())
            .await?
            > 0)
    }

    pub async fn count_pending_charges(&self, account: &AccountId) -> StoreResult<u64> {
        Ok(charge_attempt::Entity::scoped(account)
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
            .count(self.conn())
            .await?)
    }

    pub async fn list_events(
        &self,
        account: &AccountId,
        event_type: Option<&str>,
        subscription_id: Option<&SubscriptionId>,
        page: &PageRequest,
    ) -> StoreResult<Page<Event>> {
        let mut select = event::Entity::scoped(account);
        if let Some(event_type) = event_type {
            select = select.filter(event::Column::EventType.eq(event_type));
        }
        if let Some(subscription_id) = subscription_id {
            select = select.filter(event::Column::SubscriptionId.eq(subscription_id));
        }
        fetch_page(self.conn(), select, event::Column::Id, page).await
    }

    pub async fn event(&self, account: &AccountId, id: &EventId) -> StoreResult<Option<Event>> {
        Ok(event::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// Moves an account's test clock `delta_ms` forward from the offset the database holds,
    /// in one statement (`clock_offset_ms + delta_ms`, never less than it was), and returns
    /// the new offset; `None` when there is no such account. Never written from a node's
    /// copy: a node that missed another's move would write an older offset back and move the
    /// clock backwards.
    pub async fn advance_clock_offset(
        &self,
        account: &AccountId,
        delta_ms: i64,
    ) -> StoreResult<Option<i64>> {
        use super::entities::account;
        let moved = account::Entity::update_many()
            .col_expr(
                account::Column::ClockOffsetMs,
                Expr::col(account::Column::ClockOffsetMs).add(Ord::max(delta_ms, 0)),
            )
            .filter(account::Column::Id.eq(account))
            .exec_with_returning(self.writer())
            .await?;
        Ok(moved.first().map(|row| row.clock_offset_ms))
    }

    /// An account's test-clock offset as the database holds it; `None` for no such account.
    pub async fn clock_offset(&self, account: &AccountId) -> StoreResult<Option<i64>> {
        use super::entities::account;
        Ok(account::Entity::find_by_id(account.clone())
            .select_only()
            .column(account::Column::ClockOffsetMs)
            .into_tuple::<i64>()
            .one(self.conn())
            .await?)
    }
}

impl StoreTxn {
    /// Inserts a new subscription with its MRR (`mrr_cents`, by the rule) and, when that is
    /// more than 0, its `new` movement (`store::mrr`).
    /// Its first period is billed with the discount it is created with (or, prepaid until a
    /// `start_date`, its first charge takes it): `period_discount` is that.
    pub async fn insert_subscription(&self, mut row: Subscription) -> StoreResult<()> {
        row.mrr_cents = 0;
        row.period_discount = row.discount.clone();
        let movement = self.account_mrr(&mut row, 0, true).await?;
        row.into_active_model()
            .reset_all()
            .insert(&self.txn)
            .await?;
        if let Some(movement) = movement {
            self.insert_movement(movement).await?;
        }
        Ok(())
    }

    /// Writes `row` if the stored row is still at `row.version` (the version it was read at),
    /// and bumps the version; returns the row as written. A row changed meanwhile by another
    /// writer is a `StoreError::Conflict`: nothing is overwritten.
    ///
    /// In a cluster the write is also fenced: it happens only while this node's lease on the
    /// subscription's shard still carries the epoch it was granted (`store::cluster`), else
    /// `StoreError::Fenced`.
    ///
    /// The MRR is accounted here (`store::mrr`): the row's `mrr_cents` becomes its MRR by the
    /// rule, and a change from the stored one writes its movement, in this transaction. Add-ons
    /// attached or dropped in the transaction are seen: save after them.
    pub async fn save_subscription(&self, row: Subscription) -> StoreResult<Subscription> {
        self.save_subscription_as(row, MrrAfter::ByRule).await
    }

    /// The conditional, fenced write of `save_subscription`, without the MRR's accounting.
    pub(super) async fn save_row(&self, row: Subscription) -> StoreResult<Subscription> {
        let read_at = row.version;
        let id = row.id.clone();
        let shard = crate::store::ownership::shard_of(id.as_str());
        let fence = self.fence(shard).await?;
        let mut written = row;
        written.version = read_at + 1;
        let mut update = subscription::Entity::update_many()
            .set(written.clone().into_active_model().reset_all())
            .filter(subscription::Column::Id.eq(&id))
            .filter(subscription::Column::Version.eq(read_at));
        if let Some(epoch) = fence {
            update = update.filter(super::cluster::lease_is(shard, epoch));
        }
        let result = update.exec(&self.txn).await?;
        if result.rows_affected == 0 {
            if let Some(epoch) = fence
                && !super::cluster::lease_holds(&self.txn, shard, epoch).await?
            {
                self.ownership.lose(shard);
                metrics::counter!("cluster_fenced_writes_total").increment(1);
                return Err(super::StoreError::Fenced(shard));
            }
            return Err(super::StoreError::Conflict(format!("subscription {id}")));
        }
        Ok(written)
    }

    /// Sets the timers of `account`'s subscriptions paused for want of balance to `now_ms`,
    /// so that each actor looks again at whether the balance now covers its fee (durable:
    /// the timer is the row). Returns their ids.
    pub async fn wake_paused_for_balance(
        &self,
        account: &AccountId,
        now_ms: i64,
    ) -> StoreResult<Vec<SubscriptionId>> {
        let rows = subscription::Entity::update_many()
            .col_expr(subscription::Column::DueAt, Expr::value(now_ms))
            // A version bump: an actor that read the row before this (and is about to pause
            // it) fails its conditional write instead of clearing the timer set here.
            .col_expr(
                subscription::Column::Version,
                Expr::col(subscription::Column::Version).add(1),
            )
            .filter(subscription::Entity::of(account))
            .filter(subscription::Column::Status.eq(Status::PausedInsufficientBalance))
            .exec_with_returning(&self.txn)
            .await?;
        Ok(rows.into_iter().map(|row| row.id).collect())
    }

    /// Writes an event and, in the same transaction, one pending delivery per active endpoint
    /// of the account subscribed to its type.
    pub async fn insert_event(&self, row: Event) -> StoreResult<()> {
        let touched = super::fanout::write(&self.txn, &[&row]).await?;
        self.touch(touched);
        Ok(())
    }

    pub async fn attach_addon(&self, row: SubscriptionAddon) -> StoreResult<()> {
        row.into_active_model()
            .reset_all()
            .insert(&self.txn)
            .await?;
        Ok(())
    }

    pub async fn mark_addon_detached(
        &self,
        subscription_id: &SubscriptionId,
        addon_id: &AddonId,
    ) -> StoreResult<()> {
        subscription_addon::ActiveModel {
            subscription_id: Set(subscription_id.clone()),
            addon_id: Set(addon_id.clone()),
            detach_at_period_end: Set(true),
            ..Default::default()
        }
        .update(&self.txn)
        .await?;
        Ok(())
    }

    /// Whether `addon_id` is attached to the subscription (detached at period end included).
    pub async fn addon_attached(
        &self,
        subscription_id: &SubscriptionId,
        addon_id: &AddonId,
    ) -> StoreResult<bool> {
        Ok(subscription_addon::Entity::find()
            .filter(subscription_addon::Column::SubscriptionId.eq(subscription_id))
            .filter(subscription_addon::Column::AddonId.eq(addon_id))
            .count(&self.txn)
            .await?
            > 0)
    }

    /// Removes add-ons detached during the period that just ended.
    pub async fn drop_detached_addons(&self, subscription_id: &SubscriptionId) -> StoreResult<()> {
        subscription_addon::Entity::delete_many()
            .filter(subscription_addon::Column::SubscriptionId.eq(subscription_id))
            .filter(subscription_addon::Column::DetachAtPeriodEnd.eq(true))
            .exec(&self.txn)
            .await?;
        Ok(())
    }

    pub async fn begin_charge(&self, new: NewCharge) -> Result<ChargeAttempt, BeginChargeError> {
        begin_charge_in(&self.txn, new).await
    }

    /// Records the attempt `new` as declined without sending it: the card network's
    /// reattempt limit stopped it (`domain::reattempts`). No fee is reserved (no money can
    /// move), it has no transaction, and its `message` says why; `decline_code` is
    /// `network_limit`.
    pub async fn record_unsent_decline(
        &self,
        mut new: NewCharge,
        message: &str,
    ) -> StoreResult<ChargeAttempt> {
        new.fee_cents = 0;
        let mut charge = super::charges::attempt_of(new);
        charge.status = ChargeStatus::Declined;
        charge.processor_message = Some(message.to_owned());
        charge.decline_code = Some(crate::domain::decline::Decline::NetworkLimit);
        charge.finalized_at = Some(charge.updated_at);
        Ok(charge
            .into_active_model()
            .reset_all()
            .insert(&self.txn)
            .await?)
    }

    /// Records the processor event whose effect this transaction applies; false when its
    /// checksum was already recorded.
    pub async fn record_processor_event(
        &self,
        event: super::charges::ProcessorEvent,
    ) -> StoreResult<bool> {
        super::charges::record_processor_event_in(&self.txn, event).await
    }

    pub async fn settle_charge(
        &self,
        charge_id: &ChargeAttemptId,
        raw_status: &str,
        message: Option<&str>,
        transaction_id: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<Option<Settled>> {
        let settled = settle_charge_in(
            &self.txn,
            self.issuing,
            charge_id,
            raw_status,
            message,
            transaction_id,
            now_ms,
        )
        .await?;
        if let Some(settled) = &settled {
            self.touch(settled.touched.iter().cloned());
        }
        Ok(settled)
    }
}
