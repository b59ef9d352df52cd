//! The hosted checkout (CONTRACT §8): the page where customers pay (`page`), the internal
//! `POST /checkout/{id}/complete` it calls (`payment`), and the settlement that turns an
//! approved payment into a Customer, PaymentMethod and Subscription (re-exported from
//! `crate::checkout_settlement`, which the outcome router reaches without this module's HTTP
//! side).
//!
//! The session API that integrators call lives in `api::checkout_sessions`; this module owns
//! what the customer's browser talks to, which carries no API key: the session's unguessable
//! id in its URL is the customer's only credential, as on any hosted payment page. Card
//! numbers never reach this module: the browser tokenizes them with the processor.

pub mod i18n;
mod page;
mod payment;
mod promotion;

use crate::domain::checkout::SessionStatus;
use crate::http::state::AppState;
use crate::ids::SubscriptionId;
use crate::store::checkout::CheckoutSession;
use crate::store::{Store, StoreResult};
use utoipa_axum::router::OpenApiRouter;

pub use crate::checkout_settlement::settle;
pub use payment::{CompleteIn, CompleteOut, SummaryOut};

/// The page, its assets and the complete endpoint (documented in the OpenAPI document).
pub fn router() -> OpenApiRouter<AppState> {
    payment::router()
        .merge(page::router())
        .merge(promotion::router())
}

/// The session as it stands at `now_ms` (the account's clock): an open session whose
/// `expires_at` has passed, with no payment in flight, is marked expired first.
pub async fn current(
    store: &Store,
    session: CheckoutSession,
    now_ms: i64,
) -> StoreResult<CheckoutSession> {
    if session.status != SessionStatus::Open.as_str()
        || session.expires_at > now_ms
        || session.attempt_charge_id.is_some()
    {
        return Ok(session);
    }
    store.expire_checkout_session(&session.id, now_ms).await?;
    Ok(store
        .checkout_session_by_id(&session.id)
        .await?
        .unwrap_or(session))
}

/// `success_url` with the query the contract names: `subscription_id`, `status`,
/// `amount_in_cents`, `currency`, and nothing personal.
pub fn redirect_url(
    success_url: &str,
    subscription_id: &SubscriptionId,
    status: &str,
    amount_cents: i64,
) -> Option<String> {
    let mut url = url::Url::parse(success_url).ok()?;
    url.query_pairs_mut()
        .append_pair("subscription_id", subscription_id.as_str())
        .append_pair("status", status)
        .append_pair("amount_in_cents", &amount_cents.to_string())
        .append_pair("currency", crate::domain::money::CURRENCY);
    Some(url.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redirect_keeps_the_merchants_query_and_adds_ours() {
        let url = redirect_url(
            "https://shop.example/thanks?order=7",
            &SubscriptionId::parse("sub_1").expect("an id"),
            "APPROVED",
            4_990_000,
        );
        assert_eq!(
            url.as_deref(),
            Some(
                "https://shop.example/thanks?order=7&subscription_id=sub_1&status=APPROVED&amount_in_cents=4990000&currency=COP"
            )
        );
    }
}
