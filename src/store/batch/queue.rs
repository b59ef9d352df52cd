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

    /// The next batch; empty when none waits, and then the writer stops. Its size is a power
    /// of two (`batch_size`): what waits beyond it goes in the next batch.
    pub(super) fn next(&self) -> Vec<W> {
        let Ok(mut queued) = self.0.lock() else {
            return Vec::new();
        };
        let take = batch_size(queued.waiting.len());
        let batch: Vec<W> = queued.waiting.drain(..take).collect();
        if batch.is_empty() {
            queued.writing = false;
        }
        batch
    }
}

/// How many of `waiting` the next batch takes: the largest power of two at most `waiting` and
/// `MAX_BATCH` (0 for none). A batch's statements are cached by their text, which follows its
/// size: sizes of powers of two make nine shapes a step, every one kept in the connection's
/// cache, where any size would make 256, most parsed again and each kept costing memory.
fn batch_size(waiting: usize) -> usize {
    match waiting.min(MAX_BATCH) {
        0 => 0,
        n => 1 << n.ilog2(),
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

#[cfg(test)]
mod tests {
    use super::{MAX_BATCH, Queue, batch_size};

    #[test]
    fn a_batch_takes_the_largest_power_of_two_that_waits() {
        assert_eq!(batch_size(0), 0);
        assert_eq!(batch_size(1), 1);
        assert_eq!(batch_size(3), 2);
        assert_eq!(batch_size(200), 128);
        assert_eq!(batch_size(256), 256);
        assert_eq!(batch_size(10_000), MAX_BATCH);
        for waiting in 1..=2 * MAX_BATCH {
            let size = batch_size(waiting);
            assert!(size.is_power_of_two() && size <= waiting && 2 * size > waiting.min(MAX_BATCH));
        }
    }

    #[test]
    fn what_waits_beyond_a_batch_goes_in_the_next_and_none_is_lost() {
        let queue = Queue::default();
        assert!(queue.push(0));
        for item in 1..200 {
            assert!(!queue.push(item));
        }
        let mut sizes = Vec::new();
        let mut taken = Vec::new();
        loop {
            let batch = queue.next();
            if batch.is_empty() {
                break;
            }
            sizes.push(batch.len());
            taken.extend(batch);
        }
        assert_eq!(sizes, [128, 64, 8]);
        assert_eq!(taken, (0..200).collect::<Vec<_>>());
        // The writer stopped: the next push starts one again.
        assert!(queue.push(200));
    }
}
