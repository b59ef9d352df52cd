//! The background loops: the timer scheduler and the pending-charge reconciler.
//!
//! Timers live in the indexed `due_at` column (in each account's clock). The scheduler keeps
//! in memory only the soon-due window: every `LOAD_EVERY` it reads the rows due within
//! `WINDOW` into a `DelayQueue` (56 bytes an entry), and actors arm the timers they set through
//! a channel, so a retry due in a second does not wait for the next load. When an entry expires
//! the subscription's actor gets a `Due` message, with bounded concurrency; the actor re-reads
//! the row, so a stale or doubled entry does nothing. "Due" means "not before": a burst that
//! takes minutes is still correct, and after a restart the first load arms everything that fell
//! due while the service was down. The reconciler asks the processor about pending charges
//! whose outcome is unknown (when their recheck comes due, with backoff) or overdue (an event
//! that never came, a crash between recording a charge and posting it), and applies the answer
//! through the charges' owners (`outcomes`). A lookup that fails is an unknown answer, never
//! "the processor never saw it"; one charge that fails is logged and the pass goes on.

use super::Runtime;
use crate::domain::recheck::stale_after;
use crate::ids::{AccountId, SubscriptionId};
use crate::store::charges::ChargeAttempt;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::time::{DelayQueue, delay_queue};

/// How far ahead the scheduler holds timers in memory.
const WINDOW: Duration = Duration::from_secs(10);
const LOAD_EVERY: Duration = Duration::from_secs(2);
const LOAD_BATCH: u64 = 10_000;
const FULL_RESCAN: Duration = Duration::from_secs(30);
/// Renewals under way at once (read, decided, begun and posted; their outcomes wait under
/// `IN_FLIGHT`). A renewal's begin joins the next batch of the writer (`store::batch`), so this
/// is also the widest a batch of begins can be: at 64 the batches averaged 19 renewals and a
/// burst stopped at about 3,400 renewals/s with a fifth of the machine idle, every renewal
/// waiting its turn rather than the writer working (see benches/README.md, step 9).
pub const CONCURRENCY: usize = 256;

/// The timers this node's scheduler holds armed within its window: due now or in the next
/// seconds, not yet handed to their actors. Large while a burst of renewals runs; the
/// notices' worker holds its sends back meanwhile (decision 0084).
#[derive(Clone, Debug, Default)]
pub struct Backlog(Arc<std::sync::atomic::AtomicUsize>);

impl Backlog {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// The most expired timers whose renewals' reads are prefetched together.
const PREFETCH_BATCH: usize = 256;
/// Batches of expired timers being read or handed out at once: while one batch's renewals
/// wait for slots, the next one's reads are made.
const PREFETCHES: usize = 2;
/// Charges asked about at once in a reconciler pass: each is one or two processor calls that
/// may each take the client's whole timeout while the processor is down.
const RECONCILE_CONCURRENCY: usize = 16;
/// Charges a pass loads at most; the rest wait for the next pass.
const RECONCILE_BATCH: u64 = 10_000;

/// A timer an actor set: the subscription and how long from now it is due.
pub struct Arm {
    pub subscription_id: SubscriptionId,
    pub delay: Duration,
}

/// Starts both loops; `ready` is set once the first load has armed every due timer. The
/// reconciler runs a pass every `reconcile_every` (`Config::reconcile_interval_ms`). In a
/// cluster both work only on the shards this node holds, and start over on a shard it gains:
/// the scheduler loads the gained shard's timers from the start (a dead owner's due rows lie
/// before this node's marks), the reconciler asks about its pending charges at once.
pub fn spawn_background(
    runtime: Runtime,
    ready: Arc<AtomicBool>,
    arms: mpsc::UnboundedReceiver<Arm>,
    reconcile_every: Duration,
) {
    runtime.track(tokio::spawn(schedule(runtime.clone(), ready, arms)));
    let reconciler = runtime.clone();
    runtime.track(tokio::spawn(async move {
        let runtime = reconciler;
        let mut gains = runtime.ownership().gains();
        // At start every pending charge is a leftover of the previous process (perhaps posted,
        // perhaps not, and that process is gone), so ask about all of them at once. The same
        // for the charges of a shard taken over from another node, but those that node may be
        // posting right now (`reconcile_leftovers`).
        reconcile_leftovers(&runtime, Duration::ZERO, None).await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(reconcile_every) => {
                    let now = chrono::Utc::now().timestamp_millis();
                    if let Err(err) = reconcile_once(&runtime, now).await {
                        tracing::warn!(error = %err, "reconciler pass failed");
                    }
                    if let Err(err) = runtime.refunds().recheck_due(|id| runtime.owns(id)).await {
                        tracing::warn!(error = %err, "asking about pending refunds failed");
                    }
                }
                Ok(()) = gains.changed() => {
                    let posting = runtime.charger().posting_bound();
                    let gained = runtime.ownership().take_gained();
                    if !gained.is_empty() {
                        reconcile_leftovers(&runtime, posting, Some(&gained)).await;
                    }
                }
            }
        }
    }));
}

/// Asks about every pending charge of `shards` (all this node holds when `None`) but those
/// whose post may still be under way: written within `posting` (on a shard gained, `Charger::posting_bound`:
/// the shard's last owner, alive perhaps, may be posting it now, its post not at the processor
/// yet, so that a lookup would find nothing and the charge would be posted a second time
/// beside it), or being posted by this node now (`reconcile` leaves those out). Those are asked
/// about by the next passes once stale, as any other.
async fn reconcile_leftovers(runtime: &Runtime, posting: Duration, shards: Option<&[u16]>) {
    let now = chrono::Utc::now().timestamp_millis();
    match runtime
        .store()
        .stale_pending_charges(
            now + 1 - posting.as_millis() as i64,
            shards,
            RECONCILE_BATCH,
        )
        .await
    {
        Ok(charges) => {
            reconcile(runtime, charges).await;
        }
        Err(err) => tracing::warn!(error = %err, "reconciling left-over charges failed"),
    }
}

/// The soon-due window: subscription id → its queue entry.
struct Window {
    queue: DelayQueue<SubscriptionId>,
    keys: HashMap<SubscriptionId, delay_queue::Key>,
}

/// What the loader (`load_loop`) sends the timer loop.
enum Load {
    /// Due rows read: each subscription with the instant its timer falls due.
    Page(Vec<(SubscriptionId, tokio::time::Instant)>),
    /// A pass is over: every row it read has been sent.
    Done,
}

/// Where the loader's passes start.
struct Marks {
    /// Per account, the last (due_at, id) loaded: the next load reads only rows after it, so a
    /// burst of a million due rows is read once, not on every pass. Timers set earlier than the
    /// mark arrive through the arm channel, or (set on another node: a top-up's wake) as a
    /// rescan of their account from the start (`Runtime::wake_paused`); a full rescan every
    /// `FULL_RESCAN` catches the rest (a timer whose handling failed, for one).
    after: HashMap<AccountId, (i64, SubscriptionId)>,
    last_full: tokio::time::Instant,
}

impl Window {
    fn arm(&mut self, id: SubscriptionId, delay: Duration) {
        match self.keys.get(&id) {
            // Only ever move an entry earlier: a later `due_at` is found by the next load, and
            // an early wake-up re-reads the row and does nothing.
            Some(key) => {
                if self.queue.deadline(key) > tokio::time::Instant::now() + delay {
                    self.queue.reset(key, delay);
                }
            }
            None => {
                let key = self.queue.insert(id.clone(), delay);
                self.keys.insert(id, key);
            }
        }
    }
}

async fn schedule(
    runtime: Runtime,
    ready: Arc<AtomicBool>,
    mut arms: mpsc::UnboundedReceiver<Arm>,
) {
    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    // The batches being read and handed out; dropped (and so stopped) with the loop.
    let mut dispatching = tokio::task::JoinSet::new();
    let mut window = Window {
        queue: DelayQueue::new(),
        keys: HashMap::new(),
    };
    // The loader reads due rows in a task of its own, so that a pass over a million due rows
    // (the full rescan) never stops timers from firing; it stops with this loop.
    let (pages_tx, mut pages) = mpsc::channel(2);
    let mut loader = tokio::task::JoinSet::new();
    loader.spawn(load_loop(runtime.clone(), pages_tx));
    // The window's size, as a gauge and as the backlog the notices' worker reads.
    let depth = |window: &Window| {
        metrics::gauge!("timer_queue_depth").set(window.queue.len() as f64);
        runtime
            .inner
            .backlog
            .0
            .store(window.queue.len(), Ordering::Relaxed);
    };
    depth(&window);
    loop {
        tokio::select! {
            Some(expired) = std::future::poll_fn(|cx| window.queue.poll_expired(cx)), if !window.queue.is_empty() => {
                // Every timer expired by now, up to a batch, whose renewals' reads are made
                // together (`store::prefetch`).
                let mut batch = vec![expired.into_inner()];
                while batch.len() < PREFETCH_BATCH {
                    let next = std::future::poll_fn(|cx| {
                        std::task::Poll::Ready(match window.queue.poll_expired(cx) {
                            std::task::Poll::Ready(Some(expired)) => Some(expired.into_inner()),
                            _ => None,
                        })
                    })
                    .await;
                    let Some(id) = next else { break };
                    batch.push(id);
                }
                for id in &batch {
                    window.keys.remove(id);
                }
                depth(&window);
                // A shard given away since the timer was loaded: its new owner loads it.
                batch.retain(|id| runtime.owns(id.as_str()));
                // One batch's reads overlap the previous batch's renewals: the loop waits
                // only when `PREFETCHES` batches are already being read or handed out.
                while dispatching.try_join_next().is_some() {}
                if dispatching.len() >= PREFETCHES {
                    dispatching.join_next().await;
                }
                dispatching.spawn(fire(runtime.clone(), Arc::clone(&slots), batch));
            }
            Some(arm) = arms.recv() => {
                if arm.delay <= WINDOW {
                    window.arm(arm.subscription_id, arm.delay);
                    depth(&window);
                }
            }
            Some(load) = pages.recv() => match load {
                Load::Page(rows) => {
                    let now = tokio::time::Instant::now();
                    for (id, at) in rows {
                        window.arm(id, at.saturating_duration_since(now));
                    }
                    depth(&window);
                }
                Load::Done => ready.store(true, Ordering::Release),
            },
        }
    }
}

/// Loads the due rows every `LOAD_EVERY`, and at once when this node gains shards (from the
/// start: the gained shards' due rows may lie before the marks), sending them to the timer
/// loop through `pages`.
async fn load_loop(runtime: Runtime, pages: mpsc::Sender<Load>) {
    let mut marks = Marks {
        after: HashMap::new(),
        last_full: tokio::time::Instant::now(),
    };
    let mut tick = tokio::time::interval(LOAD_EVERY);
    let mut gains = runtime.ownership().gains();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Ok(()) = gains.changed() => marks.after.clear(),
            // Timers set behind the marks (a top-up's wake on another node): from the start.
            () = runtime.inner.rescan.notified() => {
                for account in runtime.take_rescans() {
                    marks.after.remove(&account);
                }
            }
        }
        if let Err(err) = load_window(&runtime, &mut marks, &pages).await {
            tracing::warn!(error = %err, "loading due timers failed");
        }
        if pages.send(Load::Done).await.is_err() {
            return;
        }
    }
}

/// Reads the renewals of `batch` together (`store::prefetch`), then hands each to its actor
/// as one of the `CONCURRENCY` renewals under way.
async fn fire(runtime: Runtime, slots: Arc<Semaphore>, batch: Vec<SubscriptionId>) {
    // A lone timer's actor reads for itself: seven queries for one would be more.
    let prefetched = if batch.len() > 1 {
        let started = std::time::Instant::now();
        let snapshots = runtime.store().due_snapshots(&batch).await;
        metrics::histogram!("renewal_prefetch_seconds").record(started.elapsed().as_secs_f64());
        snapshots
    } else {
        Ok(HashMap::new())
    };
    let mut snapshots = match prefetched {
        Ok(snapshots) => snapshots,
        Err(err) => {
            // Each actor reads for itself.
            tracing::warn!(error = %err, "prefetching due renewals failed");
            HashMap::new()
        }
    };
    for id in batch {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let runtime = runtime.clone();
        let snapshot = snapshots.remove(&id);
        tokio::spawn(async move {
            let _permit = permit;
            metrics::counter!("timers_fired_total").increment(1);
            let result = match snapshot {
                Some(snapshot) => runtime.due_prefetched(Arc::new(snapshot)).await,
                None => runtime.due(&id).await,
            };
            if let Err(err) = result {
                tracing::warn!(subscription = %id, error = %err, "timer failed");
            }
        });
    }
}

/// Sends every timer due within the window, per account in the account's clock, walking the
/// due rows in pages of `LOAD_BATCH` by (due_at, id) so that any number due at one instant is
/// loaded in one pass.
async fn load_window(
    runtime: &Runtime,
    marks: &mut Marks,
    pages: &mpsc::Sender<Load>,
) -> anyhow::Result<()> {
    if marks.last_full.elapsed() >= FULL_RESCAN {
        marks.after.clear();
        marks.last_full = tokio::time::Instant::now();
    }
    let ownership = runtime.ownership();
    let held = (!ownership.is_single()).then(|| ownership.held_shards());
    if held.as_ref().is_some_and(Vec::is_empty) {
        return Ok(());
    }
    for account in runtime.store().all_accounts().await? {
        let account_id = &account.id;
        let now = runtime.clock().now_ms(account_id).await?;
        let read_at = tokio::time::Instant::now();
        let horizon = now + WINDOW.as_millis() as i64;
        let mut after = marks.after.get(&account.id).cloned();
        loop {
            let page = runtime
                .store()
                .due_timers_page(
                    account_id,
                    horizon,
                    after.take(),
                    LOAD_BATCH,
                    held.as_deref(),
                )
                .await?;
            let full = page.len() as u64 == LOAD_BATCH;
            let last = page.last().map(|(id, due)| (*due, id.clone()));
            if let Some(last) = &last {
                marks.after.insert(account.id.clone(), last.clone());
            }
            let rows = page
                .into_iter()
                .map(|(id, due)| {
                    let delay = Duration::from_millis(u64::try_from(due - now).unwrap_or(0));
                    (id, read_at + delay)
                })
                .collect();
            if pages.send(Load::Page(rows)).await.is_err() {
                return Ok(());
            }
            if !full {
                break;
            }
            after = last;
        }
    }
    Ok(())
}

/// One reconciler pass at `now_ms` (real time): asks the processor about every pending charge
/// whose recheck is due, or that was posted `stale_after` ago and never heard of, and applies
/// the answers. Returns how many charges could not be handled (each logged and asked about
/// again later); only failing to load the charges fails the pass.
pub async fn reconcile_once(runtime: &Runtime, now_ms: i64) -> anyhow::Result<usize> {
    // Never sooner than its post may still be under way (see `reconcile_leftovers`).
    let stale = stale_after(runtime.charger().recheck_base())
        .max(runtime.charger().posting_bound())
        .as_millis() as i64;
    let charges = runtime
        .store()
        .charges_due_for_recheck(now_ms, now_ms - stale, RECONCILE_BATCH)
        .await?;
    Ok(reconcile(runtime, charges).await)
}

/// Rechecks `charges` of the shards this node holds (a subscription's charge belongs to the
/// subscription's shard, a checkout's to its own id's), a few at a time, but none this node is
/// posting right now (its post's answer settles it, or schedules its recheck); a failure of
/// one never stops the others.
async fn reconcile(runtime: &Runtime, mut charges: Vec<ChargeAttempt>) -> usize {
    charges.retain(|c| {
        runtime.owns(
            c.subscription_id
                .as_ref()
                .map_or(c.id.as_str(), SubscriptionId::as_str),
        ) && !runtime.charger().is_posting(&c.id)
    });
    let slots = Arc::new(Semaphore::new(RECONCILE_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for charge in charges {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            break;
        };
        let runtime = runtime.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let failed = recheck_one(&runtime, &charge).await.err();
            if let Some(err) = &failed {
                tracing::error!(charge = %charge.id, error = %err, "reconciling a charge failed; it stays pending and is asked about again later");
                // Backoff for a charge whose answer cannot be applied, too: not every pass.
                let now = chrono::Utc::now().timestamp_millis();
                let base = runtime.charger().recheck_base();
                let reason = format!("reconciling failed: {err}");
                let _ = runtime
                    .store()
                    .schedule_recheck(&charge, &reason, base, now)
                    .await;
            }
            failed.is_some()
        });
    }
    let mut failures = 0;
    while let Some(joined) = tasks.join_next().await {
        // A panicking recheck counts as a failure; the others carry on.
        if joined.unwrap_or(true) {
            failures += 1;
        }
    }
    failures
}

async fn recheck_one(runtime: &Runtime, charge: &ChargeAttempt) -> anyhow::Result<()> {
    let account_id = &charge.account_id;
    let Some(account) = runtime.store().account(account_id).await? else {
        anyhow::bail!("the charge's account is gone");
    };
    let outcome = runtime.recheck_charge(&account, charge).await?;
    tracing::debug!(charge = %charge.id, outcome = outcome.name(), "charge reconciled");
    Ok(())
}
