//! Who in this process waits for a charge's outcome: the hosted checkout's complete endpoint
//! waits for its payment's charge (`checkout::payment`). A waiter registers (`watch`) before it
//! reads the charge's row; the transaction that settles the charge announces it after it commits
//! (`announce`, from `checkout_settlement::settle`), which wakes the waiter at once instead of at
//! its next read. A charge settled by another node is not announced here: the waiter sees it at
//! its next read of the row, which it makes every few seconds anyway to ask the processor.

use crate::ids::ChargeAttemptId;
use dashmap::DashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The charges waited for, each with the channel its waiters hold a receiver of.
#[derive(Clone, Default)]
pub struct SettledSignal {
    waiting: Arc<DashMap<ChargeAttemptId, watch::Sender<bool>>>,
}

impl SettledSignal {
    /// Registers a waiter for `charge_id`: an announcement from now on wakes it, even one made
    /// before it starts to wait.
    pub fn watch(&self, charge_id: &ChargeAttemptId) -> SettledWatch {
        let receiver = self
            .waiting
            .entry(charge_id.to_owned())
            .or_insert_with(|| watch::channel(false).0)
            .subscribe();
        SettledWatch {
            signal: self.clone(),
            charge_id: charge_id.to_owned(),
            receiver,
        }
    }

    /// `charge_id` has settled (its transaction committed): wakes its waiters, if any.
    pub fn announce(&self, charge_id: &ChargeAttemptId) {
        if let Some(sender) = self.waiting.get(charge_id) {
            sender.send_replace(true);
        }
    }

    /// How many charges are waited for (for tests: none is left behind).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

/// One waiter's registration; dropping it unregisters the charge once no one else waits.
pub struct SettledWatch {
    signal: SettledSignal,
    charge_id: ChargeAttemptId,
    receiver: watch::Receiver<bool>,
}

impl SettledWatch {
    /// Waits until the charge is announced or `at_most` has passed; whether it was announced.
    pub async fn wait(&mut self, at_most: Duration) -> bool {
        tokio::time::timeout(at_most, self.receiver.wait_for(|settled| *settled))
            .await
            .is_ok_and(|seen| seen.is_ok())
    }
}

impl Drop for SettledWatch {
    fn drop(&mut self) {
        // This receiver still counts: the last waiter sees one.
        self.signal
            .waiting
            .remove_if(&self.charge_id, |_, sender| sender.receiver_count() <= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(raw: &str) -> ChargeAttemptId {
        ChargeAttemptId::parse(raw).expect("a charge's id")
    }

    #[tokio::test]
    async fn an_announcement_wakes_a_waiter_registered_before_it() {
        let signal = SettledSignal::default();
        let mut watch = signal.watch(&ch("ch_1"));
        // Announced before the waiter starts to wait: not lost.
        signal.announce(&ch("ch_1"));
        assert!(watch.wait(Duration::from_secs(5)).await);
        drop(watch);
        assert_eq!(signal.waiting(), 0, "unregistered");
    }

    #[tokio::test(start_paused = true)]
    async fn another_charges_announcement_does_not_wake_it() {
        let signal = SettledSignal::default();
        let mut watch = signal.watch(&ch("ch_1"));
        let other = signal.watch(&ch("ch_2"));
        signal.announce(&ch("ch_2"));
        signal.announce(&ch("ch_unwatched"));
        assert!(!watch.wait(Duration::from_millis(100)).await);
        assert_eq!(signal.waiting(), 2);
        drop(other);
        assert_eq!(signal.waiting(), 1);
    }

    #[tokio::test]
    async fn two_waiters_of_one_charge_both_wake_and_the_last_unregisters() {
        let signal = SettledSignal::default();
        let mut first = signal.watch(&ch("ch_1"));
        let mut second = signal.watch(&ch("ch_1"));
        signal.announce(&ch("ch_1"));
        assert!(first.wait(Duration::from_secs(5)).await);
        assert!(second.wait(Duration::from_secs(5)).await);
        drop(first);
        assert_eq!(signal.waiting(), 1, "the second still waits");
        drop(second);
        assert_eq!(signal.waiting(), 0);
    }
}
