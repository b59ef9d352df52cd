//! What a subscription actor works with: the store, the charger, the clock, the charges in
//! flight and the account cache, and the runtime's two services to it: arming its timer with
//! the scheduler, and reaching the node that holds another shard. The actor's behaviour
//! (`commands`, `timer`, `charging`, and the helpers in `mod.rs`) is written as methods of
//! this context; the generic runtime (`actors/`) only spawns the actor and routes messages.

use crate::actors::{InFlight, Runtime};
use crate::charges::Charger;
use crate::clock::Clock;
use crate::ids::{AccountId, SubscriptionId};
use crate::store::accounts::Account;
use crate::store::subscriptions::Subscription;
use crate::store::{Store, StoreResult};
use std::sync::Arc;

/// A subscription actor's view of the node: borrowed from the runtime for one message.
pub(crate) struct Context<'r> {
    runtime: &'r Runtime,
}

impl<'r> Context<'r> {
    pub(crate) fn of(runtime: &'r Runtime) -> Self {
        Self { runtime }
    }

    pub(super) fn store(&self) -> &'r Store {
        self.runtime.store()
    }

    pub(super) fn charger(&self) -> &'r Charger {
        self.runtime.charger()
    }

    pub(super) fn clock(&self) -> &'r Clock {
        self.runtime.clock()
    }

    /// The period charges out at the processor from this node (`in_flight`).
    pub(super) fn in_flight(&self) -> &'r InFlight {
        self.runtime.in_flight()
    }

    /// The account, from the runtime's cache (read at most every 5 s: `Runtime::account`).
    pub(super) async fn account(&self, id: &AccountId) -> StoreResult<Option<Arc<Account>>> {
        self.runtime.account(id).await
    }

    /// Tells the scheduler about the subscription's (new) due time.
    pub(super) fn arm(&self, subscription: &Subscription, now_ms: i64) {
        self.runtime.arm(subscription, now_ms);
    }

    /// Tells the scheduler, of this node or of the subscription's owner, that `id` is due.
    pub(super) fn arm_at(&self, id: &SubscriptionId, due_ms: i64, now_ms: i64) {
        self.runtime.arm_at(id, due_ms, now_ms);
    }

    /// The runtime itself, owned, for work that outlives this message (a charge's outcome
    /// sent to the node that now holds its subscription).
    pub(super) fn nodes(&self) -> Runtime {
        self.runtime.clone()
    }
}
