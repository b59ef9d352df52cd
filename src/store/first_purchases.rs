//! First purchases (CONTRACT §14, decision 0071): whether a redemption of a `first_time_only`
//! code is a person's first purchase in the account, read from their charges and
//! subscriptions, and the claim in `first_purchases` that lets one of a person's concurrent
//! first purchases have it.

use super::entities::{charge_attempt, customer, first_purchase, subscription};
use super::txn::StoreTxn;
use super::{StoreError, StoreResult};
use crate::domain::charge_status::ChargeStatus;
use crate::ids::{AccountId, ChargeAttemptId, CustomerId, SubscriptionId};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait, Func, OnConflict};
use sea_orm::{ColumnTrait, Condition, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect, Set};

/// Who buys, as far as a first purchase is concerned (`coupons::Redeeming::buyer`).
pub struct Buyer<'a> {
    pub account: &'a AccountId,
    /// `None` for a customer the payment is to create (a checkout's).
    pub customer_id: Option<&'a CustomerId>,
    /// The payer's e-mail where there is no customer yet.
    pub email: Option<&'a str>,
    /// What this very purchase wrote already, which is not another purchase.
    pub subscription_id: Option<&'a SubscriptionId>,
    pub charge_id: Option<&'a ChargeAttemptId>,
    pub now: i64,
}

/// Who a first purchase is, as `first_purchases` keys it: the e-mail in lower case (a
/// checkout's payer, or the customer's own address), else the customer's id.
pub(super) async fn key<C: sea_orm::ConnectionTrait>(
    conn: &C,
    whom: &Buyer<'_>,
) -> StoreResult<Option<String>> {
    if let Some(email) = whom.email {
        return Ok(Some(email.to_lowercase()));
    }
    let Some(id) = whom.customer_id else {
        return Ok(None);
    };
    let known = customer::Entity::find_scoped(whom.account, id.clone())
        .one(conn)
        .await?;
    Ok(Some(match known {
        Some(customer) => customer.email.to_lowercase(),
        None => format!("id:{id}"),
    }))
}

/// Whether this is not the customer's first purchase in the account (CONTRACT §14): a customer
/// with this id or this e-mail (in any case) has an approved or pending charge or a
/// subscription, other than what this purchase itself wrote.
pub(super) async fn bought_before<C: sea_orm::ConnectionTrait>(
    conn: &C,
    whom: &Buyer<'_>,
    key: Option<&str>,
) -> StoreResult<bool> {
    let mut same = Condition::any();
    if let Some(id) = whom.customer_id {
        same = same.add(customer::Column::Id.eq(id));
    }
    if let Some(key) = key.filter(|key| !key.starts_with("id:")) {
        same = same.add(Expr::expr(Func::lower(Expr::col(customer::Column::Email))).eq(key));
    }
    if same.is_empty() {
        return Ok(false);
    }
    let customers: Vec<CustomerId> = customer::Entity::scoped(whom.account)
        .filter(same)
        .select_only()
        .column(customer::Column::Id)
        .into_tuple()
        .all(conn)
        .await?;
    let mut customers = customers;
    if let Some(id) = whom.customer_id
        && !customers.contains(id)
    {
        customers.push(id.clone());
    }
    if customers.is_empty() {
        return Ok(false);
    }
    let mut charges = charge_attempt::Entity::scoped(whom.account)
        .filter(charge_attempt::Column::CustomerId.is_in(customers.iter().cloned()))
        .filter(
            charge_attempt::Column::Status.is_in([ChargeStatus::Approved, ChargeStatus::Pending]),
        );
    if let Some(own) = whom.charge_id {
        charges = charges.filter(charge_attempt::Column::Id.ne(own.clone()));
    }
    if charges.count(conn).await? > 0 {
        return Ok(true);
    }
    let mut subscriptions = subscription::Entity::scoped(whom.account)
        .filter(subscription::Column::CustomerId.is_in(customers));
    if let Some(own) = whom.subscription_id {
        subscriptions = subscriptions.filter(subscription::Column::Id.ne(own.clone()));
    }
    Ok(subscriptions.count(conn).await? > 0)
}

impl StoreTxn {
    /// Claims `whom`'s first purchase for a `first_time_only` code: of a customer's concurrent
    /// first purchases one inserts the row, the others find it (waiting, on PostgreSQL, for
    /// the first to commit or roll back) and are refused: false.
    pub(super) async fn claim_first_purchase(&self, whom: &Buyer<'_>) -> StoreResult<bool> {
        let Some(key) = key(self.conn(), whom).await? else {
            return Ok(true);
        };
        let claim = first_purchase::ActiveModel {
            account_id: Set(whom.account.clone()),
            customer_key: Set(key),
            charge_id: Set(whom.charge_id.cloned()),
            created_at: Set(whom.now),
        };
        let inserted = first_purchase::Entity::insert(claim)
            .on_conflict(
                OnConflict::columns([
                    first_purchase::Column::AccountId,
                    first_purchase::Column::CustomerKey,
                ])
                .do_nothing()
                .to_owned(),
            )
            .exec_without_returning(self.conn())
            .await
            .map_err(StoreError::from)?;
        Ok(inserted == 1)
    }

    /// Gives back the first purchase a declined checkout payment claimed, in the transaction
    /// that releases it.
    pub async fn release_first_purchase(
        &self,
        account: &AccountId,
        charge_id: &ChargeAttemptId,
    ) -> StoreResult<()> {
        first_purchase::Entity::delete_many()
            .filter(first_purchase::Entity::of(account))
            .filter(first_purchase::Column::ChargeId.eq(charge_id.clone()))
            .exec(self.conn())
            .await?;
        Ok(())
    }
}
