//! Messages for another node's shard travel to that node over internal HTTP.
//!
//! Only the actor's message moves, not the client's request: the node that took the request
//! authenticated it, counted it against its limits and holds its Idempotency-Key (all in the
//! database), and the owner's actor handles the message as if it had been sent locally. The
//! sender names the epoch it saw the owner holding; the owner refuses (421) a message for a
//! shard it no longer holds under that epoch, and the sender looks the owner up once more. A
//! shard with no live owner (a takeover under way) is `Moving`: the API answers 503 with
//! `Retry-After`.
//!
//! The internal routes (`api::internal`) share the public listener and take the cluster's
//! secret (a random value in `settings`, made by the first node) in `x-billing-cluster`,
//! compared in constant time.

use crate::actors::{ActionError, ActionOutcome, Command, Request};
use crate::ids::{AccountId, ChargeAttemptId, PlanId, SubscriptionId, WebhookEndpointId};
use crate::store::Store;
use crate::store::charges::ProcessorEvent;
use crate::store::cluster::ShardOwner;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The header carrying the cluster's secret.
pub const SECRET_HEADER: &str = "x-billing-cluster";
/// The header carrying the epoch the sender saw the owner holding.
pub const EPOCH_HEADER: &str = "x-billing-epoch";
/// The header carrying the id of the request a forwarded message belongs to.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// The `settings` key of the cluster's secret.
pub const SECRET_SETTING: &str = "cluster_secret";

/// How long a forwarded message may take: an action may wait for its charge (10 s), and the
/// owner's actor answers within its own call timeout (60 s).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(70);

/// An actor's message, as it travels between nodes: a subscription's, or (`Wake`, `Flush`)
/// a webhook endpoint's.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// The endpoint has deliveries to look at.
    Wake,
    /// Answer once every delivery of the endpoint due now has been attempted.
    Flush,
    Act {
        command: Command,
    },
    Preview {
        plan_id: PlanId,
        #[serde(default)]
        quantity: Option<i64>,
        #[serde(default)]
        at: Option<i64>,
    },
    Due,
    Outcome {
        charge_id: ChargeAttemptId,
        raw_status: String,
        message: Option<String>,
        transaction_id: Option<String>,
        event: Option<Box<ProcessorEvent>>,
    },
}

/// The owner's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum Reply {
    Action(Box<ActionOutcome>),
    Amount(i64),
    Done,
    Failed(WireError),
}

/// An `ActionError` on the wire. A storage failure travels as its message only.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum WireError {
    NotFound(String),
    Conflict(String),
    Invalid(String),
    InvalidField {
        param: String,
        message: String,
    },
    Unprocessable(String),
    InsufficientBalance,
    Unavailable,
    Moving,
    /// `ActionError::MovedMidway`: part of the command was done before the shard moved.
    MovedMidway,
    Internal(String),
}

impl From<ActionError> for WireError {
    fn from(err: ActionError) -> Self {
        match err {
            ActionError::NotFound(m) => Self::NotFound(m),
            ActionError::Conflict(m) => Self::Conflict(m),
            ActionError::Invalid(m) => Self::Invalid(m),
            ActionError::InvalidField { param, message } => Self::InvalidField { param, message },
            ActionError::Unprocessable(m) => Self::Unprocessable(m),
            ActionError::InsufficientBalance => Self::InsufficientBalance,
            ActionError::Unavailable => Self::Unavailable,
            ActionError::Moving | ActionError::Store(crate::store::StoreError::Fenced(_)) => {
                Self::Moving
            }
            ActionError::MovedMidway => Self::MovedMidway,
            ActionError::Store(crate::store::StoreError::Conflict(m)) => {
                Self::Conflict(format!("{m}; nothing was changed. Try again."))
            }
            ActionError::Store(err) => Self::Internal(err.to_string()),
            ActionError::Remote(m) => Self::Internal(m),
        }
    }
}

impl From<WireError> for ActionError {
    fn from(err: WireError) -> Self {
        match err {
            WireError::NotFound(m) => Self::NotFound(m),
            WireError::Conflict(m) => Self::Conflict(m),
            WireError::Invalid(m) => Self::Invalid(m),
            WireError::InvalidField { param, message } => Self::InvalidField { param, message },
            WireError::Unprocessable(m) => Self::Unprocessable(m),
            WireError::InsufficientBalance => Self::InsufficientBalance,
            WireError::Unavailable => Self::Unavailable,
            WireError::Moving => Self::Moving,
            WireError::MovedMidway => Self::MovedMidway,
            WireError::Internal(m) => Self::Remote(m),
        }
    }
}

/// Sends messages to other nodes.
#[derive(Clone)]
pub struct Forwarder {
    http: reqwest::Client,
    store: Store,
    secret: std::sync::Arc<str>,
}

impl Forwarder {
    /// A forwarder authenticating with the cluster's `secret`. Nodes' URLs are the operator's
    /// (`--node-url`), not a tenant's: the plain client, without redirects.
    pub fn new(store: Store, secret: String) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FORWARD_TIMEOUT)
            .build()?;
        Ok(Self {
            http,
            store,
            secret: secret.into(),
        })
    }

    /// The cluster's secret, for checking a forwarded message.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Sends `message` for subscription `id` (of `shard`) to the shard's owner and returns its
    /// reply. No live owner, or an owner that no longer holds the shard twice in a row, is
    /// `Moving`. A message whose answer is lost (a timeout, a reset) is `Unavailable`: it may
    /// have been handled, as with a local call that times out.
    pub async fn send(
        &self,
        shard: u16,
        id: &str,
        message: &Message,
    ) -> Result<Reply, ActionError> {
        for _ in 0..2 {
            let Some(owner) = self.store.shard_owner(shard).await? else {
                return Err(ActionError::Moving);
            };
            if owner.node == self.store.ownership().node() {
                // The database says this node holds it but this node no longer trusts the
                // lease (or has not learned of it yet): the lease loop settles it.
                return Err(ActionError::Moving);
            }
            match self.post(&owner, id, message).await? {
                Some(reply) => return Ok(reply),
                None => continue,
            }
        }
        Err(ActionError::Moving)
    }

    /// One POST; `None` when the owner no longer holds the shard under the epoch seen.
    async fn post(
        &self,
        owner: &ShardOwner,
        id: &str,
        message: &Message,
    ) -> Result<Option<Reply>, ActionError> {
        let url = format!(
            "{}/internal/v1/actors/{id}/messages",
            owner.url.trim_end_matches('/')
        );
        let mut request = self
            .http
            .post(url)
            .header(SECRET_HEADER, &*self.secret)
            .header(EPOCH_HEADER, owner.epoch.to_string());
        // The owner node's lines of this request carry the same id (`api::request_id`).
        if let Some(request_id) = crate::logging::current_request_id() {
            request = request.header(REQUEST_ID_HEADER, request_id);
        }
        let response = request.json(message).send().await.map_err(|err| {
            tracing::warn!(node = %owner.node, error = %err, "a forwarded message got no answer");
            if err.is_connect() {
                // Never sent: the owner is down and its lease not yet expired.
                ActionError::Moving
            } else {
                ActionError::Unavailable
            }
        })?;
        match response.status().as_u16() {
            200 => response.json::<Reply>().await.map(Some).map_err(|err| {
                tracing::warn!(node = %owner.node, error = %err, "a forwarded message's answer was unreadable");
                ActionError::Unavailable
            }),
            421 => Ok(None),
            status => {
                tracing::warn!(node = %owner.node, status, "a forwarded message was refused");
                Err(ActionError::Unavailable)
            }
        }
    }
}

/// A change every node must learn before the request that made it answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Broadcast {
    /// An account's test clock moved: its new offset.
    Clock {
        account_id: AccountId,
        offset_ms: i64,
    },
    /// An operator changed an account (its rate limits): cached copies are dropped.
    Account { account_id: AccountId },
    /// A node gave its shards back (it is stopping): take them now, not at the next pass.
    Released,
    /// Timers of an account's subscriptions were set to now in the database (a top-up woke
    /// those paused for want of balance): each node loads that account's due rows of its own
    /// shards now, instead of at its next full rescan. One message per node, however many
    /// subscriptions were woken.
    Timers { account_id: AccountId },
}

impl Forwarder {
    /// Tells every other live node about `change` and waits for each (bounded). A node that
    /// does not answer is logged and skipped: a node cut off has lost its shards by the time
    /// it could act, and forgets its cached clocks when it takes shards again.
    pub async fn broadcast(&self, change: &Broadcast) -> crate::store::StoreResult<()> {
        let me = self.store.ownership().node().to_owned();
        let mut sends = tokio::task::JoinSet::new();
        for node in self.store.live_nodes().await? {
            if node.id == me {
                continue;
            }
            let request = self
                .http
                .post(format!(
                    "{}/internal/v1/broadcast",
                    node.url.trim_end_matches('/')
                ))
                .header(SECRET_HEADER, &*self.secret)
                .timeout(Duration::from_secs(5))
                .json(change);
            sends.spawn(async move {
                match request.send().await {
                    Ok(response) if response.status().is_success() => {}
                    Ok(response) => {
                        tracing::warn!(node = %node.id, status = %response.status(), "a node refused a broadcast");
                    }
                    Err(err) => {
                        tracing::warn!(node = %node.id, error = %err, "a node missed a broadcast");
                    }
                }
            });
        }
        sends.join_all().await;
        Ok(())
    }
}

/// The runtime's side of forwarding: sending a message to the node holding its shard, and
/// handling one another node sent here.
impl super::Runtime {
    /// Sends `message` for `id` to the node holding `shard`.
    pub(super) async fn forward(
        &self,
        shard: u16,
        id: &str,
        message: Message,
    ) -> Result<Reply, ActionError> {
        let Some(forwarder) = &self.inner.forwarder else {
            return Err(ActionError::Moving);
        };
        match forwarder.send(shard, id, &message).await? {
            Reply::Failed(err) => Err(err.into()),
            reply => Ok(reply),
        }
    }

    /// Handles a message another node forwarded, if this node holds the id's shard under
    /// `epoch` (the one the sender saw); `None` otherwise (the sender looks again).
    pub async fn handle_forwarded(&self, id: &str, epoch: i64, message: Message) -> Option<Reply> {
        if !self.owns(id)
            || self
                .inner
                .ownership
                .epoch(crate::store::ownership::shard_of(id))
                != Some(epoch)
        {
            return None;
        }
        // A subscription's messages name its id; a webhook endpoint's (`Wake`, `Flush`) its own.
        let subscription = || SubscriptionId::given(id);
        let reply = match message {
            Message::Wake => {
                self.wake_endpoint(&WebhookEndpointId::given(id)).await;
                Ok(Reply::Done)
            }
            Message::Flush => {
                self.flush_endpoint(&WebhookEndpointId::given(id)).await;
                Ok(Reply::Done)
            }
            Message::Act { command } => self
                .call(&subscription(), |reply| {
                    Request::Act(command.clone(), reply)
                })
                .await
                .map(|outcome| Reply::Action(Box::new(outcome))),
            Message::Preview {
                plan_id,
                quantity,
                at,
            } => self
                .call(&subscription(), |reply| Request::Preview {
                    plan_id: plan_id.clone(),
                    quantity,
                    at,
                    reply,
                })
                .await
                .map(Reply::Amount),
            Message::Due => self
                .call(&subscription(), Request::Due)
                .await
                .map(|()| Reply::Done),
            Message::Outcome {
                charge_id,
                raw_status,
                message,
                transaction_id,
                event,
            } => self
                .call(&subscription(), |reply| Request::Outcome {
                    charge_id: charge_id.clone(),
                    raw_status: raw_status.clone(),
                    message: message.clone(),
                    transaction_id: transaction_id.clone(),
                    event: event.clone(),
                    charge: None,
                    reply,
                })
                .await
                .map(|()| Reply::Done),
        };
        Some(reply.unwrap_or_else(|err| Reply::Failed(err.into())))
    }
}
