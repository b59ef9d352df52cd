//! The domain's closed vocabularies as text columns: a row's `status`, `cycle` or `purpose` is
//! the domain enum, read from and written as its word. A word the enum does not know (which the
//! database's constraints of migration 000016 refuse to store) fails the read loudly instead of
//! being guessed.

use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::{ChargeStatus, RefundStatus};
use crate::domain::decline::Decline;
use crate::domain::dian::{DianDocumentKind, DianStatus, DianWaiting, Environment};
use crate::domain::discount::Duration;
use crate::domain::event_type::EventType;
use crate::domain::mrr::{MovementReason, MovementType};
use crate::domain::subscription::Status;
use crate::domain::tax::TaxCode;
use crate::domain::time::Cycle;

/// A stored word no value of the enum has.
#[derive(Debug, thiserror::Error)]
#[error("{word:?} is not a {vocabulary}")]
pub struct UnknownWord {
    vocabulary: &'static str,
    word: String,
}

/// Maps each enum to a text column (what `sea_orm::DeriveValueType` writes for a string type).
macro_rules! text_columns {
    ($($name:ident),+ $(,)?) => {$(
        impl From<$name> for sea_orm::Value {
            fn from(value: $name) -> Self {
                value.as_str().into()
            }
        }

        impl sea_orm::TryGetable for $name {
            fn try_get_by<I: sea_orm::ColIdx>(
                res: &sea_orm::QueryResult,
                idx: I,
            ) -> Result<Self, sea_orm::TryGetError> {
                let word = String::try_get_by(res, idx)?;
                $name::parse(&word).ok_or_else(|| {
                    sea_orm::TryGetError::DbErr(sea_orm::DbErr::TryIntoErr {
                        from: "String",
                        into: stringify!($name),
                        source: std::sync::Arc::new(UnknownWord {
                            vocabulary: stringify!($name),
                            word,
                        }),
                    })
                })
            }
        }

        impl sea_orm::sea_query::ValueType for $name {
            fn try_from(value: sea_orm::Value) -> Result<Self, sea_orm::sea_query::ValueTypeErr> {
                let word = <String as sea_orm::sea_query::ValueType>::try_from(value)?;
                $name::parse(&word).ok_or(sea_orm::sea_query::ValueTypeErr)
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
    )+};
}

text_columns!(
    Status,
    Cycle,
    ChargeStatus,
    ChargePurpose,
    RefundStatus,
    Decline,
    TaxCode,
    Duration,
    DianStatus,
    DianDocumentKind,
    DianWaiting,
    Environment,
    EventType,
    MovementType,
    MovementReason
);
