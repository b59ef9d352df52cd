//! The notices' sink (CONTRACT §15): what turns an event into its notices inside the event's
//! transaction, used by every path that writes events (`webhooks::fan_out` one at a time,
//! `batch::statements::event_statements` in batches).
//!
//! A notice is keyed by its cause (`receipt:in_…`, `payment_failed:ch_…`,
//! `subscription_canceled:sub_…`) and channel; the unique index makes a replayed or repeated
//! event write nothing more (`ON CONFLICT DO NOTHING`). What a notice says is read when it is
//! sent, not when it is written: the sink costs one read of the account's settings per
//! transaction and account (and, for an account with notices on, three reads of what the
//! events are about, however many there are).
//! A WhatsApp notice is written only for a customer with a phone who opted in to WhatsApp.

use super::StoreResult;
use super::entities::notice::Model as Notice;
use super::entities::{account, customer, invoice, notice, subscription};
use super::outbox::Event;
use crate::domain::event_type::EventType;
use crate::domain::notices::{Channel, NoticeKind, NoticeSettings, NoticeStatus};
use crate::ids::{AccountId, ChargeAttemptId, CustomerId, InvoiceId, NoticeId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// An account's settings as the sink needs them: what to send, and whether DIAN is on (a
/// receipt then waits for DIAN's acceptance).
#[derive(Clone)]
struct AccountNotices {
    settings: NoticeSettings,
    dian: bool,
}

/// What a batch's writer already knows of its events, so that the sink need not read it: the
/// customer of each subscription, and that the invoices the events name are not written yet
/// (a batch drafts its invoices with their events and inserts them after).
#[derive(Default)]
pub(crate) struct Known<'a> {
    pub customers: HashMap<&'a SubscriptionId, &'a CustomerId>,
    pub invoices_unwritten: bool,
}

/// The notices `events` cause, to be inserted in the events' transaction (`insert_notices`):
/// for each event of a kind the account sends, one per channel it has on. The reads are per
/// call, not per event: each account's settings once, then what the events are about in one
/// read of the invoices, one of the subscriptions and one of the customers per account (a
/// renewals' batch of a thousand invoices costs three reads, not two thousand).
pub(crate) async fn notices_for<C: ConnectionTrait>(
    conn: &C,
    events: &[&Event],
    known: &Known<'_>,
) -> StoreResult<Vec<Notice>> {
    let mut accounts: HashMap<AccountId, Option<AccountNotices>> = HashMap::new();
    // The events that tell a customer something, with the kind each tells.
    let mut telling: Vec<(&Event, NoticeKind)> = Vec::new();
    for event in events {
        let Some(kind) = kind_of(event.event_type) else {
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
            EventType::InvoiceDianAccepted
        } else {
            EventType::InvoiceCreated
        };
        if kind == NoticeKind::Receipt && event.event_type != receipt_event {
            continue;
        }
        telling.push((event, kind));
    }
    if telling.is_empty() {
        return Ok(Vec::new());
    }
    let abouts = abouts(conn, &telling, known).await?;
    let whatsapp = on_whatsapp(conn, &accounts, &telling, &abouts).await?;
    let mut notices = Vec::new();
    for ((event, kind), about) in telling.iter().zip(&abouts) {
        let Some(about) = about else {
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
        let Some(Some(account)) = accounts.get(&event.account_id) else {
            continue;
        };
        for channel in account.settings.channels() {
            // WhatsApp only to a customer with a phone who opted in (CONTRACT §15).
            if channel == Channel::Whatsapp
                && !whatsapp
                    .get(&event.account_id)
                    .is_some_and(|reachable| reachable.contains(&about.customer_id))
            {
                continue;
            }
            notices.push(new_notice(event, *kind, channel, &cause, about));
        }
    }
    Ok(notices)
}

/// The multi-row insert of `notices` as `new_notice` makes them (nothing sent yet), once per
/// cause and channel.
pub fn insert_notices_statement(
    backend: sea_orm::DbBackend,
    notices: Vec<Notice>,
) -> Option<sea_orm::Statement> {
    use sea_orm::{ActiveModelTrait, ActiveValue::NotSet, IntoActiveModel, QueryTrait};
    if notices.is_empty() {
        return None;
    }
    // What a new notice has not yet (its sending's columns) is left to the columns' defaults
    // (NULL, 0): fewer values to bind per row, the same row.
    let rows = notices.into_iter().map(|n| {
        debug_assert!(n.recipient.is_none() && n.message_id.is_none() && n.attempts == 0);
        let mut row = n.into_active_model().reset_all();
        row.recipient = NotSet;
        row.subject = NotSet;
        row.sent_at = NotSet;
        row.attempts = NotSet;
        row.last_error = NotSet;
        row.suppressed_reason = NotSet;
        row.message_id = NotSet;
        row.claim = NotSet;
        row.delivered_at = NotSet;
        row.read_at = NotSet;
        row
    });
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

/// The notice kind an event type may cause. Every type is named: a new one is a compile error
/// here until someone decides whether it tells the customer something.
fn kind_of(event_type: EventType) -> Option<NoticeKind> {
    use EventType::*;
    match event_type {
        InvoiceCreated | InvoiceDianAccepted => Some(NoticeKind::Receipt),
        ChargeDeclined => Some(NoticeKind::PaymentFailed),
        SubscriptionCanceled => Some(NoticeKind::SubscriptionCanceled),
        SubscriptionCreated
        | SubscriptionPaused
        | SubscriptionResumed
        | SubscriptionPastDue
        | SubscriptionPlanChanged
        | ChargeApproved
        | ChargeRefunded
        | InvoiceDianRejected
        | CreditNoteCreated
        | NoticeSent
        | NoticeFailed
        | ConsoleAction => None,
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

/// How many ids one `IN (…)` list holds: well under SQLite's limit of bound parameters.
const IDS_PER_READ: usize = 500;

/// `ids` (each with its account) grouped by account, without repeats, each group cut into lists
/// of at most `IDS_PER_READ`: one `IN (…)` read each.
fn id_lists<'a, K: Clone + Ord + 'a>(
    ids: impl IntoIterator<Item = (&'a AccountId, &'a K)>,
) -> Vec<(AccountId, Vec<K>)> {
    let mut grouped: BTreeMap<&AccountId, BTreeSet<&K>> = BTreeMap::new();
    for (account, id) in ids {
        grouped.entry(account).or_default().insert(id);
    }
    let mut lists = Vec::new();
    for (account, ids) in grouped {
        let ids: Vec<K> = ids.into_iter().cloned().collect();
        for chunk in ids.chunks(IDS_PER_READ) {
            lists.push((account.clone(), chunk.to_vec()));
        }
    }
    lists
}

/// The customers, per account, among those the notices are about that may be written to on
/// WhatsApp (a phone, and their opt-in), read only for accounts with WhatsApp on.
async fn on_whatsapp<C: ConnectionTrait>(
    conn: &C,
    accounts: &HashMap<AccountId, Option<AccountNotices>>,
    telling: &[(&Event, NoticeKind)],
    abouts: &[Option<About>],
) -> StoreResult<HashMap<AccountId, HashSet<CustomerId>>> {
    let whatsapp_on = |account: &AccountId| {
        accounts
            .get(account)
            .and_then(Option::as_ref)
            .is_some_and(|a| a.settings.channels().any(|c| c == Channel::Whatsapp))
    };
    let asked = telling
        .iter()
        .zip(abouts)
        .filter(|((event, _), _)| whatsapp_on(&event.account_id))
        .filter_map(|((event, _), about)| Some((&event.account_id, &about.as_ref()?.customer_id)));
    let mut reachable: HashMap<AccountId, HashSet<CustomerId>> = HashMap::new();
    for (account, ids) in id_lists(asked) {
        let rows: Vec<CustomerId> = customer::Entity::scoped(&account)
            .filter(customer::Column::Id.is_in(ids))
            .filter(customer::Column::WhatsappOptIn.eq(true))
            .filter(customer::Column::Phone.is_not_null())
            .filter(customer::Column::Phone.ne(""))
            .select_only()
            .column(customer::Column::Id)
            .into_tuple()
            .all(conn)
            .await?;
        reachable.entry(account).or_default().extend(rows);
    }
    Ok(reachable)
}

/// What a notice is about.
pub(crate) struct About {
    pub customer_id: CustomerId,
    pub subscription_id: Option<SubscriptionId>,
    pub invoice_id: Option<InvoiceId>,
    pub charge_id: Option<ChargeAttemptId>,
}

/// What each of `telling` is about (or nothing, when neither its invoice nor its subscription
/// is found), in their order. An invoice already written says whose it is; a batch writes its
/// invoices after its events, and then the subscription says.
async fn abouts<C: ConnectionTrait>(
    conn: &C,
    telling: &[(&Event, NoticeKind)],
    known: &Known<'_>,
) -> StoreResult<Vec<Option<About>>> {
    // (invoice id, charge id) named in each event's data.
    let named: Vec<(Option<InvoiceId>, Option<ChargeAttemptId>)> = telling
        .iter()
        .map(|(event, _)| {
            let data: Value = serde_json::from_str(&event.body)
                .ok()
                .and_then(|body: Value| body.get("data").cloned())
                .unwrap_or(Value::Null);
            let text = |field: &str| data.get(field).and_then(Value::as_str);
            (
                text("invoice_id").and_then(InvoiceId::parse),
                text("charge_attempt_id").and_then(ChargeAttemptId::parse),
            )
        })
        .collect();
    type InvoiceRow = (
        InvoiceId,
        CustomerId,
        Option<SubscriptionId>,
        Option<ChargeAttemptId>,
    );
    let named_invoices = telling
        .iter()
        .zip(&named)
        .filter(|_| !known.invoices_unwritten)
        .filter_map(|((event, _), (invoice, _))| Some((&event.account_id, invoice.as_ref()?)));
    let mut invoices: HashMap<InvoiceId, InvoiceRow> = HashMap::new();
    for (account, ids) in id_lists(named_invoices) {
        let rows: Vec<InvoiceRow> = invoice::Entity::scoped(&account)
            .filter(invoice::Column::Id.is_in(ids))
            .select_only()
            .column(invoice::Column::Id)
            .column(invoice::Column::CustomerId)
            .column(invoice::Column::SubscriptionId)
            .column(invoice::Column::ChargeId)
            .into_tuple()
            .all(conn)
            .await?;
        invoices.extend(rows.into_iter().map(|row| (row.0.clone(), row)));
    }
    // The subscriptions of the events whose invoice is not written yet (or that name none),
    // but those whose customer is known.
    let unnamed = telling
        .iter()
        .zip(&named)
        .filter(|(_, (invoice, _))| !invoice.as_ref().is_some_and(|id| invoices.contains_key(id)))
        .filter_map(|((event, _), _)| Some((&event.account_id, event.subscription_id.as_ref()?)))
        .filter(|(_, subscription)| !known.customers.contains_key(subscription));
    let mut customers: HashMap<SubscriptionId, CustomerId> = known
        .customers
        .iter()
        .map(|(subscription, customer)| ((*subscription).clone(), (*customer).clone()))
        .collect();
    for (account, ids) in id_lists(unnamed) {
        let rows: Vec<(SubscriptionId, CustomerId)> = subscription::Entity::scoped(&account)
            .filter(subscription::Column::Id.is_in(ids))
            .select_only()
            .column(subscription::Column::Id)
            .column(subscription::Column::CustomerId)
            .into_tuple()
            .all(conn)
            .await?;
        customers.extend(rows);
    }
    Ok(telling
        .iter()
        .zip(named)
        .map(|((event, _), (invoice_id, charge_id))| {
            if let Some((id, customer_id, subscription_id, charge_id)) =
                invoice_id.as_ref().and_then(|id| invoices.get(id))
            {
                return Some(About {
                    customer_id: customer_id.clone(),
                    subscription_id: subscription_id.clone(),
                    invoice_id: Some(id.clone()),
                    charge_id: charge_id.clone(),
                });
            }
            let subscription_id = event.subscription_id.clone()?;
            let customer_id = customers.get(&subscription_id)?.clone();
            Some(About {
                customer_id,
                subscription_id: Some(subscription_id),
                invoice_id,
                charge_id,
            })
        })
        .collect())
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
    scheduled(
        &event.account_id,
        (kind, channel, cause),
        About {
            customer_id: about.customer_id.clone(),
            subscription_id: about.subscription_id.clone(),
            invoice_id: about.invoice_id.clone(),
            charge_id: about.charge_id.clone(),
        },
        (scheduled_for, event.created_at),
    )
}

/// A new notice's row, the one shape every writer of notices makes (the sink, the reminders,
/// a notice a person asks for): of `kind` by `channel` for `cause`, about `about`, due at
/// `due` and written at `created_at` (the account's clock); nothing sent yet, which is what
/// `insert_notices_statement` binds.
pub(crate) fn scheduled(
    account: &AccountId,
    (kind, channel, cause): (NoticeKind, Channel, &str),
    about: About,
    (due, created_at): (i64, i64),
) -> Notice {
    Notice {
        id: NoticeId::generate(),
        account_id: account.clone(),
        kind: kind.as_str().to_owned(),
        channel: channel.as_str().to_owned(),
        cause: cause.to_owned(),
        customer_id: about.customer_id,
        subscription_id: about.subscription_id,
        invoice_id: about.invoice_id,
        charge_id: about.charge_id,
        recipient: None,
        subject: None,
        status: NoticeStatus::Scheduled.as_str().to_owned(),
        scheduled_for: due,
        sent_at: None,
        attempts: 0,
        last_error: None,
        suppressed_reason: None,
        message_id: None,
        due_at: Some(due),
        claim: None,
        created_at,
        delivered_at: None,
        read_at: None,
    }
}
