//! Notices' rows (CONTRACT §15): each account's settings, the sink that turns an event into its
//! notices inside the event's transaction (`notices_for`, used by every path that writes
//! events: `webhooks::fan_out` one at a time, `batch::statements::event_statements` in
//! batches), the list the API reads, and the delivery worker's claims.
//!
//! A notice is keyed by its cause (`receipt:in_…`, `payment_failed:ch_…`,
//! `subscription_canceled:sub_…`) and channel; the unique index makes a replayed or repeated
//! event write nothing more (`ON CONFLICT DO NOTHING`). What a notice says is read when it is
//! sent, not when it is written: the sink costs one read of the account's settings per
//! transaction (and, for an account with notices on, one read of what the event is about).

use super::entities::{account, invoice, notice, subscription};
use super::subscriptions::Event;
use super::{Page, PageRequest, Store, StoreError, StoreResult, fetch_page};
use crate::domain::notices::{Channel, Invalid, NoticeKind, NoticeSettings, NoticeStatus};
use crate::ids::{AccountId, ChargeAttemptId, CustomerId, InvoiceId, NoticeId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde_json::Value;
use std::collections::HashMap;

pub use notice::Model as Notice;

/// What `GET /v1/notices` filters by.
#[derive(Default)]
pub struct NoticeFilter {
    pub customer_id: Option<CustomerId>,
    pub subscription_id: Option<SubscriptionId>,
    pub kind: Option<String>,
    pub status: Option<String>,
}

/// Why the settings were not changed.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{}: {}", .0.field, .0.message)]
    Invalid(Invalid),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An account's settings as the sink needs them: what to send, and whether DIAN is on (a
/// receipt then waits for DIAN's acceptance).
#[derive(Clone)]
struct AccountNotices {
    settings: NoticeSettings,
    dian: bool,
}

impl Store {
    /// `account`'s notice settings as they are now.
    pub async fn notice_settings(&self, account: &AccountId) -> StoreResult<NoticeSettings> {
        let raw: Option<Option<String>> = account::Entity::find_by_id(account.clone())
            .select_only()
            .column(account::Column::Notices)
            .into_tuple()
            .one(self.conn())
            .await?;
        Ok(NoticeSettings::from_stored(raw.flatten().as_deref()))
    }

    /// Merges `patch` (the body as sent) into `account`'s settings and answers the result: a
    /// compare and swap on the stored JSON, so two PATCHes at once both land.
    pub async fn update_notice_settings(
        &self,
        account: &AccountId,
        patch: &Value,
    ) -> Result<NoticeSettings, SettingsError> {
        for _ in 0..16 {
            let stored: Option<Option<String>> = account::Entity::find_by_id(account.clone())
                .select_only()
                .column(account::Column::Notices)
                .into_tuple()
                .one(self.writer())
                .await
                .map_err(StoreError::from)?;
            let Some(stored) = stored else {
                return Err(StoreError::invariant(format!("no account {account}")).into());
            };
            let merged = NoticeSettings::from_stored(stored.as_deref())
                .merged(patch)
                .map_err(SettingsError::Invalid)?;
            let raw = serde_json::to_string(&merged)
                .map_err(|err| StoreError::invariant(format!("notice settings: {err}")))?;
            let mut update = account::Entity::update_many()
                .col_expr(account::Column::Notices, Some(raw).into())
                .filter(account::Column::Id.eq(account));
            update = match &stored {
                Some(old) => update.filter(account::Column::Notices.eq(old.as_str())),
                None => update.filter(account::Column::Notices.is_null()),
            };
            if update
                .exec(self.writer())
                .await
                .map_err(StoreError::from)?
                .rows_affected
                == 1
            {
                return Ok(merged);
            }
        }
        Err(StoreError::invariant(format!(
            "the notice settings of {account} kept changing under their update"
        ))
        .into())
    }

    pub async fn list_notices(
        &self,
        account: &AccountId,
        filter: &NoticeFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Notice>> {
        let mut select = notice::Entity::scoped(account);
        if let Some(customer) = &filter.customer_id {
            select = select.filter(notice::Column::CustomerId.eq(customer));
        }
        if let Some(subscription) = &filter.subscription_id {
            select = select.filter(notice::Column::SubscriptionId.eq(subscription));
        }
        if let Some(kind) = &filter.kind {
            select = select.filter(notice::Column::Kind.eq(kind.as_str()));
        }
        if let Some(status) = &filter.status {
            select = select.filter(notice::Column::Status.eq(status.as_str()));
        }
        fetch_page(self.conn(), select, notice::Column::Id, page).await
    }

    pub async fn notice(&self, account: &AccountId, id: &NoticeId) -> StoreResult<Option<Notice>> {
        Ok(notice::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// Notices whose time has come by their account's clock (`due_at` is on it), oldest
    /// first, at most `limit`; only `account`'s when given. Read as those due by the furthest
    /// clock of any account, then kept by each one's own.
    pub async fn due_notices(
        &self,
        account: Option<&AccountId>,
        real_now_ms: i64,
        limit: u64,
    ) -> StoreResult<Vec<Notice>> {
        use sea_orm::sea_query::Func;
        let furthest: Option<Option<i64>> = account::Entity::find()
            .select_only()
            .expr(Func::max(Expr::col(account::Column::ClockOffsetMs)))
            .into_tuple()
            .one(self.conn())
            .await?;
        let furthest = std::cmp::max(furthest.flatten().unwrap_or(0), 0);
        let mut select = notice::Entity::find();
        if let Some(account) = account {
            select = notice::Entity::scoped(account);
        }
        let candidates = select
            .filter(notice::Column::DueAt.lte(real_now_ms.saturating_add(furthest)))
            .order_by_asc(notice::Column::DueAt)
            .limit(limit.saturating_mul(4))
            .all(self.conn())
            .await?;
        let mut offsets: HashMap<AccountId, i64> = HashMap::new();
        let mut due = Vec::new();
        for notice in candidates {
            if !offsets.contains_key(&notice.account_id) {
                let offset: Option<i64> = account::Entity::find_by_id(notice.account_id.clone())
                    .select_only()
                    .column(account::Column::ClockOffsetMs)
                    .into_tuple()
                    .one(self.conn())
                    .await?;
                offsets.insert(notice.account_id.clone(), offset.unwrap_or(0));
            }
            let offset = offsets[&notice.account_id];
            if notice
                .due_at
                .is_some_and(|at| at <= real_now_ms.saturating_add(offset))
            {
                due.push(notice);
            }
            if due.len() as u64 >= limit {
                break;
            }
        }
        Ok(due)
    }

    /// Takes `notice` for one attempt: only while it is still due as read (another worker's
    /// claim moves `due_at`), its next `due_at` set to `lease_until`, so that an attempt cut
    /// off by a crash is taken again after it. False when someone else took it.
    pub async fn claim_notice(
        &self,
        notice: &Notice,
        claim: &str,
        lease_until: i64,
    ) -> StoreResult<bool> {
        let Some(due) = notice.due_at else {
            return Ok(false);
        };
        let txn = self.begin().await?;
        let taken = notice::Entity::update_many()
            .col_expr(notice::Column::Claim, Some(claim.to_owned()).into())
            .col_expr(notice::Column::DueAt, Some(lease_until).into())
            .col_expr(
                notice::Column::Attempts,
                Expr::col(notice::Column::Attempts).add(1),
            )
            .filter(notice::Column::Id.eq(notice.id.clone()))
            .filter(notice::Column::DueAt.eq(due))
            .filter(notice::Column::Status.eq(NoticeStatus::Scheduled.as_str()))
            .exec(txn.conn())
            .await?
            .rows_affected
            == 1;
        txn.commit().await?;
        Ok(taken)
    }

    /// Ends or reschedules a claimed notice with what its attempt came to; nothing when the
    /// claim is no longer this one's.
    pub async fn finish_notice(
        &self,
        id: &NoticeId,
        claim: &str,
        end: NoticeEnd,
    ) -> StoreResult<bool> {
        let mut update = notice::Entity::update_many()
            .col_expr(notice::Column::Claim, Option::<String>::None.into());
        let (status, due_at) = match &end {
            NoticeEnd::Sent { at, .. } => {
                update = update.col_expr(notice::Column::SentAt, Some(*at).into());
                (NoticeStatus::Sent, None)
            }
            NoticeEnd::Failed { .. } => (NoticeStatus::Failed, None),
            NoticeEnd::Suppressed { reason, .. } => {
                update = update.col_expr(
                    notice::Column::SuppressedReason,
                    Some((*reason).to_owned()).into(),
                );
                (NoticeStatus::Suppressed, None)
            }
            NoticeEnd::Retry { at, .. } | NoticeEnd::Later { at } => {
                (NoticeStatus::Scheduled, Some(*at))
            }
        };
        if let NoticeEnd::Later { .. } = &end {
            // Not an attempt: the rules held it back (Ley 2300's hours, one a day).
            update = update.col_expr(
                notice::Column::Attempts,
                Expr::col(notice::Column::Attempts).sub(1),
            );
        }
        if let Some(error) = end.error() {
            update = update.col_expr(notice::Column::LastError, Some(error.to_owned()).into());
        }
        if let Some(recipient) = end.recipient() {
            update = update.col_expr(notice::Column::Recipient, Some(recipient.to_owned()).into());
        }
        if let Some(subject) = end.subject() {
            update = update.col_expr(notice::Column::Subject, Some(subject.to_owned()).into());
        }
        if let NoticeEnd::Later { at } | NoticeEnd::Retry { at, .. } = &end {
            update = update.col_expr(notice::Column::ScheduledFor, Some(*at).into());
        }
        let txn = self.begin().await?;
        let done = update
            .col_expr(notice::Column::Status, status.as_str().into())
            .col_expr(notice::Column::DueAt, due_at.into())
            .filter(notice::Column::Id.eq(id.clone()))
            .filter(notice::Column::Claim.eq(claim))
            .exec(txn.conn())
            .await?
            .rows_affected
            == 1;
        txn.commit().await?;
        Ok(done)
    }

    /// Whether the customer canceled `subscription` through the portal (a notice says who).
    pub async fn canceled_in_portal(
        &self,
        account: &AccountId,
        subscription: &SubscriptionId,
    ) -> StoreResult<bool> {
        use super::entities::portal_action;
        use sea_orm::PaginatorTrait;
        Ok(portal_action::Entity::scoped(account)
            .filter(portal_action::Column::SubscriptionId.eq(subscription))
            .filter(portal_action::Column::Action.eq("subscription_cancel"))
            .count(self.conn())
            .await?
            > 0)
    }

    /// Sets the `Message-ID` a notice keeps on every attempt (first attempt only).
    pub async fn set_notice_message_id(&self, id: &NoticeId, message_id: &str) -> StoreResult<()> {
        notice::Entity::update_many()
            .col_expr(
                notice::Column::MessageId,
                Some(message_id.to_owned()).into(),
            )
            .filter(notice::Column::Id.eq(id.clone()))
            .filter(notice::Column::MessageId.is_null())
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// Whether `customer` was sent a collection notice through `channel` other than `except`
    /// since `since` (account clock): Ley 2300's "one a day" and "one channel a week".
    pub async fn collection_notices_since(
        &self,
        account: &AccountId,
        customer: &CustomerId,
        since: i64,
        except: &NoticeId,
    ) -> StoreResult<Vec<Notice>> {
        let collection: Vec<&str> = NoticeKind::ALL
            .iter()
            .filter(|kind| kind.is_collection())
            .map(|kind| kind.as_str())
            .collect();
        Ok(notice::Entity::scoped(account)
            .filter(notice::Column::CustomerId.eq(customer))
            .filter(notice::Column::Kind.is_in(collection))
            .filter(notice::Column::Status.eq(NoticeStatus::Sent.as_str()))
            .filter(notice::Column::SentAt.gte(since))
            .filter(notice::Column::Id.ne(except.clone()))
            .all(self.conn())
            .await?)
    }
}

/// What one attempt at a notice came to.
pub enum NoticeEnd {
    Sent {
        at: i64,
        recipient: String,
        subject: String,
    },
    /// Refused for good (a 5xx), or out of attempts.
    Failed {
        error: String,
        recipient: Option<String>,
    },
    Suppressed {
        reason: &'static str,
        recipient: Option<String>,
    },
    /// Unknown (a 4xx, a refused connection, a timeout): tried again at `at`.
    Retry { at: i64, error: String },
    /// Held back by a rule until `at`: not an attempt.
    Later { at: i64 },
}

impl NoticeEnd {
    fn error(&self) -> Option<&str> {
        match self {
            NoticeEnd::Failed { error, .. } | NoticeEnd::Retry { error, .. } => Some(error),
            _ => None,
        }
    }

    fn recipient(&self) -> Option<&str> {
        match self {
            NoticeEnd::Sent { recipient, .. } => Some(recipient),
            NoticeEnd::Failed { recipient, .. } | NoticeEnd::Suppressed { recipient, .. } => {
                recipient.as_deref()
            }
            _ => None,
        }
    }

    fn subject(&self) -> Option<&str> {
        match self {
            NoticeEnd::Sent { subject, .. } => Some(subject),
            _ => None,
        }
    }
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
    }
}
