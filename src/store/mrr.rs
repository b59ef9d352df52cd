//! The MRR ledger's writes (CONTRACT §16): a subscription's MRR by the rule from its row as
//! written (`domain::mrr` on the lines `catalog::period_lines` gives its current period), and
//! the movement a write that changes it adds, in that write's transaction.
//!
//! Where it is enforced: `StoreTxn::insert_subscription` and `StoreTxn::save_subscription`
//! (every write of a subscription, add-ons included: whoever attaches or drops add-ons saves
//! the subscription in the same transaction, after them, so its save sees them), and the
//! renewal batch (`store::batch`), which knows a renewal's lines from its charge and reads
//! nothing unless the MRR moved. `subscriptions.mrr_cents` is the MRR as last written: a write
//! compares with it, and writes a movement and the new value only when they differ.

use super::catalog::{CatalogItem, period_lines};
use super::entities::subscription::Model as Subscription;
use super::entities::{catalog_item, mrr_movement, subscription, subscription_addon};
use super::invoices::DraftLine;
use super::{Store, StoreResult};
use crate::domain::mrr::{self, MrrFacts};
use crate::ids::{CatalogItemId, MrrMovementId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use std::collections::{HashMap, HashSet};

pub use mrr_movement::Model as MrrMovement;

/// The MRR of a subscription in `status` whose current period, billed at `cycle`, has `lines`
/// (after its discount, at its quantity): the sum of their taxable bases as an invoice splits
/// them (`invoice_rows`), per month (`domain::mrr::mrr`).
pub fn mrr_of_lines(
    status: crate::domain::subscription::Status,
    cycle: crate::domain::time::Cycle,
    lines: &[DraftLine],
) -> i64 {
    let base = lines
        .iter()
        .map(|line| line.tax_code.split(line.amount_cents).base)
        .sum();
    mrr::mrr(status, base, cycle)
}

/// What a classification reads of a row.
pub(super) fn facts(row: &Subscription) -> MrrFacts {
    MrrFacts {
        status: row.status,
        plan_id: row.plan_id.clone(),
        cycle: row.period_cycle,
        quantity: row.period_quantity,
        discount: row.period_discount(),
        failed_attempts: row.failed_attempts,
    }
}

/// The MRR of `row` by the rule, reading its plan and its add-ons (every one attached, those
/// leaving at the period's end included: they are billed until it ends) through `conn`: the
/// transaction writing it, so that add-ons it attached or dropped are seen.
pub(super) async fn mrr_by_rule<C: ConnectionTrait>(
    conn: &C,
    row: &Subscription,
) -> StoreResult<i64> {
    if !mrr::counts(row.status) {
        return Ok(0);
    }
    let account = &row.account_id;
    let Some(plan) =
        catalog_item::Entity::find_scoped(account, CatalogItemId::Plan(row.plan_id.clone()))
            .one(conn)
            .await?
    else {
        return Ok(0);
    };
    let attached: Vec<subscription_addon::Model> = subscription_addon::Entity::scoped(account)
        .filter(subscription_addon::Column::SubscriptionId.eq(&row.id))
        .order_by_asc(subscription_addon::Column::AttachedAt)
        .all(conn)
        .await?;
    let addons = if attached.is_empty() {
        Vec::new()
    } else {
        let ids: Vec<CatalogItemId> = attached
            .iter()
            .map(|a| CatalogItemId::Addon(a.addon_id.clone()))
            .collect();
        let mut found: HashMap<CatalogItemId, CatalogItem> = catalog_item::Entity::scoped(account)
            .filter(catalog_item::Column::Id.is_in(ids.clone()))
            .all(conn)
            .await?
            .into_iter()
            .map(|item| (item.id.clone(), item))
            .collect();
        ids.iter().filter_map(|id| found.remove(id)).collect()
    };
    let lines = period_lines(
        &plan,
        &addons,
        row.period_cycle,
        row.period_quantity,
        (row.current_period_start, row.current_period_end),
        row.period_discount().as_ref(),
    );
    Ok(mrr_of_lines(row.status, row.period_cycle, &lines))
}

/// The MRR of a renewal's row (`after`, as the batch saves it) from its charge's lines, without
/// a read: they were priced for the period the row now bills (its plan, quantity and cycle,
/// the add-ons that stay, and the discount that took part: the row's `period_discount`).
pub(super) fn mrr_of_renewal(after: &Subscription, charge_lines: &str) -> Option<i64> {
    if !mrr::counts(after.status) {
        return Some(0);
    }
    let lines: Vec<DraftLine> = serde_json::from_str(charge_lines).ok()?;
    Some(mrr_of_lines(after.status, after.period_cycle, &lines))
}

/// The movement `after` (saved at `after.version`, its `mrr_cents` the new MRR) makes from
/// `before` (the stored row; `None` for a new one) and `before_mrr`; `None` when the MRR did
/// not move. `had_movement` as `domain::mrr::classify` takes it.
pub(super) fn movement(
    before: Option<&Subscription>,
    after: &Subscription,
    before_mrr: i64,
    had_movement: bool,
) -> Option<MrrMovement> {
    let (kind, reason) = mrr::classify(
        before.map(facts).as_ref(),
        &facts(after),
        (before_mrr, after.mrr_cents),
        had_movement,
    )?;
    Some(MrrMovement {
        id: MrrMovementId::generate(),
        account_id: after.account_id.clone(),
        subscription_id: after.id.clone(),
        customer_id: after.customer_id.clone(),
        kind,
        mrr_delta_cents: after.mrr_cents - before_mrr,
        mrr_after_cents: after.mrr_cents,
        reason,
        occurred_at: after.updated_at,
        version: after.version,
    })
}

/// Which of `ids` have a movement already (a rise from 0 is `new` only the first time).
pub(super) async fn with_movements<C: ConnectionTrait>(
    conn: &C,
    ids: &[SubscriptionId],
) -> StoreResult<HashSet<SubscriptionId>> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let found: Vec<SubscriptionId> = mrr_movement::Entity::find()
        .select_only()
        .column(mrr_movement::Column::SubscriptionId)
        .distinct()
        .filter(mrr_movement::Column::SubscriptionId.is_in(ids.to_vec()))
        .into_tuple()
        .all(conn)
        .await?;
    Ok(found.into_iter().collect())
}

/// The stored rows of `ids` (the before of the rows a batch is about to save).
pub(super) async fn stored_rows<C: ConnectionTrait>(
    conn: &C,
    ids: &[SubscriptionId],
) -> StoreResult<HashMap<SubscriptionId, Subscription>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(subscription::Entity::find()
        .filter(subscription::Column::Id.is_in(ids.to_vec()))
        .all(conn)
        .await?
        .into_iter()
        .map(|row| (row.id.clone(), row))
        .collect())
}

/// For the rows a batch saves whose MRR moved (`moved`: each row with its new `mrr_cents`, and
/// the MRR stored before), the movements, reading the stored rows and which have moved before:
/// two reads for the whole batch, and only when some row moved.
pub(super) async fn batch_movements<C: ConnectionTrait>(
    conn: &C,
    moved: &[(&Subscription, i64)],
) -> StoreResult<Vec<MrrMovement>> {
    if moved.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<SubscriptionId> = moved.iter().map(|(row, _)| row.id.clone()).collect();
    let stored = stored_rows(conn, &ids).await?;
    let from_zero: Vec<SubscriptionId> = moved
        .iter()
        .filter(|(_, before)| *before == 0)
        .map(|(row, _)| row.id.clone())
        .collect();
    let had = with_movements(conn, &from_zero).await?;
    Ok(moved
        .iter()
        .filter_map(|(row, before)| {
            // As stored, whatever the caller's copy said (see `account_mrr`).
            let stored = stored.get(&row.id);
            let before = stored.map_or(*before, |stored| stored.mrr_cents);
            movement(stored, row, before, had.contains(&row.id))
        })
        .collect())
}

/// What a save knows of the MRR after it (`StoreTxn::save_subscription_as`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MrrAfter {
    /// Computed from the row, its plan and add-ons (read in the transaction).
    ByRule,
    /// As stored: nothing it depends on changed.
    Unchanged,
}

impl super::txn::StoreTxn {
    /// `save_subscription`, told what the MRR after is: by the rule (read), or unchanged (the
    /// caller changed nothing it depends on: a renewal's begin).
    pub(super) async fn save_subscription_as(
        &self,
        mut row: Subscription,
        mrr: MrrAfter,
    ) -> StoreResult<Subscription> {
        let movement = match mrr {
            MrrAfter::ByRule => {
                let before = row.mrr_cents;
                let mut after = row.clone();
                after.version += 1;
                let movement = self.account_mrr(&mut after, before, false).await?;
                row.mrr_cents = after.mrr_cents;
                movement
            }
            MrrAfter::Unchanged => None,
        };
        let saved = self.save_row(row).await?;
        if let Some(movement) = movement {
            self.insert_movement(movement).await?;
        }
        Ok(saved)
    }

    /// Sets `row.mrr_cents` to its MRR by the rule (`after_mrr`, or read) and writes the
    /// movement when it moved from the MRR stored: called by the subscription's every save,
    /// before its row is written. `before_mrr` is the MRR stored (0 for a new row).
    pub(super) async fn account_mrr(
        &self,
        row: &mut Subscription,
        before_mrr: i64,
        new: bool,
    ) -> StoreResult<Option<MrrMovement>> {
        let after = mrr_by_rule(&self.txn, row).await?;
        // The stored row, not the caller's copy, says what the MRR was: a copy taken before
        // the row's insert set it would otherwise count its opening twice.
        let before = if new {
            None
        } else {
            subscription::Entity::find_by_id(row.id.clone())
                .one(&self.txn)
                .await?
        };
        let before_mrr = before
            .as_ref()
            .map_or(before_mrr, |stored| stored.mrr_cents);
        row.mrr_cents = after;
        if after == before_mrr {
            return Ok(None);
        }
        let had = before_mrr == 0
            && !new
            && !with_movements(&self.txn, std::slice::from_ref(&row.id))
                .await?
                .is_empty();
        Ok(movement(before.as_ref(), row, before_mrr, had))
    }

    /// Writes a movement (after its subscription's row).
    pub(super) async fn insert_movement(&self, movement: MrrMovement) -> StoreResult<()> {
        use sea_orm::ActiveModelTrait;
        movement
            .into_active_model()
            .reset_all()
            .insert(&self.txn)
            .await?;
        Ok(())
    }
}

/// How many subscriptions the opening pass reads at a time.
const OPENING_BATCH: u64 = 500;

impl Store {
    /// The opening movements (decision 0079): every subscription whose MRR by the rule is
    /// more than 0 while its `mrr_cents` is 0 and that has no movement (it was written before
    /// the ledger existed) gets its `new` movement and its `mrr_cents`, in batches of
    /// `OPENING_BATCH`, each batch one transaction. Run at start, after the migrations and
    /// before serving; a second run finds nothing to do. Returns how many were opened.
    pub async fn open_mrr_ledger(&self) -> StoreResult<u64> {
        use crate::domain::subscription::Status;
        let mut after: Option<SubscriptionId> = None;
        let mut opened = 0;
        loop {
            let mut select = subscription::Entity::find()
                .filter(subscription::Column::MrrCents.eq(0))
                .filter(subscription::Column::Status.is_in([Status::Active, Status::PastDue]))
                .order_by_asc(subscription::Column::Id)
                .limit(OPENING_BATCH);
            if let Some(last) = &after {
                select = select.filter(subscription::Column::Id.gt(last.clone()));
            }
            let rows = select.all(self.conn()).await?;
            let Some(last) = rows.last() else {
                return Ok(opened);
            };
            after = Some(last.id.clone());
            let ids: Vec<SubscriptionId> = rows.iter().map(|row| row.id.clone()).collect();
            let txn = self.begin().await?;
            let had = with_movements(&txn.txn, &ids).await?;
            for mut row in rows.into_iter().filter(|row| !had.contains(&row.id)) {
                let mrr = mrr_by_rule(&txn.txn, &row).await?;
                if mrr == 0 {
                    continue;
                }
                row.mrr_cents = mrr;
                // The movement dates from the subscription's creation: the ledger then reads
                // as if it had been kept from the start (at today's price).
                row.updated_at = row.created_at;
                let Some(movement) = movement(None, &row, 0, false) else {
                    continue;
                };
                // Conditional: of nodes starting together, the first to write a row opens it,
                // and the others (waiting on its lock, then seeing it written) skip it.
                let written = subscription::Entity::update_many()
                    .col_expr(
                        subscription::Column::MrrCents,
                        sea_orm::sea_query::Expr::value(mrr),
                    )
                    .filter(subscription::Column::Id.eq(row.id.clone()))
                    .filter(subscription::Column::MrrCents.eq(0))
                    .filter(subscription::Column::Version.eq(row.version))
                    .exec(&txn.txn)
                    .await?;
                if written.rows_affected == 0 {
                    continue;
                }
                txn.insert_movement(movement).await?;
                opened += 1;
            }
            txn.commit().await?;
        }
    }

    /// A subscription's MRR as stored (`mrr_cents`) and by the rule now, read afresh: the
    /// two agree whenever every write went through the ledger (the model test checks it).
    pub async fn mrr_now(
        &self,
        account: &crate::ids::AccountId,
        id: &SubscriptionId,
    ) -> StoreResult<Option<(i64, i64)>> {
        let Some(row) = subscription::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?
        else {
            return Ok(None);
        };
        let rule = mrr_by_rule(self.conn(), &row).await?;
        Ok(Some((row.mrr_cents, rule)))
    }

    /// How many movements `subscription_id` has (tests and the audit).
    pub async fn count_movements(
        &self,
        account: &crate::ids::AccountId,
        subscription_id: &SubscriptionId,
    ) -> StoreResult<u64> {
        Ok(mrr_movement::Entity::scoped(account)
            .filter(mrr_movement::Column::SubscriptionId.eq(subscription_id))
            .count(self.conn())
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::prefetch::fixture::shop;
    use sea_orm::ConnectionTrait;

    #[tokio::test]
    async fn the_opening_pass_opens_a_row_written_before_the_ledger_once() {
        let now = chrono::Utc::now().timestamp_millis();
        let shop = shop(now).await;
        // As a row written before migration 000032: no MRR, no movement.
        let conn = shop.store.conn();
        for sql in [
            "DELETE FROM mrr_movements",
            "UPDATE subscriptions SET mrr_cents = 0",
        ] {
            conn.execute_unprepared(sql).await.expect("reset");
        }
        assert_eq!(shop.store.open_mrr_ledger().await.expect("open"), 1);
        assert_eq!(shop.store.open_mrr_ledger().await.expect("again"), 0);
        let (stored, rule) = shop
            .store
            .mrr_now(&shop.account, &shop.sub.id)
            .await
            .expect("read")
            .expect("the row");
        // The plan and both add-ons (the fixture attached them after its insert, unsaved: the
        // opening pass counts what the row bills now).
        assert!(rule > 0);
        assert_eq!(stored, rule);
        let movements = shop
            .store
            .count_movements(&shop.account, &shop.sub.id)
            .await
            .expect("count");
        assert_eq!(movements, 1);
        shop.remove();
    }
}
