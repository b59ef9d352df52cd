//! The sandbox's events: a transaction turns final after `settle_delay`, and its signed
//! `transaction.updated` is POSTed to its merchant's events URL, again after each delay of
//! `event_retry_delays` until one answers 200.
//!
//! The URL is trusted (the service's own ingress, or one the operator set with the admin
//! token), so it may be private (CONTRACT §7); yet it is posted through the same guarded
//! client as webhooks (`egress`), which follows no redirect, uses no proxy and gives up after
//! a timeout: a redirect would carry a signed event, and a request from our server, wherever
//! the answering host chose.

use super::SandboxProcessor;
use super::protocol::Outcome;
use super::state::Merchant;
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
    pub(super) fn settle_later(self: &Arc<Self>, id: String, outcome: Outcome) {
        let sandbox = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(sandbox.config.settle_delay).await;
            let Some(event) = sandbox.finalize(&id, outcome) else {
                return;
            };
            sandbox.deliver(event).await;
        });
    }

    /// Moves a transaction to its final status and builds the signed event.
    fn finalize(&self, id: &str, outcome: Outcome) -> Option<(Arc<Merchant>, Value)> {
        let (merchant, body) = self.transactions.update(id, |body| {
            body["status"] = json!(outcome.status());
            body["finalized_at"] = json!(chrono::Utc::now().to_rfc3339());
            if outcome != Outcome::Approved {
                body["status_message"] = json!(match outcome {
                    Outcome::Declined => "Transacción rechazada por el banco (sandbox)",
                    _ => "Error procesando la tarjeta (sandbox)",
                });
            }
        })?;
        let merchant = self.merchants.by_public(&merchant)?;
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
        Some((merchant, event))
    }

    /// POSTs the event to the merchant's events URL until it answers 200 or retries run out.
    /// A redirect is an answer that is not 200: retried at the same URL, never followed.
    async fn deliver(&self, (merchant, event): (Arc<Merchant>, Value)) {
        let Some(url) = merchant.events_url() else {
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
