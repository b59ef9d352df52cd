//! A signed-in operator's dashboard session, shared by every node (the cookie's id stored
//! hashed).

use crate::store::Secret;
use sea_orm::entity::prelude::*;

/// A logged-in `/dashboard` session (`store::dashboard_sessions`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "dashboard_sessions")]
pub struct Model {
    /// SHA-256 (hex) of the session id the cookie carries.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id_hash: String,
    /// The token every form of the session carries.
    pub csrf: Secret,
    pub expires_at: i64,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
