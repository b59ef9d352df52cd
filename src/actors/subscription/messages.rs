//! What a subscription actor is sent and answers: the commands of the API, their outcome and
//! their failures, and the requests of the runtime (a timer, a processor outcome). Commands,
//! outcomes and failures also travel between nodes (`actors::forward`), hence serde.

use crate::domain::time::Cycle;
use crate::ids::{AddonId, ChargeAttemptId, PaymentMethodId, PlanId};
use crate::store::StoreError;
use crate::store::charges::{ChargeAttempt, ProcessorEvent};
use crate::store::coupons::Redeem;
use crate::store::subscriptions::Subscription;
use ractor::RpcReplyPort;
use std::sync::Arc;

/// A change requested through the API.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    Cancel {
        at_period_end: bool,
    },
    Pause,
    Resume,
    ChangePlan {
        plan_id: PlanId,
        cycle: Option<Cycle>,
        prorate: bool,
        /// The instant a preview priced the proration at (`proration_date`): the charge is
        /// then exactly what the preview said. `None`: now.
        #[serde(default)]
        proration_at: Option<i64>,
        /// The new quantity of seats; `None` keeps it.
        #[serde(default)]
        quantity: Option<i64>,
    },
    ChargeNow,
    AttachAddon {
        addon_id: AddonId,
        prorate: bool,
    },
    DetachAddon {
        addon_id: AddonId,
    },
    SetPaymentMethod {
        payment_method_id: PaymentMethodId,
    },
    /// Gives the subscription a coupon's discount (replacing any), redeemed now.
    SetDiscount {
        redeem: Redeem,
    },
    RemoveDiscount,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
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
    /// A 400 about one field of the request.
    #[error("{message}")]
    InvalidField { param: String, message: String },
    #[error("{0}")]
    Unprocessable(String),
    #[error("the balance does not cover the fee")]
    InsufficientBalance,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the subscription's actor did not answer")]
    Unavailable,
    /// The subscription's shard is between two nodes (`cluster`): nothing was done.
    #[error("the subscription's shard is moving to another node")]
    Moving,
    /// The subscription's shard moved to another node after part of the command was committed
    /// (a resume, then its charge's beginning): what was done stays done, and the rest is not
    /// done here. Told apart from `Moving` by the database (`Context::apply_command`).
    #[error("the subscription's shard moved to another node after part of the command was done")]
    MovedMidway,
    /// The owner node failed; its cause is in that node's log.
    #[error("the owner node failed: {0}")]
    Remote(String),
}

/// What a subscription actor receives.
pub enum SubscriptionMsg {
    /// A request, handled inside the span it was sent from: an API request's span carries
    /// its `request_id` into the actor's log lines.
    Request(Request, tracing::Span),
    IdleCheck,
}

/// A request to a subscription actor, answered through its reply port.
pub enum Request {
    Act(Command, RpcReplyPort<Result<ActionOutcome, ActionError>>),
    Preview {
        plan_id: PlanId,
        /// The quantity to price; `None`: the subscription's.
        quantity: Option<i64>,
        /// The instant to price at; `None`: now.
        at: Option<i64>,
        reply: RpcReplyPort<Result<i64, ActionError>>,
    },
    Due(RpcReplyPort<Result<(), ActionError>>),
    /// A timer came due, with what its renewal reads prefetched for its batch.
    DuePrefetched(
        Arc<crate::store::prefetch::DueSnapshot>,
        RpcReplyPort<Result<(), ActionError>>,
    ),
    Outcome {
        charge_id: ChargeAttemptId,
        raw_status: String,
        message: Option<String>,
        transaction_id: Option<String>,
        /// The processor event that reported it, recorded in the same transaction.
        event: Option<Box<ProcessorEvent>>,
        /// The charge as the sender read it, when it did (`apply_outcome`'s `known`).
        charge: Option<Box<ChargeAttempt>>,
        reply: RpcReplyPort<Result<(), ActionError>>,
    },
}
