//! The sandbox's status webhooks: `status_delay` after a message its `sent`, and as long again
//! after that its `delivered` (or, for `FAILS_TO_DELIVER`, `failed` with Meta's error 131026),
//! each in Meta's webhook shape, signed `X-Hub-Signature-256` with the number's app secret and
//! posted to the number's webhook URL. A number without a URL (or without a secret) gets none.
//!
//! The URL is the operator's (the service's own ingress, or one set with the admin token), so it
//! may be private; it is still posted through the guarded client, which follows no redirect and
//! gives up after a timeout. A post that is not answered 2xx is tried twice more; the statuses
//! posting at once are bounded, and beyond that bound a status is dropped (as a real peer's
//! webhook can be lost: the notice stays `sent`).

use super::SandboxWhatsapp;
use crate::egress::{AddressPolicy, GuardedClient};
use crate::whatsapp::signature;
use crate::whatsapp::wire::{
    Change, ChangeValue, Entry, Metadata, PRODUCT, Status, StatusError, Webhook,
};
use std::sync::Arc;
use std::time::Duration;

/// How long one post may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages whose statuses may be under way at once.
pub(super) const AT_ONCE: usize = 256;

pub(super) fn statuses_client() -> reqwest::Result<GuardedClient> {
    GuardedClient::new(
        AddressPolicy::AllowPrivate,
        crate::egress::system_resolver(),
        ATTEMPT_TIMEOUT,
        concat!("billing-sandbox-whatsapp/", env!("CARGO_PKG_VERSION")),
    )
}

/// Meta's status webhook for one message.
pub fn webhook(phone_number_id: &str, wamid: &str, to: &str, status: &str, at: i64) -> Webhook {
    let errors = if status == "failed" {
        vec![StatusError {
            code: 131_026,
            title: "Message undeliverable".to_owned(),
            message: Some("Message undeliverable".to_owned()),
        }]
    } else {
        Vec::new()
    };
    Webhook {
        object: "whatsapp_business_account".to_owned(),
        entry: vec![Entry {
            id: format!("waba{phone_number_id}"),
            changes: vec![Change {
                field: "messages".to_owned(),
                value: ChangeValue {
                    messaging_product: PRODUCT.to_owned(),
                    metadata: Metadata {
                        display_phone_number: None,
                        phone_number_id: phone_number_id.to_owned(),
                    },
                    statuses: vec![Status {
                        id: wamid.to_owned(),
                        status: status.to_owned(),
                        timestamp: at.to_string(),
                        recipient_id: to.to_owned(),
                        errors,
                    }],
                },
            }],
        }],
    }
}

impl SandboxWhatsapp {
    /// Posts the message's statuses in the background.
    pub(super) fn report_later(
        self: &Arc<Self>,
        phone_number_id: &str,
        wamid: &str,
        to: &str,
        fails: bool,
    ) {
        let target = {
            let numbers = super::lock(&self.numbers);
            numbers
                .get(phone_number_id)
                .and_then(|number| Some((number.webhook_url.clone()?, number.app_secret.clone()?)))
        };
        let Some((url, secret)) = target else {
            return;
        };
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            return;
        };
        let sandbox = Arc::clone(self);
        let (phone_number_id, wamid, to) =
            (phone_number_id.to_owned(), wamid.to_owned(), to.to_owned());
        tokio::spawn(async move {
            let last = if fails { "failed" } else { "delivered" };
            for status in ["sent", last] {
                tokio::time::sleep(sandbox.config.status_delay).await;
                let at = chrono::Utc::now().timestamp();
                let body = webhook(&phone_number_id, &wamid, &to, status, at);
                sandbox.set_status(&wamid, status);
                sandbox.post(&url, &secret, &body).await;
            }
            drop(slot);
        });
    }

    /// Posts `body` signed, up to three times until it is answered 2xx.
    async fn post(&self, url: &str, secret: &str, body: &Webhook) {
        let Ok(raw) = serde_json::to_vec(body) else {
            return;
        };
        let signed = signature::sign(secret, &raw);
        for wait in [0, 1, 5] {
            tokio::time::sleep(Duration::from_secs(wait)).await;
            let Ok(request) = self.http.post(url) else {
                return;
            };
            let request = request
                .header(signature::HEADER, &signed)
                .header("content-type", "application/json")
                .body(raw.clone());
            if let Ok(response) = self.http.send(request).await
                && response.status().is_success()
            {
                return;
            }
        }
    }
}
