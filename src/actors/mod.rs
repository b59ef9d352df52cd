//! The actor runtime: one ractor actor per subscription, activated on demand and stopped when
//! idle, under one supervisor that restarts nothing eagerly: a failed actor is dropped from the
//! registry and the next message respawns it from the database, which is the durable state.
//!
//! Handlers and the ingress never touch a subscription themselves: they send a message to its
//! actor and await the reply, so every change of one subscription is serialised.

pub mod clock;
mod scheduler;
mod subscription;

use crate::charges::Charger;
use crate::domain::time::Cycle;
use crate::store::charges::ChargeAttempt;
use crate::store::subscriptions::Subscription;
use crate::store::{Store, StoreError};
use clock::Clock;
use dashmap::DashMap;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use scheduler::{Arm, spawn_background};
pub use subscription::subscription_event;

/// How long an actor lives without messages.
const IDLE: Duration = Duration::from_secs(30);
/// How long a caller waits for an actor's reply.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A change requested through the API.
#[derive(Clone, Debug)]
pub enum Command {
    Cancel {
        at_period_end: bool,
    },
    Pause,
    Resume,
    ResumeAfterTopUp,
    ChangePlan {
        plan_id: String,
        cycle: Option<Cycle>,
        prorate: bool,
    },
    ChargeNow,
    AttachAddon {
        addon_id: String,
        prorate: bool,
    },
    DetachAddon {
        addon_id: String,
    },
    SetPaymentMethod {
        payment_method_id: String,
    },
}

#[derive(Debug)]
pub struct ActionOutcome {
    pub subscription: Subscription,
    pub charge: Option<ChargeAttempt>,
}

/// Business failures travel back through the reply; they never restart the actor.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unprocessable(String),
    #[error("the balance does not cover the fee")]
    InsufficientBalance,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the subscription's actor did not answer")]
    Unavailable,
}

pub enum SubscriptionMsg {
    Act(Command, RpcReplyPort<Result<ActionOutcome, ActionError>>),
    Preview {
        plan_id: String,
        reply: RpcReplyPort<Result<i64, ActionError>>,
    },
    Due(RpcReplyPort<Result<(), ActionError>>),
    Outcome {
        charge_id: String,
        raw_status: String,
        message: Option<String>,
        transaction_id: Option<String>,
        reply: RpcReplyPort<Result<(), ActionError>>,
    },
    IdleCheck,
}

/// What the supervisor and the runtime both see.
struct Shared {
    registry: DashMap<String, ActorRef<SubscriptionMsg>>,
    restarts: AtomicU64,
}

impl Shared {
    fn forget(&self, name: &str, id: ractor::ActorId) {
        self.registry.remove_if(name, |_, r| r.get_id() == id);
        metrics::gauge!("actors_live", "kind" => "subscription").set(self.registry.len() as f64);
    }
}

struct Inner {
    /// Timers set by actors, for the scheduler's in-memory window.
    arms: tokio::sync::mpsc::UnboundedSender<Arm>,
    store: Store,
    charger: Charger,
    clock: Clock,
    shared: Arc<Shared>,
    supervisor: ActorRef<()>,
    spawn_lock: tokio::sync::Mutex<()>,
}

/// The handle every part of the service uses to reach subscription actors.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Supervisor;

impl Actor for Supervisor {
    type Msg = ();
    type State = Arc<Shared>;
    type Arguments = Arc<Shared>;

    async fn pre_start(
        &self,
        _myself: ActorRef<()>,
        shared: Arc<Shared>,
    ) -> Result<Arc<Shared>, ActorProcessingErr> {
        Ok(shared)
    }

    /// Overrides ractor's default, which stops the supervisor when any child stops: here one
    /// subscription's failure is counted and forgotten, and touches no other subscription. The
    /// next message to that subscription respawns its actor from the database.
    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<()>,
        event: SupervisionEvent,
        shared: &mut Arc<Shared>,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                shared.restarts.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("actor_restarts_total", "kind" => "subscription").increment(1);
                tracing::warn!(actor = ?cell.get_name(), error = %err, "subscription actor failed; it restarts from the database on its next message");
                if let Some(name) = cell.get_name() {
                    shared.forget(&name, cell.get_id());
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                if let Some(name) = cell.get_name() {
                    shared.forget(&name, cell.get_id());
                }
            }
            _ => {}
        }
        Ok(())
    }
}

struct SubscriptionActor {
    runtime: Runtime,
}

struct ActorState {
    id: String,
    last_message: Instant,
}

impl Actor for SubscriptionActor {
    type Msg = SubscriptionMsg;
    type State = ActorState;
    type Arguments = String;

    async fn pre_start(
        &self,
        _myself: ActorRef<SubscriptionMsg>,
        id: String,
    ) -> Result<ActorState, ActorProcessingErr> {
        Ok(ActorState {
            id,
            last_message: Instant::now(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SubscriptionMsg>,
        msg: SubscriptionMsg,
        state: &mut ActorState,
    ) -> Result<(), ActorProcessingErr> {
        state.last_message = Instant::now();
        let runtime = &self.runtime;
        match msg {
            SubscriptionMsg::Act(command, reply) => {
                let _ = reply.send(runtime.apply_command(&state.id, command).await);
            }
            SubscriptionMsg::Preview { plan_id, reply } => {
                let result = async {
                    let sub = runtime
                        .store()
                        .subscription_by_id(&state.id)
                        .await?
                        .ok_or_else(|| ActionError::NotFound("subscription".into()))?;
                    let now = runtime
                        .clock()
                        .now_ms(&crate::ids::AccountId::from_stored(sub.account_id.clone()))
                        .await?;
                    runtime.prorated_change(&sub, &plan_id, None, now).await
                };
                let _ = reply.send(result.await);
            }
            SubscriptionMsg::Due(reply) => {
                let _ = reply.send(runtime.apply_due(&state.id).await);
            }
            SubscriptionMsg::Outcome {
                charge_id,
                raw_status,
                message,
                transaction_id,
                reply,
            } => {
                let _ = reply.send(
                    runtime
                        .apply_outcome(
                            &charge_id,
                            &raw_status,
                            message.as_deref(),
                            transaction_id.as_deref(),
                        )
                        .await,
                );
            }
            SubscriptionMsg::IdleCheck => {
                if state.last_message.elapsed() >= IDLE {
                    runtime.inner.shared.forget(&state.id, myself.get_id());
                    myself.stop(None);
                }
                return Ok(());
            }
        }
        let _ = myself.send_after(IDLE, || SubscriptionMsg::IdleCheck);
        Ok(())
    }
}

impl Runtime {
    /// Starts the supervisor; the receiver goes to `spawn_background`.
    pub async fn start(
        store: Store,
        charger: Charger,
    ) -> anyhow::Result<(Self, tokio::sync::mpsc::UnboundedReceiver<Arm>)> {
        let shared = Arc::new(Shared {
            registry: DashMap::new(),
            restarts: AtomicU64::new(0),
        });
        let (supervisor, _) = Actor::spawn(None, Supervisor, Arc::clone(&shared)).await?;
        let (arms, receiver) = tokio::sync::mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            arms,
            clock: Clock::new(store.clone()),
            store,
            charger,
            shared,
            supervisor,
            spawn_lock: tokio::sync::Mutex::new(()),
        });
        Ok((Self { inner }, receiver))
    }

    /// Tells the scheduler about a subscription's (new) due time, in its account's clock.
    pub fn arm(&self, subscription: &Subscription, now_ms: i64) {
        if let Some(due) = subscription.due_at {
            let delay = Duration::from_millis(u64::try_from(due - now_ms).unwrap_or(0));
            let _ = self.inner.arms.send(Arm {
                subscription_id: subscription.id.clone(),
                delay,
            });
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    pub fn charger(&self) -> &Charger {
        &self.inner.charger
    }

    pub fn live_actors(&self) -> usize {
        self.inner.shared.registry.len()
    }

    pub fn restarts(&self) -> u64 {
        self.inner.shared.restarts.load(Ordering::Relaxed)
    }

    /// The live actor of `id`, spawned (linked to the supervisor, named by the id) if it has
    /// none. The spawn lock and the registry keep it to one live actor per subscription.
    async fn actor(&self, id: &str) -> Result<ActorRef<SubscriptionMsg>, ActionError> {
        let registry = &self.inner.shared.registry;
        if let Some(actor) = registry.get(id) {
            return Ok(actor.clone());
        }
        let _guard = self.inner.spawn_lock.lock().await;
        if let Some(actor) = registry.get(id) {
            return Ok(actor.clone());
        }
        let (actor, _) = Actor::spawn_linked(
            Some(id.to_owned()),
            SubscriptionActor {
                runtime: self.clone(),
            },
            id.to_owned(),
            self.inner.supervisor.get_cell(),
        )
        .await
        .map_err(|err| {
            tracing::error!(error = %err, "could not spawn a subscription actor");
            ActionError::Unavailable
        })?;
        registry.insert(id.to_owned(), actor.clone());
        metrics::gauge!("actors_live", "kind" => "subscription").set(registry.len() as f64);
        Ok(actor)
    }

    /// Sends a message built by `build` and awaits the reply. When the actor stopped before
    /// handling it (the message was never processed: its reply port was dropped unsent), the
    /// actor is respawned and the message sent again; a timeout is not retried, since the
    /// first message may still be running.
    async fn call<T: Send + 'static>(
        &self,
        id: &str,
        build: impl Fn(RpcReplyPort<Result<T, ActionError>>) -> SubscriptionMsg,
    ) -> Result<T, ActionError> {
        for _ in 0..3 {
            let actor = self.actor(id).await?;
            match actor.call(&build, Some(CALL_TIMEOUT)).await {
                Ok(ractor::rpc::CallResult::Success(result)) => return result,
                Ok(ractor::rpc::CallResult::Timeout) => return Err(ActionError::Unavailable),
                Ok(ractor::rpc::CallResult::SenderError) | Err(_) => {
                    self.inner.shared.forget(id, actor.get_id());
                }
            }
        }
        Err(ActionError::Unavailable)
    }

    pub async fn act(&self, id: &str, command: Command) -> Result<ActionOutcome, ActionError> {
        self.call(id, |reply| SubscriptionMsg::Act(command.clone(), reply))
            .await
    }

    pub async fn preview(&self, id: &str, plan_id: &str) -> Result<i64, ActionError> {
        self.call(id, |reply| SubscriptionMsg::Preview {
            plan_id: plan_id.to_owned(),
            reply,
        })
        .await
    }

    pub async fn due(&self, id: &str) -> Result<(), ActionError> {
        self.call(id, SubscriptionMsg::Due).await
    }

    pub async fn outcome(
        &self,
        subscription_id: &str,
        charge_id: &str,
        raw_status: &str,
        message: Option<&str>,
        transaction_id: Option<&str>,
    ) -> Result<(), ActionError> {
        self.call(subscription_id, |reply| SubscriptionMsg::Outcome {
            charge_id: charge_id.to_owned(),
            raw_status: raw_status.to_owned(),
            message: message.map(str::to_owned),
            transaction_id: transaction_id.map(str::to_owned),
            reply,
        })
        .await
    }
}
