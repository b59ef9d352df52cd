//! A numbering range DIAN authorised an account (CONTRACT §12): its resolution, prefix, numbers
//! and dates, the technical key its invoices' CUFEs are computed with, and the next number.

use crate::ids::{AccountId, NumberingRangeId};
use crate::store::Secret;
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "dian_ranges")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: NumberingRangeId,
    pub account_id: AccountId,
    pub resolution_number: String,
    pub prefix: String,
    pub range_from: i64,
    pub range_to: i64,
    /// `YYYY-MM-DD` (text compares as dates do).
    pub valid_from: String,
    pub valid_to: String,
    pub technical_key: Secret,
    /// `range_to + 1` once every number is taken.
    pub next_number: i64,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
