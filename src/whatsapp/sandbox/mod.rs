//! The sandbox WhatsApp: the Cloud API's shape served by our code, like the sandbox processor,
//! so that a sandbox account's WhatsApp notices cross a real HTTP boundary both ways: a
//! message is posted to it, and its statuses come back as signed webhooks. In-process under
//! `/sandbox/whatsapp` (`whatsapp::SANDBOX_MOUNT`), standalone at `/` (`billing
//! sandbox-whatsapp --bind ADDR`).
//!
//! - `messages`: `POST /{version}/{phone_number_id}/messages` with the number's access token
//!   (Meta's errors: 401 for a bad token, 400 for a bad payload or an unknown number).
//! - `statuses`: each message's `sent`, then `delivered` (or `failed`, for `FAILS_TO_DELIVER`),
//!   posted to the number's webhook URL and signed with its app secret.
//! - `admin`: `_sandbox`, behind the admin token: registering a number, listing what was sent.
//!
//! It keeps the last `max_messages` messages and at most `max_numbers` numbers, in memory only.
//! Test recipients: `FAILS_TO_DELIVER` is accepted and then fails; `UNAVAILABLE` is answered
//! 503 (Meta's "service unavailable", tried again); `NOT_ON_WHATSAPP` is refused with 400.

mod admin;
mod messages;
mod statuses;

pub use crate::processor::sandbox::AdminAuth;

use crate::egress::GuardedClient;
use crate::secrets::sha256_hex;
use axum::Router;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A recipient whose messages are accepted, reported `sent`, then `failed`.
pub const FAILS_TO_DELIVER: &str = "573009990001";
/// A recipient whose messages are answered 503 (Meta's code 131016).
pub const UNAVAILABLE: &str = "573009990503";
/// A recipient that is not on WhatsApp: 400 (Meta's code 131026).
pub const NOT_ON_WHATSAPP: &str = "573009990400";

#[derive(Clone, Debug)]
pub struct SandboxWhatsappConfig {
    /// How long after a message its `sent` status is posted, and again its `delivered` (or
    /// `failed`) after that.
    pub status_delay: Duration,
    /// How many messages are kept (the oldest go first).
    pub max_messages: usize,
    /// How many numbers may be registered before a new one is refused.
    pub max_numbers: usize,
}

impl Default for SandboxWhatsappConfig {
    fn default() -> Self {
        Self {
            status_delay: Duration::from_millis(300),
            max_messages: 1_000,
            max_numbers: 10_000,
        }
    }
}

/// A business phone number the sandbox serves: who may send from it, where its statuses go.
#[derive(Clone)]
pub struct PhoneNumber {
    pub phone_number_id: String,
    pub access_token: String,
    pub app_secret: Option<String>,
    pub webhook_url: Option<String>,
}

/// What the sandbox keeps of it: the token's hash only.
struct Number {
    token_hash: String,
    app_secret: Option<String>,
    webhook_url: Option<String>,
}

/// A message as the sandbox received it.
#[derive(Clone, Debug, Serialize)]
pub struct Received {
    pub id: String,
    pub phone_number_id: String,
    pub to: String,
    pub template: String,
    pub language: String,
    pub parameters: Vec<String>,
    /// `accepted`, then the last status posted (`sent`, `delivered`, `failed`).
    pub status: String,
    pub received_at: i64,
}

pub struct SandboxWhatsapp {
    config: SandboxWhatsappConfig,
    admin: AdminAuth,
    http: GuardedClient,
    numbers: Mutex<HashMap<String, Number>>,
    received: Mutex<VecDeque<Received>>,
    counter: AtomicU64,
    /// Messages whose statuses are under way (`statuses::AT_ONCE` at most).
    slots: Arc<tokio::sync::Semaphore>,
}

/// Why a number was not registered.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

impl SandboxWhatsapp {
    /// A sandbox administered by the holder of `admin`'s token.
    pub fn new(config: SandboxWhatsappConfig, admin: AdminAuth) -> reqwest::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            http: statuses::statuses_client()?,
            config,
            admin,
            numbers: Mutex::default(),
            received: Mutex::default(),
            counter: AtomicU64::new(1),
            slots: Arc::new(tokio::sync::Semaphore::new(statuses::AT_ONCE)),
        }))
    }

    /// Serves `number` (or changes what it was told of it). For the service itself (its
    /// sandbox accounts) and the `_sandbox` administration.
    pub fn register(&self, number: PhoneNumber) -> Result<(), Full> {
        let mut numbers = lock(&self.numbers);
        if !numbers.contains_key(&number.phone_number_id)
            && numbers.len() >= self.config.max_numbers
        {
            return Err(Full);
        }
        numbers.insert(
            number.phone_number_id,
            Number {
                token_hash: sha256_hex(&number.access_token),
                app_secret: number.app_secret,
                webhook_url: number.webhook_url,
            },
        );
        Ok(())
    }

    /// The messages kept, oldest first; only `phone_number_id`'s when given.
    pub fn received(&self, phone_number_id: Option<&str>) -> Vec<Received> {
        lock(&self.received)
            .iter()
            .filter(|message| phone_number_id.is_none_or(|id| message.phone_number_id == id))
            .cloned()
            .collect()
    }

    /// The routes, relative: the caller nests them (`/sandbox/whatsapp`, or `/` standalone).
    pub fn router(self: Arc<Self>) -> Router {
        messages::router(Arc::clone(&self)).nest("/_sandbox", admin::router(self))
    }

    fn keep(&self, message: Received) {
        let mut received = lock(&self.received);
        while received.len() >= self.config.max_messages.max(1) {
            received.pop_front();
        }
        received.push_back(message);
    }

    fn set_status(&self, wamid: &str, status: &str) {
        if let Some(message) = lock(&self.received).iter_mut().find(|m| m.id == wamid) {
            status.clone_into(&mut message.status);
        }
    }

    fn next_wamid(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!(
            "wamid.sandbox{}{n:08}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        )
    }
}

/// A poisoned lock still holds consistent data here (every update is one assignment).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serves the sandbox alone (`billing sandbox-whatsapp --bind ADDR`): the Cloud API at `/`
/// (`/v21.0/{phone_number_id}/messages`), administered by the holder of `admin`'s token,
/// until `shutdown` completes.
pub async fn serve_standalone(
    listener: tokio::net::TcpListener,
    config: SandboxWhatsappConfig,
    admin: AdminAuth,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let sandbox = SandboxWhatsapp::new(config, admin)?;
    axum::serve(listener, sandbox.router())
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
