//! The actor runtime: one ractor actor per subscription, activated on demand and stopped when
//! idle, under the sharded supervision tree (`tree`), which restarts nothing eagerly: a failed
//! actor is dropped from its kind's registry and the next message respawns it from the
//! database, which is the durable state.
//!
//! Handlers and the ingress never touch a subscription themselves: they send a message to its
//! actor and await the reply, so every change of one subscription is serialised.

mod endpoint;
pub mod forward;
mod ingress;
mod outcomes;
mod scheduler;
pub mod subscription;
pub mod tree;

use crate::actors::forward::{Message, Reply};
use crate::charges::Charger;
use crate::clock::Clock;
use crate::ids::{AccountId, PlanId, SubscriptionId, WebhookEndpointId};
use crate::store::charges::{ChargeAttempt, ProcessorEvent};
use crate::store::subscriptions::Subscription;
use crate::store::{Store, StoreError};
use ractor::{ActorRef, RpcReplyPort};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tree::{ActorStats, KindRegistry, KindView, Tree};

pub use endpoint::spawn_webhooks;
pub use scheduler::CONCURRENCY as RENEWALS_AT_ONCE;
pub use scheduler::{Arm, Backlog, spawn_background};
use subscription::SubscriptionActor;
pub use subscription::in_flight::InFlight;
pub use subscription::messages::{ActionError, ActionOutcome, Command, Request, SubscriptionMsg};

/// How long a caller waits for an actor's reply.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

struct Inner {
    /// Timers set by actors, for the scheduler's in-memory window.
    arms: tokio::sync::mpsc::UnboundedSender<Arm>,
    store: Store,
    charger: Charger,
    clock: Clock,
    /// Refunds and their rechecks (with the charger's client, on the same clock).
    refunds: crate::refunds::Refunds,
    tree: Tree,
    subscriptions: Arc<KindRegistry<SubscriptionMsg>>,
    endpoints: Arc<KindRegistry<endpoint::EndpointMsg>>,
    /// Endpoints of other nodes with a wake on its way, and whether another was asked for
    /// meanwhile (`Runtime::wake_remote`).
    remote_wakes: dashmap::DashMap<WebhookEndpointId, bool>,
    /// Each endpoint's wake-coalescing flag (see `endpoint::EndpointHandle`).
    endpoint_wakes: dashmap::DashMap<WebhookEndpointId, Arc<std::sync::atomic::AtomicBool>>,
    /// The period charges out at the processor, their slots and the rows they began on.
    in_flight: InFlight,
    /// The guarded HTTP clients of webhook deliveries, per account mode (15 s timeout, no
    /// redirects, addresses checked when connecting).
    webhook_clients: crate::webhooks::send::Clients,
    /// Accounts as actors read them (see `Runtime::account`).
    accounts: dashmap::DashMap<AccountId, (Arc<crate::store::accounts::Account>, Instant)>,
    /// A subscription actor that has handled nothing for this long stops (the next message
    /// respawns it). A renewal's actor is needed for its charge's outcome, a fraction of a
    /// second later, and then not for a month: it stops once that outcome is applied, and
    /// this bounds the rest. `Config::actor_idle_secs`, 5 s by default.
    idle: Duration,
    /// The background loops (scheduler, reconciler, webhook signals), stopped with the service.
    loops: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// What this node holds (the store's, shared).
    ownership: Arc<crate::store::ownership::Ownership>,
    /// In a cluster, the way to other nodes' actors.
    forwarder: Option<crate::actors::forward::Forwarder>,
    /// Accounts whose due rows the scheduler is to load again from the start (their timers
    /// were set behind its marks: `Runtime::wake_paused`), and the signal that some wait.
    rescans: std::sync::Mutex<std::collections::BTreeSet<AccountId>>,
    rescan: tokio::sync::Notify,
    /// The renewals the scheduler has armed and not yet handed out (`scheduler::Backlog`).
    backlog: scheduler::Backlog,
}

/// The handle every part of the service uses to reach subscription actors.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl Runtime {
    /// Starts the supervisor; the receiver goes to `spawn_background`.
    pub async fn start(
        store: Store,
        charger: Charger,
        idle: Duration,
        webhook_clients: crate::webhooks::send::Clients,
        forwarder: Option<crate::actors::forward::Forwarder>,
    ) -> anyhow::Result<(Self, tokio::sync::mpsc::UnboundedReceiver<Arm>)> {
        let tree = Tree::start().await?;
        let subscriptions = tree.register::<SubscriptionMsg>("subscription");
        let endpoints = tree.register::<endpoint::EndpointMsg>("webhook_endpoint");
        let (arms, receiver) = tokio::sync::mpsc::unbounded_channel();
        let store_ownership = &Arc::clone(store.ownership());
        let clock = Clock::new(store.clone());
        let inner = Arc::new(Inner {
            arms,
            refunds: crate::refunds::Refunds::new(charger.clone(), clock.clone()),
            clock,
            store,
            charger,
            tree,
            subscriptions,
            endpoints,
            endpoint_wakes: dashmap::DashMap::new(),
            remote_wakes: dashmap::DashMap::new(),
            in_flight: InFlight::new(Arc::clone(store_ownership)),
            webhook_clients,
            accounts: dashmap::DashMap::new(),
            idle,
            loops: std::sync::Mutex::new(Vec::new()),
            ownership: Arc::clone(store_ownership),
            forwarder,
            rescans: std::sync::Mutex::new(std::collections::BTreeSet::new()),
            rescan: tokio::sync::Notify::new(),
            backlog: scheduler::Backlog::default(),
        });
        Ok((Self { inner }, receiver))
    }

    /// The account, read at most every 5 s: a renewal needs it three times (its charge, its
    /// event's checksum at the ingress, its outcome). Callers use only what is fixed when an
    /// account is created (fee schedule, dunning days, processor keys and secrets), never its
    /// balance, which moves and is only ever changed by a conditional `UPDATE`.
    pub async fn account(
        &self,
        id: &AccountId,
    ) -> crate::store::StoreResult<Option<Arc<crate::store::accounts::Account>>> {
        const TTL: Duration = Duration::from_secs(5);
        if let Some(entry) = self.inner.accounts.get(id)
            && entry.1.elapsed() < TTL
        {
            return Ok(Some(Arc::clone(&entry.0)));
        }
        let Some(account) = self.store().account(id).await? else {
            return Ok(None);
        };
        let account = Arc::new(account);
        self.inner
            .accounts
            .insert(id.clone(), (Arc::clone(&account), Instant::now()));
        Ok(Some(account))
    }

    /// Tells the scheduler about a subscription's (new) due time, in its account's clock.
    pub fn arm(&self, subscription: &Subscription, now_ms: i64) {
        if let Some((_, stats)) = self.inner.subscriptions.get(subscription.id.as_str()) {
            stats.set_next_due(subscription.due_at);
        }
        if let Some(due) = subscription.due_at {
            let delay = Duration::from_millis(u64::try_from(due - now_ms).unwrap_or(0));
            let _ = self.inner.arms.send(Arm {
                subscription_id: subscription.id.clone(),
                delay,
            });
        }
    }

    /// Tells the scheduler that subscription `id` is due at `due_ms` (account clock, `now_ms`).
    /// A subscription of another node's shard that is due already gets its `Due` there now
    /// (that node's scheduler would find a timer set behind its marks only at its next full
    /// rescan); a later one is loaded by that node's scheduler when it comes near.
    pub fn arm_at(&self, id: &SubscriptionId, due_ms: i64, now_ms: i64) {
        if !self.owns(id.as_str()) {
            if due_ms <= now_ms {
                let runtime = self.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    if let Err(err) = runtime.due(&id).await {
                        tracing::warn!(subscription = %id, error = %err, "a remote timer was not delivered; its node finds it at its next full rescan");
                    }
                });
            }
            return;
        }
        let delay = Duration::from_millis(u64::try_from(due_ms - now_ms).unwrap_or(0));
        let _ = self.inner.arms.send(Arm {
            subscription_id: id.clone(),
            delay,
        });
    }

    /// A top-up set the timers of `account`'s subscriptions `woken` (paused for want of
    /// balance) to `due_ms` in its transaction (account clock, `now_ms`). This node's own are
    /// armed here. The others' rows carry their timers, which their owners' schedulers find:
    /// each other node is told once (`Broadcast::Timers`) to load the account's due rows now,
    /// rather than one internal call per subscription (a hundred thousand woken would be as
    /// many calls at once). A node that misses the message finds them at its next full rescan.
    pub fn wake_paused(
        &self,
        account: &AccountId,
        woken: &[SubscriptionId],
        due_ms: i64,
        now_ms: i64,
    ) {
        let mut elsewhere = false;
        for id in woken {
            if self.owns(id.as_str()) {
                self.arm_at(id, due_ms, now_ms);
            } else {
                elsewhere = true;
            }
        }
        let Some(forwarder) = self.inner.forwarder.clone().filter(|_| elsewhere) else {
            return;
        };
        let change = crate::actors::forward::Broadcast::Timers {
            account_id: account.clone(),
        };
        // After the top-up committed and whatever its client does: the timers are in the rows.
        tokio::spawn(async move {
            if let Err(err) = forwarder.broadcast(&change).await {
                tracing::warn!(error = %err, "could not tell the other nodes of woken timers; they find them at their next full rescan");
            }
        });
    }

    /// Has the scheduler load `account`'s due rows again from the start, at once.
    fn rescan(&self, account: &AccountId) {
        if let Ok(mut rescans) = self.inner.rescans.lock() {
            rescans.insert(account.clone());
        }
        self.inner.rescan.notify_one();
    }

    /// The accounts whose due rows are to be loaded again from the start.
    fn take_rescans(&self) -> std::collections::BTreeSet<AccountId> {
        self.inner
            .rescans
            .lock()
            .map(|mut rescans| std::mem::take(&mut *rescans))
            .unwrap_or_default()
    }

    /// How long a subscription actor that handles nothing lives (`Config::actor_idle_secs`).
    fn idle(&self) -> Duration {
        self.inner.idle
    }

    /// The registry of subscription actors, by subscription id.
    fn subscriptions(&self) -> &KindRegistry<SubscriptionMsg> {
        &self.inner.subscriptions
    }

    /// The period charges out at the processor (`subscription::in_flight`).
    pub fn in_flight(&self) -> &InFlight {
        &self.inner.in_flight
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// How many renewals this node's scheduler holds due or about to be (a burst's size).
    pub fn backlog(&self) -> scheduler::Backlog {
        self.inner.backlog.clone()
    }

    pub fn charger(&self) -> &Charger {
        &self.inner.charger
    }

    pub fn refunds(&self) -> &crate::refunds::Refunds {
        &self.inner.refunds
    }

    /// Keeps a background loop's handle so that `stop` ends it.
    pub(crate) fn track(&self, handle: tokio::task::JoinHandle<()>) {
        if let Ok(mut loops) = self.inner.loops.lock() {
            loops.push(handle);
        }
    }

    /// Stops the background loops and every actor (the service is shutting down). Another
    /// service started later in the same process (tests, benchmarks) then shares nothing with
    /// this one: no timer of this one fires, no actor name stays registered.
    pub async fn stop(&self) {
        let loops = self
            .inner
            .loops
            .lock()
            .map(|mut loops| std::mem::take(&mut *loops))
            .unwrap_or_default();
        for handle in loops {
            handle.abort();
        }
        self.inner.tree.stop().await;
    }

    /// The supervision tree, for introspection and for registering other kinds of actor.
    pub fn tree(&self) -> &Tree {
        &self.inner.tree
    }

    /// The live actor of `id`, spawned under its shard if it has none (one per subscription:
    /// the registry's per-shard spawn lock sees to it).
    async fn actor(
        &self,
        id: &SubscriptionId,
    ) -> Result<(ActorRef<SubscriptionMsg>, Arc<ActorStats>), ActionError> {
        self.inner
            .subscriptions
            .get_or_spawn(id.as_str(), |stats| {
                (
                    SubscriptionActor {
                        runtime: self.clone(),
                    },
                    (id.clone(), stats),
                )
            })
            .await
            .map_err(|err| {
                tracing::error!(error = %err, "could not spawn a subscription actor");
                ActionError::Unavailable
            })
    }

    /// Sends a message built by `build` and awaits the reply. When the actor stopped before
    /// handling it (the message was never processed: its reply port was dropped unsent), the
    /// actor is respawned and the message sent again; a timeout is not retried, since the
    /// first message may still be running. The actor handles it inside the caller's span.
    async fn call<T: Send + 'static>(
        &self,
        id: &SubscriptionId,
        build: impl Fn(RpcReplyPort<Result<T, ActionError>>) -> Request,
    ) -> Result<T, ActionError> {
        let span = tracing::Span::current();
        let message = |reply| SubscriptionMsg::Request(build(reply), span.clone());
        for _ in 0..3 {
            let (actor, stats) = self.actor(id).await?;
            stats.enqueued();
            match actor.call(&message, Some(CALL_TIMEOUT)).await {
                Ok(ractor::rpc::CallResult::Success(result)) => return result,
                Ok(ractor::rpc::CallResult::Timeout) => return Err(ActionError::Unavailable),
                Ok(ractor::rpc::CallResult::SenderError) | Err(_) => {
                    stats.begin();
                    self.inner
                        .subscriptions
                        .forget(id.as_str(), actor.get_id(), false);
                }
            }
        }
        Err(ActionError::Unavailable)
    }

    pub async fn act(
        &self,
        id: &SubscriptionId,
        command: Command,
    ) -> Result<ActionOutcome, ActionError> {
        if let Some(shard) = self.elsewhere(id.as_str()) {
            return match self
                .forward(shard, id.as_str(), Message::Act { command })
                .await?
            {
                Reply::Action(outcome) => Ok(*outcome),
                other => Err(unexpected(other)),
            };
        }
        self.call(id, |reply| Request::Act(command.clone(), reply))
            .await
    }

    /// What changing to `plan_id` would charge now, priced at `at` (`None`: now).
    pub async fn preview(
        &self,
        id: &SubscriptionId,
        plan_id: &PlanId,
        quantity: Option<i64>,
        at: Option<i64>,
    ) -> Result<i64, ActionError> {
        if let Some(shard) = self.elsewhere(id.as_str()) {
            let message = Message::Preview {
                plan_id: plan_id.clone(),
                quantity,
                at,
            };
            return match self.forward(shard, id.as_str(), message).await? {
                Reply::Amount(amount) => Ok(amount),
                other => Err(unexpected(other)),
            };
        }
        self.call(id, |reply| Request::Preview {
            plan_id: plan_id.clone(),
            quantity,
            at,
            reply,
        })
        .await
    }

    pub async fn due(&self, id: &SubscriptionId) -> Result<(), ActionError> {
        if let Some(shard) = self.elsewhere(id.as_str()) {
            return match self.forward(shard, id.as_str(), Message::Due).await? {
                Reply::Done => Ok(()),
                other => Err(unexpected(other)),
            };
        }
        self.call(id, Request::Due).await
    }

    /// `due`, with the renewal's reads prefetched for a batch of timers (`store::prefetch`).
    pub async fn due_prefetched(
        &self,
        snapshot: Arc<crate::store::prefetch::DueSnapshot>,
    ) -> Result<(), ActionError> {
        let id = &snapshot.sub.id;
        if self.elsewhere(id.as_str()).is_some() {
            return self.due(id).await;
        }
        self.call(id, |reply| {
            Request::DuePrefetched(Arc::clone(&snapshot), reply)
        })
        .await
    }

    pub async fn outcome(
        &self,
        subscription_id: &SubscriptionId,
        charge: &ChargeAttempt,
        raw_status: &str,
        message: Option<&str>,
        transaction_id: Option<&str>,
        event: Option<ProcessorEvent>,
    ) -> Result<(), ActionError> {
        if let Some(shard) = self.elsewhere(subscription_id.as_str()) {
            let message = Message::Outcome {
                charge_id: charge.id.clone(),
                raw_status: raw_status.to_owned(),
                message: message.map(str::to_owned),
                transaction_id: transaction_id.map(str::to_owned),
                event: event.map(Box::new),
            };
            return match self
                .forward(shard, subscription_id.as_str(), message)
                .await?
            {
                Reply::Done => Ok(()),
                other => Err(unexpected(other)),
            };
        }
        self.call(subscription_id, |reply| Request::Outcome {
            charge_id: charge.id.clone(),
            raw_status: raw_status.to_owned(),
            message: message.map(str::to_owned),
            transaction_id: transaction_id.map(str::to_owned),
            event: event.clone().map(Box::new),
            charge: Some(Box::new(charge.clone())),
            reply,
        })
        .await
    }

    /// What this node holds.
    pub fn ownership(&self) -> &Arc<crate::store::ownership::Ownership> {
        &self.inner.ownership
    }

    /// Whether this node may act on subscription or endpoint `id` now.
    pub fn owns(&self, id: &str) -> bool {
        self.inner.ownership.owns(id)
    }

    /// The shard of `id` when this node does not work on it (another node holds it, or this
    /// one is handing it over): its messages are forwarded.
    fn elsewhere(&self, id: &str) -> Option<u16> {
        (!self.owns(id)).then(|| crate::store::ownership::shard_of(id))
    }

    /// Moves an account's test clock (from the database's offset: `Clock::advance`) and
    /// tells every other node before answering, so that the timers it then runs (on whichever
    /// node holds them) see the new instant. A node that misses the news reads the offset
    /// from the database within `crate::clock::CLUSTER_FRESHNESS`.
    pub async fn advance_clock(&self, account: &AccountId, millis: i64) -> Result<i64, StoreError> {
        let (now, offset_ms) = self.clock().advance(account, millis).await?;
        if let Some(forwarder) = &self.inner.forwarder {
            forwarder
                .broadcast(&crate::actors::forward::Broadcast::Clock {
                    account_id: account.clone(),
                    offset_ms,
                })
                .await?;
        }
        Ok(now)
    }

    /// Tells every other node that an operator changed `account` (its cached copies go).
    pub async fn account_changed(&self, account: &AccountId) -> Result<(), StoreError> {
        self.inner.accounts.remove(account);
        if let Some(forwarder) = &self.inner.forwarder {
            forwarder
                .broadcast(&crate::actors::forward::Broadcast::Account {
                    account_id: account.clone(),
                })
                .await?;
        }
        Ok(())
    }

    /// Applies a change another node broadcast; the API-key cache is the caller's.
    pub fn apply_broadcast(&self, change: &crate::actors::forward::Broadcast) {
        use crate::actors::forward::Broadcast;
        match change {
            Broadcast::Clock {
                account_id,
                offset_ms,
            } => self.clock().set_offset(account_id, *offset_ms),
            Broadcast::Account { account_id } => {
                self.inner.accounts.remove(account_id);
            }
            Broadcast::Released => self.inner.ownership.nudge(),
            Broadcast::Timers { account_id } => self.rescan(account_id),
        }
    }

    /// Tells the other nodes that this one gave its shards back (graceful shutdown).
    pub async fn announce_release(&self) {
        if let Some(forwarder) = &self.inner.forwarder
            && let Err(err) = forwarder
                .broadcast(&crate::actors::forward::Broadcast::Released)
                .await
        {
            tracing::warn!(error = %err, "could not tell the other nodes; they take the shards at their next pass");
        }
    }

    /// The forwarder, in a cluster (its secret authenticates internal requests).
    pub fn forwarder(&self) -> Option<&crate::actors::forward::Forwarder> {
        self.inner.forwarder.as_ref()
    }

    /// Reacts to a change of this node's holdings: a lost shard's actors stop; a gained
    /// shard's timers and charges are picked up by the background loops (`Ownership::gains`).
    pub fn on_lease_change(&self, change: crate::cluster::lease::Change) {
        use crate::cluster::lease::Change;
        match change {
            Change::Lost(shard) => self.stop_shard(shard),
            Change::Gained(_) => self.clock().forget_all(),
        }
    }

    /// Stops the live actors of `shard` (this node lost or gave it back).
    pub fn stop_shard(&self, shard: u16) {
        let of_shard = |id: &str| crate::store::ownership::shard_of(id) == shard;
        self.inner.subscriptions.stop_matching(of_shard);
        self.inner.endpoints.stop_matching(of_shard);
    }
}

impl crate::cluster::lease::Drain for Runtime {
    /// Polls (every 10 ms, at most `bound`) until no actor of `shards` is handling a message,
    /// has one waiting, or has a webhook attempt out.
    fn drain<'a>(
        &'a self,
        shards: &'a [u16],
        bound: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let of = |id: &str| shards.contains(&crate::store::ownership::shard_of(id));
            let deadline = tokio::time::Instant::now() + bound;
            while (self.inner.subscriptions.any_busy(of) || self.inner.endpoints.any_busy(of))
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    }
}

/// A reply of the wrong kind (a newer node's answer this one does not know).
fn unexpected(reply: Reply) -> ActionError {
    match reply {
        Reply::Failed(err) => err.into(),
        other => ActionError::Remote(format!("unexpected reply {other:?}")),
    }
}
