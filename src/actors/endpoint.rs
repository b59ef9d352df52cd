//! One actor per webhook endpoint. It owns the endpoint's timer and its in-flight attempts:
//! on `Wake` it takes the endpoint's due deliveries from the outbox (up to `CONCURRENCY` at
//! once), posts each from its own task, and records each outcome when the task reports back
//! (`Attempted`), scheduling the retry in the account's clock. A slow receiver therefore holds
//! up only its own actor's slots. The actor keeps no state the database does not have: a
//! restarted actor finds the same due rows, and at worst re-sends an attempt that was in flight
//! when it stopped.

use super::Runtime;
use super::tree::{ActorStats, KindView};
use crate::ids::{AccountId, DeliveryId, WebhookEndpointId};
use crate::store::webhooks::{AttemptVerdict, WebhookAttempt, WebhookDelivery};
use crate::webhooks::schedule::retry_delay;
use crate::webhooks::send::{self, AttemptResult};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;

/// Attempts in flight per endpoint.
pub const CONCURRENCY: usize = 16;

pub enum EndpointMsg {
    /// Look for due deliveries now.
    Wake,
    /// Reply once every delivery due now has been attempted and recorded.
    Flush(RpcReplyPort<()>),
    Attempted {
        delivery: Box<WebhookDelivery>,
        result: AttemptResult,
    },
    /// An attempt not made: the endpoint's shard was being handed over when it was to go out.
    Skipped { delivery_id: DeliveryId },
}

pub struct EndpointActor {
    pub(super) runtime: Runtime,
}

/// A live endpoint actor and its wake-up flag: a burst of events sends one `Wake`, not one
/// per event, since a queued `Wake` already finds every due row.
#[derive(Clone)]
pub struct EndpointHandle {
    pub(super) actor: ActorRef<EndpointMsg>,
    wake_queued: Arc<AtomicBool>,
}

pub struct EndpointState {
    id: WebhookEndpointId,
    wake_queued: Arc<AtomicBool>,
    /// What `/admin/actors` shows of this actor (its next retry).
    stats: Arc<ActorStats>,
    in_flight: HashSet<DeliveryId>,
    waiters: Vec<RpcReplyPort<()>>,
    timer: Option<JoinHandle<()>>,
}

impl Actor for EndpointActor {
    type Msg = EndpointMsg;
    type State = EndpointState;
    type Arguments = (WebhookEndpointId, Arc<AtomicBool>, Arc<ActorStats>);

    async fn pre_start(
        &self,
        _myself: ActorRef<EndpointMsg>,
        (id, wake_queued, stats): (WebhookEndpointId, Arc<AtomicBool>, Arc<ActorStats>),
    ) -> Result<EndpointState, ActorProcessingErr> {
        Ok(EndpointState {
            id,
            wake_queued,
            stats,
            in_flight: HashSet::new(),
            waiters: Vec::new(),
            timer: None,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<EndpointMsg>,
        state: &mut EndpointState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(timer) = state.timer.take() {
            timer.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<EndpointMsg>,
        msg: EndpointMsg,
        state: &mut EndpointState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            EndpointMsg::Wake => state.wake_queued.store(false, Ordering::Release),
            EndpointMsg::Flush(reply) => state.waiters.push(reply),
            EndpointMsg::Attempted { delivery, result } => {
                state.in_flight.remove(&delivery.id);
                let recorded = self.record(&delivery, result).await;
                state.stats.set_in_flight(state.in_flight.len());
                recorded?;
            }
            EndpointMsg::Skipped { delivery_id } => {
                state.in_flight.remove(&delivery_id);
                state.stats.set_in_flight(state.in_flight.len());
                // The shard moved with this attempt queued: its new owner is told now rather
                // than finding it at its next sweep.
                self.runtime.wake_endpoint(&state.id).await;
            }
        }
        self.pump(&myself, state).await
    }
}

impl EndpointActor {
    /// Starts what is due, replies to waiters when nothing due is left, and sets the timer for
    /// the next retry.
    async fn pump(
        &self,
        myself: &ActorRef<EndpointMsg>,
        state: &mut EndpointState,
    ) -> Result<(), ActorProcessingErr> {
        let store = self.runtime.store();
        let endpoint = match store.webhook_endpoint_by_id(&state.id).await? {
            Some(endpoint) if endpoint.active => endpoint,
            // Deleted or disabled: it gets nothing more; pending rows wait for re-enabling.
            _ => {
                state.waiters.drain(..).for_each(|w| drop(w.send(())));
                self.runtime.forget_endpoint(&state.id, myself.get_id());
                myself.stop(None);
                return Ok(());
            }
        };
        let account = &endpoint.account_id;
        let now = self.runtime.clock().now_ms(account).await?;
        // The account's mode decides which addresses its endpoints may reach (CONTRACT §9).
        let Some(owner) = self.runtime.account(account).await? else {
            // No account, nothing to send for (accounts are not deleted today).
            state.waiters.drain(..).for_each(|w| drop(w.send(())));
            return Ok(());
        };
        let client = self
            .runtime
            .webhook_clients()
            .for_account(owner.sandbox)
            .clone();
        let room = CONCURRENCY.saturating_sub(state.in_flight.len());
        if room > 0 {
            let due = store
                .due_deliveries(&state.id, now, (CONCURRENCY * 2) as u64)
                .await?;
            let fresh: Vec<WebhookDelivery> = due
                .into_iter()
                .filter(|d| !state.in_flight.contains(&d.id))
                .take(room)
                .collect();
            for delivery in fresh {
                // A shard given away stops sending at once; what was not sent, its new
                // owner sends.
                if !self.runtime.owns(state.id.as_str()) {
                    break;
                }
                let Some(body) = store.event_body(&delivery.event_id).await? else {
                    continue;
                };
                state.in_flight.insert(delivery.id.clone());
                state.stats.set_in_flight(state.in_flight.len());
                let (client, url, secret, me, runtime) = (
                    client.clone(),
                    endpoint.url.clone(),
                    endpoint.secret.clone(),
                    myself.clone(),
                    self.runtime.clone(),
                );
                tokio::spawn(async move {
                    // Checked again at the last moment: a node paused between queueing this
                    // attempt and sending it wakes without the shard, and its new owner sends.
                    if !runtime.owns(delivery.endpoint_id.as_str()) {
                        let _ = me.cast(EndpointMsg::Skipped {
                            delivery_id: delivery.id,
                        });
                        return;
                    }
                    let result = send::attempt(&client, &url, &secret, body).await;
                    let _ = me.cast(EndpointMsg::Attempted {
                        delivery: Box::new(delivery),
                        result,
                    });
                });
            }
        }
        if state.in_flight.is_empty() {
            state.waiters.drain(..).for_each(|w| drop(w.send(())));
        }
        if let Some(timer) = state.timer.take() {
            timer.abort();
        }
        let next = store.next_delivery_due_after(&state.id, now).await?;
        state.stats.set_next_due(next);
        if let Some(next) = next {
            let delay = Duration::from_millis(u64::try_from(next - now).unwrap_or(0));
            let me = myself.clone();
            state.timer = Some(tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = me.cast(EndpointMsg::Wake);
            }));
        }
        Ok(())
    }

    /// Records one attempt and decides the delivery's next step in the account's clock.
    async fn record(
        &self,
        delivery: &WebhookDelivery,
        result: AttemptResult,
    ) -> Result<(), ActorProcessingErr> {
        let account = &delivery.account_id;
        let now = self.runtime.clock().now_ms(account).await?;
        let made = u32::try_from(delivery.attempts).unwrap_or(0) + 1;
        let verdict = if result.delivered() {
            AttemptVerdict::Delivered
        } else {
            match retry_delay(made, rand::random::<f64>()) {
                Some(wait) => AttemptVerdict::RetryAt(now + wait.as_millis() as i64),
                None => AttemptVerdict::Failed,
            }
        };
        let outcome = match verdict {
            AttemptVerdict::Delivered => "delivered",
            AttemptVerdict::RetryAt(_) => "retrying",
            AttemptVerdict::Failed => "failed",
        };
        metrics::counter!("webhook_deliveries_total", "outcome" => outcome).increment(1);
        metrics::histogram!("webhook_attempt_duration_seconds")
            .record(result.latency_ms as f64 / 1000.0);
        let attempt = WebhookAttempt {
            id: crate::ids::AttemptId::generate(),
            delivery_id: delivery.id.clone(),
            endpoint_id: delivery.endpoint_id.clone(),
            account_id: delivery.account_id.clone(),
            attempted_at: result.attempted_at,
            status_code: result.status_code.map(i32::from),
            latency_ms: result.latency_ms,
            error: result.error,
        };
        record_surely(self.runtime.store(), delivery, attempt, verdict).await?;
        Ok(())
    }
}

/// How many times an attempt's record is written before the actor gives up on it.
const RECORD_TRIES: u32 = 6;

/// Writes an attempt's record, again on a database error: the attempt was sent, and a
/// delivery left pending for want of its record would be sent again by the next wake (the
/// receiver would hold the event twice with one attempt recorded). The error may hide a commit
/// that landed (the connection died after it): the attempt's id tells, and a second write of a
/// landed record changes nothing (the delivery is no longer pending, or the attempt's id is
/// taken and the write rolls back). A fenced write is not tried again: the shard's new owner
/// sends.
async fn record_surely(
    store: &crate::store::Store,
    delivery: &WebhookDelivery,
    attempt: WebhookAttempt,
    verdict: AttemptVerdict,
) -> Result<(), crate::store::StoreError> {
    let mut pause = Duration::from_millis(50);
    let mut tried = 1;
    loop {
        match store
            .record_attempt(delivery, attempt.clone(), verdict)
            .await
        {
            Ok(()) => return Ok(()),
            Err(err @ crate::store::StoreError::Fenced(_)) => return Err(err),
            Err(err) if tried >= RECORD_TRIES => return Err(err),
            Err(err) => {
                tracing::warn!(error = %err, delivery = %delivery.id, tried,
                    "an attempt's record failed; writing it again");
                if store.attempt_recorded(&attempt).await.unwrap_or(false) {
                    return Ok(());
                }
                tokio::time::sleep(pause).await;
                pause *= 2;
                tried += 1;
            }
        }
    }
}

/// How often every active endpoint is woken even without a signal: the safety net for a
/// missed signal and, at start, the recovery of deliveries left pending by a crash.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// How long a wake for another node keeps being tried while the endpoint's shard moves: a
/// handover (drain, release, acquire) ends well within it, a lapsed lease of a dead node too
/// with the default lease of 10 s.
const REMOTE_WAKE_PATIENCE: Duration = Duration::from_secs(15);

/// Wires the outbox signal to the endpoint actors and starts the sweep.
pub fn spawn_webhooks(runtime: Runtime) {
    let (sender, mut signals) = tokio::sync::mpsc::unbounded_channel();
    runtime.store().on_deliveries(sender);
    let handle = runtime.clone();
    handle.track(tokio::spawn(async move {
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        let mut gains = runtime.ownership().gains();
        loop {
            tokio::select! {
                Some(endpoint_id) = signals.recv() => runtime.wake_endpoint(&endpoint_id).await,
                _ = sweep.tick() => sweep_endpoints(&runtime).await,
                // A gained shard's endpoints may have deliveries its previous owner left.
                Ok(()) = gains.changed() => sweep_endpoints(&runtime).await,
            }
        }
    }));
}

/// Wakes every active endpoint of the shards this node holds.
async fn sweep_endpoints(runtime: &Runtime) {
    match runtime.store().active_webhook_endpoint_ids().await {
        Ok(ids) => {
            for (id, _) in ids.into_iter().filter(|(id, _)| runtime.owns(id.as_str())) {
                runtime.wake_endpoint(&id).await;
            }
        }
        Err(err) => tracing::warn!(error = %err, "webhook sweep failed"),
    }
}

impl Runtime {
    pub(crate) fn webhook_clients(&self) -> &crate::webhooks::send::Clients {
        &self.inner.webhook_clients
    }

    fn forget_endpoint(&self, id: &WebhookEndpointId, actor: ractor::ActorId) {
        self.inner.endpoints.forget(id.as_str(), actor, false);
    }

    /// The endpoint's live actor, spawned under its shard of the tree if it has none. The
    /// wake-coalescing flag outlives a respawn in `endpoint_wakes` and is reset by each spawn.
    async fn endpoint_actor(&self, id: &WebhookEndpointId) -> Option<EndpointHandle> {
        let wake_queued = Arc::clone(
            self.inner
                .endpoint_wakes
                .entry(id.clone())
                .or_insert_with(|| Arc::new(AtomicBool::new(false)))
                .value(),
        );
        let spawned = self
            .inner
            .endpoints
            .get_or_spawn(id.as_str(), |stats| {
                wake_queued.store(false, Ordering::Release);
                (
                    EndpointActor {
                        runtime: self.clone(),
                    },
                    (id.clone(), Arc::clone(&wake_queued), stats),
                )
            })
            .await;
        match spawned {
            Ok((actor, _)) => Some(EndpointHandle { actor, wake_queued }),
            Err(err) => {
                tracing::error!(error = %err, "could not spawn a webhook endpoint actor");
                None
            }
        }
    }

    /// Tells the endpoint's actor to look for due deliveries; in a cluster, the one on the
    /// node holding the endpoint's shard.
    pub async fn wake_endpoint(&self, id: &WebhookEndpointId) {
        if !self.owns(id.as_str()) {
            self.wake_remote(id);
            return;
        }
        if let Some(handle) = self.endpoint_actor(id).await
            && !handle.wake_queued.swap(true, Ordering::AcqRel)
            && handle.actor.cast(EndpointMsg::Wake).is_err()
        {
            handle.wake_queued.store(false, Ordering::Release);
        }
    }

    /// Stops the endpoint's actor (after a delete or a disable).
    pub fn stop_endpoint(&self, id: &WebhookEndpointId) {
        if let Some((actor, _)) = self.inner.endpoints.get(id.as_str()) {
            self.inner
                .endpoints
                .forget(id.as_str(), actor.get_id(), false);
            actor.stop(None);
        }
    }

    /// Wakes an endpoint held by another node, through that node. Wakes of one endpoint are
    /// coalesced: while one is on its way, later ones only ask for one more after it (the
    /// owner's actor reads every due row when it wakes).
    fn wake_remote(&self, id: &WebhookEndpointId) {
        use dashmap::mapref::entry::Entry;
        match self.inner.remote_wakes.entry(id.clone()) {
            Entry::Occupied(mut again) => {
                *again.get_mut() = true;
                return;
            }
            Entry::Vacant(slot) => {
                slot.insert(false);
            }
        }
        let runtime = self.clone();
        let id = id.clone();
        tokio::spawn(async move {
            loop {
                runtime.deliver_remote_wake(&id).await;
                let done = runtime
                    .inner
                    .remote_wakes
                    .remove_if(&id, |_, again| !*again)
                    .is_some();
                if done {
                    break;
                }
                if let Some(mut again) = runtime.inner.remote_wakes.get_mut(&id) {
                    *again = false;
                }
            }
        });
    }

    /// Delivers one wake to the node holding the endpoint's shard. While the shard moves
    /// (draining here, not yet trusted there) nobody can take it, and a wake given up then left
    /// a new event's delivery waiting for the owner's 30-second sweep: it is tried again, with
    /// backoff, for as long as a move takes (`REMOTE_WAKE_PATIENCE`), and taken here if the
    /// shard comes back to this node meanwhile.
    async fn deliver_remote_wake(&self, id: &WebhookEndpointId) {
        let deadline = tokio::time::Instant::now() + REMOTE_WAKE_PATIENCE;
        let mut pause = Duration::from_millis(50);
        loop {
            if self.owns(id.as_str()) {
                Box::pin(self.wake_endpoint(id)).await;
                return;
            }
            let Err(err) = self.endpoint_message(id, super::Message::Wake).await else {
                return;
            };
            if tokio::time::Instant::now() + pause > deadline {
                // The owner's sweep finds its due rows anyway.
                tracing::info!(endpoint = %id, error = %err, "a remote wake was not delivered; the owner's sweep will find its deliveries");
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Sends an endpoint's message to the node holding its shard.
    async fn endpoint_message(
        &self,
        id: &WebhookEndpointId,
        message: super::Message,
    ) -> Result<(), super::ActionError> {
        let shard = crate::store::ownership::shard_of(id.as_str());
        match self.forward(shard, id.as_str(), message).await? {
            super::Reply::Done => Ok(()),
            other => Err(super::unexpected(other)),
        }
    }

    /// Handles `Flush` of one endpoint held here.
    pub(super) async fn flush_endpoint(&self, id: &WebhookEndpointId) {
        if let Some(EndpointHandle { actor, .. }) = self.endpoint_actor(id).await {
            let _ = actor
                .call(EndpointMsg::Flush, Some(Duration::from_secs(20)))
                .await;
        }
    }

    /// Runs every delivery of `account` due by its clock's now and waits for their outcomes
    /// (the test clock's promise), each endpoint in parallel, bounded by one attempt timeout;
    /// an endpoint held by another node is flushed there.
    pub async fn flush_endpoints(&self, account: &AccountId) -> crate::store::StoreResult<()> {
        let ids = self.store().active_webhook_endpoint_ids().await?;
        let mut waits = tokio::task::JoinSet::new();
        for (id, _) in ids.into_iter().filter(|(_, owner)| owner == account) {
            if !self.owns(id.as_str()) {
                let runtime = self.clone();
                waits.spawn(async move {
                    if let Err(err) = runtime.endpoint_message(&id, super::Message::Flush).await {
                        tracing::warn!(endpoint = %id, error = %err, "flushing a remote endpoint failed");
                    }
                });
                continue;
            }
            if let Some(EndpointHandle { actor, .. }) = self.endpoint_actor(&id).await {
                waits.spawn(async move {
                    let _ = actor
                        .call(EndpointMsg::Flush, Some(Duration::from_secs(20)))
                        .await;
                });
            }
        }
        waits.join_all().await;
        Ok(())
    }
}
