//! The sandbox's events: a transaction turns final after `settle_delay` (or is voided), and
//! its signed `transaction.updated` is POSTed to its merchant's events URL, again after each
//! delay of `event_retry_delays` (Wompi's 30 minutes, 3 hours and 24 hours) until one answers
//! 200. Refunds send no event: the service asks about them.
//!
//! The URL is trusted (the service's own ingress, or one the operator set with the admin
//! token), so it may be private (CONTRACT §7); yet it is posted through the same guarded
//! client as webhooks (`egress`), which follows no redirect, uses no proxy and gives up after
//! a timeout: a redirect would carry a signed event, and a request from our server, wherever
//! the answering host chose.

use super::SandboxProcessor;
use super::merchants::Merchant;
use super::scenario::Scenario;
use crate::egress::{AddressPolicy, GuardedClient};
use crate::processor::signature::event_checksum;
use axum::http::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// How long one delivery attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// The one place the events' HTTP client is built: guarded, private addresses permitted.
pub(super) fn events_client() -> Result<GuardedClient, reqwest::Error> {
    GuardedClient::new(
        AddressPolicy::AllowPrivate,
        crate::egress::system_resolver(),
        ATTEMPT_TIMEOUT,
        concat!("billing-sandbox-processor/", env!("CARGO_PKG_VERSION")),
    )
}

impl SandboxProcessor {
    /// Turns the transaction `id` final after `settle_delay`, as `scenario` says, and sends
    /// its event.
    pub(super) fn settle_later(self: &Arc<Self>, id: String, scenario: Scenario) {
        let sandbox = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(sandbox.config.settle_delay).await;
            let Some((merchant, body)) = sandbox.ledger.update(&id, |body| {
                body["status"] = json!(scenario.transaction_status());
                body["finalized_at"] = json!(chrono::Utc::now().to_rfc3339());
                if let Some(message) = scenario.status_message() {
                    body["status_message"] = json!(message);
                }
            }) else {
                return;
            };
            let Some(merchant) = sandbox.merchants.by_public(&merchant) else {
                return;
            };
            sandbox.deliver(&merchant, &body).await;
        });
    }

    /// Sends the event of `merchant`'s transaction `body`, now changed, in the background.
    pub(super) fn announce(self: &Arc<Self>, merchant: Arc<Merchant>, body: Value) {
        let sandbox = Arc::clone(self);
        tokio::spawn(async move { sandbox.deliver(&merchant, &body).await });
    }

    /// The signed `transaction.updated` of a transaction's body.
    fn signed_event(merchant: &Merchant, body: &Value) -> Option<Value> {
        let mut event = json!({
            "event": "transaction.updated",
            "data": {"transaction": body},
            "environment": "test",
            "signature": {"properties": ["transaction.id", "transaction.status", "transaction.amount_in_cents"]},
            "timestamp": chrono::Utc::now().timestamp(),
            "sent_at": chrono::Utc::now().to_rfc3339(),
        });
        let checksum = event_checksum(&event, &merchant.keys.events_secret)?;
        event["signature"]["checksum"] = json!(checksum);
        Some(event)
    }

    /// POSTs the event to the merchant's events URL until it answers 200 or retries run out.
    /// A redirect is an answer that is not 200: retried at the same URL, never followed.
    async fn deliver(&self, merchant: &Merchant, body: &Value) {
        let Some(url) = merchant.events_url() else {
            return;
        };
        let Some(event) = Self::signed_event(merchant, body) else {
            return;
        };
        let checksum = event["signature"]["checksum"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut delays = self.config.event_retry_delays.iter();
        loop {
            let sent = {
                let _slot = self.event_slots.acquire().await;
                match self.http.post(&url) {
                    Ok(request) => {
                        let request = request.header("X-Event-Checksum", &checksum).json(&event);
                        self.http.send(request).await
                    }
                    Err(err) => Err(err),
                }
            };
            if sent.is_ok_and(|r| r.status() == StatusCode::OK) {
                return;
            }
            let Some(delay) = delays.next() else {
                tracing::warn!(url = %url, "sandbox processor gave up delivering an event");
                return;
            };
            tokio::time::sleep(*delay).await;
        }
    }
}
