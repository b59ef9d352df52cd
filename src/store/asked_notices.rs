//! Notices a person asks for, one at a time, beside those events cause (`notice_sink`): a
//! portal link sent from the console (CONTRACT §17). Each is a notice like the others (its
//! own kind, once per cause by the unique index, delivered by the notices' worker), and the
//! one who asked may have it tried at once (`SendNow`, which the worker implements).

use super::entities::notice;
use super::notices::Notice;
use super::{Store, StoreError, StoreResult};
use crate::ids::{AccountId, CustomerId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::{ColumnTrait, QueryFilter};
use std::future::Future;
use std::pin::Pin;

/// Tries a notice at once, as the notices' worker would (`notices::Notices`): the notice as it
/// stands after (sent, failed, suppressed, or scheduled for its next attempt).
pub trait SendNow: Send + Sync {
    fn send_now<'a>(
        &'a self,
        notice: &'a Notice,
    ) -> Pin<Box<dyn Future<Output = StoreResult<Option<Notice>>> + Send + 'a>>;
}

impl Store {
    /// A portal link a person asked the console to send (CONTRACT §17): one e-mail notice of
    /// kind `portal_link` per `cause` (its person and form key: a form posted again is the
    /// same notice, by the unique index), due `now` on the account's clock; the notice as it
    /// stands (new, or as the first post left it).
    pub async fn queue_portal_link(
        &self,
        account: &AccountId,
        customer: &CustomerId,
        subscription: Option<&SubscriptionId>,
        cause: &str,
        now: i64,
    ) -> StoreResult<Notice> {
        use crate::domain::notices::{Channel, NoticeKind};
        let email = Channel::Email.as_str();
        let row = super::notice_sink::scheduled(
            account,
            (NoticeKind::PortalLink, Channel::Email, cause),
            super::notice_sink::About {
                customer_id: customer.clone(),
                subscription_id: subscription.cloned(),
                invoice_id: None,
                charge_id: None,
            },
            (now, now),
        );
        super::notice_sink::insert_notices(self.writer(), vec![row]).await?;
        notice::Entity::scoped(account)
            .filter(notice::Column::Cause.eq(cause))
            .filter(notice::Column::Channel.eq(email))
            .one(self.writer())
            .await?
            .ok_or_else(|| StoreError::invariant(format!("the notice of {cause} is missing")))
    }
}
