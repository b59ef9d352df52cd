//! What the fault-injection harness (`crate::chaos`) reads back after a run, beyond the
//! invariant checker's own queries (`audit`): one account's charges and subscriptions as
//! plain rows, and a fresh PostgreSQL schema per run. Nothing here is on a request's path.

use billing::ids::{AccountId, SubscriptionId};
use billing::store::Scoped;
use billing::store::StoreResult;
use billing::store::entities::{charge_attempt, subscription};
use sea_orm::{ConnectionTrait, Database, PaginatorTrait, QueryOrder};

/// A charge attempt as the harness judges it: which card it went to and how it ended.
#[derive(Clone, Debug)]
pub struct ChaosCharge {
    pub id: String,
    pub reference: String,
    pub status: String,
    pub payment_method_id: String,
    pub subscription_id: Option<String>,
    pub purpose: String,
    pub period_start: Option<i64>,
}

/// A subscription as the harness judges it.
#[derive(Clone, Debug)]
pub struct ChaosSubscription {
    pub id: String,
    pub customer_id: String,
    pub status: String,
    pub payment_method_id: String,
}

impl crate::Raw<'_> {
    /// How many charge attempts the account has made, whatever their status.
    pub async fn count_charges(&self, account: &AccountId) -> StoreResult<u64> {
        Ok(charge_attempt::Entity::scoped(account)
            .count(self.conn())
            .await?)
    }

    /// Every charge attempt of the account, oldest first.
    pub async fn chaos_charges(&self, account: &AccountId) -> StoreResult<Vec<ChaosCharge>> {
        let rows = charge_attempt::Entity::scoped(account)
            .order_by_asc(charge_attempt::Column::Id)
            .all(self.conn())
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| ChaosCharge {
                id: row.id.into_string(),
                reference: row.reference,
                status: row.status.as_str().to_owned(),
                payment_method_id: row.payment_method_id.into_string(),
                subscription_id: row.subscription_id.map(SubscriptionId::into_string),
                purpose: row.purpose.as_str().to_owned(),
                period_start: row.period_start,
            })
            .collect())
    }

    /// Every subscription of the account, oldest first.
    pub async fn chaos_subscriptions(
        &self,
        account: &AccountId,
    ) -> StoreResult<Vec<ChaosSubscription>> {
        let rows = subscription::Entity::scoped(account)
            .order_by_asc(subscription::Column::Id)
            .all(self.conn())
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| ChaosSubscription {
                id: row.id.into_string(),
                customer_id: row.customer_id.into_string(),
                status: row.status.as_str().to_owned(),
                payment_method_id: row.default_payment_method_id.into_string(),
            })
            .collect())
    }
}

/// Creates `schema` in the PostgreSQL database at `url` and returns a URL whose connections
/// use it (its `search_path`), so each run starts on an empty database without needing the
/// right to create databases.
pub async fn fresh_postgres_schema(url: &str, schema: &str) -> StoreResult<String> {
    let db = Database::connect(url).await?;
    db.execute_unprepared(&format!("CREATE SCHEMA {schema}"))
        .await?;
    db.close().await?;
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok(format!(
        "{url}{separator}options=-c%20search_path%3D{schema}"
    ))
}

/// Drops a schema made by `fresh_postgres_schema` with everything in it.
pub async fn drop_postgres_schema(url: &str, schema: &str) -> StoreResult<()> {
    let db = Database::connect(url).await?;
    db.execute_unprepared(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await?;
    db.close().await?;
    Ok(())
}

/// Terminates every backend whose `application_name` is `name`; how many.
pub async fn terminate_backends(postgres: &str, name: &str) -> anyhow::Result<u64> {
    use sea_orm::{ConnectionTrait, Database, Statement, Value};
    let db = Database::connect(postgres).await?;
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1) t",
            [Value::from(name.to_owned())],
        ))
        .await?
        .ok_or_else(|| anyhow::anyhow!("no answer to pg_terminate_backend"))?;
    let count: i64 = row.try_get_by_index(0)?;
    db.close().await?;
    Ok(count as u64)
}
