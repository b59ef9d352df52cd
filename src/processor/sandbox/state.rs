//! What the sandbox keeps in memory, and what bounds it: merchants (the administration may make
//! at most `SandboxConfig::max_merchants`) and transactions with their references (each kept
//! for `SandboxConfig::retention` after it was made, then pruned as later ones are made).
//!
//! It knows nothing of HTTP: the handlers in `protocol` and `admin` ask it, and it answers
//! only for the merchant that asks (a transaction is found by id or reference under its own
//! merchant, never another's).

use super::MerchantKeys;
use crate::secrets::random_token;
use dashmap::DashMap;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::time::Instant;

pub(super) struct Merchant {
    pub(super) keys: MerchantKeys,
    pub(super) events_url: RwLock<Option<String>>,
}

impl Merchant {
    pub(super) fn acceptance_token(&self) -> String {
        format!(
            "acc_test_{}",
            &crate::secrets::sha256_hex(&self.keys.public_key)[..24]
        )
    }

    pub(super) fn events_url(&self) -> Option<String> {
        self.events_url.read().ok().and_then(|url| url.clone())
    }

    fn set_events_url(&self, events_url: Option<String>) {
        if let Ok(mut url) = self.events_url.write() {
            *url = events_url;
        }
    }
}

/// The keys an administrator posts; what is missing is generated for a new merchant, and left
/// as it is for an existing one.
#[derive(Default)]
pub(super) struct ProposedKeys {
    pub(super) public_key: Option<String>,
    pub(super) private_key: Option<String>,
    pub(super) events_secret: Option<String>,
    pub(super) integrity_secret: Option<String>,
}

/// Why the administration may not add or change a merchant.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    #[error("the sandbox already holds its maximum of {0} merchants")]
    Full(usize),
    #[error("a merchant with this public key exists with other keys")]
    OtherKeys,
    #[error("another merchant has this private key")]
    PrivateKeyTaken,
}

pub(super) enum Admitted {
    Created(Arc<Merchant>),
    Updated(Arc<Merchant>),
}

#[derive(Default)]
pub(super) struct Merchants {
    by_public: DashMap<String, Arc<Merchant>>,
    by_private: DashMap<String, Arc<Merchant>>,
    /// Serialises the administration's check-then-insert, so that the cap holds exactly.
    admitting: Mutex<()>,
}

impl Merchants {
    pub(super) fn by_public(&self, key: &str) -> Option<Arc<Merchant>> {
        self.by_public.get(key).map(|m| Arc::clone(&m))
    }

    pub(super) fn by_private(&self, key: &str) -> Option<Arc<Merchant>> {
        self.by_private.get(key).map(|m| Arc::clone(&m))
    }

    /// The service's own registration of an account that uses the in-process sandbox: adds it,
    /// or points an existing one's events at `events_url`. Not capped: only the operator makes
    /// accounts, and the accounts table bounds them.
    pub(super) fn register(&self, keys: MerchantKeys, events_url: Option<String>) {
        if let Some(existing) = self.by_public(&keys.public_key) {
            existing.set_events_url(events_url);
            return;
        }
        self.insert(keys, events_url);
    }

    /// The administration's: a new merchant (at most `cap` in all), or a new events URL for an
    /// existing one whose keys are the ones posted.
    pub(super) fn admit(
        &self,
        proposed: ProposedKeys,
        events_url: Option<String>,
        cap: usize,
    ) -> Result<Admitted, Refusal> {
        let _admitting = self.admitting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = proposed
            .public_key
            .as_deref()
            .and_then(|k| self.by_public(k))
        {
            let keys = &existing.keys;
            let same =
                |given: &Option<String>, held: &str| given.as_deref().is_none_or(|g| g == held);
            if !(same(&proposed.private_key, &keys.private_key)
                && same(&proposed.events_secret, &keys.events_secret)
                && same(&proposed.integrity_secret, &keys.integrity_secret))
            {
                return Err(Refusal::OtherKeys);
            }
            existing.set_events_url(events_url);
            return Ok(Admitted::Updated(existing));
        }
        if self.by_public.len() >= cap {
            return Err(Refusal::Full(cap));
        }
        let keys = MerchantKeys {
            public_key: proposed
                .public_key
                .unwrap_or_else(|| random_token("pub_test_", 32)),
            private_key: proposed
                .private_key
                .unwrap_or_else(|| random_token("prv_test_", 32)),
            events_secret: proposed
                .events_secret
                .unwrap_or_else(|| random_token("test_events_", 32)),
            integrity_secret: proposed
                .integrity_secret
                .unwrap_or_else(|| random_token("test_integrity_", 32)),
        };
        // A private key names the merchant a protocol call acts as: two merchants sharing one
        // would let the second take over the first's transactions.
        if self.by_private.contains_key(&keys.private_key) {
            return Err(Refusal::PrivateKeyTaken);
        }
        Ok(Admitted::Created(self.insert(keys, events_url)))
    }

    fn insert(&self, keys: MerchantKeys, events_url: Option<String>) -> Arc<Merchant> {
        let merchant = Arc::new(Merchant {
            keys: keys.clone(),
            events_url: RwLock::new(events_url),
        });
        self.by_private
            .insert(keys.private_key, Arc::clone(&merchant));
        self.by_public
            .insert(keys.public_key, Arc::clone(&merchant));
        merchant
    }
}

/// A transaction as the sandbox keeps it: its JSON as compact text, a few hundred bytes,
/// where a `Value` tree took several KB (a long burst keeps every transaction it made).
struct StoredTransaction {
    /// The merchant's public key.
    merchant: String,
    reference: Box<str>,
    body: Box<str>,
}

impl StoredTransaction {
    fn body(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

pub(super) struct Transactions {
    retention: Duration,
    by_id: DashMap<String, StoredTransaction>,
    /// (merchant's public key, reference) → transaction id.
    by_reference: DashMap<(String, String), String>,
    /// Ids in the order they were made, with when: the front is the oldest, so pruning costs
    /// only what it removes.
    made: Mutex<VecDeque<(Instant, String)>>,
}

impl Transactions {
    pub(super) fn new(retention: Duration) -> Self {
        Self {
            retention,
            by_id: DashMap::new(),
            by_reference: DashMap::new(),
            made: Mutex::new(VecDeque::new()),
        }
    }

    /// Keeps a new transaction of `merchant` (its public key), unless the merchant has used
    /// `reference` already (false). Transactions past their retention go first, so the
    /// sandbox holds at most what was made within one retention.
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
            },
        );
        self.made_list().push_back((Instant::now(), id.to_owned()));
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

    /// Applies `change` to the transaction `id`; answers its merchant and new body.
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

    /// Drops every transaction made `retention` ago or earlier, with its reference.
    pub(super) fn prune(&self) {
        let mut made = self.made_list();
        while let Some((at, _)) = made.front() {
            if at.elapsed() < self.retention {
                break;
            }
            let Some((_, id)) = made.pop_front() else {
                break;
            };
            if let Some((_, stored)) = self.by_id.remove(&id) {
                self.by_reference.remove_if(
                    &(stored.merchant, stored.reference.into_string()),
                    |_, held| *held == id,
                );
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }

    fn made_list(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, String)>> {
        // The list is consistent after any panic (each step is one push or pop).
        self.made.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DAY: Duration = Duration::from_secs(86_400);

    #[tokio::test(start_paused = true)]
    async fn transactions_past_their_retention_go_with_their_reference_when_another_is_made() {
        let transactions = Transactions::new(7 * DAY);
        assert!(transactions.insert("t1", "pub_a", "ref-1", &json!({"id": "t1"})));
        tokio::time::advance(6 * DAY).await;
        assert!(transactions.insert("t2", "pub_a", "ref-2", &json!({"id": "t2"})));
        assert!(transactions.get("pub_a", "t1").is_some(), "six days: kept");
        tokio::time::advance(DAY + Duration::from_secs(1)).await;
        assert!(transactions.insert("t3", "pub_a", "ref-3", &json!({"id": "t3"})));
        assert!(transactions.get("pub_a", "t1").is_none());
        assert!(transactions.by_reference("pub_a", "ref-1").is_none());
        assert_eq!(transactions.len(), 2, "t2 and t3 remain");
        // The reference is free again, as at a processor that never saw it.
        assert!(transactions.insert("t4", "pub_a", "ref-1", &json!({"id": "t4"})));
        assert!(
            !transactions.insert("t5", "pub_a", "ref-2", &json!({})),
            "ref-2 is kept"
        );
    }

    #[test]
    fn a_transaction_is_found_only_under_its_own_merchant() {
        let transactions = Transactions::new(DAY);
        assert!(transactions.insert("t1", "pub_a", "ref", &json!({"id": "t1"})));
        assert!(transactions.get("pub_b", "t1").is_none());
        assert!(transactions.by_reference("pub_b", "ref").is_none());
        assert!(transactions.insert("t2", "pub_b", "ref", &json!({"id": "t2"})));
        assert_eq!(
            transactions.by_reference("pub_a", "ref"),
            Some(json!({"id": "t1"}))
        );
    }

    fn keys(n: u32) -> ProposedKeys {
        ProposedKeys {
            public_key: Some(format!("pub_test_{n}")),
            private_key: Some(format!("prv_test_{n}")),
            ..ProposedKeys::default()
        }
    }

    #[test]
    fn the_administration_makes_at_most_the_cap_and_changes_only_with_the_same_keys() {
        let merchants = Merchants::default();
        assert!(matches!(
            merchants.admit(keys(1), None, 2),
            Ok(Admitted::Created(_))
        ));
        assert!(matches!(
            merchants.admit(keys(2), None, 2),
            Ok(Admitted::Created(_))
        ));
        assert!(matches!(
            merchants.admit(keys(3), None, 2),
            Err(Refusal::Full(2))
        ));
        // An existing merchant may still be changed when full.
        let url = Some("http://127.0.0.1:1/events".to_owned());
        assert!(matches!(
            merchants.admit(keys(1), url.clone(), 2),
            Ok(Admitted::Updated(_))
        ));
        assert_eq!(
            merchants
                .by_public("pub_test_1")
                .and_then(|m| m.events_url()),
            url
        );
        let mut other = keys(1);
        other.private_key = Some("prv_test_other".into());
        assert!(matches!(
            merchants.admit(other, None, 2),
            Err(Refusal::OtherKeys)
        ));
        let mut shared = keys(9);
        shared.private_key = Some("prv_test_1".into());
        assert!(matches!(
            merchants.admit(shared, None, 10),
            Err(Refusal::PrivateKeyTaken)
        ));
    }
}
