//! Seeding and triggering for the renewal benchmark (`billing bench renewals`): bulk inserts
//! in large transactions and one statement that makes every seeded subscription due. Not used
//! by the service itself.

use billing::domain::charge_purpose::ChargePurpose;
use billing::domain::charge_status::ChargeStatus;
use billing::domain::subscription::Status;
use billing::ids::{AccountId, ChargeAttemptId, CustomerId, PaymentMethodId, SubscriptionId};
use billing::store::Scoped;
use billing::store::StoreResult;
use billing::store::entities::{
    account, balance_transaction, charge_attempt, event, invoice, subscription,
};
use billing::store::subscriptions::Subscription;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect,
};

impl crate::Raw<'_> {
    /// Inserts `rows` in one transaction, one multi-row INSERT per 500 rows.
    pub async fn seed_subscriptions(&self, rows: &[Subscription]) -> StoreResult<()> {
        let txn = self.begin().await?;
        for chunk in rows.chunks(500) {
            subscription::Entity::insert_many(
                chunk
                    .iter()
                    .cloned()
                    .map(sea_orm::IntoActiveModel::into_active_model),
            )
            .exec(&txn)
            .await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Inserts, for each of `rows`, its previous period's approved charge (`period` long,
    /// ending where its current period starts): the history a subscription that renews has,
    /// so that the charges' table and its indexes hold what they would in service, not only
    /// the burst's own charges. Its amount and fee are zero: only its place in the table
    /// matters here, and a zero fee has no ledger row to go with it.
    pub async fn seed_paid_periods(&self, rows: &[Subscription], period: i64) -> StoreResult<()> {
        let txn = self.begin().await?;
        for chunk in rows.chunks(500) {
            charge_attempt::Entity::insert_many(chunk.iter().map(|sub| {
                let id = billing::ids::ChargeAttemptId::generate();
                let at = sub.current_period_start;
                charge_attempt::ActiveModel {
                    id: Set(id.clone()),
                    account_id: Set(sub.account_id.clone()),
                    subscription_id: Set(Some(sub.id.clone())),
                    customer_id: Set(sub.customer_id.clone()),
                    payment_method_id: Set(sub.default_payment_method_id.clone()),
                    amount_cents: Set(0),
                    fee_cents: Set(0),
                    reference: Set(id.to_string()),
                    processor_transaction_id: Set(Some(format!("tx_{id}"))),
                    status: Set(ChargeStatus::Approved),
                    processor_status: Set(Some("APPROVED".into())),
                    processor_message: Set(None),
                    purpose: Set(ChargePurpose::Renewal),
                    period_start: Set(Some(at - period)),
                    created_at: Set(at - period),
                    updated_at: Set(at - period),
                    finalized_at: Set(Some(at - period)),
                    pending_change: Set(None),
                    refunded_cents: Set(0),
                    refunding_cents: Set(0),
                    invoice_lines: Set(None),
                    decline_code: Set(None),
                }
            }))
            .exec(&txn)
            .await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// On PostgreSQL, the planner's statistics of the tables a renewal reads, as autovacuum
    /// keeps them in a database in service (it would gather them within a minute of the
    /// seeding; the burst starts at once). SQLite keeps none unless told to, nor does the
    /// service tell it: nothing there.
    pub async fn analyze_seeded(&self) -> StoreResult<()> {
        use sea_orm::ConnectionTrait;
        if self.conn().get_database_backend() == sea_orm::DbBackend::Postgres {
            self.writer()
                .execute_unprepared("ANALYZE subscriptions, charge_attempts")
                .await?;
        }
        Ok(())
    }

    /// Makes every active subscription of `account` due at `at`: its period becomes
    /// [at, at + 30 days), unpaid and due now, so the timer charges it once (one charge, one
    /// fee, one `charge.approved`, the next charge date set), as a renewal would.
    pub async fn make_all_due(&self, account: &AccountId, at: i64) -> StoreResult<u64> {
        let result = subscription::Entity::update_many()
            .col_expr(subscription::Column::CurrentPeriodStart, Expr::value(at))
            .col_expr(subscription::Column::Anchor, Expr::value(at))
            .col_expr(
                subscription::Column::CurrentPeriodEnd,
                Expr::value(at + 30 * 86_400_000),
            )
            .col_expr(subscription::Column::NextChargeDate, Expr::value(at))
            .col_expr(subscription::Column::DueAt, Expr::value(at))
            .filter(subscription::Entity::of(account))
            .filter(subscription::Column::Status.eq(Status::Active))
            .exec(self.writer())
            .await?;
        Ok(result.rows_affected)
    }

    /// How many active subscriptions of `account` were renewed after `at`: their next timer is
    /// the next period's end, a month on. The `due_at` index keeps this poll from scanning
    /// every subscription (at 100,000 a full scan every poll took a visible share of the two
    /// cores it measures).
    pub async fn count_renewed(&self, account: &AccountId, at: i64) -> StoreResult<u64> {
        Ok(renewed(account, at).count(self.conn()).await?)
    }

    /// When the last of the subscriptions `count_renewed` counts was renewed (its row's
    /// `updated_at`, written in the settlement's transaction), in milliseconds.
    pub async fn last_renewed_at(&self, account: &AccountId, at: i64) -> StoreResult<Option<i64>> {
        Ok(renewed(account, at)
            .select_only()
            .column_as(subscription::Column::UpdatedAt.max(), "last")
            .into_tuple::<Option<i64>>()
            .one(self.conn())
            .await?
            .flatten())
    }

    /// Invoices of `account` (the seeded previous periods have none: the renewals' alone).
    pub async fn count_invoices(&self, account: &AccountId) -> StoreResult<u64> {
        Ok(invoice::Entity::scoped(account).count(self.conn()).await?)
    }

    /// Notices of `account`.
    pub async fn count_notices(&self, account: &AccountId) -> StoreResult<u64> {
        Ok(billing::store::entities::notice::Entity::scoped(account)
            .count(self.conn())
            .await?)
    }

    /// Approved charges of `account`.
    pub async fn count_approved_charges(&self, account: &AccountId) -> StoreResult<u64> {
        Ok(charge_attempt::Entity::scoped(account)
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Approved))
            .count(self.conn())
            .await?)
    }

    /// The rows renewals of `renewals` write, written as multi-row statements, `chunk` renewals
    /// per transaction (the renewal benchmark's primitive limit): per renewal its approved
    /// charge attempt, its fee's ledger row and its `charge.approved` event; per chunk one
    /// UPDATE of the balance by the chunk's fees and one of the subscriptions' next timer.
    pub async fn write_renewal_rows(
        &self,
        renewals: &[RenewalRows],
        chunk: usize,
        now_ms: i64,
    ) -> StoreResult<()> {
        for part in renewals.chunks(chunk.max(1)) {
            let txn = self.begin().await?;
            charge_attempt::Entity::insert_many(part.iter().map(|r| charge_attempt::ActiveModel {
                id: Set(r.charge_id.clone()),
                account_id: Set(r.account.clone()),
                subscription_id: Set(Some(r.subscription_id.clone())),
                customer_id: Set(r.customer_id.clone()),
                payment_method_id: Set(r.payment_method_id.clone()),
                amount_cents: Set(r.amount_cents),
                fee_cents: Set(r.fee_cents),
                reference: Set(r.charge_id.to_string()),
                processor_transaction_id: Set(Some(r.transaction_id.clone())),
                status: Set(ChargeStatus::Approved),
                processor_status: Set(Some("APPROVED".into())),
                processor_message: Set(None),
                purpose: Set(ChargePurpose::Renewal),
                period_start: Set(Some(r.period_start)),
                created_at: Set(now_ms),
                updated_at: Set(now_ms),
                finalized_at: Set(Some(now_ms)),
                pending_change: Set(None),
                refunded_cents: Set(0),
                refunding_cents: Set(0),
                invoice_lines: Set(None),
                decline_code: Set(None),
            }))
            .exec(&txn)
            .await?;
            balance_transaction::Entity::insert_many(part.iter().map(|r| {
                balance_transaction::ActiveModel {
                    id: Set(billing::ids::BalanceTransactionId::generate()),
                    account_id: Set(r.account.clone()),
                    kind: Set("fee".into()),
                    amount_cents: Set(-r.fee_cents),
                    charge_attempt_id: Set(Some(r.charge_id.clone())),
                    description: Set("renewal fee".into()),
                    created_at: Set(now_ms),
                }
            }))
            .exec(&txn)
            .await?;
            event::Entity::insert_many(part.iter().map(|r| event::ActiveModel {
                id: Set(billing::ids::EventId::generate()),
                account_id: Set(r.account.clone()),
                event_type: Set(billing::domain::event_type::EventType::ChargeApproved),
                subscription_id: Set(Some(r.subscription_id.clone())),
                body: Set(r.event_body.clone()),
                created_at: Set(now_ms),
            }))
            .exec(&txn)
            .await?;
            let fees: i64 = part.iter().map(|r| r.fee_cents).sum();
            if let Some(first) = part.first() {
                account::Entity::update_many()
                    .col_expr(
                        account::Column::AvailableCents,
                        Expr::col(account::Column::AvailableCents).sub(fees),
                    )
                    .filter(account::Column::Id.eq(&first.account))
                    .exec(&txn)
                    .await?;
            }
            subscription::Entity::update_many()
                .col_expr(
                    subscription::Column::Version,
                    Expr::col(subscription::Column::Version).add(1),
                )
                .filter(subscription::Column::Id.is_in(part.iter().map(|r| &r.subscription_id)))
                .exec(&txn)
                .await?;
            txn.commit().await?;
        }
        Ok(())
    }
}

/// What one renewal writes (`fixtures::write_renewal_rows`).
#[derive(Clone, Debug)]
pub struct RenewalRows {
    pub account: AccountId,
    pub subscription_id: SubscriptionId,
    pub customer_id: CustomerId,
    pub payment_method_id: PaymentMethodId,
    pub charge_id: ChargeAttemptId,
    pub transaction_id: String,
    pub amount_cents: i64,
    pub fee_cents: i64,
    pub period_start: i64,
    pub event_body: String,
}

/// The active subscriptions of `account` renewed after `at`: their next timer is the next
/// period's end, a month on.
fn renewed(account: &AccountId, at: i64) -> sea_orm::Select<subscription::Entity> {
    subscription::Entity::scoped(account)
        .filter(subscription::Column::DueAt.gt(at + 86_400_000))
        .filter(subscription::Column::NextChargeDate.gt(at))
        .filter(subscription::Column::Status.eq(Status::Active))
}
