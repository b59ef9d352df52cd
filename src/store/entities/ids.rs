//! The id newtypes of `crate::ids` as text columns: a row's `id`, `account_id`, `plan_id`, …
//! is the newtype, written as its string and read back as it (`from_stored`: the prefix is not
//! checked again, as the string was ours). A catalog item's id is a plan's or an add-on's, told
//! apart by its prefix; a stored id with neither fails the read loudly.
//!
//! The same impls as `words`' (what `sea_orm::DeriveValueType` writes for a string newtype),
//! kept here so that `ids` names no I/O crate; and `TryFromU64`, which a primary key's type
//! needs (an id is never a number: it refuses, as `String` does).

use crate::ids::{
    AccountId, AddonId, AttemptId, BalanceTransactionId, CatalogItemId, ChargeAttemptId,
    ChargeConflictId, CheckoutSessionId, ConsoleActionId, ConsoleUserId, CouponId, CreditNoteId,
    CustomerId, DeliveryId, DocumentId, EventId, InvoiceId, MrrMovementId, NoticeId,
    NumberingRangeId, PaymentMethodId, PlanId, PortalActionId, PortalSessionId, PromotionCodeId,
    RefundId, SubscriptionId, WebhookEndpointId,
};

/// A stored string that is not an id of the column's type (a catalog item's with neither a
/// plan's nor an add-on's prefix: the only id read that checks).
#[derive(Debug, thiserror::Error)]
#[error("{raw:?} is not a {of}")]
pub struct StrangeId {
    of: &'static str,
    raw: String,
}

/// The text column impls of an id type; `$read` makes it from the stored string.
macro_rules! text_id_column {
    ($name:ident, $read:expr) => {
        impl From<$name> for sea_orm::Value {
            fn from(id: $name) -> Self {
                id.as_str().into()
            }
        }

        /// A filter's operand without a clone: `Column::Id.eq(&id)`.
        impl From<&$name> for sea_orm::Value {
            fn from(id: &$name) -> Self {
                id.as_str().into()
            }
        }

        impl sea_orm::TryGetable for $name {
            fn try_get_by<I: sea_orm::ColIdx>(
                res: &sea_orm::QueryResult,
                idx: I,
            ) -> Result<Self, sea_orm::TryGetError> {
                let raw = String::try_get_by(res, idx)?;
                let read: fn(String) -> Result<$name, String> = $read;
                read(raw).map_err(|raw| {
                    sea_orm::TryGetError::DbErr(sea_orm::DbErr::TryIntoErr {
                        from: "String",
                        into: stringify!($name),
                        source: std::sync::Arc::new(StrangeId {
                            of: stringify!($name),
                            raw,
                        }),
                    })
                })
            }
        }

        impl sea_orm::sea_query::ValueType for $name {
            fn try_from(value: sea_orm::Value) -> Result<Self, sea_orm::sea_query::ValueTypeErr> {
                let raw = <String as sea_orm::sea_query::ValueType>::try_from(value)?;
                let read: fn(String) -> Result<$name, String> = $read;
                read(raw).map_err(|_| sea_orm::sea_query::ValueTypeErr)
            }

            fn type_name() -> String {
                stringify!($name).to_owned()
            }

            fn array_type() -> sea_orm::sea_query::ArrayType {
                sea_orm::sea_query::ArrayType::String
            }

            fn column_type() -> sea_orm::sea_query::ColumnType {
                sea_orm::sea_query::ColumnType::String(sea_orm::sea_query::StringLen::None)
            }
        }

        impl sea_orm::sea_query::Nullable for $name {
            fn null() -> sea_orm::Value {
                sea_orm::Value::String(None)
            }
        }

        impl sea_orm::IntoActiveValue<$name> for $name {
            fn into_active_value(self) -> sea_orm::ActiveValue<$name> {
                sea_orm::ActiveValue::Set(self)
            }
        }

        impl sea_orm::TryFromU64 for $name {
            fn try_from_u64(_: u64) -> Result<Self, sea_orm::DbErr> {
                Err(sea_orm::DbErr::ConvertFromU64(stringify!($name)))
            }
        }
    };
}

/// Every newtype of `crate::ids`, read back as it was written.
macro_rules! id_columns {
    ($($name:ident),+ $(,)?) => {$(
        text_id_column!($name, |raw| Ok($name::from_stored(raw)));
    )+};
}

id_columns!(
    AccountId,
    PlanId,
    AddonId,
    CustomerId,
    PaymentMethodId,
    SubscriptionId,
    ChargeAttemptId,
    CheckoutSessionId,
    WebhookEndpointId,
    EventId,
    DeliveryId,
    AttemptId,
    BalanceTransactionId,
    ChargeConflictId,
    RefundId,
    InvoiceId,
    CreditNoteId,
    PortalSessionId,
    PortalActionId,
    CouponId,
    PromotionCodeId,
    NumberingRangeId,
    NoticeId,
    MrrMovementId,
    ConsoleUserId,
    ConsoleActionId,
);

text_id_column!(CatalogItemId, |raw| CatalogItemId::parse(&raw).ok_or(raw));
text_id_column!(DocumentId, |raw| DocumentId::parse(&raw).ok_or(raw));

#[cfg(test)]
mod tests {
    use crate::ids::{AddonId, CatalogItemId, CustomerId, PlanId, SubscriptionId};
    use sea_orm::sea_query::{Alias, ColumnDef, Query, SqliteQueryBuilder, Table};
    use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};

    /// A table of text columns, as every id column is.
    async fn table() -> sea_orm::DatabaseConnection {
        let db = Database::connect("sqlite::memory:").await.expect("connect");
        let create = Table::create()
            .table(Alias::new("ids"))
            .col(ColumnDef::new(Alias::new("id")).text().not_null())
            .col(ColumnDef::new(Alias::new("customer_id")).text().null())
            .col(ColumnDef::new(Alias::new("item_id")).text().not_null())
            .to_string(SqliteQueryBuilder);
        db.execute_unprepared(&create).await.expect("create");
        db
    }

    async fn insert(
        db: &sea_orm::DatabaseConnection,
        values: [sea_orm::Value; 3],
    ) -> Result<(), sea_orm::DbErr> {
        let insert = Query::insert()
            .into_table(Alias::new("ids"))
            .columns(["id", "customer_id", "item_id"].map(Alias::new))
            .values_panic(values.map(Into::into))
            .to_owned();
        db.execute(&insert).await.map(|_| ())
    }

    #[tokio::test]
    async fn a_typed_id_is_written_as_its_text_and_read_back_as_itself() {
        let db = table().await;
        let subscription = SubscriptionId::generate();
        let customer = CustomerId::generate();
        let plan = CatalogItemId::Plan(PlanId::generate());
        let addon = CatalogItemId::Addon(AddonId::generate());
        insert(
            &db,
            [
                subscription.clone().into(),
                Some(customer.clone()).into(),
                plan.clone().into(),
            ],
        )
        .await
        .expect("insert");
        insert(
            &db,
            [
                (&subscription).into(),
                Option::<CustomerId>::None.into(),
                addon.clone().into(),
            ],
        )
        .await
        .expect("insert");
        let rows = db
            .query_all_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT id, customer_id, item_id FROM ids ORDER BY rowid",
            ))
            .await
            .expect("select");
        let read: Vec<(SubscriptionId, Option<CustomerId>, CatalogItemId)> = rows
            .iter()
            .map(|row| {
                (
                    row.try_get("", "id").expect("id"),
                    row.try_get("", "customer_id").expect("customer_id"),
                    row.try_get("", "item_id").expect("item_id"),
                )
            })
            .collect();
        assert_eq!(
            read,
            vec![
                (subscription.clone(), Some(customer), plan),
                (subscription.clone(), None, addon),
            ]
        );
        let text: String = rows[0].try_get("", "id").expect("text");
        assert_eq!(text, subscription.as_str());
    }

    #[tokio::test]
    async fn a_catalog_item_id_of_neither_kind_fails_the_read() {
        let db = table().await;
        insert(
            &db,
            [
                SubscriptionId::generate().into(),
                Option::<CustomerId>::None.into(),
                "cus_123".into(),
            ],
        )
        .await
        .expect("insert");
        let row = db
            .query_one_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT item_id FROM ids",
            ))
            .await
            .expect("select")
            .expect("a row");
        let err = row
            .try_get::<CatalogItemId>("", "item_id")
            .expect_err("not a catalog item's id");
        assert!(err.to_string().contains("cus_123"), "{err}");
    }
}
