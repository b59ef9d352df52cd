//! The notices' sink (CONTRACT §15): what turns an event into its notices inside the event's
//! transaction, used by every path that writes events (`webhooks::fan_out` one at a time,
//! `batch::statements::event_statements` in batches).
//!
//! A notice is keyed by its cause (`receipt:in_…`, `payment_failed:ch_…`,
//! `subscription_canceled:sub_…`) and channel; the unique index makes a replayed or repeated
//! event write nothing more (`ON CONFLICT DO NOTHING`). What a notice says is read when it is
//! sent, not when it is written: the sink costs one read of the account's settings per
//! transaction (and, for an account with notices on, one read of what the event is about).
//! A WhatsApp notice is written only for a customer with a phone who opted in to WhatsApp.

use super::StoreResult;
use super::entities::notice::Model as Notice;
use super::entities::{account, customer, invoice, notice, subscription};
use super::outbox::Event;
use crate::domain::notices::{Channel, NoticeKind, NoticeSettings, NoticeStatus};
use crate::ids::{AccountId, ChargeAttemptId, CustomerId, InvoiceId, NoticeId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};
use serde_json::Value;
use std::collections::HashMap;

/// An account's settings as the sink needs them: what to send, and whether DIAN is on (a
/// receipt then waits for DIAN's acceptance).
#[derive(Clone)]
struct AccountNotices {
    settings: NoticeSettings,
    dian: bool,
}

/// The notices `events` cause, to be inserted in the events' transaction (`insert_notices`):
/// for each event of a kind the account sends, one per channel it has on.
pub(crate) async fn notices_for<C: ConnectionTrait>(
    conn: &C,
    events: &[&Event],
) -> StoreResult<Vec<Notice>> {
    let mut accounts: HashMap<AccountId, Option<AccountNotices>> = HashMap::new();
    let mut notices = Vec::new();
    for event in events {
        let Some(kind) = kind_of(&event.event_type) else {
            continue;
        };
        if !accounts.contains_key(&event.account_id) {
            let read = account_notices(conn, &event.account_id).await?;
            accounts.insert(event.account_id.clone(), read);
        }
        let Some(Some(account)) = accounts.get(&event.account_id) else {
            continue;
        };
        if !account.settings.kinds.on(kind) {
            continue;
        }
        // With DIAN on, the receipt waits for DIAN's acceptance (it carries the
        // AttachedDocument); without, it goes with the invoice.
        let receipt_event = if account.dian {
            "invoice.dian_accepted"
        } else {
            "invoice.created"
        };
        if kind == NoticeKind::Receipt && event.event_type != receipt_event {
            continue;
        }
        let Some(about) = about(conn, event).await? else {
            continue;
        };
        let cause = match kind {
            NoticeKind::Receipt => about.invoice_id.as_ref().map(|id| format!("receipt:{id}")),
            NoticeKind::PaymentFailed => about
                .charge_id
                .as_ref()
                .map(|id| format!("payment_failed:{id}")),
            NoticeKind::SubscriptionCanceled => about
                .subscription_id
                .as_ref()
                .map(|id| format!("subscription_canceled:{id}")),
            _ => None,
        };
        let Some(cause) = cause else {
            continue;
        };
        for channel in account.settings.channels() {
            // WhatsApp only to a customer with a phone who opted in (CONTRACT §15).
            if channel == Channel::Whatsapp
                && !on_whatsapp(conn, &event.account_id, &about.customer_id).await?
            {
                continue;
            }
            notices.push(new_notice(event, kind, channel, &cause, &about));
        }
    }
    Ok(notices)
}

/// The multi-row insert of `notices`, once per cause and channel.
pub(crate) fn insert_notices_statement(
    backend: sea_orm::DbBackend,
    notices: Vec<Notice>,
) -> Option<sea_orm::Statement> {
    use sea_orm::{ActiveModelTrait, IntoActiveModel, QueryTrait};
    if notices.is_empty() {
        return None;
    }
    let rows = notices
        .into_iter()
        .map(|n| n.into_active_model().reset_all());
    Some(
        notice::Entity::insert_many(rows)
            .on_conflict(
                OnConflict::columns([
                    notice::Column::AccountId,
                    notice::Column::Cause,
                    notice::Column::Channel,
                ])
                .do_nothing()
                .to_owned(),
            )
            .build(backend),
    )
}

/// Inserts `notices` in the caller's transaction, once per cause and channel.
pub(crate) async fn insert_notices<C: ConnectionTrait>(
    conn: &C,
    notices: Vec<Notice>,
) -> StoreResult<()> {
    if let Some(statement) = insert_notices_statement(conn.get_database_backend(), notices) {
        conn.execute_raw(statement).await?;
    }
    Ok(())
}

/// The notice kind an event type may cause.
fn kind_of(event_type: &str) -> Option<NoticeKind> {
    match event_type {
        "invoice.created" | "invoice.dian_accepted" => Some(NoticeKind::Receipt),
        "charge.declined" => Some(NoticeKind::PaymentFailed),
        "subscription.canceled" => Some(NoticeKind::SubscriptionCanceled),
        _ => None,
    }
}

async fn account_notices<C: ConnectionTrait>(
    conn: &C,
    id: &AccountId,
) -> StoreResult<Option<AccountNotices>> {
    let row: Option<(Option<String>, Option<String>)> = account::Entity::find_by_id(id.clone())
        .select_only()
        .column(account::Column::Notices)
        .column(account::Column::Dian)
        .into_tuple()
        .one(conn)
        .await?;
    let Some((Some(raw), dian)) = row else {
        return Ok(None);
    };
    let settings = NoticeSettings::from_stored(Some(&raw));
    if settings.channels().next().is_none() {
        return Ok(None);
    }
    Ok(Some(AccountNotices {
        settings,
        dian: dian.is_some(),
    }))
}

/// Whether `customer` may be written to on WhatsApp: a phone, and their opt-in.
async fn on_whatsapp<C: ConnectionTrait>(
    conn: &C,
    account: &AccountId,
    customer: &CustomerId,
) -> StoreResult<bool> {
    let row: Option<(Option<String>, bool)> = customer::Entity::find_by_id(customer.clone())
        .filter(customer::Entity::of(account))
        .select_only()
        .column(customer::Column::Phone)
        .column(customer::Column::WhatsappOptIn)
        .into_tuple()
        .one(conn)
        .await?;
    Ok(row.is_some_and(|(phone, opted_in)| opted_in && phone.is_some_and(|p| !p.is_empty())))
}

/// What an event is about, as a notice refers to it.
struct About {
    customer_id: CustomerId,
    subscription_id: Option<SubscriptionId>,
    invoice_id: Option<InvoiceId>,
    charge_id: Option<ChargeAttemptId>,
}

async fn about<C: ConnectionTrait>(conn: &C, event: &Event) -> StoreResult<Option<About>> {
    let data: Value = serde_json::from_str(&event.body)
        .ok()
        .and_then(|body: Value| body.get("data").cloned())
        .unwrap_or(Value::Null);
    let text = |field: &str| data.get(field).and_then(Value::as_str).map(str::to_owned);
    let invoice_id = text("invoice_id").and_then(|id| InvoiceId::parse(&id));
    if let Some(invoice_id) = &invoice_id {
        // A batch writes its invoices after its events: then the subscription says whose.
        if let Some(row) = invoice::Entity::find_by_id(invoice_id.clone())
            .filter(invoice::Entity::of(&event.account_id))
            .one(conn)
            .await?
        {
            return Ok(Some(About {
                customer_id: row.customer_id,
                subscription_id: row.subscription_id,
                invoice_id: Some(invoice_id.clone()),
                charge_id: row.charge_id,
            }));
        }
    }
    let Some(subscription_id) = event.subscription_id.clone() else {
        return Ok(None);
    };
    let customer: Option<CustomerId> = subscription::Entity::find_by_id(subscription_id.clone())
        .filter(subscription::Entity::of(&event.account_id))
        .select_only()
        .column(subscription::Column::CustomerId)
        .into_tuple()
        .one(conn)
        .await?;
    let Some(customer_id) = customer else {
        return Ok(None);
    };
    Ok(Some(About {
        customer_id,
        subscription_id: Some(subscription_id),
        invoice_id,
        charge_id: text("charge_attempt_id").and_then(|id| ChargeAttemptId::parse(&id)),
    }))
}

fn new_notice(
    event: &Event,
    kind: NoticeKind,
    channel: Channel,
    cause: &str,
    about: &About,
) -> Notice {
    // A collection message waits for the hours Ley 2300 allows; the others go at once. Both
    // on the account's clock, as the event's instant is.
    let scheduled_for = if kind.is_collection() {
        let at = crate::domain::time::from_millis(event.created_at);
        crate::domain::collection_hours::next_allowed(at).timestamp_millis()
    } else {
        event.created_at
    };
    Notice {
        id: NoticeId::generate(),
        account_id: event.account_id.clone(),
        kind: kind.as_str().to_owned(),
        channel: channel.as_str().to_owned(),
        cause: cause.to_owned(),
        customer_id: about.customer_id.clone(),
        subscription_id: about.subscription_id.clone(),
        invoice_id: about.invoice_id.clone(),
        charge_id: about.charge_id.clone(),
        recipient: None,
        subject: None,
        status: NoticeStatus::Scheduled.as_str().to_owned(),
        scheduled_for,
        sent_at: None,
        attempts: 0,
        last_error: None,
        suppressed_reason: None,
        message_id: None,
        due_at: Some(scheduled_for),
        claim: None,
        created_at: event.created_at,
        delivered_at: None,
        read_at: None,
    }
}
