//! The events' fan-out: an event is written with what it causes, in the transaction of the
//! change it reports. Every writer goes through here, one event at a time (`write`: the
//! actor's units, invoices, credit notes, notices' ends) or in batches (`statements`: the
//! renewals' multi-row writes), so every sink sees every event, whichever path wrote it.
//!
//! The sinks, each reading once per account what it needs:
//! 1. webhook deliveries: one pending delivery per active endpoint of the account subscribed
//!    to the event's type (`webhooks::subscribes`);
//! 2. notices: what the event tells the customer (`notice_sink`, CONTRACT §15).
//!
//! A new sink is one more step in `statements`, whose rows go in the same statements list.

use super::StoreResult;
use super::entities::{notice, webhook_delivery};
use super::notice_sink::Known;
use super::outbox::Event;
use super::webhooks::{WebhookEndpoint, active_endpoints, pending_delivery, subscribes};
use crate::ids::{AccountId, WebhookEndpointId};
use sea_orm::{ActiveModelTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryTrait};
use std::collections::BTreeMap;

/// The statements writing `events` and every sink's rows for them, in order (the events
/// first: the deliveries and notices refer to them), and the endpoints given deliveries, to be
/// told once the transaction commits; `known` is what the caller knows of the events, which
/// the sinks need not read.
pub(crate) async fn statements<C: ConnectionTrait>(
    conn: &C,
    events: &[&Event],
    known: &Known<'_>,
) -> StoreResult<(Vec<sea_orm::Statement>, Vec<WebhookEndpointId>)> {
    let (sinks, touched) = sink_statements(conn, events, known).await?;
    let backend = conn.get_database_backend();
    let mut statements: Vec<_> = insert_events(backend, events).into_iter().collect();
    statements.extend(sinks);
    Ok((statements, touched))
}

/// Writes `events` and their sinks' rows on `conn` (inside the caller's transaction); the
/// endpoints given deliveries. The events go first, before the sinks read: on SQLite a
/// transaction whose first statement is a read cannot always become a write.
pub(crate) async fn write<C: ConnectionTrait>(
    conn: &C,
    events: &[&Event],
) -> StoreResult<Vec<WebhookEndpointId>> {
    if let Some(insert) = insert_events(conn.get_database_backend(), events) {
        conn.execute_raw(insert).await?;
    }
    let (sinks, touched) = sink_statements(conn, events, &Known::default()).await?;
    for statement in sinks {
        conn.execute_raw(statement).await?;
    }
    Ok(touched)
}

fn insert_events(backend: sea_orm::DbBackend, events: &[&Event]) -> Option<sea_orm::Statement> {
    insert_all(backend, events.iter().map(|e| (*e).clone()))
}

/// Every sink's rows for `events`, as statements, and the endpoints given deliveries.
async fn sink_statements<C: ConnectionTrait>(
    conn: &C,
    events: &[&Event],
    known: &Known<'_>,
) -> StoreResult<(Vec<sea_orm::Statement>, Vec<WebhookEndpointId>)> {
    let backend = conn.get_database_backend();
    let deliveries = deliveries_for(conn, events).await?;
    let touched = deliveries.iter().map(|d| d.endpoint_id.clone()).collect();
    let notices = super::notice_sink::notices_for(conn, events, known).await?;
    let statements = insert_all(backend, deliveries)
        .into_iter()
        .chain(insert_notices(backend, notices))
        .collect();
    Ok((statements, touched))
}

/// The webhook sink: a pending delivery of each event to each active endpoint of its account
/// subscribed to its type, due when the event was written.
async fn deliveries_for<C: ConnectionTrait>(
    conn: &C,
    events: &[&Event],
) -> StoreResult<Vec<webhook_delivery::Model>> {
    let mut endpoints: BTreeMap<&AccountId, Vec<WebhookEndpoint>> = BTreeMap::new();
    let mut deliveries = Vec::new();
    for event in events {
        if !endpoints.contains_key(&event.account_id) {
            let active = active_endpoints(conn, &event.account_id).await?;
            endpoints.insert(&event.account_id, active);
        }
        for endpoint in &endpoints[&event.account_id] {
            if subscribes(endpoint, event.event_type) {
                deliveries.push(pending_delivery(event, &endpoint.id, event.created_at));
            }
        }
    }
    Ok(deliveries)
}

/// The notices' sink's rows: a notice already written for its cause and channel (a replayed
/// event) is left as it is, by the unique index.
fn insert_notices(
    backend: sea_orm::DbBackend,
    notices: Vec<notice::Model>,
) -> Option<sea_orm::Statement> {
    super::notice_sink::insert_notices_statement(backend, notices)
}

/// One multi-row INSERT of `rows`, or none when there are none.
pub(super) fn insert_all<M, A>(
    backend: sea_orm::DbBackend,
    rows: impl IntoIterator<Item = M>,
) -> Option<sea_orm::Statement>
where
    M: IntoActiveModel<A>,
    A: ActiveModelTrait,
{
    let mut rows = rows
        .into_iter()
        .map(|row| row.into_active_model().reset_all())
        .peekable();
    rows.peek()?;
    Some(<A::Entity as EntityTrait>::insert_many(rows).build(backend))
}
