//! The sandbox's merchants, in memory: their keys, where their events go, and the two
//! acceptance tokens they present. The administration may make at most
//! `SandboxConfig::max_merchants`; the service's own registrations are bounded by its accounts.
//!
//! It knows nothing of HTTP: the handlers in `protocol` and `admin` ask it.

use super::MerchantKeys;
use crate::secrets::{random_token, sha256_hex};
use dashmap::DashMap;
use std::sync::{Arc, Mutex, RwLock};

pub(super) struct Merchant {
    pub(super) keys: MerchantKeys,
    pub(super) events_url: RwLock<Option<String>>,
}

impl Merchant {
    /// The token of the end-user policy (`presigned_acceptance`, `END_USER_POLICY`).
    pub(super) fn acceptance_token(&self) -> String {
        format!("acc_test_{}", &sha256_hex(&self.keys.public_key)[..24])
    }

    /// The token of the personal-data authorization (`presigned_personal_data_auth`,
    /// `PERSONAL_DATA_AUTH`): another document, so another token.
    pub(super) fn personal_data_token(&self) -> String {
        let seed = format!("personal-data:{}", self.keys.public_key);
        format!("pda_test_{}", &sha256_hex(seed)[..24])
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

#[cfg(test)]
mod tests {
    use super::*;

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
