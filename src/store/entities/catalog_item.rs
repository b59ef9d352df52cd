//! A plan or an add-on (`kind`), with its monthly and annual amounts in cents.

use crate::domain::tax::TaxCode;
use crate::ids::{AccountId, CatalogItemId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "catalog_items")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: CatalogItemId,
    pub account_id: AccountId,
    /// `plan` or `addon`.
    pub kind: String,
    pub name: String,
    pub monthly_amount_cents: i64,
    pub annual_amount_cents: i64,
    pub active: bool,
    pub metadata: Option<String>,
    pub created_at: i64,
    /// How its tax-inclusive price splits into base and IVA.
    pub tax_code: TaxCode,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
