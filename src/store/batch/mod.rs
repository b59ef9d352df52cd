//! A renewal's two writes, batched across renewals: a period charge's begin (the fee's
//! reservation, the pending attempt, the subscription's row) and its outcome (the settlement,
//! the fee captured or given back, the processor event's record, the events and their
//! deliveries, the subscription's row), each for every renewal that waits to write it at once,
//! as one unit of a few multi-row statements instead of one unit per renewal.
//!
//! Each actor still decides its own subscription's transition and hands the rows it would write
//! to `Store::begin_period_charge` or `Store::settle_period_charge`. The first caller to find no
//! batch of its step being written starts one (on SQLite on the writer's thread, on PostgreSQL
//! on the batch writer's); callers that arrive meanwhile queue, and the next batch takes the
//! largest power of two of those queued (up to `MAX_BATCH`; the rest go in the batch after:
//! `queue::batch_size`, so that a step's statements have a few shapes, each prepared once).
//! In a batch, per account one UPDATE of the balance by the batch's sum (last: every batch
//! writes that row), one INSERT per table, and one conditional upsert of every subscription
//! (`version` as read); on SQLite the statements of a step go to
//! the connection's thread together (`execute_together`), and what the batch depends on is
//! checked by the count of rows they changed. Anything refused (a balance short of the sum, a
//! period that already has a live charge, a row changed since it was read, a charge no longer
//! pending) rolls the whole batch back, and each of its renewals is then written as its own
//! unit, exactly as a lone renewal is: whoever would have been refused alone is refused alone,
//! with the reason, and the rest go through.
//!
//! In a cluster a batch first fences every shard it writes at once (`StoreTxn::fence_all`: the
//! shards' locks shared, their leases checked), as each subscription's write alone is fenced
//! (`StoreTxn::save_subscription`); a shard no longer held refuses the batch, and the write
//! alone then ends `Fenced`.

use super::charges::{
    BeginChargeError, ChargeAttempt, NewCharge, Overrun, ProcessorEvent, attempt_of,
    fee_ledger_row, insert_processor_events,
};
use super::entities::{account, subscription_addon};
use super::mrr::MrrAfter;
use super::notice_sink::Known;
use super::subscriptions::{Event, Subscription};
use super::txn::StoreTxn;
use super::{Store, StoreError, StoreResult};
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::ChargeStatus;
use crate::domain::reattempts::Window;
use crate::ids::{ChargeAttemptId, SubscriptionId};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryTrait};
use std::collections::{BTreeMap, HashMap};
use tokio::sync::oneshot;

mod notes;
mod queue;
mod statements;

use super::fanout::insert_all;
pub(crate) use queue::Batches;
pub use statements::settle_pending;
use statements::{event_statements, execute_together, upsert_all};

/// The most renewals one batch writes: under 6,000 bound values in its largest statement (the
/// subscriptions' upsert), well under SQLite's 32,766 and PostgreSQL's 65,535.
const MAX_BATCH: usize = 256;

/// A period's charge about to begin: the attempt, the subscription's row as it is to be saved
/// (its `version` as read), and the events written with them.
pub struct PeriodChargeBegin {
    pub charge: NewCharge,
    pub row: Subscription,
    /// Events that exist only if the charge begins, written in its unit (a resumption's
    /// `subscription.resumed`: CONTRACT §5); none for a renewal.
    pub events: Vec<Event>,
}

/// What beginning a period's charge did: the attempt and the saved row, or why nothing was
/// written.
pub type Began = Result<(ChargeAttempt, Subscription), BeginChargeError>;

type BeginWaiter = (PeriodChargeBegin, oneshot::Sender<StoreResult<Began>>);
type SettleWaiter = (
    PeriodChargeSettle,
    oneshot::Sender<StoreResult<Option<Subscription>>>,
);
type NoteWaiter = (TransactionNote, oneshot::Sender<StoreResult<()>>);

/// The processor's answer to a charge's post that left it pending: the transaction it made,
/// kept on the charge's row (`Store::note_processor_transaction`).
#[derive(Clone, Debug)]
pub struct TransactionNote {
    pub charge_id: ChargeAttemptId,
    pub transaction_id: String,
    pub raw_status: String,
    /// Real time.
    pub now_ms: i64,
}

impl Store {
    /// Begins a period's charge: reserves its fee, inserts the pending attempt and saves the
    /// subscription's `row`, in one unit that is refused whole (`BeginChargeError`) or written
    /// whole, batched with the renewals that wait at the same time (see the module doc).
    pub async fn begin_period_charge(&self, begin: PeriodChargeBegin) -> StoreResult<Began> {
        let (reply, answer) = oneshot::channel();
        if self.batches.begins.push((begin, reply)) {
            let store = self.clone();
            self.start_writer(async move { store.write_begins().await });
        }
        answer
            .await
            .map_err(|_| StoreError::invariant("the batch writer stopped".into()))?
    }

    /// Starts a step's writer: on SQLite on the writer's thread, where every unit runs; on
    /// PostgreSQL on the batch writer's own (each statement's answer wakes a thread that has
    /// nothing else to do, not a task queued behind the service's HTTP and actors). It runs
    /// in a task of its own, so a caller that stops waiting never leaves the writes queued
    /// behind it unwritten.
    fn start_writer(&self, write: impl std::future::Future<Output = ()> + Send + 'static) {
        match (&self.lane, &self.batch_writer) {
            (Some(lane), _) | (None, Some((lane, _))) => lane.spawn(write),
            (None, None) => {
                tokio::spawn(write);
            }
        }
    }

    /// Writes batches of begins until none waits.
    async fn write_begins(self) {
        let _writer = self.batches.begins.writer();
        loop {
            let batch = self.batches.begins.next();
            if batch.is_empty() {
                return;
            }
            self.write_begin_batch(batch).await;
        }
    }

    async fn write_begin_batch(&self, batch: Vec<BeginWaiter>) {
        let size = batch.len();
        metrics::histogram!("charge_begin_batch_size").record(size as f64);
        if size > 1 {
            let (begins, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            match self.begin_many(&begins).await {
                Ok(Some(began)) => {
                    for (reply, began) in replies.into_iter().zip(began) {
                        let _ = reply.send(Ok(Ok(began)));
                    }
                    return;
                }
                Ok(None) => {}
                Err(err) => tracing::debug!(error = %err, "a batch of charge begins failed"),
            }
            metrics::counter!("charge_begin_batches_refused_total").increment(1);
            // One unit each, side by side: their units share the group's commit.
            let mut singles = tokio::task::JoinSet::new();
            for (begin, reply) in begins.into_iter().zip(replies) {
                let store = self.clone();
                singles.spawn(async move {
                    let _ = reply.send(store.begin_one(begin).await);
                });
            }
            singles.join_all().await;
            return;
        }
        for (begin, reply) in batch {
            let _ = reply.send(self.begin_one(begin).await);
        }
    }

    /// One renewal's write as its own unit.
    async fn begin_one(&self, begin: PeriodChargeBegin) -> StoreResult<Began> {
        let txn = self.begin().await?;
        begin_in(txn, begin).await
    }

    /// A retry's begin where its card network's limits are kept (CONTRACT §15): one unit
    /// locks the payment method's row, counts its attempts over each of `windows` and begins
    /// the charge only if each allows one more; past one, nothing is written and the window
    /// is the answer, with the begin handed back. Never batched: two retries on one card at
    /// once are counted one after the other, on any node, so they cannot both pass a limit.
    pub async fn begin_counted_charge(
        &self,
        begin: PeriodChargeBegin,
        windows: &[Window],
    ) -> StoreResult<Result<Began, (Overrun, PeriodChargeBegin)>> {
        let txn = self.begin().await?;
        let charge = &begin.charge;
        txn.lock_payment_method(&charge.account, &charge.payment_method_id)
            .await?;
        let overrun: Option<Overrun> = txn
            .overrun(
                &charge.account,
                &charge.payment_method_id,
                windows,
                charge.amount_cents,
                charge.now_ms,
            )
            .await?;
        match overrun {
            // Dropped, the unit writes nothing; the begin is handed back.
            Some(overrun) => Ok(Err((overrun, begin))),
            None => Ok(Ok(begin_in(txn, begin).await?)),
        }
    }

    /// The whole batch as one unit, or `None` (nothing written) when any of it is refused.
    async fn begin_many(
        &self,
        begins: &[PeriodChargeBegin],
    ) -> StoreResult<Option<Vec<(ChargeAttempt, Subscription)>>> {
        let txn = self.begin_batch().await?;
        if !txn
            .fence_all(begins.iter().map(|b| b.row.id.as_str()))
            .await?
        {
            return Ok(None);
        }
        let conn = txn.conn();
        let backend = conn.get_database_backend();
        let mut fees: BTreeMap<&str, i64> = BTreeMap::new();
        for begin in begins {
            *fees.entry(begin.charge.account.as_str()).or_default() += begin.charge.fee_cents;
        }
        let charges: Vec<ChargeAttempt> = begins
            .iter()
            .map(|begin| attempt_of(begin.charge.clone()))
            .collect();
        // The MRR of a row whose begin may move it (a trial's end, a resumption: rare), by the
        // rule; a renewal's or a retry's changes nothing it depends on and reads nothing.
        let mut saving = Vec::with_capacity(begins.len());
        let mut movements = Vec::new();
        for begin in begins {
            let mut row = begin.row.clone();
            if begin_mrr(begin) == MrrAfter::ByRule {
                let mut after = row.clone();
                after.version += 1;
                movements.extend(txn.account_mrr(&mut after, row.mrr_cents, false).await?);
                row.mrr_cents = after.mrr_cents;
            }
            saving.push(row);
        }
        let (upsert, rows) = upsert_all(backend, saving);
        let mut statements: Vec<_> = insert_all(backend, charges.iter().cloned())
            .into_iter()
            .chain([upsert])
            .collect();
        // The reservations last: the account's row is the one every batch writes, and on
        // PostgreSQL its lock is held from here to the commit.
        for (account_id, sum) in &fees {
            statements.push(
                account::Entity::update_many()
                    .col_expr(
                        account::Column::AvailableCents,
                        Expr::col(account::Column::AvailableCents).sub(*sum),
                    )
                    .col_expr(
                        account::Column::ReservedCents,
                        Expr::col(account::Column::ReservedCents).add(*sum),
                    )
                    .filter(account::Column::Id.eq(*account_id))
                    .filter(account::Column::AvailableCents.gte(*sum))
                    .build(backend),
            );
        }
        // Every charge inserted (or an error), every row saved at the version read (else not
        // counted), every account's balance enough for its sum (else not counted): the whole
        // batch holds exactly when it changed that many rows.
        let expected = 2 * begins.len() as u64 + fees.len() as u64;
        match execute_together(conn, statements).await {
            Ok(changed) if changed == expected => {}
            Ok(_) => return Ok(None),
            // A period with a live charge already (`charge_attempts_live_period`).
            Err(err) if err.is_unique_violation() => return Ok(None),
            Err(err) => return Err(err),
        }
        // The events of the charges that began (a resumption's), with their deliveries: they
        // change no row the batch depends on, so they are written after the count, not counted.
        let events: Vec<&Event> = begins.iter().flat_map(|b| b.events.iter()).collect();
        if !events.is_empty() || !movements.is_empty() {
            let mut statements = event_statements(&txn, events, &Known::default()).await?;
            statements.extend(insert_all(backend, movements));
            execute_together(txn.conn(), statements).await?;
        }
        txn.commit().await?;
        Ok(Some(charges.into_iter().zip(rows).collect()))
    }
}

/// What a begin's row needs for its MRR: a renewal's or a retry's begin changes nothing the MRR
/// depends on (its due time, its update time: the period moves when it is paid), so it is
/// unchanged and read for nothing; a first charge (a trial's end) or a resumption moves the
/// status, and is computed by the rule.
/// A period charge's begin written in `txn`, which it commits unless the charge is refused.
async fn begin_in(txn: StoreTxn, begin: PeriodChargeBegin) -> StoreResult<Began> {
    let mrr = begin_mrr(&begin);
    match txn.begin_charge(begin.charge).await {
        Ok(charge) => {
            for event in begin.events {
                txn.insert_event(event).await?;
            }
            let row = txn.save_subscription_as(begin.row, mrr).await?;
            txn.commit().await?;
            Ok(Ok((charge, row)))
        }
        // Nothing was written (the unit rolls back).
        Err(BeginChargeError::Store(err)) => Err(err),
        Err(refused) => Ok(Err(refused)),
    }
}

fn begin_mrr(begin: &PeriodChargeBegin) -> MrrAfter {
    let plain = matches!(
        begin.charge.purpose,
        ChargePurpose::Renewal | ChargePurpose::Retry
    );
    if plain && begin.events.is_empty() {
        MrrAfter::Unchanged
    } else {
        MrrAfter::ByRule
    }
}

/// The MRR after an outcome, without a read: 0 when the row's status does not count (a
/// cancellation by dunning, a pause meanwhile); from the charge's lines when a period was paid
/// (`mrr::mrr_of_renewal`: the period the row bills now); else as stored (a decline that
/// keeps it `past_due` changes nothing the MRR depends on).
fn settle_mrr(settle: &PeriodChargeSettle) -> i64 {
    let row = &settle.row;
    if !crate::domain::mrr::counts(row.status) {
        return 0;
    }
    let charge = &settle.charge;
    if !charge.is(ChargeStatus::Approved) || charge.period_start.is_none() {
        return row.mrr_cents;
    }
    charge
        .invoice_lines
        .as_deref()
        .and_then(|lines| super::mrr::mrr_of_renewal(row, lines))
        .unwrap_or(row.mrr_cents)
}

/// A period charge's final outcome as its subscription's actor decided to apply it, assuming
/// the charge is still pending (`Store::settle_period_charge`).
pub struct PeriodChargeSettle {
    /// The charge as it is to be stored once settled: its final status, the processor's
    /// status, message and transaction id, `updated_at` and `finalized_at`.
    pub charge: ChargeAttempt,
    /// The processor event that reported the outcome, recorded with it.
    pub event: Option<ProcessorEvent>,
    /// The events it emits, in order: the charge's, then the subscription's transition's.
    pub events: Vec<Event>,
    /// Whether the add-ons detached at the period's end leave now.
    pub drop_detached_addons: bool,
    /// The subscription's row as it is to be saved (its `version` as read).
    pub row: Subscription,
}

impl Store {
    /// Applies a period charge's final outcome, batched with the outcomes that arrive at the
    /// same time: the charge's settlement (once: only a pending charge), the fee captured or
    /// given back, the processor event's record, the events with their deliveries and the
    /// subscription's row, in one unit. The saved row, or `None` when nothing of it was
    /// written: its batch was refused (a charge of it no longer pending, a row changed since
    /// it was read); the caller then applies the outcome alone, as its own unit.
    pub async fn settle_period_charge(
        &self,
        settle: PeriodChargeSettle,
    ) -> StoreResult<Option<Subscription>> {
        let (reply, answer) = oneshot::channel();
        if self.batches.settles.push((settle, reply)) {
            let store = self.clone();
            self.start_writer(async move { store.write_settles().await });
        }
        answer
            .await
            .map_err(|_| StoreError::invariant("the batch writer stopped".into()))?
    }

    /// Writes batches of outcomes until none waits.
    async fn write_settles(self) {
        let _writer = self.batches.settles.writer();
        loop {
            let batch = self.batches.settles.next();
            if batch.is_empty() {
                return;
            }
            let (settles, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            let saved = match self.settle_many(&settles).await {
                Ok(Some(saved)) => saved.into_iter().map(Some).collect(),
                Ok(None) => {
                    metrics::counter!("charge_settle_batches_refused_total").increment(1);
                    vec![None; replies.len()]
                }
                Err(err) => {
                    tracing::debug!(error = %err, "a batch of charge outcomes failed");
                    metrics::counter!("charge_settle_batches_refused_total").increment(1);
                    vec![None; replies.len()]
                }
            };
            metrics::histogram!("charge_settle_batch_size").record(replies.len() as f64);
            for (reply, saved) in replies.into_iter().zip(saved) {
                let _ = reply.send(Ok(saved));
            }
        }
    }

    /// The batch as one unit: the saved rows, in the order of `settles`. `None` when it is
    /// refused (nothing written at all): a charge of it no longer pending, a row changed since
    /// it was read.
    async fn settle_many(
        &self,
        settles: &[PeriodChargeSettle],
    ) -> StoreResult<Option<Vec<Subscription>>> {
        let txn = self.begin_batch().await?;
        if !txn
            .fence_all(settles.iter().map(|s| s.row.id.as_str()))
            .await?
        {
            return Ok(None);
        }
        let conn = txn.conn();
        let backend = conn.get_database_backend();
        let charges: Vec<&ChargeAttempt> = settles.iter().map(|s| &s.charge).collect();
        let update = settle_pending(&charges);
        // The MRR after each outcome, from what the batch holds (`settle_mrr`); the movements
        // of those that moved, which alone cost reads.
        let mut saving = Vec::with_capacity(settles.len());
        let mut moved = Vec::new();
        for settle in settles {
            let mut row = settle.row.clone();
            let after = settle_mrr(settle);
            if after != row.mrr_cents {
                let before = row.mrr_cents;
                row.mrr_cents = after;
                let mut saved = row.clone();
                saved.version += 1;
                moved.push((saved, before));
            }
            saving.push(row);
        }
        let moved: Vec<(&Subscription, i64)> = moved.iter().map(|(row, b)| (row, *b)).collect();
        let movements = super::mrr::batch_movements(conn, &moved).await?;
        let (upsert, saved) = upsert_all(backend, saving);
        // Counted, not returned (each returned row is a hand-off from SQLite's connection
        // thread): every charge still pending and every row at the version read, or the whole
        // batch is refused and each outcome applied alone, as for any refusal (a charge settled
        // by another writer since its event was read is rare).
        let changed = execute_together(conn, vec![backend.build(&update), upsert]).await?;
        if changed != 2 * charges.len() as u64 {
            return Ok(None);
        }
        let chosen: Vec<&PeriodChargeSettle> = settles.iter().collect();

        // What follows changes no row the batch depends on: written together, not counted.
        let mut statements = Vec::new();
        // A checksum already recorded is left as it is, as `record_processor_event` does.
        let events = chosen.iter().filter_map(|s| s.event.clone()).collect();
        statements.extend(insert_processor_events(backend, events));

        // The fee: captured from the reservation when approved, given back to the available
        // balance otherwise; one UPDATE per account by the batch's sums.
        let mut fees: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
        let mut ledger = Vec::new();
        for settle in &chosen {
            let charge = &settle.charge;
            let (reserved, returned) = fees.entry(charge.account_id.as_str()).or_default();
            *reserved += charge.fee_cents;
            if charge.is(ChargeStatus::Approved) {
                ledger.push(fee_ledger_row(charge, charge.updated_at));
            } else {
                *returned += charge.fee_cents;
            }
        }
        statements.extend(insert_all(backend, ledger));
        statements.extend(insert_all(backend, movements));

        let leaving: Vec<&str> = chosen
            .iter()
            .filter(|s| s.drop_detached_addons)
            .map(|s| s.row.id.as_str())
            .collect();
        if !leaving.is_empty() {
            statements.push(
                subscription_addon::Entity::delete_many()
                    .filter(subscription_addon::Column::SubscriptionId.is_in(leaving))
                    .filter(subscription_addon::Column::DetachAtPeriodEnd.eq(true))
                    .build(backend),
            );
        }

        // The approved charges' invoices, drafted now (customers read, metadata from the rows)
        // so that their events are written with the others; numbered below.
        let approved: Vec<&ChargeAttempt> = chosen
            .iter()
            .map(|s| &s.charge)
            .filter(|c| c.is(ChargeStatus::Approved))
            .filter(|_| self.issuing == super::Issuing::Issued)
            .collect();
        let metadata: HashMap<&SubscriptionId, Option<&str>> = chosen
            .iter()
            .map(|s| (&s.row.id, s.row.metadata.as_deref()))
            .collect();
        let invoices = super::invoices::draft_in(conn, &approved, Some(&metadata)).await?;

        // The events, and their deliveries.
        let rows: Vec<&Event> = chosen
            .iter()
            .flat_map(|s| s.events.iter())
            .chain(invoices.events.iter())
            .collect();
        // Whose each subscription is, the batch knows: its notices need no read for it, nor
        // for invoices not written yet.
        let known = Known {
            customers: chosen
                .iter()
                .map(|s| (&s.row.id, &s.row.customer_id))
                .collect(),
            invoices_unwritten: true,
        };
        statements.extend(event_statements(&txn, rows, &known).await?);

        // The account's row last (see `begin_many`).
        for (account_id, (reserved, returned)) in fees {
            statements.push(
                account::Entity::update_many()
                    .col_expr(
                        account::Column::ReservedCents,
                        Expr::col(account::Column::ReservedCents).sub(reserved),
                    )
                    .col_expr(
                        account::Column::AvailableCents,
                        Expr::col(account::Column::AvailableCents).add(returned),
                    )
                    .filter(account::Column::Id.eq(account_id))
                    .build(backend),
            );
        }
        execute_together(conn, statements).await?;
        // The invoices numbered now: after the account's row, as every settlement takes the
        // account's row before its series' (no deadlock between a batch and a charge settled
        // alone).
        super::invoices::number_in(conn, invoices.rows).await?;
        txn.commit().await?;
        for settle in &chosen {
            let outcome = settle.charge.status.as_str();
            metrics::counter!("charge_outcomes_total", "outcome" => outcome).increment(1);
        }
        Ok(Some(saved))
    }
}

#[cfg(test)]
mod tests;
