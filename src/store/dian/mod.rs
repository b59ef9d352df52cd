//! DIAN electronic invoicing's rows (CONTRACT §12): an account's settings and secrets
//! (`accounts.dian*`), its numbering ranges (`dian_ranges`), and the electronic document beside
//! each invoice and credit note written while DIAN is on (`dian_documents`). `numbering` numbers
//! documents inside the transaction that writes them; `submission` claims due documents and
//! records their signature and DIAN's answer (with the invoice's event); `waiting` numbers the
//! invoices waiting for a range and keeps what waits for an operator; `documents` rebuilds
//! the `dian::document::Document` a row stands for. Signing and talking to DIAN are not here.

pub mod documents;
pub(crate) mod numbering;
pub mod submission;
pub mod waiting;

use super::entities::{account, dian_document, dian_range};
use super::{Store, StoreError, StoreResult};
use crate::dian::document::NumberingRange;
use crate::domain::dian::{DianStatus, Environment};
use crate::ids::{AccountId, DocumentId, NumberingRangeId};
use crate::store::Scoped;
use chrono::NaiveDate;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter, QueryOrder,
    QuerySelect,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub use dian_document::Model as DianDocument;
pub use dian_range::Model as DianRange;

/// The prefix of credit notes' DIAN numbers (`NC1`, `NC2`, …), never a range's.
pub const CREDIT_NOTE_PREFIX: &str = "NC";
/// The series credit notes' DIAN numbers are taken from.
pub(crate) const CREDIT_NOTE_SERIES: &str = "dian_credit_note";

/// An account's DIAN settings, without secrets (`accounts.dian`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DianSettings {
    pub environment: Environment,
    pub software_id: String,
    pub certificate_subject: String,
    /// The certificate's end of validity, milliseconds.
    pub certificate_not_after: i64,
}

/// An account's DIAN secrets: the software's PIN, the PKCS#12 file and its password.
#[derive(Clone)]
pub struct DianSecrets {
    pub software_pin: String,
    pub p12_base64: String,
    pub password: String,
}

impl std::fmt::Debug for DianSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DianSecrets(..)")
    }
}

/// The seller and software a document is issued under, fixed when it is numbered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issuer {
    pub legal_name: String,
    /// Digits, without the check digit.
    pub nit: String,
    pub address: serde_json::Value,
    pub tax_regime: String,
    pub software_id: String,
}

impl account::Model {
    /// The DIAN settings; `None` while DIAN is off.
    pub fn dian_settings(&self) -> Option<DianSettings> {
        self.dian
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
    }

    /// The DIAN secrets; `None` while DIAN is off.
    pub fn dian_secrets(&self) -> Option<DianSecrets> {
        Some(DianSecrets {
            software_pin: self.dian_software_pin.as_deref()?.to_owned(),
            p12_base64: self.dian_certificate.as_deref()?.to_owned(),
            password: self.dian_certificate_password.as_deref()?.to_owned(),
        })
    }

    /// The issuer of a document numbered now: the seller's settings and the software. `None`
    /// when DIAN is off or the seller lacks what a document needs.
    pub(crate) fn dian_issuer(&self) -> Option<(Issuer, Environment)> {
        let settings = self.dian_settings()?;
        let seller = self.seller();
        Some((
            Issuer {
                legal_name: seller.legal_name?,
                nit: seller.nit?,
                address: seller.address?,
                tax_regime: seller.tax_regime?,
                software_id: settings.software_id,
            },
            settings.environment,
        ))
    }
}

/// A numbering range to add (validated by the caller).
#[derive(Clone)]
pub struct NewRange {
    pub resolution_number: String,
    pub prefix: String,
    pub from: i64,
    pub to: i64,
    pub valid_from: NaiveDate,
    pub valid_to: NaiveDate,
    pub technical_key: String,
}

impl DianRange {
    pub fn valid_from_date(&self) -> NaiveDate {
        NaiveDate::parse_from_str(&self.valid_from, "%Y-%m-%d").unwrap_or_default()
    }

    pub fn valid_to_date(&self) -> NaiveDate {
        NaiveDate::parse_from_str(&self.valid_to, "%Y-%m-%d").unwrap_or_default()
    }

    /// The range as a document names it.
    pub fn numbering_range(&self) -> NumberingRange {
        NumberingRange {
            resolution_number: self.resolution_number.clone(),
            prefix: self.prefix.clone(),
            from: self.range_from,
            to: self.range_to,
            valid_from: self.valid_from_date(),
            valid_to: self.valid_to_date(),
            technical_key: self.technical_key.expose().to_owned(),
        }
    }
}

impl Store {
    /// Turns DIAN on (or changes its settings) for `id`: the settings and the secrets.
    pub async fn enable_dian(
        &self,
        id: &AccountId,
        settings: &DianSettings,
        secrets: DianSecrets,
    ) -> StoreResult<account::Model> {
        let raw = serde_json::to_string(settings)
            .map_err(|err| StoreError::invariant(format!("DIAN settings: {err}")))?;
        let pin: super::Secret = secrets.software_pin.into();
        let p12: super::Secret = secrets.p12_base64.into();
        let password: super::Secret = secrets.password.into();
        let updated = account::Entity::update_many()
            .col_expr(account::Column::Dian, Some(raw).into())
            .col_expr(account::Column::DianSoftwarePin, Some(pin).into())
            .col_expr(account::Column::DianCertificate, Some(p12).into())
            .col_expr(
                account::Column::DianCertificatePassword,
                Some(password).into(),
            )
            .filter(account::Column::Id.eq(id.as_str()))
            .exec_with_returning(self.writer())
            .await?;
        updated
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::invariant(format!("no account {id}")))
    }

    /// Adds a numbering range to `account` and numbers, in issue order, the invoices awaiting
    /// one whose issue date it covers; in one transaction, with the account's row locked
    /// (PostgreSQL), so two ranges added at once number each waiting invoice once. `Err` (and
    /// nothing written) when it overlaps a range of the same prefix.
    pub async fn create_dian_range(
        &self,
        account: &AccountId,
        new: NewRange,
        now_ms: i64,
    ) -> StoreResult<Result<DianRange, String>> {
        let txn = self.begin().await?;
        waiting::lock_account(txn.conn(), account).await?;
        let overlapping = dian_range::Entity::scoped(account)
            .filter(dian_range::Column::Prefix.eq(new.prefix.as_str()))
            .filter(dian_range::Column::RangeFrom.lte(new.to))
            .filter(dian_range::Column::RangeTo.gte(new.from))
            .one(txn.conn())
            .await?;
        if let Some(other) = overlapping {
            return Ok(Err(format!(
                "the numbers overlap those of range {} (prefix {}, {} to {})",
                other.id, other.prefix, other.range_from, other.range_to
            )));
        }
        let range = DianRange {
            id: NumberingRangeId::generate(),
            account_id: account.clone(),
            resolution_number: new.resolution_number,
            prefix: new.prefix,
            range_from: new.from,
            range_to: new.to,
            valid_from: new.valid_from.format("%Y-%m-%d").to_string(),
            valid_to: new.valid_to.format("%Y-%m-%d").to_string(),
            technical_key: new.technical_key.into(),
            next_number: new.from,
            created_at: now_ms,
        };
        range
            .clone()
            .into_active_model()
            .reset_all()
            .insert(txn.conn())
            .await?;
        numbering::number_waiting_in(txn.conn(), account, now_ms).await?;
        let range = dian_range::Entity::find_by_id(range.id.clone())
            .one(txn.conn())
            .await?
            .unwrap_or(range);
        txn.commit().await?;
        Ok(Ok(range))
    }

    /// `account`'s ranges, oldest first.
    pub async fn dian_ranges(&self, account: &AccountId) -> StoreResult<Vec<DianRange>> {
        Ok(dian_range::Entity::scoped(account)
            .order_by_asc(dian_range::Column::Id)
            .all(self.conn())
            .await?)
    }

    /// `account`'s range `id` (a document's, for its printed authorisation).
    pub async fn dian_range(
        &self,
        account: &AccountId,
        id: &NumberingRangeId,
    ) -> StoreResult<Option<DianRange>> {
        Ok(dian_range::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// Every account's ranges (operators: the metrics and the dashboard).
    pub async fn all_dian_ranges(&self) -> StoreResult<Vec<DianRange>> {
        Ok(dian_range::Entity::find()
            .order_by_asc(dian_range::Column::Id)
            .all(self.conn())
            .await?)
    }

    /// The electronic documents of `ids` (invoices or credit notes of `account`), by id.
    pub async fn dian_documents(
        &self,
        account: &AccountId,
        ids: &[DocumentId],
    ) -> StoreResult<HashMap<DocumentId, DianDocument>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(dian_document::Entity::scoped(account)
            .filter(dian_document::Column::Id.is_in(ids))
            .all(self.conn())
            .await?
            .into_iter()
            .map(|doc| (doc.id.clone(), doc))
            .collect())
    }

    /// How many of `account`'s documents stand at each status (tests, operators).
    pub async fn dian_status_counts(
        &self,
        account: &AccountId,
    ) -> StoreResult<HashMap<DianStatus, u64>> {
        let rows: Vec<DianStatus> = dian_document::Entity::find()
            .select_only()
            .column(dian_document::Column::Status)
            .filter(dian_document::Entity::of(account))
            .into_tuple()
            .all(self.conn())
            .await?;
        let mut counts = HashMap::new();
        for status in rows {
            *counts.entry(status).or_insert(0) += 1;
        }
        Ok(counts)
    }
}
