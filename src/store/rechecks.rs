//! Charges whose outcome is not known yet, and when to ask the processor about them next.
//!
//! A charge is asked about (by the reconciler) when its recheck time has come, or, without a
//! recheck row, when it was posted `stale_after` ago and no event has settled it. Each answer
//! that does not settle it (unknown, or still pending at the processor) pushes the next ask
//! further out along `domain::recheck`'s schedule. Rows of charges that settled meanwhile are
//! dropped when they come due. Times are real time, not an account's test clock: the
//! processor lives in real time.

use super::entities::{charge_attempt, charge_recheck};
use super::{Store, StoreResult};
use crate::domain::charge_status::ChargeStatus;
use crate::domain::recheck::recheck_delay;
use crate::ids::ChargeAttemptId;
use sea_orm::sea_query::{OnConflict, Query};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set};
use std::time::Duration;

use super::charges::ChargeAttempt;

impl Store {
    /// Notes that `charge` is still not settled, for `reason`, and schedules the next ask
    /// along the backoff of `base`. Returns the ask's number (1 for the first).
    pub async fn schedule_recheck(
        &self,
        charge: &ChargeAttempt,
        reason: &str,
        base: Duration,
        now_ms: i64,
    ) -> StoreResult<u32> {
        // Read then upsert: two checkers of one charge at once (the page's poll and the
        // reconciler) at worst count one ask too few, which only shortens one wait.
        let previous = charge_recheck::Entity::find_by_id(charge.id.clone())
            .one(self.conn())
            .await?;
        let quiet_since = previous
            .as_ref()
            .and_then(|row| row.quiet_since)
            .unwrap_or(now_ms);
        let previous = previous.map_or(0, |row| row.attempts);
        let attempt = u32::try_from(previous).unwrap_or(0).saturating_add(1);
        let delay = recheck_delay(base, attempt).as_millis() as i64;
        let row = charge_recheck::ActiveModel {
            charge_id: Set(charge.id.clone()),
            account_id: Set(charge.account_id.clone()),
            attempts: Set(i32::try_from(attempt).unwrap_or(i32::MAX)),
            recheck_at: Set(now_ms + delay),
            last_reason: Set(Some(reason.to_owned())),
            updated_at: Set(now_ms),
            quiet_since: Set(Some(quiet_since)),
        };
        let txn = self.begin().await?;
        charge_recheck::Entity::insert(row)
            .on_conflict(
                OnConflict::column(charge_recheck::Column::ChargeId)
                    .update_columns([
                        charge_recheck::Column::Attempts,
                        charge_recheck::Column::RecheckAt,
                        charge_recheck::Column::LastReason,
                        charge_recheck::Column::UpdatedAt,
                        charge_recheck::Column::QuietSince,
                    ])
                    .to_owned(),
            )
            .exec_without_returning(txn.conn())
            .await?;
        txn.commit().await?;
        Ok(attempt)
    }

    /// Notes that a post of `charge` went out just now whose answer we did not get: it may
    /// still reach the processor, so the quiet counts again from `now_ms`.
    pub async fn note_unanswered_post(
        &self,
        charge: &ChargeAttemptId,
        now_ms: i64,
    ) -> StoreResult<()> {
        charge_recheck::Entity::update_many()
            .col_expr(charge_recheck::Column::QuietSince, Some(now_ms).into())
            .filter(charge_recheck::Column::ChargeId.eq(charge.clone()))
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// Since when (real time) no post of `charge` whose answer we did not get went out, as
    /// far as its recheck row knows; None without a row.
    pub async fn quiet_since(&self, charge: &ChargeAttemptId) -> StoreResult<Option<i64>> {
        Ok(charge_recheck::Entity::find_by_id(charge.clone())
            .one(self.conn())
            .await?
            .and_then(|row| row.quiet_since))
    }

    /// Attempts still pending that were last touched before `before_ms`, oldest first: the
    /// ones whose outcome should be asked of the processor; with `shards`, only those whose
    /// owner (their subscription, or the charge itself when it has none) falls in one of them.
    pub async fn stale_pending_charges(
        &self,
        before_ms: i64,
        shards: Option<&[u16]>,
        limit: u64,
    ) -> StoreResult<Vec<ChargeAttempt>> {
        let mut select = charge_attempt::Entity::find();
        if let Some(shards) = shards {
            select = select.filter(super::cluster::in_shards(
                "coalesce(subscription_id, id)",
                shards,
            ));
        }
        Ok(select
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
            .filter(charge_attempt::Column::UpdatedAt.lt(before_ms))
            .order_by_asc(charge_attempt::Column::UpdatedAt)
            .limit(limit)
            .all(self.conn())
            .await?)
    }

    /// The recheck row of a charge, if it has one.
    pub async fn charge_recheck(
        &self,
        charge_id: &ChargeAttemptId,
    ) -> StoreResult<Option<charge_recheck::Model>> {
        Ok(charge_recheck::Entity::find_by_id(charge_id.clone())
            .one(self.conn())
            .await?)
    }

    /// Pending charges to ask the processor about now: those whose recheck time has come
    /// (soonest first), then those last touched before `stale_before_ms` that have no recheck
    /// (oldest first). Recheck rows of charges no longer pending are dropped on the way.
    pub async fn charges_due_for_recheck(
        &self,
        now_ms: i64,
        stale_before_ms: i64,
        limit: u64,
    ) -> StoreResult<Vec<ChargeAttempt>> {
        let due: Vec<ChargeAttemptId> = charge_recheck::Entity::find()
            .select_only()
            .column(charge_recheck::Column::ChargeId)
            .filter(charge_recheck::Column::RecheckAt.lte(now_ms))
            .order_by_asc(charge_recheck::Column::RecheckAt)
            .limit(limit)
            .into_tuple()
            .all(self.conn())
            .await?;
        let mut charges = Vec::new();
        if !due.is_empty() {
            let mut found = charge_attempt::Entity::find()
                .filter(charge_attempt::Column::Id.is_in(due.clone()))
                .all(self.conn())
                .await?;
            let settled: Vec<&ChargeAttemptId> = due
                .iter()
                .filter(|id| {
                    !found
                        .iter()
                        .any(|c| c.id == **id && c.is(ChargeStatus::Pending))
                })
                .collect();
            if !settled.is_empty() {
                charge_recheck::Entity::delete_many()
                    .filter(charge_recheck::Column::ChargeId.is_in(settled))
                    .exec(self.writer())
                    .await?;
            }
            found.retain(|c| c.is(ChargeStatus::Pending));
            // In the order they came due.
            found.sort_by_key(|c| due.iter().position(|id| *id == c.id));
            charges = found;
        }
        let rest = limit.saturating_sub(charges.len() as u64);
        if rest > 0 {
            let unchecked = Query::select()
                .column(charge_recheck::Column::ChargeId)
                .from(charge_recheck::Entity)
                .to_owned();
            charges.extend(
                charge_attempt::Entity::find()
                    .filter(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
                    .filter(charge_attempt::Column::UpdatedAt.lt(stale_before_ms))
                    .filter(charge_attempt::Column::Id.not_in_subquery(unchecked))
                    .order_by_asc(charge_attempt::Column::UpdatedAt)
                    .limit(rest)
                    .all(self.conn())
                    .await?,
            );
        }
        Ok(charges)
    }
}
