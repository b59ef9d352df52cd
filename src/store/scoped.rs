//! The tenant filter, written once: every entity with an `account_id` column is `Scoped`, and a
//! query of an integrator's objects starts from `Entity::scoped(account)` (or
//! `find_scoped(account, id)`, or `of(account)` for an update or a delete). A finder without its
//! account (`Entity::find()`) is then the unusual spelling, left to the runtime's lookups by an
//! id it got from a scoped one and to the capability URLs (ARCHITECTURE's invariants).
//!
//! `tests/tidy.rs` holds the rule: the account's column is compared in this file only.

use super::entities::{
    balance_transaction, catalog_item, charge_attempt, charge_conflict, charge_recheck,
    checkout_session, collection_slot, console_action, console_invitation, console_session,
    console_user, coupon, credit_note, customer, dian_document, dian_range, event, first_purchase,
    idempotency_key, invoice, invoice_series, mrr_movement, notice, pay_link, payment_method,
    portal_action, portal_session, processor_event, promotion_code, refund, subscription,
    subscription_addon, webhook_attempt, webhook_delivery, webhook_endpoint,
};
use crate::ids::AccountId;
use sea_orm::{ColumnTrait, Condition, EntityTrait, PrimaryKeyTrait, QueryFilter, Select};

/// An entity whose rows each belong to one account.
pub trait Scoped: EntityTrait {
    /// The rows of `account`: the condition, for an update, a delete or a join.
    fn of(account: &AccountId) -> Condition;

    /// The rows of `account`.
    fn scoped(account: &AccountId) -> Select<Self> {
        Self::find().filter(Self::of(account))
    }

    /// The row `id`, if it is `account`'s.
    fn find_scoped<K>(account: &AccountId, id: K) -> Select<Self>
    where
        K: Into<<Self::PrimaryKey as PrimaryKeyTrait>::ValueType>,
    {
        Self::find_by_id(id).filter(Self::of(account))
    }
}

macro_rules! scoped {
    ($($entity:ident),+ $(,)?) => {$(
        impl Scoped for $entity::Entity {
            fn of(account: &AccountId) -> Condition {
                Condition::all().add($entity::Column::AccountId.eq(account))
            }
        }
    )+};
}

scoped!(
    balance_transaction,
    catalog_item,
    charge_attempt,
    charge_conflict,
    charge_recheck,
    checkout_session,
    collection_slot,
    console_action,
    console_invitation,
    console_session,
    console_user,
    coupon,
    credit_note,
    customer,
    dian_document,
    dian_range,
    event,
    first_purchase,
    idempotency_key,
    invoice,
    invoice_series,
    mrr_movement,
    notice,
    pay_link,
    payment_method,
    portal_action,
    portal_session,
    processor_event,
    promotion_code,
    refund,
    subscription,
    subscription_addon,
    webhook_attempt,
    webhook_delivery,
    webhook_endpoint,
);
