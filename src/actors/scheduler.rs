//! The background loops: the timer scheduler and the pending-charge reconciler.
//!
//! Timers live in the indexed `due_at` column (in each account's clock). The scheduler keeps
//! in memory only the soon-due window: every `LOAD_EVERY` it reads the rows due within
//! `WINDOW` into a `DelayQueue` (56 bytes an entry), and actors arm the timers they set through
//! a channel, so a retry due in a second does not wait for the next load. When an entry expires
//! the subscription's actor gets a `Due` message, with bounded concurrency; the actor re-reads
//! the row, so a stale or doubled entry does nothing. "Due" means "not before": a burst that
//! takes minutes is still correct, and after a restart the first load arms everything that fell
//! due while the service was down. The reconciler asks the processor about charges pending for
//! too long (an event that never came, or a crash between recording a charge and posting it).

use super::Runtime;
use crate::ids::AccountId;
use crate::store::subscriptions::DueClaim;
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
const CONCURRENCY: usize = 64;
/// How long a loaded due row stays claimed by this process (PostgreSQL; see
/// `Store::due_timers_page`). A row still in the window when its claim ends is claimed again by
/// the next full rescan; a row of a process that died is loaded by another after this.
const CLAIM: Duration = Duration::from_secs(300);
/// A pending charge older than this is asked about.
const STALE_PENDING: Duration = Duration::from_secs(30);

/// A timer an actor set: the subscription and how long from now it is due.
pub struct Arm {
    pub subscription_id: String,
    pub delay: Duration,
}

/// Starts both loops; `ready` is set once the first load has armed every due timer.
pub fn spawn_background(
    runtime: Runtime,
    ready: Arc<AtomicBool>,
    arms: mpsc::UnboundedReceiver<Arm>,
) {
    runtime.track(tokio::spawn(schedule(runtime.clone(), ready, arms)));
    let reconciler = runtime.clone();
    runtime.track(tokio::spawn(async move {
        let runtime = reconciler;
        // At start nothing is in flight in this process: every pending charge is a leftover of
        // the previous one (perhaps posted, perhaps not), so ask about all of them at once.
        if let Err(err) = reconcile_once(&runtime, chrono::Utc::now().timestamp_millis() + 1).await
        {
            tracing::warn!(error = %err, "start-up reconciliation failed");
        }
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let before = chrono::Utc::now().timestamp_millis() - STALE_PENDING.as_millis() as i64;
            if let Err(err) = reconcile_once(&runtime, before).await {
                tracing::warn!(error = %err, "reconciler pass failed");
            }
        }
    }));
}

/// The soon-due window: subscription id → its queue entry.
struct Window {
    queue: DelayQueue<String>,
    keys: HashMap<String, delay_queue::Key>,
    /// Per account, the last (due_at, id) loaded: the next load reads only rows after it, so a
    /// burst of a million due rows is read once, not on every pass. Timers set earlier than the
    /// mark arrive through the arm channel; a full rescan every `FULL_RESCAN` catches the rest
    /// (a timer whose handling failed, for one).
    marks: HashMap<String, (i64, String)>,
    last_full: tokio::time::Instant,
}

impl Window {
    fn arm(&mut self, id: String, delay: Duration) {
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
    let mut window = Window {
        queue: DelayQueue::new(),
        keys: HashMap::new(),
        marks: HashMap::new(),
        last_full: tokio::time::Instant::now(),
    };
    let mut load = tokio::time::interval(LOAD_EVERY);
    metrics::gauge!("timer_queue_depth").set(0.0);
    loop {
        tokio::select! {
            Some(expired) = std::future::poll_fn(|cx| window.queue.poll_expired(cx)), if !window.queue.is_empty() => {
                let id = expired.into_inner();
                window.keys.remove(&id);
                metrics::gauge!("timer_queue_depth").set(window.queue.len() as f64);
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else { return };
                let runtime = runtime.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    metrics::counter!("timers_fired_total").increment(1);
                    if let Err(err) = runtime.due(&id).await {
                        tracing::warn!(subscription = %id, error = %err, "timer failed");
                    }
                });
            }
            Some(arm) = arms.recv() => {
                if arm.delay <= WINDOW {
                    window.arm(arm.subscription_id, arm.delay);
                    metrics::gauge!("timer_queue_depth").set(window.queue.len() as f64);
                }
            }
            _ = load.tick() => {
                if let Err(err) = load_window(&runtime, &mut window).await {
                    tracing::warn!(error = %err, "loading due timers failed");
                }
                ready.store(true, Ordering::Release);
            }
        }
    }
}

/// Arms every timer due within the window, per account in the account's clock, walking the
/// due rows in pages of `LOAD_BATCH` by (due_at, id) so that any number due at one instant is
/// loaded in one pass.
async fn load_window(runtime: &Runtime, window: &mut Window) -> anyhow::Result<()> {
    if window.last_full.elapsed() >= FULL_RESCAN {
        window.marks.clear();
        window.last_full = tokio::time::Instant::now();
    }
    for account in runtime.store().all_accounts().await? {
        let account_id = AccountId::from_stored(account.id.clone());
        let now = runtime.clock().now_ms(&account_id).await?;
        let horizon = now + WINDOW.as_millis() as i64;
        let wall = chrono::Utc::now().timestamp_millis();
        let claim = DueClaim {
            now_ms: wall,
            until_ms: wall + CLAIM.as_millis() as i64,
        };
        let mut after = window.marks.get(&account.id).cloned();
        loop {
            let page = runtime
                .store()
                .due_timers_page(&account_id, horizon, after.take(), LOAD_BATCH, claim)
                .await?;
            let full = page.len() as u64 == LOAD_BATCH;
            let last = page.last().map(|(id, due)| (*due, id.clone()));
            if let Some(last) = &last {
                window.marks.insert(account.id.clone(), last.clone());
            }
            for (id, due) in page {
                window.arm(
                    id,
                    Duration::from_millis(u64::try_from(due - now).unwrap_or(0)),
                );
            }
            if !full {
                break;
            }
            after = last;
        }
    }
    metrics::gauge!("timer_queue_depth").set(window.queue.len() as f64);
    Ok(())
}

/// Asks the processor about charges pending since before `before_ms` and applies its answer.
pub async fn reconcile_once(runtime: &Runtime, before_ms: i64) -> anyhow::Result<()> {
    for charge in runtime
        .store()
        .stale_pending_charges(before_ms, 10_000)
        .await?
    {
        let account_id = AccountId::from_stored(charge.account_id.clone());
        let Some(account) = runtime.store().account(&account_id).await? else {
            continue;
        };
        let creds = runtime.charger().credentials(&account)?;
        let client = runtime.charger().client();
        let found = match &charge.processor_transaction_id {
            Some(id) => client.get_transaction(&creds, id).await.ok(),
            None => client
                .find_transaction_by_reference(&creds, &charge.reference)
                .await
                .ok()
                .flatten(),
        };
        match (found, &charge.subscription_id) {
            (Some(tx), Some(sub)) if tx.is_final() => {
                runtime
                    .outcome(
                        sub,
                        &charge.id,
                        &tx.status,
                        tx.status_message.as_deref(),
                        Some(&tx.id),
                        None,
                    )
                    .await?;
            }
            (Some(tx), None) => {
                runtime.charger().apply(&charge, &tx).await?;
            }
            (None, _) => {
                // The processor never saw it (a crash before the post, or a lost request):
                // post it now under the same reference, which cannot double-charge.
                if let Ok(Some(tx)) = runtime.charger().submit(&account, &charge).await {
                    runtime
                        .store()
                        .record_processor_transaction(
                            &charge.id,
                            &tx.id,
                            &tx.status,
                            chrono::Utc::now().timestamp_millis(),
                        )
                        .await?;
                }
            }
            (Some(tx), Some(_)) => {
                // Still pending at the processor: note it, which also restarts the staleness
                // wait, so the charge is asked about again later rather than on every pass.
                let now = chrono::Utc::now().timestamp_millis();
                runtime
                    .store()
                    .record_processor_transaction(&charge.id, &tx.id, &tx.status, now)
                    .await?;
            }
        }
    }
    Ok(())
}
