//! A renewal's two writes, batched across renewals: a period charge's begin (the fee's
//! reservation, the pending attempt, the subscription's row) and its outcome (the settlement,
//! the fee captured or given back, the processor event's record, the events and their
//! deliveries, the subscription's row), each for every renewal that waits to write it at once,
//! as one unit of a few multi-row statements instead of one unit per renewal.
//!
//! Each actor still decides its own subscription's transition and hands the rows it would write
//! to `Store::begin_period_charge` or `Store::settle_period_charge`. The first caller to find no
//! batch of its step being written starts one (on SQLite on the writer's thread, on PostgreSQL
//! on the batch writer's); callers that arrive meanwhile queue, and the next batch takes every
//! one queued (up to `MAX_BATCH`). In a batch, per account one UPDATE of the balance by the
//! batch's sum (last: every batch writes that row), one INSERT per table, and one conditional
//! upsert of every subscription (`version` as read); on SQLite the statements of a step go to
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
    BeginChargeError, ChargeAttempt, NewCharge, ProcessorEvent, attempt_of, fee_ledger_row,
    insert_processor_events,
};
use super::entities::{account, charge_attempt, subscription, subscription_addon};
use super::subscriptions::{Event, StoreTxn, Subscription};
use super::webhooks::{WebhookEndpoint, active_endpoints, pending_delivery, subscribes};
use super::{Store, StoreError, StoreResult};
use sea_orm::sea_query::{CaseStatement, Expr, ExprTrait, OnConflict, Query};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, Iterable,
    QueryFilter, QueryTrait,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

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
    pub charge_id: String,
    pub transaction_id: String,
    pub raw_status: String,
    /// Real time.
    pub now_ms: i64,
}

/// The writes waiting for the next batch of one step, and whether a batch is being written.
pub(crate) struct Queue<W>(Arc<Mutex<Queued<W>>>);

impl<W> Clone for Queue<W> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<W> Default for Queue<W> {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Queued {
            waiting: Vec::new(),
            writing: false,
        })))
    }
}

struct Queued<W> {
    waiting: Vec<W>,
    writing: bool,
}

impl<W> Queue<W> {
    /// Queues `waiter`; true when the caller is to start writing batches.
    fn push(&self, waiter: W) -> bool {
        let Ok(mut queued) = self.0.lock() else {
            return false;
        };
        queued.waiting.push(waiter);
        !std::mem::replace(&mut queued.writing, true)
    }

    /// Held by the writer while it writes: should it panic, the next caller starts a writer
    /// again instead of queueing behind one that is gone (the panicked batch's callers get an
    /// error, their reply dropped).
    fn writer(&self) -> WriterGuard<'_, W> {
        WriterGuard(self)
    }

    /// The next batch; empty when none waits, and then the writer stops.
    fn next(&self) -> Vec<W> {
        let Ok(mut queued) = self.0.lock() else {
            return Vec::new();
        };
        let take = queued.waiting.len().min(MAX_BATCH);
        let batch: Vec<W> = queued.waiting.drain(..take).collect();
        if batch.is_empty() {
            queued.writing = false;
        }
        batch
    }
}

struct WriterGuard<'a, W>(&'a Queue<W>);

impl<W> Drop for WriterGuard<'_, W> {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Ok(mut queued) = self.0.0.lock()
        {
            queued.writing = false;
        }
    }
}

/// The batch queues of a `Store`.
#[derive(Clone, Default)]
pub(crate) struct Batches {
    begins: Queue<BeginWaiter>,
    settles: Queue<SettleWaiter>,
    notes: Queue<NoteWaiter>,
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
        match txn.begin_charge(begin.charge).await {
            Ok(charge) => {
                for event in begin.events {
                    txn.insert_event(event).await?;
                }
                let row = txn.save_subscription(begin.row).await?;
                txn.commit().await?;
                Ok(Ok((charge, row)))
            }
            // Nothing was written (the unit rolls back).
            Err(BeginChargeError::Store(err)) => Err(err),
            Err(refused) => Ok(Err(refused)),
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
        let (upsert, rows) = upsert_all(backend, begins.iter().map(|b| b.row.clone()).collect());
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
        if !events.is_empty() {
            let statements = event_statements(&txn, events).await?;
            execute_together(txn.conn(), statements).await?;
        }
        txn.commit().await?;
        Ok(Some(charges.into_iter().zip(rows).collect()))
    }
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
        let (upsert, saved) = upsert_all(backend, settles.iter().map(|s| s.row.clone()).collect());
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
            if charge.status == "approved" {
                ledger.push(fee_ledger_row(charge, charge.updated_at));
            } else {
                *returned += charge.fee_cents;
            }
        }
        statements.extend(insert_all(backend, ledger));

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

        // The events, and their deliveries.
        let rows: Vec<&Event> = chosen.iter().flat_map(|s| s.events.iter()).collect();
        statements.extend(event_statements(&txn, rows).await?);

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
        txn.commit().await?;
        for settle in &chosen {
            let outcome = settle.charge.status.clone();
            metrics::counter!("charge_outcomes_total", "outcome" => outcome).increment(1);
        }
        Ok(Some(saved))
    }
}

/// The statements inserting `rows` and their deliveries to each account's active endpoints
/// subscribed to their type (read once per account); the endpoints are noted on `txn`, to be
/// told once it commits.
async fn event_statements(
    txn: &StoreTxn,
    rows: Vec<&Event>,
) -> StoreResult<Vec<sea_orm::Statement>> {
    let conn = txn.conn();
    let backend = conn.get_database_backend();
    let mut endpoints: BTreeMap<&str, Vec<WebhookEndpoint>> = BTreeMap::new();
    let mut deliveries = Vec::new();
    for row in &rows {
        if !endpoints.contains_key(row.account_id.as_str()) {
            let active = active_endpoints(conn, &row.account_id).await?;
            endpoints.insert(row.account_id.as_str(), active);
        }
        for endpoint in &endpoints[row.account_id.as_str()] {
            if subscribes(endpoint, &row.event_type) {
                deliveries.push(pending_delivery(row, &endpoint.id, row.created_at));
            }
        }
    }
    txn.touch(deliveries.iter().map(|d| d.endpoint_id.clone()));
    Ok(insert_all(backend, rows.into_iter().cloned())
        .into_iter()
        .chain(insert_all(backend, deliveries))
        .collect())
}

impl Store {
    /// Keeps the transaction the processor made for a still-pending charge on its row, where
    /// every node reads it and every settlement is decided against it (`settle_charge_in`,
    /// `settle_pending`: a report naming another transaction moves no money), batched with the
    /// notes of the posts that answer at the same time: one UPDATE for all of them. A charge
    /// settled meanwhile is left as it is.
    pub async fn note_processor_transaction(&self, note: TransactionNote) -> StoreResult<()> {
        let (reply, answer) = oneshot::channel();
        if self.batches.notes.push((note, reply)) {
            let store = self.clone();
            self.start_writer(async move { store.write_notes().await });
        }
        answer
            .await
            .map_err(|_| StoreError::invariant("the batch writer stopped".into()))?
    }

    /// Writes batches of notes until none waits.
    async fn write_notes(self) {
        let _writer = self.batches.notes.writer();
        loop {
            let batch = self.batches.notes.next();
            if batch.is_empty() {
                return;
            }
            let (notes, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            metrics::histogram!("charge_note_batch_size").record(notes.len() as f64);
            let written = self.note_many(&notes).await;
            for reply in replies {
                let _ = reply.send(match &written {
                    Ok(()) => Ok(()),
                    Err(err) => Err(StoreError::invariant(format!(
                        "noting the processor's transactions: {err}"
                    ))),
                });
            }
        }
    }

    async fn note_many(&self, notes: &[TransactionNote]) -> StoreResult<()> {
        let txn = self.begin_batch().await?;
        let conn = txn.conn();
        let backend = conn.get_database_backend();
        let by_id = |value: fn(&TransactionNote) -> sea_orm::Value| {
            charge_case(notes, |note| note.charge_id.as_str(), value)
        };
        let mut update = Query::update();
        update
            .table(charge_attempt::Entity)
            .value(
                charge_attempt::Column::ProcessorTransactionId,
                by_id(|n| n.transaction_id.clone().into()),
            )
            .value(
                charge_attempt::Column::ProcessorStatus,
                by_id(|n| n.raw_status.clone().into()),
            )
            .value(
                charge_attempt::Column::UpdatedAt,
                by_id(|n| n.now_ms.into()),
            )
            .and_where(charge_attempt::Column::Id.is_in(notes.iter().map(|n| n.charge_id.as_str())))
            .and_where(still_pending());
        conn.execute_raw(backend.build(&update)).await?;
        txn.commit().await
    }
}

/// One column's values for a multi-row UPDATE of charge attempts: a CASE branch per item.
fn charge_case<'a, T: 'a>(
    items: impl IntoIterator<Item = &'a T>,
    charge_id: fn(&T) -> &str,
    value: fn(&T) -> sea_orm::Value,
) -> CaseStatement {
    items.into_iter().fold(CaseStatement::new(), |case, item| {
        case.case(
            Expr::col(charge_attempt::Column::Id).eq(charge_id(item)),
            Expr::val(value(item)),
        )
    })
}

/// The settlement of `charges` (each as it is to be stored), of those still pending only:
/// whichever writer moves a charge out of pending applies its outcome, once
/// (`settle_charge_in` alone does the same). It changes one row per charge still pending.
pub fn settle_pending(charges: &[&ChargeAttempt]) -> sea_orm::sea_query::UpdateStatement {
    let by_id = |value: fn(&ChargeAttempt) -> sea_orm::Value| {
        charge_case(charges.iter().copied(), |charge| charge.id.as_str(), value)
    };
    let mut update = Query::update();
    update
        .table(charge_attempt::Entity)
        .value(
            charge_attempt::Column::Status,
            by_id(|c| c.status.clone().into()),
        )
        .value(
            charge_attempt::Column::ProcessorStatus,
            by_id(|c| c.processor_status.clone().into()),
        )
        .value(
            charge_attempt::Column::ProcessorMessage,
            by_id(|c| c.processor_message.clone().into()),
        )
        .value(
            charge_attempt::Column::ProcessorTransactionId,
            reported_transaction(charges),
        )
        .value(
            charge_attempt::Column::UpdatedAt,
            by_id(|c| c.updated_at.into()),
        )
        .value(
            charge_attempt::Column::FinalizedAt,
            by_id(|c| c.finalized_at.into()),
        )
        .and_where(charge_attempt::Column::Id.is_in(charges.iter().map(|c| c.id.as_str())))
        .and_where(still_pending())
        .and_where(same_transaction(charges));
    update
}

/// "The charge's stored transaction, if it has one, is the one reported": decided against the
/// row, whatever a caller's copy of it says, so that a report naming another transaction than
/// the one noted (by any node) settles nothing here, and alone is kept as a conflict
/// (`settle_charge_in`). A charge settled without a transaction id keeps the stored one.
fn same_transaction(charges: &[&ChargeAttempt]) -> Expr {
    let stored = || Expr::col(charge_attempt::Column::ProcessorTransactionId);
    stored()
        .is_null()
        .or(stored().eq(reported_transaction(charges)))
}

/// Each charge's reported transaction id, or the stored one where none was reported (never
/// NULL over a noted one).
fn reported_transaction(charges: &[&ChargeAttempt]) -> Expr {
    let stored = Expr::col(charge_attempt::Column::ProcessorTransactionId);
    let mut reported = CaseStatement::new();
    let mut any = false;
    for charge in charges {
        if let Some(transaction_id) = &charge.processor_transaction_id {
            reported = reported.case(
                Expr::col(charge_attempt::Column::Id).eq(charge.id.as_str()),
                Expr::val(transaction_id.as_str()),
            );
            any = true;
        }
    }
    // A CASE needs a WHEN: none reported, the stored one stays.
    if !any {
        return stored;
    }
    reported.finally(stored).into()
}

/// "The charge is still pending", written so that no plan answers it from the status index:
/// the charges are found by their keys and this only filters them. Until vacuum runs, that
/// index keeps an entry for the pending version of every charge settled since, and a
/// PostgreSQL bitmap scan of it visits every one of them: during a burst each settlement
/// read the pages of every charge of the burst so far (2.4 of its 3.4 ms, 20,000 charges into one).
fn still_pending() -> Expr {
    Expr::cust(r#""charge_attempts"."status" || '' = 'pending'"#)
}

/// The conditional upsert saving `rows` (each with its `version` as read), and the rows as
/// it saves them. It changes one row for each row still at the version read, and none for a
/// row changed since: the caller counts.
fn upsert_all(
    backend: sea_orm::DbBackend,
    rows: Vec<Subscription>,
) -> (sea_orm::Statement, Vec<Subscription>) {
    let rows: Vec<Subscription> = rows
        .into_iter()
        .map(|mut row| {
            row.version += 1;
            row
        })
        .collect();
    // Every row exists (it was read), so the upsert only ever updates, and only a row whose
    // version is still the one read: `excluded.version` is that plus one.
    let upsert = subscription::Entity::insert_many(
        rows.iter()
            .map(|row| row.clone().into_active_model().reset_all()),
    )
    .on_conflict(
        OnConflict::column(subscription::Column::Id)
            .update_columns(
                subscription::Column::iter().filter(|c| !matches!(c, subscription::Column::Id)),
            )
            .action_and_where(
                Expr::col((subscription::Entity, subscription::Column::Version))
                    .eq(Expr::cust("excluded.version - 1")),
            )
            .to_owned(),
    )
    .into_query();
    (backend.build(&upsert), rows)
}

/// One multi-row INSERT of `rows`, every column set; `None` for no rows.
fn insert_all<M, A>(
    backend: sea_orm::DbBackend,
    rows: impl IntoIterator<Item = M>,
) -> Option<sea_orm::Statement>
where
    M: IntoActiveModel<A>,
    A: ActiveModelTrait,
{
    let mut rows = rows
        .into_iter()
        .map(|row| row.into_active_model().reset_all())
        .peekable();
    rows.peek()?;
    Some(<A::Entity as EntityTrait>::insert_many(rows).build(backend))
}

/// Runs `statements` in order; the rows they changed, in all. On SQLite in one round trip to
/// the connection's thread: the statements joined into one string, their values in order
/// (SQLite binds each statement's `?` from where the one before stopped), so a batch's writes
/// cost one hand-off, not one per statement. Elsewhere one by one (PostgreSQL prepares one
/// statement at a time).
async fn execute_together<C: ConnectionTrait>(
    conn: &C,
    statements: Vec<sea_orm::Statement>,
) -> StoreResult<u64> {
    let backend = conn.get_database_backend();
    if backend != sea_orm::DbBackend::Sqlite {
        let mut changed = 0;
        for statement in statements {
            changed += conn.execute_raw(statement).await?.rows_affected();
        }
        return Ok(changed);
    }
    let mut sql = String::new();
    let mut values = Vec::new();
    for statement in statements {
        sql.push_str(&statement.sql);
        sql.push_str(";\n");
        values.extend(statement.values.map(|v| v.0).unwrap_or_default());
    }
    if sql.is_empty() {
        return Ok(0);
    }
    let together = sea_orm::Statement::from_sql_and_values(backend, sql, values);
    Ok(conn.execute_raw(together).await?.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::{PeriodChargeBegin, PeriodChargeSettle};
    use crate::ids::SubscriptionId;
    use crate::store::charges::{BeginChargeError, ChargeAttempt, NewCharge, ProcessorEvent};
    use crate::store::prefetch::fixture::{Shop, shop};
    use crate::store::subscriptions::Subscription;
    use crate::store::webhooks::WebhookEndpoint;

    const NOW: i64 = 1_700_000_000_000;

    /// `n` more subscriptions like the shop's, each due.
    async fn subscriptions(shop: &Shop, n: usize) -> Vec<Subscription> {
        let txn = shop.store.begin().await.expect("begin");
        let mut rows = Vec::new();
        for _ in 0..n {
            let mut row = shop.sub.clone();
            row.id = SubscriptionId::generate().into_string();
            txn.insert_subscription(row.clone()).await.expect("insert");
            rows.push(row);
        }
        txn.commit().await.expect("commit");
        rows
    }

    /// The begin of `sub`'s next period with a fee of `fee`, its row with the timer taken.
    fn begin(sub: &Subscription, fee: i64) -> PeriodChargeBegin {
        let mut row = sub.clone();
        row.due_at = None;
        PeriodChargeBegin {
            charge: NewCharge {
                account: crate::ids::AccountId::from_stored(sub.account_id.clone()),
                subscription_id: Some(sub.id.clone()),
                customer_id: sub.customer_id.clone(),
                payment_method_id: sub.default_payment_method_id.clone(),
                amount_cents: fee * 10,
                fee_cents: fee,
                purpose: "renewal",
                period_start: Some(sub.current_period_end),
                pending_change: None,
                now_ms: NOW,
            },
            row,
            events: Vec::new(),
        }
    }

    async fn available(shop: &Shop) -> (i64, i64) {
        let balance = shop
            .store
            .balance(&shop.account)
            .await
            .expect("balance")
            .expect("account");
        (balance.available_cents, balance.reserved_cents)
    }

    #[tokio::test]
    async fn a_batch_writes_every_row_in_one_unit_or_nothing_at_all() {
        let shop = shop(NOW).await;
        let subs = subscriptions(&shop, 3).await;
        let (before, _) = available(&shop).await;

        // A row changed since it was read: nothing of the batch is written.
        let mut stale: Vec<_> = subs.iter().map(|s| begin(s, 100)).collect();
        stale[1].row.version += 7;
        assert!(
            shop.store
                .begin_many(&stale)
                .await
                .expect("batch")
                .is_none()
        );
        // A balance short of the batch's fees: nothing either.
        let short: Vec<_> = subs.iter().map(|s| begin(s, before / 2)).collect();
        assert!(
            shop.store
                .begin_many(&short)
                .await
                .expect("batch")
                .is_none()
        );
        // A period that already has a live charge: nothing either.
        let taken = shop
            .store
            .begin_charge(begin(&subs[2], 100).charge)
            .await
            .expect("a live charge of the period");
        let with_taken: Vec<_> = subs.iter().map(|s| begin(s, 100)).collect();
        assert!(
            shop.store
                .begin_many(&with_taken)
                .await
                .expect("batch")
                .is_none()
        );
        assert_eq!(available(&shop).await, (before - 100, 100));
        for sub in &subs {
            let row = shop.store.subscription_by_id(&sub.id).await.expect("read");
            assert_eq!(
                row.as_ref(),
                Some(sub),
                "a refused batch changed {}",
                sub.id
            );
        }

        // Refused nothing: every row, one reservation of the sum.
        let whole: Vec<_> = subs[..2].iter().map(|s| begin(s, 100)).collect();
        let began = shop
            .store
            .begin_many(&whole)
            .await
            .expect("batch")
            .expect("written");
        assert_eq!(available(&shop).await, (before - 300, 300));
        for ((charge, row), sub) in began.iter().zip(&subs) {
            let stored = shop.store.charge_by_id(&charge.id).await.expect("read");
            assert_eq!(stored.as_ref(), Some(charge));
            assert_eq!(charge.subscription_id.as_deref(), Some(sub.id.as_str()));
            assert_eq!(charge.status, "pending");
            assert_eq!(row.version, sub.version + 1);
            assert_eq!(row.due_at, None);
            let stored = shop.store.subscription_by_id(&sub.id).await.expect("read");
            assert_eq!(stored.as_ref(), Some(row));
        }
        assert_ne!(taken.id, began[0].0.id);
        shop.remove();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renewals_beginning_at_once_are_refused_one_by_one_as_alone() {
        let shop = shop(NOW).await;
        let subs = subscriptions(&shop, 40).await;
        let (before, _) = available(&shop).await;
        // The balance covers 25 of the 40 fees.
        let fee = before / 25;
        let mut tasks = tokio::task::JoinSet::new();
        for sub in &subs {
            let (store, begin) = (shop.store.clone(), begin(sub, fee));
            tasks.spawn(async move { store.begin_period_charge(begin).await });
        }
        let (mut began, mut short) = (0, 0);
        while let Some(done) = tasks.join_next().await {
            match done.expect("task").expect("store") {
                Ok((charge, row)) => {
                    began += 1;
                    assert_eq!(row.version, 1);
                    assert_eq!(charge.fee_cents, fee);
                }
                Err(BeginChargeError::InsufficientBalance) => short += 1,
                Err(other) => panic!("unexpected refusal: {other}"),
            }
        }
        assert_eq!((began, short), (25, 15));
        assert_eq!(
            available(&shop).await,
            (before - 25 * fee, 25 * fee),
            "the reserved fees are exactly those of the charges begun"
        );
        shop.remove();
    }

    /// Events carried by begins (a resumption's) exist only with their charges: a refused
    /// batch writes none, a batch written whole writes each with its deliveries.
    #[tokio::test]
    async fn a_begins_events_are_written_with_its_charge_or_not_at_all() {
        let shop = shop(NOW).await;
        let subs = subscriptions(&shop, 3).await;
        let endpoint = WebhookEndpoint {
            id: "we_resumed".into(),
            account_id: shop.account.as_str().to_owned(),
            url: "https://example.com/hook".into(),
            secret: crate::store::Secret::from("whsec_x".to_owned()),
            events: r#"["subscription.resumed"]"#.into(),
            active: true,
            created_at: 0,
            updated_at: 0,
        };
        shop.store
            .insert_webhook_endpoint(endpoint, 10)
            .await
            .expect("endpoint");
        let (before, _) = available(&shop).await;
        let resuming = |sub: &Subscription, fee: i64| {
            let mut begin = begin(sub, fee);
            begin.events = vec![crate::events::subscription_event(
                sub,
                "subscription.resumed",
                None,
                NOW,
            )];
            begin
        };
        let short: Vec<_> = subs.iter().map(|s| resuming(s, before / 2)).collect();
        assert!(
            shop.store
                .begin_many(&short)
                .await
                .expect("batch")
                .is_none()
        );
        assert_eq!(count(&shop, "events", "1 = 1").await, 0);
        assert_eq!(count(&shop, "webhook_deliveries", "1 = 1").await, 0);

        let whole: Vec<_> = subs.iter().map(|s| resuming(s, 100)).collect();
        shop.store
            .begin_many(&whole)
            .await
            .expect("batch")
            .expect("written");
        assert_eq!(available(&shop).await, (before - 300, 300));
        let resumed = "type = 'subscription.resumed'";
        assert_eq!(count(&shop, "events", resumed).await, 3);
        let deliveries = "endpoint_id = 'we_resumed'";
        assert_eq!(count(&shop, "webhook_deliveries", deliveries).await, 3);
        shop.remove();
    }

    /// The settle of `charge` (pending) with `status`, the subscription's row saved as read.
    fn settle(sub: &Subscription, charge: &ChargeAttempt, status: &str) -> PeriodChargeSettle {
        let mut settled = charge.clone();
        settled.status = status.to_owned();
        settled.processor_status = Some(status.to_uppercase());
        settled.processor_transaction_id = Some(format!("tx-{}", charge.id));
        settled.updated_at = NOW;
        settled.finalized_at = Some(NOW);
        let event_type = format!("charge.{status}");
        PeriodChargeSettle {
            events: vec![crate::events::subscription_event(
                sub,
                &event_type,
                Some((&settled, "X")),
                NOW,
            )],
            event: Some(ProcessorEvent {
                checksum: format!("sum-{}", charge.id),
                account_id: sub.account_id.clone(),
                event_type: "transaction.updated".into(),
                transaction_id: settled.processor_transaction_id.clone(),
                reference: Some(charge.reference.clone()),
                status: settled.processor_status.clone(),
                body: "{}".into(),
                received_at: NOW,
                processed_at: None,
            }),
            charge: settled,
            drop_detached_addons: false,
            row: sub.clone(),
        }
    }

    /// The number of rows of `table` where `condition` holds.
    async fn count(shop: &Shop, table: &str, condition: &str) -> i64 {
        use sea_orm::ConnectionTrait;
        let conn = shop.store.conn();
        let sql = format!("SELECT COUNT(*) AS n FROM {table} WHERE {condition}");
        let row = conn
            .query_one_raw(sea_orm::Statement::from_string(
                conn.get_database_backend(),
                sql,
            ))
            .await
            .expect("count")
            .expect("a row");
        row.try_get::<i64>("", "n").expect("n")
    }

    #[tokio::test]
    async fn a_batch_of_outcomes_settles_each_pending_charge_once_with_its_money_and_events() {
        let shop = shop(NOW).await;
        let subs = subscriptions(&shop, 4).await;
        let endpoint = WebhookEndpoint {
            id: "we_batch".into(),
            account_id: shop.account.as_str().to_owned(),
            url: "https://example.com/hook".into(),
            secret: crate::store::Secret::from("whsec_x".to_owned()),
            events: r#"["charge.approved"]"#.into(),
            active: true,
            created_at: 0,
            updated_at: 0,
        };
        shop.store
            .insert_webhook_endpoint(endpoint, 10)
            .await
            .expect("endpoint");
        let mut charges = Vec::new();
        for (i, sub) in subs.iter().enumerate() {
            let charge = shop
                .store
                .begin_charge(begin(sub, 100 * (i as i64 + 1)).charge)
                .await
                .expect("charge");
            charges.push(charge);
        }
        let (before, reserved) = available(&shop).await;
        assert_eq!(reserved, 100 + 200 + 300 + 400);

        // A row changed since it was read: nothing of the batch is written.
        let mut stale: Vec<_> = (0..3)
            .map(|i| settle(&subs[i], &charges[i], "approved"))
            .collect();
        stale[2].row.version += 1;
        assert!(
            shop.store
                .settle_many(&stale)
                .await
                .expect("batch")
                .is_none()
        );
        assert_eq!(available(&shop).await, (before, reserved));
        let pending = "status = 'pending'";
        assert_eq!(count(&shop, "charge_attempts", pending).await, 4);

        // The fourth charge is settled alone first: a batch holding it is refused whole, and
        // writes nothing (its outcomes are then applied alone, each as its own unit).
        shop.store
            .settle_charge(&charges[3].id, "DECLINED", None, None, NOW)
            .await
            .expect("settle alone");
        let (before, _) = available(&shop).await;
        let mut batch = vec![
            settle(&subs[0], &charges[0], "approved"),
            settle(&subs[1], &charges[1], "declined"),
            settle(&subs[2], &charges[2], "approved"),
            settle(&subs[3], &charges[3], "approved"),
        ];
        let refused = shop.store.settle_many(&batch).await.expect("batch");
        assert!(
            refused.is_none(),
            "a charge settled before is not settled again"
        );
        assert_eq!(count(&shop, "charge_attempts", pending).await, 3);
        assert_eq!(available(&shop).await, (before, 100 + 200 + 300));
        assert_eq!(count(&shop, "events", "1 = 1").await, 0);
        assert_eq!(count(&shop, "processor_events", "1 = 1").await, 0);

        // The three still pending, together.
        batch.pop();
        let saved = shop
            .store
            .settle_many(&batch)
            .await
            .expect("batch")
            .expect("written");
        assert_eq!(saved.len(), 3);
        for i in 0..3 {
            let row = &saved[i];
            assert_eq!(row.version, subs[i].version + 1);
            let stored = shop.store.charge_by_id(&charges[i].id).await.expect("read");
            assert_eq!(stored.as_ref(), Some(&batch[i].charge));
        }
        let stored = shop.store.charge_by_id(&charges[3].id).await.expect("read");
        assert_eq!(stored.map(|c| c.status), Some("declined".to_owned()));
        // Fees: 100 and 300 captured, 200 given back; the fourth's went back before.
        assert_eq!(available(&shop).await, (before + 200, 0));
        assert_eq!(
            count(&shop, "balance_transactions", "kind = 'fee'").await,
            2
        );
        assert_eq!(count(&shop, "events", "1 = 1").await, 3);
        // One delivery per event the endpoint subscribes to.
        let deliveries = "endpoint_id = 'we_batch'";
        assert_eq!(count(&shop, "webhook_deliveries", deliveries).await, 2);
        assert_eq!(count(&shop, "processor_events", "1 = 1").await, 3);
        assert_eq!(count(&shop, "charge_attempts", pending).await, 0);
        shop.remove();
    }
}
