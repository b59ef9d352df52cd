//! The sandbox's transactions and their refunds, in memory: each transaction is kept for
//! `SandboxConfig::retention` after it was made, with its reference and its refunds, then
//! pruned (with them) as later transactions are made.
//!
//! It knows nothing of HTTP and decides nothing about refunds: the handlers ask it, and it
//! answers only for the merchant that asks (a transaction or a refund is found under its own
//! merchant, never another's). A change a merchant asks for (`amend`) sees and changes the
//! transaction and its refunds under one lock, so two refunds cannot both take the last of
//! an amount, nor a void pass a refund.

use super::retention::Retention;
use dashmap::DashMap;
use serde::Serialize;
use serde_json::Value;
use std::time::Duration;

/// A refund as the protocol shows it.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Refund {
    pub(super) id: String,
    pub(super) transaction_id: String,
    pub(super) amount_in_cents: i64,
    /// PENDING, then APPROVED or DECLINED.
    pub(super) status: &'static str,
    pub(super) reason: Option<String>,
    pub(super) created_at: String,
}

/// A transaction as the sandbox keeps it: its JSON as compact text, a few hundred bytes,
/// where a `Value` tree took several KB (a long burst keeps every transaction it made).
struct StoredTransaction {
    /// The merchant's public key.
    merchant: String,
    reference: Box<str>,
    body: Box<str>,
    refunds: Vec<Refund>,
}

impl StoredTransaction {
    fn body(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

pub(super) struct Ledger {
    by_id: DashMap<String, StoredTransaction>,
    /// (merchant's public key, reference) → transaction id.
    by_reference: DashMap<(String, String), String>,
    /// Refund id → transaction id.
    refunds: DashMap<String, String>,
    retention: Retention,
}

impl Ledger {
    pub(super) fn new(retention: Duration) -> Self {
        Self {
            by_id: DashMap::new(),
            by_reference: DashMap::new(),
            refunds: DashMap::new(),
            retention: Retention::new(retention),
        }
    }

    /// Keeps a new transaction of `merchant` (its public key), unless the merchant has used
    /// `reference` already (false), whatever came of that transaction. Transactions past their
    /// retention go first, so the sandbox holds at most what was made within one retention.
    pub(super) fn insert(&self, id: &str, merchant: &str, reference: &str, body: &Value) -> bool {
        self.prune();
        match self
            .by_reference
            .entry((merchant.to_owned(), reference.to_owned()))
        {
            dashmap::Entry::Occupied(_) => return false,
            dashmap::Entry::Vacant(slot) => {
                slot.insert(id.to_owned());
            }
        }
        self.by_id.insert(
            id.to_owned(),
            StoredTransaction {
                merchant: merchant.to_owned(),
                reference: reference.into(),
                body: body.to_string().into_boxed_str(),
                refunds: Vec::new(),
            },
        );
        self.retention.made(id);
        true
    }

    /// The transaction `id` if it is `merchant`'s.
    pub(super) fn get(&self, merchant: &str, id: &str) -> Option<Value> {
        let stored = self.by_id.get(id)?;
        (stored.merchant == merchant).then(|| stored.body())
    }

    /// `merchant`'s transaction under `reference`.
    pub(super) fn by_reference(&self, merchant: &str, reference: &str) -> Option<Value> {
        let id = self
            .by_reference
            .get(&(merchant.to_owned(), reference.to_owned()))?
            .clone();
        self.get(merchant, &id)
    }

    /// The sandbox's own change to the transaction `id` (it turning final): answers its
    /// merchant and new body.
    pub(super) fn update(
        &self,
        id: &str,
        change: impl FnOnce(&mut Value),
    ) -> Option<(String, Value)> {
        let mut stored = self.by_id.get_mut(id)?;
        let mut body = stored.body();
        change(&mut body);
        stored.body = body.to_string().into_boxed_str();
        Some((stored.merchant.clone(), body))
    }

    /// A change `merchant` asks for to its transaction `id`: `change` sees the transaction
    /// and its refunds, and may change both, under the transaction's lock. `None` when the
    /// transaction is not `merchant`'s (or not kept).
    pub(super) fn amend<R>(
        &self,
        merchant: &str,
        id: &str,
        change: impl FnOnce(&mut Value, &mut Vec<Refund>) -> R,
    ) -> Option<R> {
        let mut stored = self.by_id.get_mut(id)?;
        if stored.merchant != merchant {
            return None;
        }
        let mut body = stored.body();
        let refunds_before = stored.refunds.len();
        let answer = change(&mut body, &mut stored.refunds);
        stored.body = body.to_string().into_boxed_str();
        for refund in &stored.refunds[refunds_before..] {
            self.refunds.insert(refund.id.clone(), id.to_owned());
        }
        Some(answer)
    }

    /// `merchant`'s refund `id`.
    pub(super) fn refund(&self, merchant: &str, id: &str) -> Option<Refund> {
        let transaction_id = self.refunds.get(id)?.clone();
        self.refunds_of(merchant, &transaction_id)?
            .into_iter()
            .find(|refund| refund.id == id)
    }

    /// The refunds of `merchant`'s transaction `transaction_id`, oldest first.
    pub(super) fn refunds_of(&self, merchant: &str, transaction_id: &str) -> Option<Vec<Refund>> {
        let stored = self.by_id.get(transaction_id)?;
        (stored.merchant == merchant).then(|| stored.refunds.clone())
    }

    /// The sandbox's own change to the refund `id` (it turning final).
    pub(super) fn settle_refund(&self, id: &str, status: &'static str) {
        let Some(transaction_id) = self.refunds.get(id).map(|t| t.clone()) else {
            return;
        };
        if let Some(mut stored) = self.by_id.get_mut(&transaction_id)
            && let Some(refund) = stored.refunds.iter_mut().find(|r| r.id == id)
        {
            refund.status = status;
        }
    }

    /// Drops every transaction made `retention` ago or earlier, with its reference and its
    /// refunds.
    pub(super) fn prune(&self) {
        for id in self.retention.expired() {
            let Some((_, stored)) = self.by_id.remove(&id) else {
                continue;
            };
            self.by_reference.remove_if(
                &(stored.merchant, stored.reference.into_string()),
                |_, held| *held == id,
            );
            for refund in stored.refunds {
                self.refunds.remove(&refund.id);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DAY: Duration = Duration::from_secs(86_400);

    fn refund(id: &str, transaction_id: &str) -> Refund {
        Refund {
            id: id.into(),
            transaction_id: transaction_id.into(),
            amount_in_cents: 100,
            status: "PENDING",
            reason: None,
            created_at: String::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transactions_past_their_retention_go_with_their_reference_when_another_is_made() {
        let ledger = Ledger::new(7 * DAY);
        assert!(ledger.insert("t1", "pub_a", "ref-1", &json!({"id": "t1"})));
        tokio::time::advance(6 * DAY).await;
        assert!(ledger.insert("t2", "pub_a", "ref-2", &json!({"id": "t2"})));
        assert!(ledger.get("pub_a", "t1").is_some(), "six days: kept");
        tokio::time::advance(DAY + Duration::from_secs(1)).await;
        assert!(ledger.insert("t3", "pub_a", "ref-3", &json!({"id": "t3"})));
        assert!(ledger.get("pub_a", "t1").is_none());
        assert!(ledger.by_reference("pub_a", "ref-1").is_none());
        assert_eq!(ledger.len(), 2, "t2 and t3 remain");
        // The reference is free again, as at a processor that never saw it.
        assert!(ledger.insert("t4", "pub_a", "ref-1", &json!({"id": "t4"})));
        assert!(
            !ledger.insert("t5", "pub_a", "ref-2", &json!({})),
            "ref-2 is kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn refunds_go_with_their_transaction() {
        let ledger = Ledger::new(DAY);
        assert!(ledger.insert("t1", "pub_a", "ref-1", &json!({"id": "t1"})));
        ledger.amend("pub_a", "t1", |_, refunds| {
            refunds.push(refund("r1", "t1"));
        });
        assert!(ledger.refund("pub_a", "r1").is_some());
        tokio::time::advance(DAY).await;
        ledger.prune();
        assert!(ledger.refund("pub_a", "r1").is_none());
        assert!(ledger.refunds.is_empty(), "the refund's index went too");
    }

    #[test]
    fn a_transaction_and_its_refunds_are_found_only_under_their_own_merchant() {
        let ledger = Ledger::new(DAY);
        assert!(ledger.insert("t1", "pub_a", "ref", &json!({"id": "t1"})));
        assert!(ledger.get("pub_b", "t1").is_none());
        assert!(ledger.by_reference("pub_b", "ref").is_none());
        assert!(ledger.insert("t2", "pub_b", "ref", &json!({"id": "t2"})));
        assert_eq!(
            ledger.by_reference("pub_a", "ref"),
            Some(json!({"id": "t1"}))
        );
        let refunded = ledger.amend("pub_b", "t1", |_, refunds| {
            refunds.push(refund("r1", "t1"));
        });
        assert!(
            refunded.is_none(),
            "pub_b cannot refund pub_a's transaction"
        );
        ledger.amend("pub_a", "t1", |_, refunds| {
            refunds.push(refund("r1", "t1"));
        });
        assert!(ledger.refund("pub_b", "r1").is_none());
        assert!(ledger.refunds_of("pub_b", "t1").is_none());
        assert_eq!(ledger.refunds_of("pub_a", "t1").map(|r| r.len()), Some(1));
    }
}
