//! A claimed Idempotency-Key: the request's fingerprint and, once it finished, the response kept
//! for replay.

use crate::ids::AccountId;
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "idempotency_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub account_id: AccountId,
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    /// sha256 of method, path and body: a different request under the same key is refused.
    pub request_hash: String,
    /// `running` while the first request is in flight, then `done`.
    pub state: String,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
