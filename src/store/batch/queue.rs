//! The queue of one step's writes waiting for the next batch, and the one writer at a time
//! that takes them.

use super::{BeginWaiter, MAX_BATCH, NoteWaiter, SettleWaiter};
use std::sync::{Arc, Mutex};

/// The writes waiting for the next batch of one step, and whether a batch is being written.
pub(crate) struct Queue<W>(Arc<Mutex<Queued<W>>>);

impl<W> Clone for Queue<W> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<W> Default for Queue<W> {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Queued {
            waiting: Vec::new(),
            writing: false,
        })))
    }
}

pub(super) struct Queued<W> {
    waiting: Vec<W>,
    writing: bool,
}

impl<W> Queue<W> {
    /// Queues `waiter`; true when the caller is to start writing batches.
    pub(super) fn push(&self, waiter: W) -> bool {
        let Ok(mut queued) = self.0.lock() else {
            return false;
        };
        queued.waiting.push(waiter);
        !std::mem::replace(&mut queued.writing, true)
    }

    /// Held by the writer while it writes: should it panic, the next caller starts a writer
    /// again instead of queueing behind one that is gone (the panicked batch's callers get an
    /// error, their reply dropped).
    pub(super) fn writer(&self) -> WriterGuard<'_, W> {
        WriterGuard(self)
    }

    /// The next batch; empty when none waits, and then the writer stops.
    pub(super) fn next(&self) -> Vec<W> {
        let Ok(mut queued) = self.0.lock() else {
            return Vec::new();
        };
        let take = queued.waiting.len().min(MAX_BATCH);
        let batch: Vec<W> = queued.waiting.drain(..take).collect();
        if batch.is_empty() {
            queued.writing = false;
        }
        batch
    }
}

pub(super) struct WriterGuard<'a, W>(&'a Queue<W>);

impl<W> Drop for WriterGuard<'_, W> {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Ok(mut queued) = self.0.0.lock()
        {
            queued.writing = false;
        }
    }
}

/// The batch queues of a `Store`.
#[derive(Clone, Default)]
pub(crate) struct Batches {
    pub(super) begins: Queue<BeginWaiter>,
    pub(super) settles: Queue<SettleWaiter>,
    pub(super) notes: Queue<NoteWaiter>,
}
