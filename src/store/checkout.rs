//! Checkout sessions and the transactions that pay them.
//!
//! A session moves `open → complete` or `open → expired`, each by a conditional UPDATE so
//! that concurrent requests agree on one winner. While a payment is in flight the session
//! holds its charge in `attempt_charge_id` (see the migration): that column is the lock that
//! keeps a double submission from charging twice.

use super::entities::{charge_attempt, checkout_session, customer, payment_method};
use super::txn::StoreTxn;
use super::{Page, PageRequest, Store, StoreResult, fetch_page};
use crate::domain::checkout::SessionStatus::{Complete, Expired, Open};
use crate::ids::{
    AccountId, ChargeAttemptId, CheckoutSessionId, CustomerId, PaymentMethodId, SubscriptionId,
};
use crate::store::Scoped;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter};

use crate::processor::client::SourceKind;
pub use checkout_session::Model as CheckoutSession;

/// What one payment attempt of a session will create if the processor approves it.
#[derive(Clone, Debug)]
pub struct CheckoutAttempt {
    pub charge_id: ChargeAttemptId,
    pub customer_id: CustomerId,
    pub payment_method_id: PaymentMethodId,
    pub payment_source_id: i64,
    pub source_kind: SourceKind,
    pub email: String,
    pub name: String,
    pub brand: Option<String>,
    pub last4: Option<String>,
    pub expires_at: Option<i64>,
    /// The card or Nequi token tried: a token is tried once per session.
    pub token: String,
    /// JSON of the `Discount` the attempt redeemed, given back if it is declined.
    pub discount: Option<String>,
}

impl CheckoutSession {
    /// The plan's amount times the quantity, before any discount: what the session was
    /// created at, as `amount_cents` less what its discount took.
    pub fn subtotal_cents(&self) -> i64 {
        self.subtotal_cents.unwrap_or(self.amount_cents)
    }

    /// The coupon or code the integrator gave the session.
    pub fn redeem(&self) -> Option<super::coupons::Redeem> {
        self.redeem
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
    }

    /// The discount its payment's attempt redeemed.
    pub fn attempt_discount(&self) -> Option<crate::domain::discount::Discount> {
        self.attempt_discount
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
    }
}

impl Store {
    pub async fn insert_checkout_session(
        &self,
        session: CheckoutSession,
    ) -> StoreResult<CheckoutSession> {
        Ok(session
            .into_active_model()
            .reset_all()
            .insert(self.writer())
            .await?)
    }

    pub async fn checkout_session(
        &self,
        account: &AccountId,
        id: &CheckoutSessionId,
    ) -> StoreResult<Option<CheckoutSession>> {
        Ok(checkout_session::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// Marks every open session of `account` whose time has passed expired (as
    /// `expire_checkout_session` does for one), so that a list shows them as they are.
    pub async fn expire_checkout_sessions(
        &self,
        account: &AccountId,
        now_ms: i64,
    ) -> StoreResult<()> {
        checkout_session::Entity::update_many()
            .col_expr(checkout_session::Column::Status, Expired.as_str().into())
            .col_expr(checkout_session::Column::UpdatedAt, now_ms.into())
            .filter(checkout_session::Entity::of(account))
            .filter(checkout_session::Column::Status.eq(Open.as_str()))
            .filter(checkout_session::Column::ExpiresAt.lte(now_ms))
            .filter(checkout_session::Column::AttemptChargeId.is_null())
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// The account's sessions, newest first, optionally in one status.
    pub async fn list_checkout_sessions(
        &self,
        account: &AccountId,
        status: Option<&str>,
        page: &PageRequest,
    ) -> StoreResult<Page<CheckoutSession>> {
        let mut select = checkout_session::Entity::scoped(account);
        if let Some(status) = status {
            select = select.filter(checkout_session::Column::Status.eq(status));
        }
        fetch_page(self.conn(), select, checkout_session::Column::Id, page).await
    }

    /// A session by id alone: for the hosted page, whose URL (the unguessable id) is the
    /// customer's only credential, as with any hosted payment page.
    pub async fn checkout_session_by_id(
        &self,
        id: &CheckoutSessionId,
    ) -> StoreResult<Option<CheckoutSession>> {
        Ok(checkout_session::Entity::find_by_id(id.clone())
            .one(self.conn())
            .await?)
    }

    /// The session whose payment attempt is `charge_id`, if one still waits for it.
    pub async fn checkout_session_for_charge(
        &self,
        charge_id: &ChargeAttemptId,
    ) -> StoreResult<Option<CheckoutSession>> {
        Ok(checkout_session::Entity::find()
            .filter(checkout_session::Column::AttemptChargeId.eq(charge_id))
            .one(self.conn())
            .await?)
    }

    /// Marks an open session expired once `now_ms` (the account's clock) has reached its
    /// `expires_at`, unless a payment is in flight: that payment decides. True if it changed.
    pub async fn expire_checkout_session(
        &self,
        id: &CheckoutSessionId,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let result = checkout_session::Entity::update_many()
            .col_expr(checkout_session::Column::Status, Expired.as_str().into())
            .col_expr(checkout_session::Column::UpdatedAt, now_ms.into())
            .filter(checkout_session::Column::Id.eq(id))
            .filter(checkout_session::Column::Status.eq(Open.as_str()))
            .filter(checkout_session::Column::ExpiresAt.lte(now_ms))
            .filter(checkout_session::Column::AttemptChargeId.is_null())
            .exec(self.writer())
            .await?;
        Ok(result.rows_affected == 1)
    }
}

impl StoreTxn {
    /// Takes the session's payment lock for `attempt`: only an open session with no payment
    /// in flight can be claimed. False when another attempt holds it or the session is closed.
    pub async fn claim_checkout_session(
        &self,
        id: &CheckoutSessionId,
        attempt: &CheckoutAttempt,
        now_ms: i64,
    ) -> StoreResult<bool> {
        use checkout_session::Column as C;
        let result = checkout_session::Entity::update_many()
            .col_expr(C::AttemptChargeId, attempt.charge_id.clone().into())
            .col_expr(C::AttemptCustomerId, attempt.customer_id.clone().into())
            .col_expr(
                C::AttemptPaymentMethodId,
                attempt.payment_method_id.clone().into(),
            )
            .col_expr(C::AttemptPaymentSourceId, attempt.payment_source_id.into())
            .col_expr(C::AttemptSourceKind, attempt.source_kind.as_str().into())
            .col_expr(C::AttemptEmail, attempt.email.clone().into())
            .col_expr(C::AttemptName, attempt.name.clone().into())
            .col_expr(C::AttemptBrand, attempt.brand.clone().into())
            .col_expr(C::AttemptLast4, attempt.last4.clone().into())
            .col_expr(C::AttemptExpiresAt, attempt.expires_at.into())
            .col_expr(C::AttemptCardToken, attempt.token.clone().into())
            .col_expr(C::AttemptDiscount, attempt.discount.clone().into())
            .col_expr(C::UpdatedAt, now_ms.into())
            .filter(C::Id.eq(id))
            .filter(C::Status.eq(Open.as_str()))
            .filter(C::AttemptChargeId.is_null())
            .exec(self.conn())
            .await?;
        Ok(result.rows_affected == 1)
    }

    pub async fn checkout_session_for_charge(
        &self,
        charge_id: &ChargeAttemptId,
    ) -> StoreResult<Option<CheckoutSession>> {
        Ok(checkout_session::Entity::find()
            .filter(checkout_session::Column::AttemptChargeId.eq(charge_id))
            .one(self.conn())
            .await?)
    }

    /// `open → complete` for the attempt `charge_id`; false if the session is not waiting for
    /// that charge (so nothing is created twice).
    pub async fn complete_checkout_session(
        &self,
        id: &CheckoutSessionId,
        charge_id: &ChargeAttemptId,
        subscription_id: &SubscriptionId,
        now_ms: i64,
    ) -> StoreResult<bool> {
        use checkout_session::Column as C;
        let result = checkout_session::Entity::update_many()
            .col_expr(C::Status, Complete.as_str().into())
            .col_expr(C::SubscriptionId, subscription_id.into())
            .col_expr(C::LastError, Option::<String>::None.into())
            .col_expr(C::UpdatedAt, now_ms.into())
            .filter(C::Id.eq(id))
            .filter(C::AttemptChargeId.eq(charge_id))
            .filter(C::Status.eq(Open.as_str()))
            .exec(self.conn())
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// A failed attempt lets go of the lock, keeping the reason for the page.
    pub async fn release_checkout_session(
        &self,
        id: &CheckoutSessionId,
        charge_id: &ChargeAttemptId,
        error: &str,
        now_ms: i64,
    ) -> StoreResult<()> {
        use checkout_session::Column as C;
        checkout_session::Entity::update_many()
            .col_expr(C::AttemptChargeId, Option::<String>::None.into())
            .col_expr(C::AttemptDiscount, Option::<String>::None.into())
            .col_expr(C::LastError, error.into())
            .col_expr(C::UpdatedAt, now_ms.into())
            .filter(C::Id.eq(id))
            .filter(C::AttemptChargeId.eq(charge_id))
            .exec(self.conn())
            .await?;
        Ok(())
    }

    pub async fn insert_customer(&self, row: customer::Model) -> StoreResult<()> {
        row.into_active_model()
            .reset_all()
            .insert(self.conn())
            .await?;
        Ok(())
    }

    pub async fn insert_payment_method(&self, row: payment_method::Model) -> StoreResult<()> {
        row.into_active_model()
            .reset_all()
            .insert(self.conn())
            .await?;
        Ok(())
    }

    /// Makes a checkout charge the payment of the new subscription's first period, so that
    /// the subscription's actor never charges that period again.
    pub async fn attach_charge_to_subscription(
        &self,
        charge_id: &ChargeAttemptId,
        subscription_id: &SubscriptionId,
        period_start: i64,
    ) -> StoreResult<()> {
        charge_attempt::Entity::update_many()
            .col_expr(
                charge_attempt::Column::SubscriptionId,
                subscription_id.into(),
            )
            .col_expr(charge_attempt::Column::PeriodStart, period_start.into())
            .filter(charge_attempt::Column::Id.eq(charge_id))
            .exec(self.conn())
            .await?;
        Ok(())
    }
}
