//! Creating accounts: key generation, processor credentials and their environment checks.
//! Used by the admin API, `billing account create` and the first start of `billing serve`.

use crate::domain::money::FeeSchedule;
use crate::domain::text::Name;
use crate::ids::AccountId;
use crate::secrets::{new_api_key, random_token, sha256_hex};
use crate::store::accounts::{Account, NewAccount};
use crate::store::{Store, StoreError};

/// Default limits (CONTRACT §3); an operator can change them per account.
pub const DEFAULT_RATE_LIMIT_PER_MINUTE: i64 = 100;
pub const DEFAULT_STATUS_RATE_LIMIT_PER_MINUTE: i64 = 20;
/// Dunning retries, in days after the first failure (CONTRACT §5).
pub const DEFAULT_DUNNING_RETRY_DAYS: &str = "1,3,5,7";

/// Processor credentials given by the operator.
#[derive(Clone)]
pub struct ProcessorSpec {
    /// None: the in-process sandbox processor, which adopts the keys given.
    pub base_url: Option<String>,
    pub public_key: String,
    pub private_key: String,
    pub events_secret: String,
    pub integrity_secret: String,
}

#[derive(Clone)]
pub struct AccountSpec {
    pub name: String,
    pub sandbox: bool,
    pub processor: Option<ProcessorSpec>,
    pub fee: Option<FeeSchedule>,
    pub rate_limit_per_minute: Option<i64>,
    pub status_rate_limit_per_minute: Option<i64>,
}

/// A new account and its API key, which is shown this once and stored only hashed.
pub struct CreatedAccount {
    pub account: Account,
    pub api_key: String,
}

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("{message}")]
    Invalid {
        message: String,
        param: &'static str,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(message: impl Into<String>, param: &'static str) -> AccountError {
    AccountError::Invalid {
        message: message.into(),
        param,
    }
}

/// Fresh sandbox processor keys, in the processor's own formats.
pub fn sandbox_processor_keys() -> ProcessorSpec {
    ProcessorSpec {
        base_url: None,
        public_key: random_token("pub_test_", 32),
        private_key: random_token("prv_test_", 32),
        events_secret: random_token("test_events_", 32),
        integrity_secret: random_token("test_integrity_", 32),
    }
}

fn check_processor(spec: &ProcessorSpec, sandbox: bool) -> Result<(), AccountError> {
    let (public, private) = if sandbox {
        ("pub_test_", "prv_test_")
    } else {
        ("pub_prod_", "prv_prod_")
    };
    let mode = if sandbox { "a sandbox" } else { "a live" };
    if !spec.public_key.starts_with(public) {
        return Err(invalid(
            format!("{mode} account needs a `{public}` public key."),
            "processor.public_key",
        ));
    }
    if !spec.private_key.starts_with(private) {
        return Err(invalid(
            format!("{mode} account needs a `{private}` private key."),
            "processor.private_key",
        ));
    }
    if spec.events_secret.is_empty() || spec.integrity_secret.is_empty() {
        return Err(invalid(
            "events_secret and integrity_secret are required.",
            "processor",
        ));
    }
    if !sandbox && spec.base_url.is_none() {
        return Err(invalid(
            "a live account needs processor.base_url.",
            "processor.base_url",
        ));
    }
    if let Some(url) = &spec.base_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid(
            "processor.base_url must be an http(s) URL.",
            "processor.base_url",
        ));
    }
    Ok(())
}

pub async fn create_account(
    store: &Store,
    spec: AccountSpec,
    now_ms: i64,
) -> Result<CreatedAccount, AccountError> {
    let name = Name::parse(&spec.name).map_err(|why| invalid(format!("name {why}."), "name"))?;
    let processor = match spec.processor {
        Some(processor) => processor,
        None if spec.sandbox => sandbox_processor_keys(),
        None => {
            return Err(invalid(
                "a live account needs processor credentials.",
                "processor",
            ));
        }
    };
    check_processor(&processor, spec.sandbox)?;
    let fee = spec.fee.unwrap_or_default();
    if !(0..=10_000).contains(&fee.percent_bps) || fee.fixed_cents < 0 {
        return Err(invalid(
            "fee.percent_bps must be 0–10000 and fee.fixed_cents ≥ 0.",
            "fee",
        ));
    }
    let limits = [
        spec.rate_limit_per_minute,
        spec.status_rate_limit_per_minute,
    ];
    if limits.iter().flatten().any(|limit| *limit < 0) {
        return Err(invalid(
            "rate limits must be ≥ 0 (0 = unlimited).",
            "rate_limit_per_minute",
        ));
    }
    let api_key = new_api_key(spec.sandbox);
    let account = store
        .create_account(NewAccount {
            id: AccountId::generate(),
            name: name.into_string(),
            sandbox: spec.sandbox,
            api_key_hash: sha256_hex(&api_key),
            processor_base_url: processor.base_url,
            processor_public_key: processor.public_key,
            processor_private_key: processor.private_key,
            processor_events_secret: processor.events_secret,
            processor_integrity_secret: processor.integrity_secret,
            fee_percent_bps: fee.percent_bps,
            fee_fixed_cents: fee.fixed_cents,
            rate_limit_per_minute: spec
                .rate_limit_per_minute
                .unwrap_or(DEFAULT_RATE_LIMIT_PER_MINUTE),
            status_rate_limit_per_minute: spec
                .status_rate_limit_per_minute
                .unwrap_or(DEFAULT_STATUS_RATE_LIMIT_PER_MINUTE),
            dunning_retry_days: DEFAULT_DUNNING_RETRY_DAYS.to_owned(),
            created_at: now_ms,
        })
        .await?;
    Ok(CreatedAccount { account, api_key })
}

/// The fees an account pays per approved charge.
pub fn fee_schedule(account: &Account) -> FeeSchedule {
    FeeSchedule {
        percent_bps: account.fee_percent_bps,
        fixed_cents: account.fee_fixed_cents,
    }
}

/// The processor base URL an account's calls (and its browser tokenization) go to.
pub fn processor_base_url(account: &Account, public_url: &str) -> String {
    account
        .processor_base_url
        .clone()
        .unwrap_or_else(|| format!("{}/sandbox/processor/v1", public_url.trim_end_matches('/')))
}
