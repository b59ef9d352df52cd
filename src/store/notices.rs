//! Notices' rows (CONTRACT §15): each account's settings, the list the API reads, and the
//! delivery worker's claims. The notices themselves are written by `notice_sink`, in the
//! transaction of the event that causes them.

use super::entities::{account, collection_slot, notice};
use super::{Page, PageRequest, Store, StoreError, StoreResult, fetch_page};
use crate::domain::event_type::EventType;
use crate::domain::notices::{Invalid, NoticeSettings, NoticeStatus};
use crate::ids::{AccountId, CustomerId, NoticeId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde_json::Value;
use std::collections::HashMap;

pub use super::entities::collection_slot::Model as CollectionSlot;
pub use super::entities::pay_link::Model as PayLink;
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

    /// How many of `account`'s notices (of `channel` only, when given) some worker holds a
    /// claim on now: an attempt under way (a WhatsApp send whose wamid may not be recorded yet).
    pub async fn notices_in_flight(
        &self,
        account: &AccountId,
        channel: Option<crate::domain::notices::Channel>,
    ) -> StoreResult<u64> {
        use sea_orm::PaginatorTrait;
        let mut claimed = notice::Entity::scoped(account)
            .filter(notice::Column::Claim.is_not_null())
            .filter(notice::Column::Status.eq(NoticeStatus::Scheduled.as_str()));
        if let Some(channel) = channel {
            claimed = claimed.filter(notice::Column::Channel.eq(channel.as_str()));
        }
        Ok(claimed.count(self.conn()).await?)
    }

    /// Ends or reschedules a claimed notice with what its attempt came to; nothing when the
    /// claim is no longer this one's.
    pub async fn finish_notice(
        &self,
        notice: &Notice,
        claim: &str,
        end: NoticeEnd,
        now: i64,
    ) -> StoreResult<bool> {
        let id = &notice.id;
        let mut update = notice::Entity::update_many()
            .col_expr(notice::Column::Claim, Option::<String>::None.into());
        let (status, due_at) = match &end {
            NoticeEnd::Sent { at, wamid, .. } => {
                update = update.col_expr(notice::Column::SentAt, Some(*at).into());
                if let Some(wamid) = wamid {
                    update = update.col_expr(notice::Column::MessageId, Some(wamid.clone()).into());
                }
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
        // A collection message that surely reached nobody gives its Ley 2300 slots back.
        let reached_nobody = matches!(
            end,
            NoticeEnd::Failed {
                surely_unsent: true,
                ..
            } | NoticeEnd::Suppressed { .. }
        );
        if done && reached_nobody {
            release_slots(txn.conn(), notice).await?;
        }
        // Its end is an event (`notice.sent`, `notice.failed`), in the same transaction.
        let ended = match &end {
            NoticeEnd::Sent { .. } => Some(EventType::NoticeSent),
            NoticeEnd::Failed { .. } => Some(EventType::NoticeFailed),
            _ => None,
        };
        if let (true, Some(event_type)) = (done, ended) {
            let mut data = serde_json::json!({
                "notice_id": notice.id, "kind": notice.kind, "channel": notice.channel,
                "customer_id": notice.customer_id, "subscription_id": notice.subscription_id,
                "metadata": null, "invoice_id": notice.invoice_id,
                "charge_attempt_id": notice.charge_id, "to": end.recipient(),
                "last_error": end.error(),
            });
            if let Some(fields) = data.as_object_mut() {
                fields.retain(|key, value| key == "metadata" || !Value::is_null(value));
            }
            txn.insert_event(super::outbox::event_row(
                &notice.account_id,
                notice.subscription_id.as_ref(),
                event_type,
                data,
                now,
            ))
            .await?;
        }
        txn.commit().await?;
        Ok(done)
    }

    /// How many notices there are in each status, every account's (the operator's dashboard).
    pub async fn count_notices_by_status(&self) -> StoreResult<Vec<(String, u64)>> {
        use sea_orm::sea_query::Func;
        let rows: Vec<(String, i64)> = notice::Entity::find()
            .select_only()
            .column(notice::Column::Status)
            .expr(Func::count(Expr::col(notice::Column::Id)))
            .group_by(notice::Column::Status)
            .order_by_asc(notice::Column::Status)
            .into_tuple()
            .all(self.conn())
            .await?;
        Ok(rows
            .into_iter()
            .map(|(status, count)| (status, u64::try_from(count).unwrap_or(0)))
            .collect())
    }

    /// Keeps a failed payment's link: `token_hash` opens `subscription`'s card update.
    pub async fn insert_pay_link(&self, link: PayLink) -> StoreResult<()> {
        use sea_orm::{ActiveModelTrait, IntoActiveModel};
        link.into_active_model()
            .reset_all()
            .insert(self.writer())
            .await?;
        Ok(())
    }

    /// The link whose token hashes to `token_hash`.
    pub async fn pay_link(&self, token_hash: &str) -> StoreResult<Option<PayLink>> {
        Ok(
            super::entities::pay_link::Entity::find_by_id(token_hash.to_owned())
                .one(self.conn())
                .await?,
        )
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

    /// Gives back the Ley 2300 slots `notice` holds (it reached nobody).
    pub async fn release_collection_slots(&self, notice: &Notice) -> StoreResult<()> {
        release_slots(self.writer(), notice).await
    }

    /// Takes `notice`'s customer's Ley 2300 slot `period` (`day:<ms>`, `week:<ms>`) for it,
    /// unless another notice holds it already: the slot as it stands, whoever took it. One
    /// insert decides, on every node: the primary key keeps the first.
    pub async fn take_collection_slot(
        &self,
        notice: &Notice,
        period: String,
        now: i64,
    ) -> StoreResult<CollectionSlot> {
        use sea_orm::sea_query::OnConflict;
        let slot = CollectionSlot {
            account_id: notice.account_id.clone(),
            customer_id: notice.customer_id.clone(),
            period: period.clone(),
            channel: notice.channel.clone(),
            notice_id: notice.id.clone(),
            taken_at: now,
        };
        collection_slot::Entity::insert(sea_orm::IntoActiveModel::into_active_model(slot.clone()))
            .on_conflict(
                OnConflict::columns([
                    collection_slot::Column::AccountId,
                    collection_slot::Column::CustomerId,
                    collection_slot::Column::Period,
                ])
                .do_nothing()
                .to_owned(),
            )
            .exec_without_returning(self.writer())
            .await?;
        Ok(collection_slot::Entity::find_scoped(
            &notice.account_id,
            (
                notice.account_id.clone(),
                notice.customer_id.clone(),
                period,
            ),
        )
        .one(self.writer())
        .await?
        .unwrap_or(slot))
    }
}

/// Deletes the Ley 2300 slots `notice` holds, on `conn`.
async fn release_slots<C: sea_orm::ConnectionTrait>(conn: &C, notice: &Notice) -> StoreResult<()> {
    collection_slot::Entity::delete_many()
        .filter(collection_slot::Entity::of(&notice.account_id))
        .filter(collection_slot::Column::NoticeId.eq(notice.id.clone()))
        .exec(conn)
        .await?;
    Ok(())
}

/// What a WhatsApp status webhook says became of a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    Delivered { at: i64 },
    Read { at: i64 },
    Failed { error: String },
}

impl Store {
    /// Records `delivery` on `account`'s WhatsApp notice whose wamid is `wamid`: `delivered_at`
    /// and `read_at` once each (the first report wins); a failure ends a `sent` notice
    /// `failed` with its error. False when no notice of the account has that wamid.
    pub async fn record_whatsapp_delivery(
        &self,
        account: &AccountId,
        wamid: &str,
        delivery: &Delivery,
    ) -> StoreResult<bool> {
        let Some(found) = notice::Entity::scoped(account)
            .filter(notice::Column::Channel.eq(crate::domain::notices::Channel::Whatsapp.as_str()))
            .filter(notice::Column::MessageId.eq(wamid))
            .one(self.conn())
            .await?
        else {
            return Ok(false);
        };
        let mut update = notice::Entity::update_many().filter(notice::Column::Id.eq(found.id));
        update = match delivery {
            Delivery::Delivered { at } => update
                .col_expr(notice::Column::DeliveredAt, Some(*at).into())
                .filter(notice::Column::DeliveredAt.is_null()),
            Delivery::Read { at } => update
                .col_expr(
                    notice::Column::DeliveredAt,
                    Expr::from(sea_orm::sea_query::Func::coalesce([
                        Expr::col(notice::Column::DeliveredAt),
                        Expr::val(*at),
                    ])),
                )
                .col_expr(notice::Column::ReadAt, Some(*at).into())
                .filter(notice::Column::ReadAt.is_null()),
            Delivery::Failed { error } => update
                .col_expr(notice::Column::Status, NoticeStatus::Failed.as_str().into())
                .col_expr(notice::Column::LastError, Some(error.clone()).into())
                .filter(notice::Column::Status.eq(NoticeStatus::Sent.as_str())),
        };
        let txn = self.begin().await?;
        update.exec(txn.conn()).await?;
        txn.commit().await?;
        Ok(true)
    }
}

/// What one attempt at a notice came to.
pub enum NoticeEnd {
    Sent {
        at: i64,
        recipient: String,
        /// An e-mail's subject (a WhatsApp template has none).
        subject: Option<String>,
        /// A WhatsApp message's wamid, which its status webhooks name.
        wamid: Option<String>,
    },
    /// Refused for good (a 5xx), or out of attempts.
    Failed {
        error: String,
        recipient: Option<String>,
        /// Refused: the message surely reached nobody (out of attempts, one of them may have).
        surely_unsent: bool,
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
            NoticeEnd::Sent { subject, .. } => subject.as_deref(),
            _ => None,
        }
    }
}
