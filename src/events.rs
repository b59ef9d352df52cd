//! The events' payloads (spec "Events", CONTRACT §6): every event a subscription's change emits
//! is built here, whoever writes it (the actor, direct creation, the checkout's settlement,
//! a refund), so its shape is written once.

use crate::domain::event_type::EventType;
use crate::store::charges::ChargeAttempt;
use crate::store::refunds::Refund;
use crate::store::subscriptions::{Event, Subscription, event_row};
use serde_json::{Value, json};

/// The event `event_type` of `sub`, in the spec's payload shape: `data.subscription_id`,
/// `data.metadata` (the subscription's, or null) and, for charge events, the charge's id, raw
/// processor status and amount.
pub fn subscription_event(
    sub: &Subscription,
    event_type: EventType,
    charge: Option<(&ChargeAttempt, &str)>,
    now_ms: i64,
) -> Event {
    event_of(sub, event_type, event_data(sub, charge), now_ms)
}

/// `charge.refunded`: the charge event's data (`charge_attempt_id`, the refund's raw `status`)
/// with `refund_id`, and `amount_in_cents` the amount this refund gave back.
pub fn charge_refunded_event(
    sub: &Subscription,
    charge: &ChargeAttempt,
    refund: &Refund,
    raw_status: &str,
    now_ms: i64,
) -> Event {
    let mut data = event_data(sub, Some((charge, raw_status)));
    data["refund_id"] = json!(refund.id);
    data["amount_in_cents"] = json!(refund.amount_cents);
    event_of(sub, EventType::ChargeRefunded, data, now_ms)
}

/// An event's `data`: the subscription's id and metadata, and a charge's fields.
fn event_data(sub: &Subscription, charge: Option<(&ChargeAttempt, &str)>) -> Value {
    let metadata: Value = sub
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::Null);
    let mut data = json!({"subscription_id": sub.id, "metadata": metadata});
    if let Some((charge, raw_status)) = charge {
        data["charge_attempt_id"] = json!(charge.id);
        data["status"] = json!(raw_status);
        data["amount_in_cents"] = json!(charge.amount_cents);
        if let Some(decline) = charge.decline_code {
            data["decline_code"] = json!(decline);
        }
    }
    data
}

/// The event row of `sub` with this type and data, as delivered.
fn event_of(sub: &Subscription, event_type: EventType, data: Value, now_ms: i64) -> Event {
    event_row(&sub.account_id, Some(&sub.id), event_type, data, now_ms)
}
