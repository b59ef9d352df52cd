//! The loops that run beside the requests (DIAN's filing, the notices' delivery, the purge of
//! expired Idempotency-Keys), in one shape: each is a `Loop`, started by `Background::start`,
//! flushed for an account in the order they were given when its test clock moves (a loop that
//! sends what falls due by an account's clock sends it then), and drained at shutdown: told to
//! stop, then awaited within a bound, so that an attempt under way records its outcome before
//! the database pool closes. The HTTP layer holds the registry, not the loops, so that a loop
//! may use what the HTTP layer uses (the documents) without the two importing each other.

use crate::ids::AccountId;
use crate::store::StoreResult;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A boxed future, as the loops' methods answer.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A loop beside the requests.
pub trait Loop: Send + Sync + 'static {
    /// Runs until `stop` changes (or its sender is gone).
    fn run(self: Arc<Self>, stop: watch::Receiver<()>) -> BoxFuture<'static, ()>;

    /// Does now what is due by `account`'s clock; a loop with nothing clock-bound does
    /// nothing.
    fn flush<'a>(&'a self, account: &'a AccountId) -> BoxFuture<'a, StoreResult<()>> {
        let _ = account;
        Box::pin(async { Ok(()) })
    }
}

/// The started loops.
#[derive(Clone)]
pub struct Background(Arc<Registry>);

struct Registry {
    loops: Vec<Arc<dyn Loop>>,
    stop: watch::Sender<()>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Background {
    /// Starts every loop, each in a task of its own.
    pub fn start(loops: Vec<Arc<dyn Loop>>) -> Self {
        let (stop, _) = watch::channel(());
        let tasks = loops
            .iter()
            .map(|each| tokio::spawn(Arc::clone(each).run(stop.subscribe())))
            .collect();
        Self(Arc::new(Registry {
            loops,
            stop,
            tasks: Mutex::new(tasks),
        }))
    }

    /// Flushes every loop for `account`, in order.
    pub async fn flush(&self, account: &AccountId) -> StoreResult<()> {
        for each in &self.0.loops {
            each.flush(account).await?;
        }
        Ok(())
    }

    /// Tells every loop to stop and waits for them, at most `bound` in all; one still running
    /// then is aborted (its work is a row's claim, which lapses and is taken again).
    pub async fn drain(&self, bound: Duration) {
        self.0.stop.send_replace(());
        let tasks =
            std::mem::take(&mut *self.0.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        let deadline = tokio::time::Instant::now() + bound;
        for mut task in tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its flushes, and how many of its runs saw the stop.
    #[derive(Default)]
    struct Counting {
        flushed: AtomicUsize,
        stopped: AtomicUsize,
    }

    struct Named(Arc<Counting>, &'static str, Arc<Mutex<Vec<&'static str>>>);

    impl Loop for Named {
        fn run(self: Arc<Self>, mut stop: watch::Receiver<()>) -> BoxFuture<'static, ()> {
            Box::pin(async move {
                let _ = stop.changed().await;
                self.0.stopped.fetch_add(1, Ordering::SeqCst);
            })
        }

        fn flush<'a>(&'a self, _: &'a AccountId) -> BoxFuture<'a, StoreResult<()>> {
            Box::pin(async move {
                self.0.flushed.fetch_add(1, Ordering::SeqCst);
                self.2.lock().expect("lock").push(self.1);
                Ok(())
            })
        }
    }

    /// Never looks at its stop: the drain's bound ends it.
    struct Deaf;

    impl Loop for Deaf {
        fn run(self: Arc<Self>, _: watch::Receiver<()>) -> BoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn loops_flush_in_order_and_drain_when_told_to_stop() {
        // A loop that ignores its stop (`Deaf`) is aborted at the bound: the drain returns.
        let counting = Arc::new(Counting::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first: Arc<dyn Loop> =
            Arc::new(Named(Arc::clone(&counting), "first", Arc::clone(&order)));
        let second: Arc<dyn Loop> =
            Arc::new(Named(Arc::clone(&counting), "second", Arc::clone(&order)));
        let background = Background::start(vec![first, second, Arc::new(Deaf)]);
        background
            .flush(&AccountId::given("acct_x"))
            .await
            .expect("flush");
        assert_eq!(*order.lock().expect("lock"), vec!["first", "second"]);
        assert_eq!(
            counting.stopped.load(Ordering::SeqCst),
            0,
            "running until told"
        );
        background.drain(Duration::from_millis(200)).await;
        assert_eq!(
            counting.stopped.load(Ordering::SeqCst),
            2,
            "both saw the stop"
        );
        assert_eq!(counting.flushed.load(Ordering::SeqCst), 2);
    }
}
