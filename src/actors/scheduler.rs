//! The background loops: the timer scheduler and the pending-charge reconciler.
//!
//! The scheduler reads, per account and in the account's clock, the subscriptions whose
//! `due_at` has passed (an indexed column) and sends each a `Due` message, with bounded
//! concurrency. "Due" means "not before": a burst that takes minutes is still correct, and
//! after a restart the first pass runs everything that fell due while the service was down.
//! The reconciler asks the processor about charges pending for too long (an event that never
//! came, or a crash between recording a charge and posting it).

use super::Runtime;
use crate::ids::AccountId;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

const TICK: Duration = Duration::from_millis(250);
const BATCH: u64 = 1000;
const CONCURRENCY: usize = 64;
/// A pending charge older than this is asked about.
const STALE_PENDING: Duration = Duration::from_secs(30);

/// Starts both loops; `ready` is set once the first scheduler pass (recovery) has run.
pub fn spawn_background(runtime: Runtime, ready: Arc<AtomicBool>) {
    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    let scheduler = runtime.clone();
    tokio::spawn(async move {
        loop {
            if let Err(err) = run_due_once(&scheduler, &slots).await {
                tracing::warn!(error = %err, "scheduler pass failed");
            }
            ready.store(true, Ordering::Release);
            tokio::time::sleep(TICK).await;
        }
    });
    tokio::spawn(async move {
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
    });
}

/// One pass: every due subscription of every account gets a `Due` message.
pub async fn run_due_once(runtime: &Runtime, slots: &Arc<Semaphore>) -> anyhow::Result<()> {
    for account in runtime.store().all_accounts().await? {
        let account_id = AccountId::from_stored(account.id.clone());
        let now = runtime.clock().now_ms(&account_id).await?;
        let due = runtime
            .store()
            .due_subscriptions(&account_id, now, BATCH)
            .await?;
        let mut tasks = Vec::with_capacity(due.len());
        for sub in due {
            let permit = Arc::clone(slots).acquire_owned().await?;
            let runtime = runtime.clone();
            tasks.push(tokio::spawn(async move {
                let _permit = permit;
                metrics::counter!("renewals_due_total").increment(1);
                if let Err(err) = runtime.due(&sub.id).await {
                    tracing::warn!(subscription = %sub.id, error = %err, "timer failed");
                }
            }));
        }
        for task in tasks {
            let _ = task.await;
        }
    }
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
            _ => {
                runtime
                    .store()
                    .record_processor_transaction(
                        &charge.id,
                        charge
                            .processor_transaction_id
                            .as_deref()
                            .unwrap_or_default(),
                        charge.processor_status.as_deref().unwrap_or("PENDING"),
                        chrono::Utc::now().timestamp_millis(),
                    )
                    .await?;
            }
        }
    }
    Ok(())
}
