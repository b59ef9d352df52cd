//! `Idempotency-Key` on every POST, as one layer (CONTRACT §3): the first response under a key
//! is kept and replayed for 24 hours; another body under the same key is refused (400); a
//! duplicate that arrives while the first still runs is answered 409 at once.
//!
//! The request runs in a task of its own from its key's claim on: axum drops a handler's future
//! when its client hangs up, and a request cut off half-way (its key claimed, its subscription
//! written, its charge posted, its response never stored) would leave its key locked and tempt
//! the client to use a new one. The task runs the handler to its end and keeps its response,
//! whoever still listens.
//!
//! Which responses are kept: every 2xx and 4xx (a 4xx commits nothing and would be answered the
//! same again), and every 5xx except those marked `NothingCommitted`. A 5xx may come after some
//! of the request's effects were committed (a subscription written, then its actor timed out);
//! releasing the key would let the retry do them twice, so only a failure known to precede the
//! first write (`ApiError::Uncommitted`) releases it. Keys older than 24 hours are deleted by
//! `purge_loop`; this module does not decide what a handler commits, only what its answer says.
//!
//! Those tasks are `RequestTasks`: at shutdown the service waits for them (bounded by
//! `Config::shutdown_grace_secs`) before it gives its shards back and closes its database
//! pool, so that a request whose client hung up still ends and keeps its response, instead of
//! stopping between two of its units with its key left `running`.

use super::error::ApiError;
use super::error::NothingCommitted;
use crate::ids::AccountId;
use crate::store::Store;
use crate::store::idempotency::Claim;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub const HEADER: &str = "idempotency-key";
pub(super) const MAX_BODY: usize = 1024 * 1024;
/// Tries at storing a finished request's response (or releasing its key) before giving up.
const KEEP_ATTEMPTS: u32 = 5;
/// Keys deleted per statement by the purge: small enough that SQLite's one writer is never
/// held long, large enough that a day's backlog goes in few statements.
pub const PURGE_BATCH: u64 = 1_000;

/// Why an `Idempotency-Key` header is refused (400, param `Idempotency-Key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("Idempotency-Key must be 1 to {MAX_KEY_LEN} characters")]
    Length,
    #[error("Idempotency-Key must be printable ASCII")]
    Characters,
}

/// The namespace a request's keys live in when it is not the API key's account's own: a
/// credential other than an API key (a portal session) puts one on the request, and its keys
/// are stored as `scoped_key` makes them (CONTRACT §3: keys are scoped to the credential).
#[derive(Clone, Debug)]
pub struct IdempotencyScope(pub String);

impl IdempotencyScope {
    /// `key` in this scope, as stored: the scope, a middle dot, the key. A key as a client
    /// sends it is printable ASCII (`parse_key`), so it never holds the middle dot: no key an
    /// API key sends can equal one of a scope, and no two scopes share one.
    pub fn scoped_key(&self, key: &str) -> String {
        format!("{}\u{b7}{key}", self.0)
    }
}

/// The longest key: a UUID or a client's own composite key fits many times over.
pub const MAX_KEY_LEN: usize = 255;

/// Validates a raw `Idempotency-Key` header value: 1 to 255 printable ASCII characters
/// (0x20–0x7E). Before, a value with other bytes (UTF-8,
/// a tab, obs-text) was not readable as text and the request then ran without idempotency, so
/// a client's retry could create twice; it is refused now instead of ignored. Fuzzed by the
/// target `idempotency_key`.
pub fn parse_key(raw: &[u8]) -> Result<&str, KeyError> {
    if raw.is_empty() || raw.len() > MAX_KEY_LEN {
        return Err(KeyError::Length);
    }
    if !raw.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(KeyError::Characters);
    }
    std::str::from_utf8(raw).map_err(|_| KeyError::Characters)
}

/// The tasks in which keyed requests run, kept for the shutdown to wait for. A generation at
/// a time: `seal` closes the tasks running now for `drain` and starts a new generation for the
/// requests still accepted meanwhile, so that the first wait is not drawn out by new arrivals.
#[derive(Clone, Default)]
pub struct RequestTasks(Arc<std::sync::Mutex<TaskTracker>>);

impl RequestTasks {
    /// Runs `task` as one of the tracked requests.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.current().spawn(task)
    }

    fn current(&self) -> TaskTracker {
        self.0.lock().map_or_else(
            |poisoned| poisoned.into_inner().clone(),
            |tracker| tracker.clone(),
        )
    }

    /// Closes the generation running now and starts a new one; returns the closed one.
    pub fn seal(&self) -> TaskTracker {
        let fresh = TaskTracker::new();
        let mut current = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let sealed = std::mem::replace(&mut *current, fresh);
        sealed.close();
        sealed
    }

    /// Waits until the requests running now have ended, or until `deadline`; false when some
    /// were still running then (they are dropped with the process).
    pub async fn drain(&self, deadline: tokio::time::Instant) -> bool {
        let sealed = self.seal();
        if sealed.is_empty() {
            return true;
        }
        tracing::info!(
            requests = sealed.len(),
            "waiting for the requests in flight to end"
        );
        let ended = tokio::time::timeout_at(deadline, sealed.wait())
            .await
            .is_ok();
        if !ended {
            tracing::warn!(
                requests = sealed.len(),
                "requests still running at the end of the shutdown grace; their keys answer 409 until they expire"
            );
        }
        ended
    }
}

/// A key this request holds once `claim` succeeded.
pub(super) struct HeldKey {
    pub(super) store: Store,
    pub(super) account: AccountId,
    pub(super) key: String,
}

impl HeldKey {
    /// Takes the key for this request (`None`), or answers in its place: the kept response,
    /// 400 for another request under the key, 409 while the first still runs.
    pub(super) async fn claim(&self, fingerprint: &str) -> Result<Option<Response>, ApiError> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        match self
            .store
            .claim_idempotency_key(&self.account, &self.key, fingerprint, now_ms)
            .await?
        {
            Claim::Fresh => Ok(None),
            Claim::Replay { status, body } => Ok(Some(replay(status, body))),
            Claim::Mismatch => Err(ApiError::Idempotency {
                status: StatusCode::BAD_REQUEST,
                message: "This Idempotency-Key was already used with a different request."
                    .to_owned(),
            }),
            Claim::InFlight => Err(ApiError::Idempotency {
                status: StatusCode::CONFLICT,
                message: "A request with this Idempotency-Key is still being processed; retry \
                          after it finishes to get its response."
                    .to_owned(),
            }),
        }
    }

    /// Runs `work` to its end in a task of its own, keeps its response for the key, and
    /// answers it. Dropping the returned future (the client hung up) does not stop the task.
    pub(super) async fn run(
        self,
        work: impl Future<Output = Response> + Send + 'static,
    ) -> Response {
        let task = async move {
            // The handler in a task of its own, so that a panic in it still ends here (and
            // is kept, as a 500 whose effects are unknown) instead of unwinding past `keep`.
            let response = match tokio::spawn(work.in_current_span()).await {
                Ok(response) => response,
                Err(_) => ApiError::Internal("handler panicked".into()).into_response(),
            };
            let (parts, body) = response.into_parts();
            let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
            let nothing_committed = parts.extensions.get::<NothingCommitted>().is_some();
            self.keep(parts.status, nothing_committed, &body).await;
            Response::from_parts(parts, Body::from(body))
        };
        tokio::spawn(task.instrument(tracing::Span::current()))
            .await
            .unwrap_or_else(|_| ApiError::Internal("request task failed".into()).into_response())
    }

    /// Stores the response for the key, or releases the key of a 5xx that committed nothing.
    /// Retried a few times: a key left `running` answers 409 until it expires.
    async fn keep(&self, status: StatusCode, nothing_committed: bool, body: &[u8]) {
        let release = status.is_server_error() && nothing_committed;
        for attempt in 0..KEEP_ATTEMPTS {
            let kept = if release {
                self.store
                    .release_idempotency_key(&self.account, &self.key)
                    .await
            } else {
                let text = String::from_utf8_lossy(body).into_owned();
                self.store
                    .finish_idempotency_key(&self.account, &self.key, status.as_u16(), text)
                    .await
            };
            match kept {
                Ok(()) => return,
                Err(err) => {
                    tracing::warn!(error = %err, attempt, "could not keep an idempotent response");
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
            }
        }
        tracing::error!(
            key = %self.key,
            "gave up keeping an idempotent response; the key answers 409 until it expires"
        );
    }
}

/// A kept response, answered again.
fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// Deletes keys older than 24 hours, at start and then every `every`, in batches of
/// `PURGE_BATCH`, until `stop`'s sender is dropped, and the console's expired sessions and
/// invitations with them. A claim treats an expired key as new anyway, and an expired session
/// or invitation opens nothing; the purge only keeps the tables from growing for ever.
/// The purge as a background loop (`background::Loop`): nothing in it is clock-bound.
pub struct Purge {
    pub store: Store,
    pub every: Duration,
}

impl crate::background::Loop for Purge {
    fn run(
        self: std::sync::Arc<Self>,
        stop: tokio::sync::watch::Receiver<()>,
    ) -> crate::background::BoxFuture<'static, ()> {
        Box::pin(purge_loop(self.store.clone(), self.every, stop))
    }
}

async fn purge_loop(store: Store, every: Duration, mut stop: tokio::sync::watch::Receiver<()>) {
    loop {
        purge_once(&store).await;
        let now_ms = chrono::Utc::now().timestamp_millis();
        if let Err(err) = store.purge_expired_console_rows(now_ms).await {
            tracing::warn!(error = %err, "purging expired console sessions failed");
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn purge_once(store: &Store) {
    loop {
        let now_ms = chrono::Utc::now().timestamp_millis();
        match store
            .purge_expired_idempotency_keys(now_ms, PURGE_BATCH)
            .await
        {
            Ok(deleted) if deleted >= PURGE_BATCH => {
                // Let the other writers in between two batches.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(_) => return,
            Err(err) => {
                tracing::warn!(error = %err, "purging expired idempotency keys failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::idempotency::test_store;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn held(store: &Store) -> HeldKey {
        HeldKey {
            store: store.clone(),
            account: AccountId::parse("acct_1").expect("an account's id"),
            key: "k".to_owned(),
        }
    }

    /// One request under the key `k`, through the layer's steps; `runs` counts its work.
    async fn send(store: &Store, runs: &Arc<AtomicUsize>, answer: fn() -> Response) -> Response {
        let held = held(store);
        if let Some(kept) = held.claim("request").await.expect("claim") {
            return kept;
        }
        let runs = Arc::clone(runs);
        held.run(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            answer()
        })
        .await
    }

    fn replayed(response: &Response) -> bool {
        response.headers().contains_key("idempotent-replayed")
    }

    #[test]
    fn a_scoped_key_is_never_a_key_a_client_can_send() {
        let scoped = IdempotencyScope("portal:bps_1".to_owned()).scoped_key("order-42");
        assert!(parse_key(scoped.as_bytes()).is_err());
        assert_ne!(
            scoped,
            IdempotencyScope("portal:bps_2".to_owned()).scoped_key("order-42")
        );
    }

    #[tokio::test]
    async fn a_5xx_whose_effects_are_unknown_keeps_its_key_and_is_replayed() {
        let store = test_store().await;
        let runs = Arc::new(AtomicUsize::new(0));
        // As a create did when its actor timed out after the subscription was written.
        let failed =
            || ApiError::Internal("actor unavailable after the commit".into()).into_response();
        let first = send(&store, &runs, failed).await;
        assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let retry = send(&store, &runs, failed).await;
        assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(replayed(&retry));
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the retry did not run again"
        );
    }

    #[tokio::test]
    async fn a_5xx_that_committed_nothing_releases_its_key() {
        let store = test_store().await;
        let runs = Arc::new(AtomicUsize::new(0));
        let failed = || {
            ApiError::Internal("database unreachable before any write".into())
                .before_any_write()
                .into_response()
        };
        let first = send(&store, &runs, failed).await;
        assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let retry = send(&store, &runs, || StatusCode::CREATED.into_response()).await;
        assert_eq!(retry.status(), StatusCode::CREATED);
        assert!(!replayed(&retry));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "the retry ran the request");
    }

    #[tokio::test]
    async fn a_4xx_is_kept_for_its_key() {
        let store = test_store().await;
        let runs = Arc::new(AtomicUsize::new(0));
        let refused = || ApiError::conflict("The subscription is canceled.").into_response();
        send(&store, &runs, refused).await;
        let retry = send(&store, &runs, refused).await;
        assert_eq!(retry.status(), StatusCode::CONFLICT);
        assert!(replayed(&retry));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_panicking_handler_does_not_leave_its_key_running() {
        let store = test_store().await;
        let runs = Arc::new(AtomicUsize::new(0));
        let first = send(&store, &runs, || panic!("handler bug")).await;
        assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
        // Kept as a 500 (what the handler did before panicking is unknown), not left running.
        let retry = send(&store, &runs, || StatusCode::CREATED.into_response()).await;
        assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(replayed(&retry));
    }

    #[test]
    fn keys_are_one_to_255_printable_ascii_characters() {
        assert_eq!(parse_key(b"order-1 retry"), Ok("order-1 retry"));
        assert_eq!(parse_key(&[b'k'; 255]).map(str::len), Ok(255));
        assert_eq!(parse_key(&[b'k'; 256]), Err(KeyError::Length));
        assert_eq!(parse_key(b""), Err(KeyError::Length));
        assert_eq!(parse_key("pedido-ñ".as_bytes()), Err(KeyError::Characters));
        assert_eq!(parse_key(b"a\tb"), Err(KeyError::Characters));
        assert_eq!(parse_key(b"a\x7fb"), Err(KeyError::Characters));
    }

    mod properties {
        use super::super::{MAX_KEY_LEN, parse_key};
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// The fuzz target `idempotency_key`'s property, bounded.
            #[test]
            fn a_key_is_accepted_exactly_when_printable_and_short_enough(
                raw in proptest::collection::vec(
                    prop_oneof![3 => 0x20u8..=0x7e, 1 => any::<u8>()], 0..300),
            ) {
                let expected = !raw.is_empty()
                    && raw.len() <= MAX_KEY_LEN
                    && raw.iter().all(|b| (0x20..=0x7e).contains(b));
                match parse_key(&raw) {
                    Ok(key) => prop_assert!(expected && key.as_bytes() == raw.as_slice()),
                    Err(_) => prop_assert!(!expected),
                }
            }
        }
    }
}
