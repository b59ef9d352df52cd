//! The loops that run beside the requests, as the test clock sees them: each one that sends
//! what falls due by an account's clock (the notices' delivery) registers here, and an advance
//! of the test clock flushes them all, in order, once the timers it woke have run. The HTTP
//! layer holds the registry, not the loops, so that a loop may use what the HTTP layer uses
//! (the documents) without the two importing each other.

use crate::ids::AccountId;
use crate::store::StoreResult;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A loop that can send now what is due by an account's clock.
pub trait Flush: Send + Sync {
    fn flush<'a>(
        &'a self,
        account: &'a AccountId,
    ) -> Pin<Box<dyn Future<Output = StoreResult<()>> + Send + 'a>>;
}

/// The registered loops, flushed in the order they were given.
#[derive(Clone, Default)]
pub struct Background(Arc<Vec<Arc<dyn Flush>>>);

impl Background {
    pub fn new(loops: Vec<Arc<dyn Flush>>) -> Self {
        Self(Arc::new(loops))
    }

    /// Flushes every loop for `account`, in order.
    pub async fn flush(&self, account: &AccountId) -> StoreResult<()> {
        for each in self.0.iter() {
            each.flush(account).await?;
        }
        Ok(())
    }
}
