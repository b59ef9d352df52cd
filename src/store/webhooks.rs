//! Webhook endpoints, the delivery outbox and the attempts log, tenant-scoped.
//!
//! Deliveries are written by `StoreTxn::insert_event` in the transaction of the change that
//! caused the event (one per active endpoint subscribed to its type); after that transaction
//! commits, the ids of the endpoints it touched go to the [`DeliverySignal`], which wakes
//! their actors. The signal is only a shortcut: an actor that misses it still finds its due
//! rows by `next_attempt_at` on its next sweep.

use super::entities::{account, event, webhook_attempt, webhook_delivery, webhook_endpoint};
use super::{Page, PageRequest, Store, StoreError, StoreResult, fetch_page};
use crate::domain::event_type::EventType;
use crate::ids::{AccountId, DeliveryId, EventId, WebhookEndpointId};
use crate::store::Scoped;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, QuerySelect, Set,
};
use std::sync::{Arc, OnceLock};
use tokio::sync::mpsc::UnboundedSender;

pub use webhook_attempt::Model as WebhookAttempt;
pub use webhook_delivery::Model as WebhookDelivery;
pub use webhook_endpoint::Model as WebhookEndpoint;

/// Where committed deliveries are announced: endpoint ids, once per transaction.
#[derive(Clone, Default)]
pub struct DeliverySignal(Arc<OnceLock<UnboundedSender<WebhookEndpointId>>>);

impl DeliverySignal {
    pub(crate) fn announce(&self, endpoint_ids: impl IntoIterator<Item = WebhookEndpointId>) {
        if let Some(sender) = self.0.get() {
            for id in endpoint_ids {
                let _ = sender.send(id);
            }
        }
    }
}

/// A change of an endpoint.
#[derive(Clone, Debug, Default)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub active: Option<bool>,
}

/// Why an endpoint was not inserted.
#[derive(Debug, thiserror::Error)]
pub enum InsertEndpointError {
    /// The account has `limit` endpoints already; nothing was written.
    #[error("the account already has {limit} webhook endpoints")]
    LimitReached { limit: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What an attempt ended in, decided by the caller (the endpoint's actor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptVerdict {
    Delivered,
    RetryAt(i64),
    Failed,
}

impl AttemptVerdict {
    fn status(self) -> &'static str {
        match self {
            AttemptVerdict::Delivered => "delivered",
            AttemptVerdict::RetryAt(_) => "pending",
            AttemptVerdict::Failed => "failed",
        }
    }
}

/// Whether an endpoint subscribed to `event_type` (`*` stands for every type).
pub fn subscribes(endpoint: &WebhookEndpoint, event_type: EventType) -> bool {
    serde_json::from_str::<Vec<String>>(&endpoint.events)
        .unwrap_or_default()
        .iter()
        .any(|t| t == event_type.as_str() || t == "*")
}

/// The active endpoints of `account` subscribed to `event_type`.
async fn subscribed_endpoints<C: ConnectionTrait>(
    conn: &C,
    account: &AccountId,
    event_type: EventType,
) -> StoreResult<Vec<WebhookEndpoint>> {
    Ok(active_endpoints(conn, account)
        .await?
        .into_iter()
        .filter(|e| subscribes(e, event_type))
        .collect())
}

/// The active endpoints of `account`.
pub(super) async fn active_endpoints<C: ConnectionTrait>(
    conn: &C,
    account: &AccountId,
) -> StoreResult<Vec<WebhookEndpoint>> {
    Ok(webhook_endpoint::Entity::scoped(account)
        .filter(webhook_endpoint::Column::Active.eq(true))
        .all(conn)
        .await?)
}

/// A delivery of `event` to `endpoint_id`, pending and due at `due_ms`.
pub(super) fn pending_delivery(
    event: &event::Model,
    endpoint_id: &WebhookEndpointId,
    due_ms: i64,
) -> WebhookDelivery {
    WebhookDelivery {
        id: DeliveryId::generate(),
        account_id: event.account_id.clone(),
        endpoint_id: endpoint_id.to_owned(),
        event_id: event.id.clone(),
        status: "pending".into(),
        attempts: 0,
        next_attempt_at: Some(due_ms),
        last_status_code: None,
        last_error: None,
        created_at: due_ms,
        updated_at: due_ms,
    }
}

/// Inserts one pending delivery of `event` per endpoint, due at `due_ms`; returns them.
async fn insert_deliveries<C: ConnectionTrait>(
    conn: &C,
    event: &event::Model,
    endpoints: &[WebhookEndpoint],
    due_ms: i64,
) -> StoreResult<Vec<WebhookDelivery>> {
    let mut deliveries = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let row = pending_delivery(event, &endpoint.id, due_ms);
        row.clone()
            .into_active_model()
            .reset_all()
            .insert(conn)
            .await?;
        deliveries.push(row);
    }
    Ok(deliveries)
}

impl Store {
    /// Where committed deliveries are announced; set once by the webhook runtime.
    pub fn on_deliveries(&self, sender: UnboundedSender<WebhookEndpointId>) {
        let _ = self.signal.0.set(sender);
    }

    /// Inserts an endpoint unless its account already has `limit` of them (active or
    /// disabled: a disabled endpoint keeps its deliveries and can be enabled again, so it
    /// still counts; a deleted one is gone and does not).
    ///
    /// The count and the insert are one transaction that concurrent creates of the same
    /// account cannot interleave: on PostgreSQL it first locks the account's row (`FOR NO KEY
    /// UPDATE`, which, unlike `FOR UPDATE`, leaves the account's other rows free to reference
    /// it), so a second create waits and then counts the first one's committed row; on SQLite
    /// every unit holds the single writer from `begin` to its savepoint's release. The row is
    /// inserted before counting, so that SQLite's transaction starts as a write.
    pub async fn insert_webhook_endpoint(
        &self,
        row: WebhookEndpoint,
        limit: u64,
    ) -> Result<(), InsertEndpointError> {
        use sea_orm::sea_query::LockType;
        use sea_orm::{DbBackend, PaginatorTrait};
        let account_id = row.account_id.clone();
        let txn = self.begin().await?;
        if txn.conn().get_database_backend() == DbBackend::Postgres {
            account::Entity::find_by_id(account_id.clone())
                .select_only()
                .column(account::Column::Id)
                .lock(LockType::NoKeyUpdate)
                .into_tuple::<AccountId>()
                .one(txn.conn())
                .await
                .map_err(StoreError::from)?;
        }
        row.into_active_model()
            .reset_all()
            .insert(txn.conn())
            .await
            .map_err(StoreError::from)?;
        let count = webhook_endpoint::Entity::scoped(&account_id)
            .count(txn.conn())
            .await
            .map_err(StoreError::from)?;
        if count > limit {
            // Dropping the transaction rolls the insert back.
            return Err(InsertEndpointError::LimitReached { limit });
        }
        txn.commit().await?;
        Ok(())
    }

    pub async fn webhook_endpoint(
        &self,
        account: &AccountId,
        id: &WebhookEndpointId,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        Ok(webhook_endpoint::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// An endpoint by id alone: for its actor, whose id came from a scoped lookup.
    pub async fn webhook_endpoint_by_id(
        &self,
        id: &WebhookEndpointId,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        Ok(webhook_endpoint::Entity::find_by_id(id.clone())
            .one(self.conn())
            .await?)
    }

    pub async fn list_webhook_endpoints(
        &self,
        account: &AccountId,
        page: &PageRequest,
    ) -> StoreResult<Page<WebhookEndpoint>> {
        let select = webhook_endpoint::Entity::scoped(account);
        fetch_page(self.conn(), select, webhook_endpoint::Column::Id, page).await
    }

    /// Ids of every active endpoint, of every account: the actors the runtime keeps.
    pub async fn active_webhook_endpoint_ids(
        &self,
    ) -> StoreResult<Vec<(WebhookEndpointId, AccountId)>> {
        Ok(webhook_endpoint::Entity::find()
            .select_only()
            .column(webhook_endpoint::Column::Id)
            .column(webhook_endpoint::Column::AccountId)
            .filter(webhook_endpoint::Column::Active.eq(true))
            .into_tuple()
            .all(self.conn())
            .await?)
    }

    pub async fn update_webhook_endpoint(
        &self,
        account: &AccountId,
        id: &WebhookEndpointId,
        patch: EndpointPatch,
        now_ms: i64,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        let Some(found) = self.webhook_endpoint(account, id).await? else {
            return Ok(None);
        };
        let mut model = found.into_active_model();
        if let Some(url) = patch.url {
            model.url = Set(url);
        }
        if let Some(events) = patch.events {
            model.events = Set(serde_json::Value::from(events).to_string());
        }
        if let Some(active) = patch.active {
            model.active = Set(active);
        }
        model.updated_at = Set(now_ms);
        Ok(Some(model.update(self.writer()).await?))
    }

    /// Deletes an endpoint with its deliveries and their attempts, in one transaction.
    pub async fn delete_webhook_endpoint(
        &self,
        account: &AccountId,
        id: &WebhookEndpointId,
    ) -> StoreResult<bool> {
        let txn = self.begin().await?;
        let deleted = webhook_endpoint::Entity::delete_many()
            .filter(webhook_endpoint::Column::Id.eq(id))
            .filter(webhook_endpoint::Entity::of(account))
            .exec(txn.conn())
            .await?;
        if deleted.rows_affected == 0 {
            return Ok(false);
        }
        webhook_attempt::Entity::delete_many()
            .filter(webhook_attempt::Column::EndpointId.eq(id))
            .exec(txn.conn())
            .await?;
        webhook_delivery::Entity::delete_many()
            .filter(webhook_delivery::Column::EndpointId.eq(id))
            .exec(txn.conn())
            .await?;
        txn.commit().await?;
        Ok(true)
    }

    /// Pending deliveries of an endpoint due by `now_ms`, earliest first.
    pub async fn due_deliveries(
        &self,
        endpoint_id: &WebhookEndpointId,
        now_ms: i64,
        limit: u64,
    ) -> StoreResult<Vec<WebhookDelivery>> {
        Ok(webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint_id))
            .filter(webhook_delivery::Column::NextAttemptAt.lte(now_ms))
            .order_by_asc(webhook_delivery::Column::NextAttemptAt)
            .order_by_asc(webhook_delivery::Column::Id)
            .limit(limit)
            .all(self.conn())
            .await?)
    }

    /// When the endpoint's earliest pending delivery due after `after_ms` is due.
    pub async fn next_delivery_due_after(
        &self,
        endpoint_id: &WebhookEndpointId,
        after_ms: i64,
    ) -> StoreResult<Option<i64>> {
        Ok(webhook_delivery::Entity::find()
            .select_only()
            .column(webhook_delivery::Column::NextAttemptAt)
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint_id))
            .filter(webhook_delivery::Column::NextAttemptAt.gt(after_ms))
            .order_by_asc(webhook_delivery::Column::NextAttemptAt)
            .limit(1)
            .into_tuple::<Option<i64>>()
            .one(self.conn())
            .await?
            .flatten())
    }

    /// Pending deliveries of `account` due by `now_ms` (what the test clock waits for).
    pub async fn count_due_deliveries(&self, account: &AccountId, now_ms: i64) -> StoreResult<u64> {
        use sea_orm::PaginatorTrait;
        Ok(webhook_delivery::Entity::scoped(account)
            .filter(webhook_delivery::Column::NextAttemptAt.lte(now_ms))
            .count(self.conn())
            .await?)
    }

    /// The body of an event, by id alone (the delivery that names it was scoped).
    pub async fn event_body(&self, event_id: &EventId) -> StoreResult<Option<String>> {
        Ok(event::Entity::find_by_id(event_id.clone())
            .select_only()
            .column(event::Column::Body)
            .into_tuple::<String>()
            .one(self.conn())
            .await?)
    }

    /// Records an attempt and moves its delivery, in one transaction. Only a still-pending
    /// delivery moves, so a late report after a deletion changes nothing.
    pub async fn record_attempt(
        &self,
        delivery: &WebhookDelivery,
        attempt: WebhookAttempt,
        verdict: AttemptVerdict,
    ) -> StoreResult<()> {
        use sea_orm::sea_query::{Expr, ExprTrait};
        let txn = self.begin().await?;
        // Fenced like a subscription's write: a node that lost the endpoint's shard records
        // nothing (its attempt shows in the receiver's log only).
        let shard = crate::store::ownership::shard_of(delivery.endpoint_id.as_str());
        let fence = txn.fence(shard).await?;
        let mut update = webhook_delivery::Entity::update_many()
            .col_expr(
                webhook_delivery::Column::Status,
                Expr::value(verdict.status()),
            )
            .col_expr(
                webhook_delivery::Column::Attempts,
                Expr::col(webhook_delivery::Column::Attempts).add(1),
            )
            .col_expr(
                webhook_delivery::Column::NextAttemptAt,
                Expr::value(match verdict {
                    AttemptVerdict::RetryAt(at) => Some(at),
                    _ => None,
                }),
            )
            .col_expr(
                webhook_delivery::Column::LastStatusCode,
                Expr::value(attempt.status_code),
            )
            .col_expr(
                webhook_delivery::Column::LastError,
                Expr::value(attempt.error.clone()),
            )
            .col_expr(
                webhook_delivery::Column::UpdatedAt,
                Expr::value(attempt.attempted_at),
            )
            .filter(webhook_delivery::Column::Id.eq(&delivery.id))
            .filter(webhook_delivery::Column::Status.eq("pending"));
        if let Some(epoch) = fence {
            update = update.filter(super::cluster::lease_is(shard, epoch));
        }
        let moved = update.exec(txn.conn()).await?;
        if moved.rows_affected == 0
            && let Some(epoch) = fence
            && !super::cluster::lease_holds(txn.conn(), shard, epoch).await?
        {
            self.ownership.lose(shard);
            metrics::counter!("cluster_fenced_writes_total").increment(1);
            return Err(super::StoreError::Fenced(shard));
        }
        if moved.rows_affected == 1 {
            attempt
                .into_active_model()
                .reset_all()
                .insert(txn.conn())
                .await?;
        }
        txn.commit().await?;
        Ok(())
    }

    pub async fn list_deliveries(
        &self,
        account: &AccountId,
        endpoint_id: &WebhookEndpointId,
        page: &PageRequest,
    ) -> StoreResult<Page<WebhookDelivery>> {
        let select = webhook_delivery::Entity::scoped(account)
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint_id));
        fetch_page(self.conn(), select, webhook_delivery::Column::Id, page).await
    }

    /// Whether an attempt's record is in the database.
    pub async fn attempt_recorded(&self, attempt: &WebhookAttempt) -> StoreResult<bool> {
        Ok(
            webhook_attempt::Entity::find_scoped(&attempt.account_id, attempt.id.clone())
                .one(self.conn())
                .await?
                .is_some(),
        )
    }

    /// The attempts of the given deliveries, oldest first.
    pub async fn attempts_of(
        &self,
        delivery_ids: &[DeliveryId],
    ) -> StoreResult<Vec<WebhookAttempt>> {
        Ok(webhook_attempt::Entity::find()
            .filter(webhook_attempt::Column::DeliveryId.is_in(delivery_ids.iter().cloned()))
            .order_by_asc(webhook_attempt::Column::Id)
            .all(self.conn())
            .await?)
    }

    /// Queues `event` again to every active endpoint subscribed to it; announces them.
    pub async fn redeliver(
        &self,
        event: &event::Model,
        now_ms: i64,
    ) -> StoreResult<Vec<WebhookDelivery>> {
        // Read before the transaction: on SQLite a transaction that starts with a read cannot
        // always upgrade to a write while another connection writes.
        let endpoints =
            subscribed_endpoints(self.conn(), &event.account_id, event.event_type).await?;
        let txn = self.begin().await?;
        let deliveries = insert_deliveries(txn.conn(), event, &endpoints, now_ms).await?;
        txn.commit().await?;
        self.signal
            .announce(deliveries.iter().map(|d| d.endpoint_id.clone()));
        Ok(deliveries)
    }
}
