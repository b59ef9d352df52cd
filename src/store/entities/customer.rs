//! An integrator's customer (a name and an e-mail).

use crate::ids::{AccountId, CustomerId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "customers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: CustomerId,
    pub account_id: AccountId,
    pub email: String,
    pub name: String,
    pub metadata: Option<String>,
    pub created_at: i64,
    /// CC, CE, NIT, PP, TI or DIE (CONTRACT §11); None: invoiced to the final consumer.
    pub tax_id_type: Option<String>,
    pub tax_id_number: Option<String>,
    pub legal_name: Option<String>,
    /// JSON `{line, city_code, country}`.
    pub address: Option<String>,
    /// E.164 (`+573001234567`), for WhatsApp notices.
    pub phone: Option<String>,
    /// Whether the customer agreed to WhatsApp notices (CONTRACT §15).
    pub whatsapp_opt_in: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
