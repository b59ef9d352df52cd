//! An account's numbering series: the next number to give, taken in the transaction of the
//! document that uses it.

use crate::ids::AccountId;
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "invoice_series")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub account_id: AccountId,
    #[sea_orm(primary_key, auto_increment = false)]
    pub series: String,
    pub prefix: String,
    pub next_number: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
