//! Reminders (CONTRACT §15): the notices that time causes rather than an event.
//! `renewal_upcoming` (an annual subscription, 7 days before its renewal), `trial_ending` (a
//! trial longer than 7 days, 7 days before it ends) and `card_expiring` (a card that expires
//! before the subscription's next charge, 14 days before that charge).
//!
//! Each is about a subscription's timer (`due_at`: the renewal of an active subscription, the
//! end of a trial), so the notices' worker slides a window over the timers of each account
//! that sends notices, `(from, now + lead]` by the account's clock, and this module answers
//! the subscriptions that fall in it, a page at a time along `(account_id, due_at, id)`, the
//! scheduler's own index. A reminder's cause names the subscription (or the card) and the
//! instant it announces, so the unique `(account, cause, channel)` keeps it to one however
//! often, and by however many nodes, a window is looked at.

use super::entities::{customer, payment_method, subscription};
use super::{Store, StoreResult};
use crate::domain::notices::{Channel, NoticeKind};
use crate::domain::subscription::Status;
use crate::domain::time::Cycle;
use crate::ids::AccountId;
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

pub use super::entities::subscription::Model as Subscription;

/// How long before what it announces each reminder is written.
pub fn lead_ms(kind: NoticeKind) -> i64 {
    const DAY: i64 = 86_400_000;
    match kind {
        NoticeKind::CardExpiring => 14 * DAY,
        _ => 7 * DAY,
    }
}

/// A trial shorter than this has no `trial_ending` reminder.
pub const SHORTEST_REMINDED_TRIAL_MS: i64 = 7 * 86_400_000;

/// The reminder kinds, in the order the worker writes them.
pub const REMINDERS: [NoticeKind; 3] = [
    NoticeKind::RenewalUpcoming,
    NoticeKind::TrialEnding,
    NoticeKind::CardExpiring,
];

/// One subscription a reminder is about, with the instant it announces.
pub struct Reminded {
    pub subscription: Subscription,
    /// For `card_expiring`: the card, whose expiry is before `subscription.due_at`.
    pub card: Option<crate::ids::PaymentMethodId>,
}

/// The cause a reminder of `kind` about `reminded` is kept once by.
pub fn cause(kind: NoticeKind, reminded: &Reminded) -> String {
    let at = reminded.subscription.due_at.unwrap_or_default();
    match (&reminded.card, kind) {
        (Some(card), NoticeKind::CardExpiring) => format!("card_expiring:{card}:{at}"),
        _ => format!("{}:{}:{at}", kind.as_str(), reminded.subscription.id),
    }
}

/// The instant a reminder's cause announces (its last part), if it is one.
pub fn announced_at(cause: &str) -> Option<i64> {
    cause.rsplit(':').next()?.parse().ok()
}

impl Store {
    /// The accounts with a channel of notices on, and their settings.
    pub async fn accounts_sending_notices(
        &self,
    ) -> StoreResult<Vec<(AccountId, crate::domain::notices::NoticeSettings)>> {
        use super::entities::account;
        let rows: Vec<(AccountId, Option<String>)> = account::Entity::find()
            .filter(account::Column::Notices.is_not_null())
            .select_only()
            .column(account::Column::Id)
            .column(account::Column::Notices)
            .into_tuple()
            .all(self.conn())
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, raw)| {
                let settings = crate::domain::notices::NoticeSettings::from_stored(raw.as_deref());
                (id, settings)
            })
            .filter(|(_, settings)| settings.channels().next().is_some())
            .collect())
    }

    /// The subscriptions of `account` a reminder of `kind` is about whose timer falls in
    /// `(after, through]`, from `(after, after_id)` on, at most `limit`, in the index's order.
    pub async fn reminder_page(
        &self,
        account: &AccountId,
        kind: NoticeKind,
        (after, after_id): (i64, Option<&str>),
        through: i64,
        limit: u64,
    ) -> StoreResult<Vec<Reminded>> {
        let mut select = subscription::Entity::scoped(account)
            .filter(subscription::Column::DueAt.lte(through))
            .filter(subscription::Column::CancelAtPeriodEnd.eq(false));
        select = match after_id {
            Some(id) => select.filter(
                Expr::tuple([
                    Expr::col(subscription::Column::DueAt),
                    Expr::col(subscription::Column::Id),
                ])
                .gt(Expr::tuple([Expr::value(after), Expr::value(id)])),
            ),
            None => select.filter(subscription::Column::DueAt.gt(after)),
        };
        select = match kind {
            NoticeKind::RenewalUpcoming => select
                .filter(subscription::Column::Status.eq(Status::Active))
                .filter(subscription::Column::Cycle.eq(Cycle::Annual)),
            NoticeKind::TrialEnding => select
                .filter(subscription::Column::Status.eq(Status::Trialing))
                .filter(
                    Expr::col(subscription::Column::DueAt)
                        .sub(Expr::col(subscription::Column::CurrentPeriodStart))
                        .gt(SHORTEST_REMINDED_TRIAL_MS),
                ),
            NoticeKind::CardExpiring => select
                .filter(subscription::Column::Status.is_in([Status::Active, Status::Trialing]))
                .filter(Expr::cust(
                    "EXISTS (SELECT 1 FROM payment_methods pm \
                     WHERE pm.id = subscriptions.default_payment_method_id \
                     AND pm.expires_at IS NOT NULL AND pm.expires_at <= subscriptions.due_at)",
                )),
            _ => return Ok(Vec::new()),
        };
        let rows = select
            .order_by_asc(subscription::Column::DueAt)
            .order_by_asc(subscription::Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?;
        if kind != NoticeKind::CardExpiring {
            return Ok(rows
                .into_iter()
                .map(|subscription| Reminded {
                    subscription,
                    card: None,
                })
                .collect());
        }
        // The cards of the page that expire before their charge.
        let ids: Vec<_> = rows
            .iter()
            .map(|s| s.default_payment_method_id.clone())
            .collect();
        let expiring: std::collections::HashMap<_, i64> = payment_method::Entity::scoped(account)
            .filter(payment_method::Column::Id.is_in(ids))
            .filter(payment_method::Column::ExpiresAt.is_not_null())
            .select_only()
            .column(payment_method::Column::Id)
            .column(payment_method::Column::ExpiresAt)
            .into_tuple::<(crate::ids::PaymentMethodId, i64)>()
            .all(self.conn())
            .await?
            .into_iter()
            .collect();
        Ok(rows
            .into_iter()
            .map(|subscription| {
                let card = subscription.default_payment_method_id.clone();
                let expires = expiring.get(&card).copied();
                let charge = subscription.due_at.unwrap_or_default();
                Reminded {
                    card: expires.filter(|at| *at <= charge).map(|_| card),
                    subscription,
                }
            })
            .collect())
    }

    /// Writes the reminders of `kind` about `reminded` for `channels`, scheduled at `now`,
    /// once per cause and channel.
    pub async fn insert_reminders(
        &self,
        kind: NoticeKind,
        reminded: &[Reminded],
        channels: &[Channel],
        now: i64,
    ) -> StoreResult<()> {
        let mut rows = Vec::new();
        // WhatsApp only to the customers who opted in and have a phone (as the events' sink).
        let on_whatsapp = if channels.contains(&Channel::Whatsapp) {
            self.whatsapp_customers(reminded).await?
        } else {
            Default::default()
        };
        for each in reminded {
            if kind == NoticeKind::CardExpiring && each.card.is_none() {
                continue;
            }
            let sub = &each.subscription;
            for channel in channels {
                if *channel == Channel::Whatsapp && !on_whatsapp.contains(&sub.customer_id) {
                    continue;
                }
                rows.push(super::notice_sink::scheduled(
                    &sub.account_id,
                    (kind, *channel, &cause(kind, each)),
                    super::notice_sink::About {
                        customer_id: sub.customer_id.clone(),
                        subscription_id: Some(sub.id.clone()),
                        invoice_id: None,
                        charge_id: None,
                    },
                    (now, now),
                ));
            }
        }
        super::notice_sink::insert_notices(self.writer(), rows).await
    }

    /// Of the customers `reminded` is about, those WhatsApp may reach.
    async fn whatsapp_customers(
        &self,
        reminded: &[Reminded],
    ) -> StoreResult<std::collections::HashSet<crate::ids::CustomerId>> {
        let Some(first) = reminded.first() else {
            return Ok(Default::default());
        };
        let ids: Vec<_> = reminded
            .iter()
            .map(|each| each.subscription.customer_id.clone())
            .collect();
        Ok(customer::Entity::scoped(&first.subscription.account_id)
            .filter(customer::Column::Id.is_in(ids))
            .filter(customer::Column::WhatsappOptIn.eq(true))
            .filter(customer::Column::Phone.is_not_null())
            .select_only()
            .column(customer::Column::Id)
            .into_tuple::<crate::ids::CustomerId>()
            .all(self.conn())
            .await?
            .into_iter()
            .collect())
    }
}

/// Dunning's figure (CONTRACT §15's metrics): of the subscription periods with a declined
/// charge since `since` (real time), how many were paid after all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    pub failed_periods: i64,
    pub recovered_periods: i64,
}

impl Store {
    /// The periods whose charge was declined since `since`, and those of them since approved.
    pub async fn recovery_since(&self, since: i64) -> StoreResult<Recovery> {
        use sea_orm::{ConnectionTrait, Statement};
        let conn = self.conn();
        let backend = conn.get_database_backend();
        let sql = "SELECT COUNT(*) AS failed, \
             COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM charge_attempts a \
                 WHERE a.subscription_id = d.subscription_id AND a.period_start = d.period_start \
                 AND a.status = 'approved') THEN 1 ELSE 0 END), 0) AS recovered \
             FROM (SELECT DISTINCT subscription_id, period_start FROM charge_attempts \
                 WHERE status = 'declined' AND subscription_id IS NOT NULL \
                 AND period_start IS NOT NULL AND created_at >= $1) d";
        let sql = match backend {
            sea_orm::DbBackend::Postgres => sql.to_owned(),
            _ => sql.replace("$1", "?"),
        };
        let row = conn
            .query_one_raw(Statement::from_sql_and_values(backend, sql, [since.into()]))
            .await?;
        let Some(row) = row else {
            return Ok(Recovery::default());
        };
        Ok(Recovery {
            failed_periods: row.try_get("", "failed")?,
            recovered_periods: row.try_get("", "recovered")?,
        })
    }
}
