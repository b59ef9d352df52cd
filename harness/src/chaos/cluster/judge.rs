//! What a cluster run judges beyond the chaos harness's money checks (`checks::charges`: the
//! invariant checker, each charge ended as its card decides, each processor transaction exactly
//! one of our charges): that every event reached each endpoint subscribed to it, once per
//! attempt recorded, and never again after a successful attempt. Two nodes sending one delivery
//! show here: the receiver holds the event twice, and the deliveries log either one attempt
//! (one sender's write lost) or two successful ones.
//!
//! One duplicate is not a fault of the cluster but of HTTP: a node that sent a delivery and
//! died, froze or lost its database connection before recording the attempt leaves it pending
//! (or its record is fenced), and the next owner sends it again. Such a pair (received once
//! before the interruption ended, once after it began, one more receipt than attempts) is
//! counted apart, not as a violation. An interruption ends when a frozen node is woken (a
//! frozen process sends nothing; what arrives meanwhile was on the wire before), or half a
//! second after a kill or a connection cut (bytes already sent still arrive). A first receipt
//! after a frozen node woke up is not excused: a node must not start a send for a shard it no
//! longer trusts.

use super::receiver::Received;
use crate::audit::queries::Breach;
use billing::ids::AccountId;
use billing::store::Store;
use sea_orm::{ConnectionTrait, Statement, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// What the webhook check counted.
#[derive(Clone, Debug, Default)]
pub struct WebhookTally {
    pub events: usize,
    pub deliveries: usize,
    pub attempts: usize,
    pub received: usize,
    /// (endpoint, event) pairs received more than once.
    pub received_twice: usize,
    /// Of those, the duplicates an interruption explains (see the module's doc).
    pub resent_after_interruption: usize,
}

struct Delivery {
    endpoint_id: String,
    event_id: String,
    status: String,
}

/// Runs a query with the account id as its one parameter; rows as strings (NULL as empty).
async fn rows(
    store: &Store,
    sql: &str,
    account: &AccountId,
    columns: usize,
) -> anyhow::Result<Vec<Vec<String>>> {
    let backend = crate::Raw(store).conn().get_database_backend();
    let statement =
        Statement::from_sql_and_values(backend, sql, [Value::from(account.as_str().to_owned())]);
    let mut out = Vec::new();
    for row in crate::Raw(store).conn().query_all_raw(statement).await? {
        let mut values = Vec::with_capacity(columns);
        for i in 0..columns {
            values.push(
                row.try_get_by_index::<Option<String>>(i)?
                    .unwrap_or_default(),
            );
        }
        out.push(values);
    }
    Ok(out)
}

/// How many of the account's webhook deliveries are still pending.
pub async fn pending_deliveries(store: &Store, account: &AccountId) -> anyhow::Result<usize> {
    Ok(rows(
        store,
        "SELECT id FROM webhook_deliveries WHERE account_id = $1 AND status = 'pending'",
        account,
        1,
    )
    .await?
    .len())
}

/// Compares the receiver's log with the database's events, deliveries and attempts.
/// `endpoints` maps each endpoint's number (its receiver path) to its id and event types;
/// `interruptions` are the spans (see the module's doc) nodes were killed, frozen or cut from
/// the database.
pub async fn webhooks(
    store: &Store,
    account: &AccountId,
    endpoints: &BTreeMap<usize, (String, Vec<&'static str>)>,
    received: &[Received],
    interruptions: &[(Instant, Instant)],
) -> anyhow::Result<(Vec<Breach>, WebhookTally)> {
    let mut breaches = Vec::new();
    let mut tally = WebhookTally {
        received: received.len(),
        ..WebhookTally::default()
    };
    let events: HashMap<String, String> = rows(
        store,
        "SELECT id, type FROM events WHERE account_id = $1",
        account,
        2,
    )
    .await?
    .into_iter()
    .map(|r| (r[0].clone(), r[1].clone()))
    .collect();
    tally.events = events.len();
    let deliveries: HashMap<String, Delivery> = rows(
        store,
        "SELECT id, endpoint_id, event_id, status FROM webhook_deliveries WHERE account_id = $1",
        account,
        4,
    )
    .await?
    .into_iter()
    .map(|r| {
        (
            r[0].clone(),
            Delivery {
                endpoint_id: r[1].clone(),
                event_id: r[2].clone(),
                status: r[3].clone(),
            },
        )
    })
    .collect();
    tally.deliveries = deliveries.len();
    // (endpoint id, event id) → its attempts (real time, status), over every delivery row of
    // the pair.
    let mut attempts: HashMap<(String, String), Vec<(i64, String)>> = HashMap::new();
    for row in rows(
        store,
        "SELECT delivery_id, CAST(status_code AS TEXT), CAST(attempted_at AS TEXT) \
         FROM webhook_attempts WHERE account_id = $1",
        account,
        3,
    )
    .await?
    {
        tally.attempts += 1;
        let Some(delivery) = deliveries.get(&row[0]) else {
            continue;
        };
        attempts
            .entry((delivery.endpoint_id.clone(), delivery.event_id.clone()))
            .or_default()
            .push((row[2].parse().unwrap_or_default(), row[1].clone()));
    }
    let mut rows_per_pair: HashMap<(String, String), Vec<&Delivery>> = HashMap::new();
    for delivery in deliveries.values() {
        rows_per_pair
            .entry((delivery.endpoint_id.clone(), delivery.event_id.clone()))
            .or_default()
            .push(delivery);
    }
    let mut receipts: HashMap<(usize, &str), Vec<&Received>> = HashMap::new();
    for r in received {
        receipts
            .entry((r.endpoint, r.event_id.as_str()))
            .or_default()
            .push(r);
    }

    for (&n, (endpoint_id, types)) in endpoints {
        let subscribed = |t: &str| types.iter().any(|s| *s == "*" || *s == t);
        for (event_id, event_type) in &events {
            if !subscribed(event_type) {
                continue;
            }
            let pair = (endpoint_id.clone(), event_id.clone());
            let rows = rows_per_pair.get(&pair).map_or(&[][..], Vec::as_slice);
            if rows.len() != 1 {
                breaches.push(Breach {
                    invariant: "an event has other than one delivery to an endpoint subscribed to it",
                    detail: format!(
                        "{event_id} ({event_type}) to endpoint {endpoint_id}: {} deliveries",
                        rows.len()
                    ),
                });
            }
            for delivery in rows {
                if delivery.status != "delivered" {
                    breaches.push(Breach {
                        invariant: "a delivery to a receiver that always answers 200 not delivered",
                        detail: format!("{event_id} to {endpoint_id} is {}", delivery.status),
                    });
                }
            }
            let tries = attempts.get(&pair).map_or(&[][..], Vec::as_slice);
            let tried = tries.len();
            let succeeded = tries.iter().filter(|(_, status)| status == "200").count();
            // When each receipt and each attempt happened: what a person reading a breach
            // sets beside the nodes' logs and the fault's instant.
            let when = |times: &[&Received]| {
                let receipts: Vec<String> = times.iter().map(|r| clock(r.at_ms)).collect();
                let tries: Vec<String> = tries
                    .iter()
                    .map(|(at, status)| format!("{} ({status})", clock(*at)))
                    .collect();
                format!(
                    "received at {}; attempts at {}",
                    receipts.join(", "),
                    tries.join(", ")
                )
            };
            let times = receipts
                .get(&(n, event_id.as_str()))
                .map_or(&[][..], Vec::as_slice);
            if times.is_empty() {
                breaches.push(Breach {
                    invariant: "an event of a subscribed type never reached the endpoint",
                    detail: format!("{event_id} ({event_type}) to endpoint {endpoint_id}"),
                });
                continue;
            }
            if times.len() > 1 {
                tally.received_twice += 1;
            }
            if succeeded > 1 {
                breaches.push(Breach {
                    invariant: "a delivery sent again after it succeeded",
                    detail: format!(
                        "{event_id} ({event_type}) to endpoint {endpoint_id}: {succeeded} \
                         successful attempts; {}",
                        when(times)
                    ),
                });
            } else if times.len() > tried {
                let crash_between = times.len() == tried + 1
                    && interruptions.iter().any(|(began, ended)| {
                        times[0].at <= *ended && *began <= times[times.len() - 1].at
                    });
                if crash_between {
                    tally.resent_after_interruption += 1;
                } else {
                    breaches.push(Breach {
                        invariant: "an event received more times than attempts recorded",
                        detail: format!(
                            "{event_id} ({event_type}) to endpoint {endpoint_id}: {}",
                            when(times)
                        ),
                    });
                }
            }
        }
    }
    for r in received {
        let known = endpoints.get(&r.endpoint).is_some_and(|(_, types)| {
            events
                .get(&r.event_id)
                .is_some_and(|t| types.iter().any(|s| *s == "*" || s == t))
        });
        if !known {
            breaches.push(Breach {
                invariant: "an endpoint received an event it is not subscribed to, or none we made",
                detail: format!(
                    "endpoint {} received {} ({})",
                    r.endpoint, r.event_id, r.event_type
                ),
            });
        }
    }
    Ok((breaches, tally))
}

/// A real-time instant (ms) as a time of day, UTC, to the millisecond.
pub fn clock(ms: i64) -> String {
    billing::domain::time::from_millis(ms)
        .format("%H:%M:%S%.3f")
        .to_string()
}

/// The account's subscriptions whose due renewal is not done yet (due and not charged, or
/// charged and still pending), each with its id: the failover clock stops when none of a
/// killed node's shards is left here.
pub async fn undone(
    store: &Store,
    account: &AccountId,
    now_ms: i64,
) -> anyhow::Result<Vec<String>> {
    let backend = crate::Raw(store).conn().get_database_backend();
    let statement = Statement::from_sql_and_values(
        backend,
        "SELECT s.id FROM subscriptions s JOIN accounts a ON a.id = s.account_id \
         WHERE s.account_id = $1 AND ( \
           (s.status IN ('active', 'trialing', 'past_due') AND s.due_at IS NOT NULL \
             AND s.due_at <= $2 + a.clock_offset_ms) \
           OR EXISTS (SELECT 1 FROM charge_attempts c \
             WHERE c.subscription_id = s.id AND c.status = 'pending'))",
        [
            Value::from(account.as_str().to_owned()),
            Value::from(now_ms),
        ],
    );
    let mut out = Vec::new();
    for row in crate::Raw(store).conn().query_all_raw(statement).await? {
        out.push(row.try_get_by_index::<String>(0)?);
    }
    Ok(out)
}
