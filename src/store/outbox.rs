//! The events outbox's rows: every event is written, with its deliveries, in the transaction
//! of the change it reports; this is the envelope they share.

use super::entities::event;
use crate::ids::{AccountId, SubscriptionId};

pub use event::Model as Event;

/// An event row as delivered: the envelope every event shares (`id`, `type`, `created`, and the
/// `data` its builder gives: `events` for a subscription's, `invoices` for a document's).
pub fn event_row(
    account: &AccountId,
    subscription_id: Option<&SubscriptionId>,
    event_type: crate::domain::event_type::EventType,
    data: serde_json::Value,
    now_ms: i64,
) -> Event {
    let id = crate::ids::EventId::generate();
    let created = crate::domain::time::rfc3339(crate::domain::time::from_millis(now_ms));
    let body = serde_json::json!({"id": id, "type": event_type, "created": created, "data": data});
    Event {
        id,
        account_id: account.clone(),
        event_type,
        subscription_id: subscription_id.cloned(),
        body: body.to_string(),
        created_at: now_ms,
    }
}
