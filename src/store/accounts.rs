//! Accounts (integrators), their hashed API keys, and service-wide settings.

use super::entities::{account, setting};
use super::{Store, StoreResult};
use crate::ids::AccountId;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, Set};

pub use account::Model as Account;

/// The seller's invoicing settings (CONTRACT §11), kept as JSON on the account.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Seller {
    pub legal_name: Option<String>,
    /// Its digits, without the check digit.
    pub nit: Option<String>,
    pub address: Option<serde_json::Value>,
    pub tax_regime: Option<String>,
}

impl Account {
    /// The seller's settings (none set: all empty).
    pub fn seller(&self) -> Seller {
        self.invoicing
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or_default()
    }
}

/// Everything needed to create an account; keys are already generated or given.
#[derive(Clone)]
pub struct NewAccount {
    pub id: AccountId,
    pub name: String,
    pub sandbox: bool,
    pub api_key_hash: String,
    pub processor_base_url: Option<String>,
    pub processor_public_key: String,
    pub processor_private_key: String,
    pub processor_events_secret: String,
    pub processor_integrity_secret: String,
    pub fee_percent_bps: i64,
    pub fee_fixed_cents: i64,
    pub rate_limit_per_minute: i64,
    pub status_rate_limit_per_minute: i64,
    pub dunning_retry_days: String,
    pub created_at: i64,
}

/// Operator-settable limits of one account.
#[derive(Clone, Copy, Debug, Default)]
pub struct AccountLimitsPatch {
    pub rate_limit_per_minute: Option<i64>,
    pub status_rate_limit_per_minute: Option<i64>,
}

impl Store {
    pub async fn create_account(&self, new: NewAccount) -> StoreResult<Account> {
        let model = account::ActiveModel {
            id: Set(new.id),
            name: Set(new.name),
            sandbox: Set(new.sandbox),
            api_key_hash: Set(new.api_key_hash),
            processor_base_url: Set(new.processor_base_url),
            processor_public_key: Set(new.processor_public_key),
            processor_private_key: Set(new.processor_private_key.into()),
            processor_events_secret: Set(new.processor_events_secret.into()),
            processor_integrity_secret: Set(new.processor_integrity_secret.into()),
            fee_percent_bps: Set(new.fee_percent_bps),
            fee_fixed_cents: Set(new.fee_fixed_cents),
            rate_limit_per_minute: Set(new.rate_limit_per_minute),
            status_rate_limit_per_minute: Set(new.status_rate_limit_per_minute),
            clock_offset_ms: Set(0),
            dunning_retry_days: Set(new.dunning_retry_days),
            available_cents: Set(0),
            reserved_cents: Set(0),
            created_at: Set(new.created_at),
            default_tax_code: Set(crate::domain::tax::TaxCode::Iva19),
            invoicing: Set(None),
            notices: Set(None),
            portal: Set(None),
            dian: Set(None),
            dian_software_pin: Set(None),
            dian_certificate: Set(None),
            dian_certificate_password: Set(None),
        };
        Ok(model.insert(self.writer()).await?)
    }

    /// Stores the seller's settings and default tax code; the account as it now is.
    pub async fn update_invoicing(
        &self,
        id: &AccountId,
        seller: &Seller,
        default_tax_code: crate::domain::tax::TaxCode,
    ) -> StoreResult<Account> {
        let raw = serde_json::to_string(seller)
            .map_err(|err| super::StoreError::invariant(format!("seller settings: {err}")))?;
        let updated = account::Entity::update_many()
            .col_expr(account::Column::Invoicing, Some(raw).into())
            .col_expr(account::Column::DefaultTaxCode, default_tax_code.into())
            .filter(account::Column::Id.eq(id))
            .exec_with_returning(self.writer())
            .await?;
        updated
            .into_iter()
            .next()
            .ok_or_else(|| super::StoreError::invariant(format!("no account {id}")))
    }

    pub async fn account_by_key_hash(&self, hash: &str) -> StoreResult<Option<Account>> {
        Ok(account::Entity::find()
            .filter(account::Column::ApiKeyHash.eq(hash))
            .one(self.conn())
            .await?)
    }

    pub async fn account(&self, id: &AccountId) -> StoreResult<Option<Account>> {
        Ok(account::Entity::find_by_id(id.clone())
            .one(self.conn())
            .await?)
    }

    pub async fn all_accounts(&self) -> StoreResult<Vec<Account>> {
        Ok(account::Entity::find().all(self.conn()).await?)
    }

    pub async fn count_accounts(&self) -> StoreResult<u64> {
        Ok(account::Entity::find().count(self.conn()).await?)
    }

    /// Applies an operator's limit change; `None` when the account does not exist.
    pub async fn update_account_limits(
        &self,
        id: &AccountId,
        patch: AccountLimitsPatch,
    ) -> StoreResult<Option<Account>> {
        let Some(found) = self.account(id).await? else {
            return Ok(None);
        };
        let mut model: account::ActiveModel = found.into();
        if let Some(limit) = patch.rate_limit_per_minute {
            model.rate_limit_per_minute = Set(limit);
        }
        if let Some(limit) = patch.status_rate_limit_per_minute {
            model.status_rate_limit_per_minute = Set(limit);
        }
        Ok(Some(model.update(self.writer()).await?))
    }

    pub async fn setting(&self, key: &str) -> StoreResult<Option<String>> {
        Ok(setting::Entity::find_by_id(key)
            .one(self.conn())
            .await?
            .map(|row| row.value))
    }

    /// Stores `value` under `key` unless the key is already set; returns the stored value.
    pub async fn setting_insert_once(&self, key: &str, value: &str) -> StoreResult<String> {
        let inserted = setting::ActiveModel {
            key: Set(key.to_owned()),
            value: Set(value.to_owned()),
        }
        .insert(self.writer())
        .await;
        match inserted {
            Ok(row) => Ok(row.value),
            Err(err) => match self.setting(key).await? {
                Some(existing) => Ok(existing),
                None => Err(err.into()),
            },
        }
    }
}

impl super::txn::StoreTxn {
    /// The account, read inside this transaction: a unit that needs it never waits for a
    /// second connection of the pool while holding its own (a small pool's units would all
    /// wait for each other).
    pub async fn account(&self, id: &AccountId) -> StoreResult<Option<Account>> {
        Ok(account::Entity::find_by_id(id.clone())
            .one(self.conn())
            .await?)
    }
}
