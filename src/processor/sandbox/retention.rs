//! How long the sandbox keeps what it made (transactions, Nequi tokens): the ids in the order
//! they were made, with when, so that dropping what is past its retention costs only what it
//! drops. The owner of the ids drops them from its own maps.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

pub(super) struct Retention {
    keep_for: Duration,
    /// The front is the oldest.
    made: Mutex<VecDeque<(Instant, String)>>,
}

impl Retention {
    pub(super) fn new(keep_for: Duration) -> Self {
        Self {
            keep_for,
            made: Mutex::new(VecDeque::new()),
        }
    }

    /// Notes that `id` was made now.
    pub(super) fn made(&self, id: &str) {
        self.list().push_back((Instant::now(), id.to_owned()));
    }

    /// Takes out and answers the ids made `keep_for` ago or earlier.
    pub(super) fn expired(&self) -> Vec<String> {
        let mut made = self.list();
        let mut expired = Vec::new();
        while made
            .front()
            .is_some_and(|(at, _)| at.elapsed() >= self.keep_for)
        {
            expired.extend(made.pop_front().map(|(_, id)| id));
        }
        expired
    }

    fn list(&self) -> MutexGuard<'_, VecDeque<(Instant, String)>> {
        // The list is consistent after any panic (each step is one push or pop).
        self.made.lock().unwrap_or_else(|e| e.into_inner())
    }
}
