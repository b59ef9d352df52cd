//! What a chaos run checks once its faults are off and its charges have settled: the
//! invariant checker (`crate::audit`: our side, and each of our charges asked about at the
//! processor), then what only the harness knows. It knows the processor's side in the other
//! direction (every transaction the sandbox made under a reference we posted is exactly one of
//! our charges: every create went through the proxy, which saw its reference), which cards
//! approve and which decline (so an unknown outcome that became a decline, or anything that
//! became an error, shows), and which requests were retried under one Idempotency-Key.

use crate::audit::audit;
use crate::audit::queries::Breach;
use crate::chaos::proxy::Proxy;
use crate::chaos::shop::Shop;
use billing::charges::Charger;
use billing::processor::client::ProcessorClient;
use billing::store::Store;
use std::collections::{BTreeSet, HashMap, HashSet};

/// What the run set up, to judge its outcome by.
#[derive(Default)]
pub struct Expected {
    /// Payment methods whose card approves (4242).
    pub approving: HashSet<String>,
    /// Payment methods whose card declines (4111).
    pub declining: HashSet<String>,
    /// Creates retried under one Idempotency-Key: (customer, the subscription answered).
    pub idempotent: Vec<(String, String)>,
}

/// Counts for the run's line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub charges: usize,
    pub approved: usize,
    pub declined: usize,
    /// Distinct references the proxy saw posted.
    pub posted: usize,
}

/// Every violation found, and the counts.
pub async fn check(
    store: &Store,
    shop: &Shop,
    proxy: &Proxy,
    expected: &Expected,
) -> anyhow::Result<(Vec<Breach>, Tally)> {
    let (mut breaches, tally) = charges(store, shop, Some(proxy), expected).await?;
    breaches.extend(subscriptions(store, shop, expected).await?);
    Ok((breaches, tally))
}

/// The money checks: the invariant checker, each charge ended as its card decides, and (given
/// the proxy every processor request went through) each processor transaction under a
/// reference we posted exactly one of our charges.
pub async fn charges(
    store: &Store,
    shop: &Shop,
    proxy: Option<&Proxy>,
    expected: &Expected,
) -> anyhow::Result<(Vec<Breach>, Tally)> {
    let now = chrono::Utc::now().timestamp_millis();
    // Asked through the proxy, now passing everything through: the account's own processor.
    let charger = Charger::new(store.clone(), ProcessorClient::new()?, String::new());
    let report = audit(store, &charger, now).await?;
    let mut breaches = report.breaches;
    let charges = crate::Raw(store).chaos_charges(&shop.account).await?;
    let mut tally = Tally {
        charges: charges.len(),
        ..Tally::default()
    };
    let mut by_reference: HashMap<&str, usize> = HashMap::new();
    for charge in &charges {
        *by_reference.entry(charge.reference.as_str()).or_default() += 1;
        match charge.status.as_str() {
            "approved" => tally.approved += 1,
            "declined" => tally.declined += 1,
            _ => {}
        }
        let expected_status = if expected.approving.contains(&charge.payment_method_id) {
            "approved"
        } else if expected.declining.contains(&charge.payment_method_id) {
            "declined"
        } else {
            continue;
        };
        if charge.status != expected_status {
            breaches.push(Breach {
                invariant: "a charge did not end as its card decides",
                detail: format!(
                    "{} ({}, subscription {}) is {}; its card {}",
                    charge.id,
                    charge.purpose,
                    charge.subscription_id.as_deref().unwrap_or("none"),
                    charge.status,
                    if expected_status == "approved" {
                        "approves"
                    } else {
                        "declines"
                    }
                ),
            });
        }
    }

    // The processor's side: each reference ever posted, asked about straight at the sandbox.
    let Some(proxy) = proxy else {
        return Ok((breaches, tally));
    };
    let posted: BTreeSet<String> = proxy
        .seen("POST", "/transactions")
        .iter()
        .filter_map(|seen| serde_json::from_str::<serde_json::Value>(&seen.body).ok())
        .filter_map(|body| body["reference"].as_str().map(str::to_owned))
        .collect();
    tally.posted = posted.len();
    let client = ProcessorClient::new()?;
    for reference in &posted {
        let Some(tx) = client
            .find_transaction_by_reference(&shop.direct, reference)
            .await?
        else {
            continue;
        };
        let ours = by_reference.get(reference.as_str()).copied().unwrap_or(0);
        if ours != 1 {
            breaches.push(Breach {
                invariant: "a processor transaction is not exactly one of our charges",
                detail: format!(
                    "transaction {} ({}, {} cents) under reference {reference} matches {ours} charges",
                    tx.id, tx.status, tx.amount_in_cents
                ),
            });
        }
    }

    Ok((breaches, tally))
}

/// Each subscription where its card takes it, one subscription per Idempotency-Key.
async fn subscriptions(
    store: &Store,
    shop: &Shop,
    expected: &Expected,
) -> anyhow::Result<Vec<Breach>> {
    let mut breaches = Vec::new();
    let subscriptions = crate::Raw(store).chaos_subscriptions(&shop.account).await?;
    for sub in &subscriptions {
        let expected_status = if expected.approving.contains(&sub.payment_method_id) {
            "active"
        } else if expected.declining.contains(&sub.payment_method_id) {
            "past_due"
        } else {
            continue;
        };
        if sub.status != expected_status {
            breaches.push(Breach {
                invariant: "a subscription is not where its card takes it",
                detail: format!("{} is {}, expected {expected_status}", sub.id, sub.status),
            });
        }
    }
    for (customer, answered) in &expected.idempotent {
        let made: Vec<&str> = subscriptions
            .iter()
            .filter(|s| &s.customer_id == customer)
            .map(|s| s.id.as_str())
            .collect();
        if made != [answered.as_str()] {
            breaches.push(Breach {
                invariant: "a create retried under one Idempotency-Key made other than one subscription",
                detail: format!("customer {customer}: answered {answered}, made {made:?}"),
            });
        }
    }
    Ok(breaches)
}
