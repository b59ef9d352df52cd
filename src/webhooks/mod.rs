//! Outgoing webhooks: what an event type is, how a delivery is signed and sent, when it is
//! retried, and which URLs may receive. The actor that drives an endpoint's deliveries is in
//! `actors::endpoint`; the rows are in `store::webhooks`.

pub mod schedule;
pub mod send;
pub mod signing;
pub mod target;

use crate::domain::event_type::EventType;

/// Every event type an endpoint can subscribe to (`*` subscribes to all).
pub const EVENT_TYPES: &[&str] = EventType::WORDS;

/// The largest event body we send (spec: 64 KB).
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// Whether `name` is a known event type or the wildcard.
pub fn is_event_type(name: &str) -> bool {
    name == "*" || EventType::parse(name).is_some()
}
