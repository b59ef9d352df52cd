//! The period charges out at the processor: at most `IN_FLIGHT` at once (each holds a slot
//! until its outcome is applied), each kept as it began so that the ingress can judge an event
//! about it without reading it, and per subscription the row its charge began on, which the
//! outcome settles on without reading it again.

use crate::ids::{ChargeAttemptId, SubscriptionId};
use crate::store::charges::ChargeAttempt;
use crate::store::ownership::Ownership;
use crate::store::subscriptions::Subscription;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// At most this many period charges (renewals, first charges, retries, charge-now) are out
/// at the processor, posted and not yet settled. The scheduler's own bound (`CONCURRENCY`)
/// covers only the posting; without this one a burst of a million posts far faster than
/// outcomes come back, and the pending charges, the processor's events and the reconciler's
/// polls of "stale" charges pile up. It also bounds the rate: at most `IN_FLIGHT` charges a
/// processor latency, so 2,048 allow 20,000 renewals/s against the sandbox's 100 ms and
/// still 1,000/s against a processor that takes two seconds to settle (512 held a burst at
/// 512 / (100 ms + the event's round trip), about 3,500/s, on this code's own sandbox).
const IN_FLIGHT: usize = 2048;
/// A slot whose charge has had no outcome for this long is given back (the charge stays
/// pending and the reconciler keeps asking about it), so a processor that never answers
/// cannot stop renewals.
const SLOT_TIMEOUT: Duration = Duration::from_secs(60);

/// The charges out at the processor (one per node, in the runtime).
pub struct InFlight {
    room: Arc<tokio::sync::Semaphore>,
    /// Each period charge out at the processor, by id (its reference), with its slot: released
    /// when its outcome is applied. The ingress reads an outcome's charge here (`charge_out`).
    out: dashmap::DashMap<ChargeAttemptId, OutCharge>,
    /// Per subscription, the row its period charge left when it began, with that charge's id:
    /// the charge's outcome settles on it without reading the row again (`apply_outcome`).
    /// Taken by the outcome, dropped by any command; one entry per charge out at the processor.
    began: dashmap::DashMap<SubscriptionId, (ChargeAttemptId, Box<Subscription>)>,
    /// What this node holds: a charge's copy is trusted only while its shard stays here.
    ownership: Arc<Ownership>,
    /// Requests waiting for a charge's outcome (`settlement`), woken when it is applied here.
    waiting: dashmap::DashMap<ChargeAttemptId, Arc<tokio::sync::Notify>>,
}

/// A period charge out at the processor (`InFlight::out`).
struct OutCharge {
    _slot: tokio::sync::OwnedSemaphorePermit,
    since: Instant,
    /// The charge as it began, while nothing but its beginning wrote it: dropped (`None`)
    /// when a pending answer about it is noted (its transaction id), so the ingress reads it.
    charge: Option<Box<ChargeAttempt>>,
    /// The epoch of its subscription's shard when it began: after a shard moved away (and
    /// perhaps back) another node may have written the charge.
    epoch: Option<i64>,
}

impl InFlight {
    pub fn new(ownership: Arc<Ownership>) -> Self {
        Self {
            room: Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT)),
            out: dashmap::DashMap::new(),
            began: dashmap::DashMap::new(),
            ownership,
            waiting: dashmap::DashMap::new(),
        }
    }

    /// Waits for room among the charges out at the processor (see `IN_FLIGHT`).
    pub async fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        loop {
            let slot = Arc::clone(&self.room).acquire_owned();
            match tokio::time::timeout(SLOT_TIMEOUT, slot).await {
                Ok(slot) => return slot.ok(),
                Err(_) => self.out.retain(|_, out| out.since.elapsed() < SLOT_TIMEOUT),
            }
        }
    }

    /// Keeps `slot` taken, and `charge` as it began, until the charge's outcome is applied.
    pub fn hold_until_settled(
        &self,
        charge: &ChargeAttempt,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        if let Some(slot) = slot {
            let epoch = charge.subscription_id.as_ref().and_then(|id| {
                self.ownership
                    .epoch(crate::store::ownership::shard_of(id.as_str()))
            });
            self.out.insert(
                charge.id.clone(),
                OutCharge {
                    _slot: slot,
                    since: Instant::now(),
                    charge: Some(Box::new(charge.clone())),
                    epoch,
                },
            );
        }
    }

    /// The period charge out at the processor under `reference`, as it began (pending), while
    /// its outcome is not applied, no pending answer about it was noted here and its shard
    /// stayed with this node: what the ingress would read for an event about it. The copy may
    /// lag the row (the post's answer, or another node, noted its transaction since), so
    /// nothing is decided on it alone: its settlement stays conditional in the database, on
    /// the status and on the stored transaction id (`store::charges::settle_charge_in`), so a
    /// charge another writer settled meanwhile (a race with a recheck) is still applied once,
    /// and a report naming another transaction than the stored one moves no money.
    pub fn charge_out(&self, reference: &str) -> Option<ChargeAttempt> {
        // A charge's reference is its id, as the processor's event carries it.
        let out = self.out.get(&ChargeAttemptId::given(reference))?;
        let charge = out.charge.as_deref()?;
        let shard = crate::store::ownership::shard_of(charge.subscription_id.as_ref()?.as_str());
        (charge.reference == reference
            && out.epoch.is_some()
            && self.ownership.epoch(shard) == out.epoch)
            .then(|| charge.clone())
    }

    /// A pending answer about `charge_id` is being noted (its transaction id): from now on
    /// the ingress reads the charge.
    pub fn charge_touched(&self, charge_id: &ChargeAttemptId) {
        if let Some(mut out) = self.out.get_mut(charge_id) {
            out.charge = None;
        }
    }

    /// The charge's outcome was applied here (or it left this node): its slot is free, and
    /// the requests waiting for it read it now.
    pub fn release(&self, charge_id: &ChargeAttemptId) {
        self.out.remove(charge_id);
        if let Some((_, waiting)) = self.waiting.remove(charge_id) {
            waiting.notify_waiters();
        }
    }

    /// A wake-up for when `charge_id`'s outcome is applied on this node, registered before the
    /// caller reads the charge so that an outcome applied in between is not missed. The
    /// caller reads the charge after it fires, and also now and then without it: the outcome
    /// may be applied on another node (the shard moved, or it is another node's).
    pub fn settlement(
        &self,
        charge_id: &ChargeAttemptId,
    ) -> std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>> {
        let waiting = self
            .waiting
            .entry(charge_id.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Notify::new()))
            .clone();
        let mut settled = Box::pin(waiting.notified_owned());
        settled.as_mut().enable();
        settled
    }

    /// Forgets the wake-up of `charge_id` once no request waits for it.
    pub fn stop_waiting(&self, charge_id: &ChargeAttemptId) {
        self.waiting
            .remove_if(charge_id, |_, waiting| Arc::strong_count(waiting) == 1);
    }

    /// Keeps `row`, as the beginning of its period charge `charge_id` saved it, for the
    /// charge's outcome.
    pub fn keep_began(&self, charge_id: &ChargeAttemptId, row: &Subscription) {
        self.began.insert(
            row.id.clone(),
            (charge_id.to_owned(), Box::new(row.clone())),
        );
    }

    /// The row kept when `charge_id` began, if it is the subscription's last kept one (taken:
    /// an outcome uses it once).
    pub fn take_began(
        &self,
        subscription_id: &SubscriptionId,
        charge_id: &ChargeAttemptId,
    ) -> Option<Subscription> {
        let (_, (charge, row)) = self.began.remove(subscription_id)?;
        (charge == *charge_id).then_some(*row)
    }

    /// Forgets the row kept for `subscription_id`'s charge (a command may change the row, or
    /// the shard moved away).
    pub fn forget_began(&self, subscription_id: &SubscriptionId) {
        self.began.remove(subscription_id);
    }

    /// The charge whose row is kept for `subscription_id`, if any.
    pub fn began_charge(&self, subscription_id: &SubscriptionId) -> Option<ChargeAttemptId> {
        self.began.get(subscription_id).map(|kept| kept.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(raw: &str) -> ChargeAttemptId {
        ChargeAttemptId::parse(raw).expect("a charge's id")
    }

    #[tokio::test]
    async fn a_waiter_registered_before_the_outcome_wakes_when_it_is_applied() {
        let in_flight = InFlight::new(Arc::new(Ownership::single_node()));
        let settled = in_flight.settlement(&ch("ch_1"));
        let other = in_flight.settlement(&ch("ch_2"));
        // Applied between the registration and the wait: the wake-up is kept.
        in_flight.release(&ch("ch_1"));
        tokio::time::timeout(Duration::from_secs(5), settled)
            .await
            .expect("woken by the release");
        // Another charge's waiter is not woken by it.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), other)
                .await
                .is_err()
        );
        in_flight.stop_waiting(&ch("ch_2"));
        assert!(in_flight.waiting.is_empty(), "no wake-up is left behind");
    }
}
