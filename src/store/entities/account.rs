//! An integrator's account: its hashed API key, processor credentials, fee terms, rate limits and
//! prepaid balance (available and reserved cents).

use crate::domain::tax::TaxCode;
use crate::ids::AccountId;
use crate::store::Secret;
use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "accounts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: AccountId,
    pub name: String,
    pub sandbox: bool,
    pub api_key_hash: String,
    pub processor_base_url: Option<String>,
    pub processor_public_key: String,
    pub processor_private_key: Secret,
    pub processor_events_secret: Secret,
    pub processor_integrity_secret: Secret,
    pub fee_percent_bps: i64,
    pub fee_fixed_cents: i64,
    pub rate_limit_per_minute: i64,
    pub status_rate_limit_per_minute: i64,
    pub clock_offset_ms: i64,
    pub dunning_retry_days: String,
    pub available_cents: i64,
    pub reserved_cents: i64,
    pub created_at: i64,
    /// The tax code of a plan or add-on created without one (CONTRACT §11).
    pub default_tax_code: TaxCode,
    /// The seller's invoicing settings (JSON of `store::accounts::Seller`).
    pub invoicing: Option<String>,
    /// The notice settings (JSON of `domain::notices::NoticeSettings`); None: nothing is sent.
    pub notices: Option<String>,
    /// What customers may do in the portal (JSON of `domain::portal::PortalConfig`; `None`:
    /// the defaults).
    pub portal: Option<String>,
    /// DIAN's settings (JSON of `store::dian::DianSettings`); `None`: DIAN is off.
    pub dian: Option<String>,
    pub dian_software_pin: Option<Secret>,
    /// The signing certificate's PKCS#12 file, base64.
    pub dian_certificate: Option<Secret>,
    pub dian_certificate_password: Option<Secret>,
}

/// Secrets stay out of logs: the Debug form names the account only.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
