//! Processor reports that moved no money because they contradict the charge: kept for
//! operators (`GET /admin/charge-conflicts`, the dashboard), logged, and counted in
//! `charge_outcome_conflicts_total{kind}` (CONTRACT §7; migration 000010).
//!
//! Two kinds: `outcome`, a final status that contradicts the recorded final outcome (APPROVED
//! for a charge recorded declined or error, DECLINED or VOIDED for one recorded approved), and
//! `mismatch`, an event whose amount, currency or transaction id are not its charge's.

use super::super::entities::charge_conflict;
use super::super::{Page, PageRequest, Store, StoreResult, fetch_page};
use super::{ChargeAttempt, ProcessorEvent, record_processor_event_in};
use crate::domain::charge_status::ChargeStatus;
use crate::ids::ChargeConflictId;
use sea_orm::{ActiveModelTrait, ConnectionTrait, EntityTrait, PaginatorTrait};

pub use charge_conflict::Model as ChargeConflict;

/// What a processor reported that did not fit the charge.
#[derive(Clone, Debug)]
pub struct Report {
    pub kind: &'static str,
    pub reported_status: Option<String>,
    pub transaction_id: Option<String>,
    pub amount_cents: Option<i64>,
    pub currency: Option<String>,
    pub event_checksum: Option<String>,
    pub detail: String,
}

/// Whether a reported final status contradicts the recorded one: approval on one side and
/// not on the other. DECLINED against a recorded ERROR is no contradiction (no money differs).
pub fn contradicts(recorded: ChargeStatus, reported: &str) -> bool {
    recorded != ChargeStatus::Pending
        && (recorded == ChargeStatus::Approved) != (reported == "APPROVED")
}

impl Store {
    /// Keeps a processor event that moves no money, with the conflict it raised, in one
    /// transaction; false (and nothing written) when the event was already kept.
    pub async fn flag_processor_event(
        &self,
        mut event: ProcessorEvent,
        charge: &ChargeAttempt,
        report: Report,
    ) -> StoreResult<bool> {
        // Not applied: `processed_at` stays empty.
        event.processed_at = None;
        let txn = self.begin().await?;
        if !record_processor_event_in(txn.conn(), event).await? {
            return Ok(false);
        }
        insert_conflict_in(
            txn.conn(),
            charge,
            report,
            chrono::Utc::now().timestamp_millis(),
        )
        .await?;
        txn.commit().await?;
        Ok(true)
    }

    /// Keeps a conflict that came without an event (a poll's answer), in a unit of its own.
    pub async fn record_conflict(&self, charge: &ChargeAttempt, report: Report) -> StoreResult<()> {
        let txn = self.begin().await?;
        insert_conflict_in(
            txn.conn(),
            charge,
            report,
            chrono::Utc::now().timestamp_millis(),
        )
        .await?;
        txn.commit().await
    }

    /// Conflicts over every account, newest first.
    pub async fn list_charge_conflicts(
        &self,
        page: &PageRequest,
    ) -> StoreResult<Page<ChargeConflict>> {
        fetch_page(
            self.conn(),
            charge_conflict::Entity::find(),
            charge_conflict::Column::Id,
            page,
        )
        .await
    }

    pub async fn count_charge_conflicts(&self) -> StoreResult<u64> {
        Ok(charge_conflict::Entity::find().count(self.conn()).await?)
    }
}

/// Records a conflict of `charge` (as it is stored now), logs it and counts it.
pub(crate) async fn insert_conflict_in<C: ConnectionTrait>(
    conn: &C,
    charge: &ChargeAttempt,
    report: Report,
    now_ms: i64,
) -> StoreResult<()> {
    tracing::error!(
        charge = %charge.id,
        account = %charge.account_id,
        recorded = %charge.status,
        reported = report.reported_status.as_deref().unwrap_or("-"),
        transaction = report.transaction_id.as_deref().unwrap_or("-"),
        kind = report.kind,
        detail = %report.detail,
        "processor report contradicts the charge; kept for operators, no money moved"
    );
    metrics::counter!("charge_outcome_conflicts_total", "kind" => report.kind).increment(1);
    charge_conflict::ActiveModel {
        id: sea_orm::Set(ChargeConflictId::generate()),
        account_id: sea_orm::Set(charge.account_id.clone()),
        charge_id: sea_orm::Set(charge.id.clone()),
        kind: sea_orm::Set(report.kind.to_owned()),
        recorded_status: sea_orm::Set(charge.status.as_str().to_owned()),
        reported_status: sea_orm::Set(report.reported_status),
        transaction_id: sea_orm::Set(report.transaction_id),
        amount_cents: sea_orm::Set(report.amount_cents),
        currency: sea_orm::Set(report.currency),
        event_checksum: sea_orm::Set(report.event_checksum),
        detail: sea_orm::Set(report.detail),
        created_at: sea_orm::Set(now_ms),
    }
    .insert(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::contradicts;
    use crate::domain::charge_status::ChargeStatus;

    #[test]
    fn only_a_different_approval_contradicts() {
        assert!(contradicts(ChargeStatus::Error, "APPROVED"));
        assert!(contradicts(ChargeStatus::Declined, "APPROVED"));
        assert!(contradicts(ChargeStatus::Approved, "DECLINED"));
        assert!(contradicts(ChargeStatus::Approved, "VOIDED"));
        assert!(!contradicts(ChargeStatus::Error, "DECLINED"));
        assert!(!contradicts(ChargeStatus::Approved, "APPROVED"));
        assert!(!contradicts(ChargeStatus::Pending, "APPROVED"));
    }
}
