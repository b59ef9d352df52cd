//! Seeding and triggering for the renewal benchmark (`billing bench renewals`): bulk inserts
//! in large transactions and one statement that makes every seeded subscription due. Not used
//! by the service itself.

use billing::domain::charge_purpose::ChargePurpose;
use billing::domain::charge_status::ChargeStatus;
use billing::domain::subscription::Status;
use billing::ids::{AccountId, ChargeAttemptId, SubscriptionId};
use billing::store::Scoped;
use billing::store::StoreResult;
use billing::store::entities::{
    account, balance_transaction, charge_attempt, event, invoice, invoice_series, notice,
    processor_event, subscription,
};
use billing::store::subscriptions::Subscription;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QuerySelect,
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

    /// The account's invoice series, as an account whose subscriptions renewed before has it
    /// (its first invoice made the row): the burst then adds rows per renewal only.
    pub async fn seed_invoice_series(&self, account: &AccountId) -> StoreResult<()> {
        use billing::store::invoices::{INVOICE_PREFIX, INVOICE_SERIES};
        invoice_series::Entity::insert(invoice_series::ActiveModel {
            account_id: Set(account.clone()),
            series: Set(INVOICE_SERIES.to_owned()),
            prefix: Set(INVOICE_PREFIX.to_owned()),
            next_number: Set(1),
        })
        .exec_without_returning(self.writer())
        .await?;
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

    /// What the burst wrote for the renewal of `id`, the model of the primitive limit's rows
    /// (`write_renewal_rows`): its approved charge, and what was written with it.
    pub async fn renewal_written(&self, id: &SubscriptionId) -> StoreResult<Option<Written>> {
        let Some(charge) = charge_attempt::Entity::find()
            .filter(charge_attempt::Column::SubscriptionId.eq(id))
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Approved))
            .filter(charge_attempt::Column::AmountCents.gt(0))
            .one(self.conn())
            .await?
        else {
            return Ok(None);
        };
        let ledger = balance_transaction::Entity::find()
            .filter(balance_transaction::Column::ChargeAttemptId.eq(&charge.id))
            .all(self.conn())
            .await?;
        let events = event::Entity::find()
            .filter(event::Column::SubscriptionId.eq(id))
            .all(self.conn())
            .await?;
        let invoices = invoice::Entity::find()
            .filter(invoice::Column::ChargeId.eq(&charge.id))
            .all(self.conn())
            .await?;
        let notices = notice::Entity::find()
            .filter(notice::Column::SubscriptionId.eq(id))
            .all(self.conn())
            .await?;
        let processor_events = processor_event::Entity::find()
            .filter(processor_event::Column::Reference.eq(&charge.reference))
            .all(self.conn())
            .await?;
        Ok(Some(Written {
            charge,
            ledger,
            events,
            invoices,
            notices,
            processor_events,
        }))
    }

    /// The rows of `renewals` as the burst wrote them for one renewal (`like`), written as
    /// multi-row statements, `chunk` renewals per transaction (the renewal benchmark's
    /// primitive limit): per renewal a copy of each row of `like` with its own ids, its
    /// charge approved; per chunk one UPDATE of the balance by the chunk's fees, one of the
    /// invoice series taking the chunk's numbers, and one of the subscriptions' versions.
    pub async fn write_renewal_rows(
        &self,
        renewals: &[RenewalRows],
        like: &Written,
        chunk: usize,
        now_ms: i64,
    ) -> StoreResult<()> {
        use sea_orm::IntoActiveModel;
        let backend = self.writer().get_database_backend();
        for part in renewals.chunks(chunk.max(1)) {
            let Some(first) = part.first() else { break };
            let txn = self.begin().await?;
            // The chunk's invoice numbers, taken as the service takes them.
            let (mut sequence, mut prefix) = (0, String::new());
            if let Some(invoice) = like.invoices.first() {
                let count = (part.len() * like.invoices.len()) as i64;
                let moved = invoice_series::Entity::update_many()
                    .col_expr(
                        invoice_series::Column::NextNumber,
                        Expr::col(invoice_series::Column::NextNumber).add(count),
                    )
                    .filter(invoice_series::Entity::of(&first.account))
                    .filter(invoice_series::Column::Series.eq(&invoice.series))
                    .exec_with_returning(&txn)
                    .await?;
                if let Some(row) = moved.first() {
                    (sequence, prefix) = (row.next_number - count, row.prefix.clone());
                }
            }
            let charges = part.iter().map(|r| {
                let mut charge = like.charge.clone();
                charge.id = r.charge_id.clone();
                charge.subscription_id = Some(r.subscription_id.clone());
                charge.reference = r.charge_id.to_string();
                charge.processor_transaction_id = Some(r.transaction_id.clone());
                charge.period_start = Some(r.period_start);
                (charge.created_at, charge.updated_at) = (now_ms, now_ms);
                charge.finalized_at = Some(now_ms);
                charge.into_active_model()
            });
            insert_rows(&txn, charges).await?;
            let ledger = part.iter().flat_map(|r| {
                like.ledger.iter().map(move |row| {
                    let mut row = row.clone();
                    row.id = billing::ids::BalanceTransactionId::generate();
                    row.charge_attempt_id = Some(r.charge_id.clone());
                    row.created_at = now_ms;
                    row.into_active_model()
                })
            });
            insert_rows(&txn, ledger).await?;
            let events = part.iter().flat_map(|r| {
                like.events.iter().map(move |row| {
                    let mut row = row.clone();
                    row.id = billing::ids::EventId::generate();
                    row.subscription_id = Some(r.subscription_id.clone());
                    row.created_at = now_ms;
                    row.into_active_model()
                })
            });
            insert_rows(&txn, events).await?;
            let mut invoice_ids = Vec::with_capacity(part.len());
            let mut invoices = Vec::with_capacity(part.len());
            for r in part {
                for row in &like.invoices {
                    let mut row = row.clone();
                    row.id = billing::ids::InvoiceId::generate();
                    row.sequence = sequence;
                    row.number = format!("{prefix}{sequence}");
                    sequence += 1;
                    row.charge_id = Some(r.charge_id.clone());
                    row.subscription_id = Some(r.subscription_id.clone());
                    row.hosted_token = billing::secrets::random_token("", 24);
                    row.issued_at = now_ms;
                    invoice_ids.push(row.id.clone());
                    invoices.push(row.into_active_model());
                }
            }
            insert_rows(&txn, invoices).await?;
            let mut notices = Vec::new();
            for (i, r) in part.iter().enumerate() {
                for row in &like.notices {
                    let mut row = row.clone();
                    row.id = billing::ids::NoticeId::generate();
                    row.subscription_id = Some(r.subscription_id.clone());
                    row.charge_id = row.charge_id.as_ref().map(|_| r.charge_id.clone());
                    row.invoice_id = invoice_ids.get(i).cloned().or(row.invoice_id);
                    row.cause = format!("{}:{}", row.kind, row.id);
                    (row.recipient, row.subject, row.message_id) = (None, None, None);
                    (row.sent_at, row.claim, row.attempts) = (None, None, 0);
                    row.created_at = now_ms;
                    notices.push(row);
                }
            }
            if let Some(statement) =
                billing::store::notice_sink::insert_notices_statement(backend, notices)
            {
                txn.execute_raw(statement).await?;
            }
            let processor_events = part.iter().flat_map(|r| {
                like.processor_events.iter().map(move |row| {
                    let mut row = row.clone();
                    row.checksum = format!("{}{}", r.charge_id, uuid::Uuid::new_v4().simple());
                    row.reference = Some(r.charge_id.to_string());
                    row.transaction_id = Some(r.transaction_id.clone());
                    (row.received_at, row.processed_at) = (now_ms, Some(now_ms));
                    row.into_active_model()
                })
            });
            insert_rows(&txn, processor_events).await?;
            let fees: i64 = part.iter().map(|r| r.fee_cents).sum();
            account::Entity::update_many()
                .col_expr(
                    account::Column::AvailableCents,
                    Expr::col(account::Column::AvailableCents).sub(fees),
                )
                .filter(account::Column::Id.eq(&first.account))
                .exec(&txn)
                .await?;
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

/// Inserts `rows` as one multi-row statement, or none if there are none.
async fn insert_rows<A>(
    txn: &sea_orm::DatabaseTransaction,
    rows: impl IntoIterator<Item = A>,
) -> StoreResult<()>
where
    A: sea_orm::ActiveModelTrait,
{
    let rows: Vec<A> = rows.into_iter().collect();
    if !rows.is_empty() {
        <A::Entity as EntityTrait>::insert_many(rows)
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// What the burst wrote for one renewal (`Raw::renewal_written`).
#[derive(Clone, Debug)]
pub struct Written {
    pub charge: charge_attempt::Model,
    pub ledger: Vec<balance_transaction::Model>,
    pub events: Vec<event::Model>,
    pub invoices: Vec<invoice::Model>,
    pub notices: Vec<notice::Model>,
    pub processor_events: Vec<processor_event::Model>,
}

/// One renewal of the primitive limit (`fixtures::write_renewal_rows`): its own ids.
#[derive(Clone, Debug)]
pub struct RenewalRows {
    pub account: AccountId,
    pub subscription_id: SubscriptionId,
    pub charge_id: ChargeAttemptId,
    pub transaction_id: String,
    pub fee_cents: i64,
    pub period_start: i64,
}

impl crate::Raw<'_> {
    /// The rows of every table of the database (on PostgreSQL, of the schema the connection
    /// uses), by table name: what a burst and the primitive limit each add is compared with
    /// this, table by table.
    pub async fn row_counts(&self) -> StoreResult<std::collections::BTreeMap<String, i64>> {
        use sea_orm::{ConnectionTrait, Statement};
        let backend = self.conn().get_database_backend();
        let list = match backend {
            sea_orm::DbBackend::Postgres => {
                "SELECT table_name::text AS name FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            }
            _ => "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        };
        let mut counts = std::collections::BTreeMap::new();
        for row in self
            .conn()
            .query_all_raw(Statement::from_string(backend, list))
            .await?
        {
            let name: String = row.try_get("", "name")?;
            // Names from the catalogue, quoted: no input of anyone's reaches this statement.
            let count = Statement::from_string(
                backend,
                format!(
                    "SELECT COUNT(*) AS n FROM \"{}\"",
                    name.replace('"', "\"\"")
                ),
            );
            let n: i64 = match self.conn().query_one_raw(count).await? {
                Some(row) => row.try_get("", "n")?,
                None => 0,
            };
            counts.insert(name, n);
        }
        Ok(counts)
    }
}

/// What each table gained between two `row_counts`, the tables that gained nothing left out
/// (and those that lost rows: a PostgreSQL node's stop removes its own `cluster_nodes` row,
/// which is not a renewal's work).
pub fn rows_added(
    before: &std::collections::BTreeMap<String, i64>,
    after: &std::collections::BTreeMap<String, i64>,
) -> std::collections::BTreeMap<String, i64> {
    after
        .iter()
        .map(|(table, n)| (table.clone(), n - before.get(table).copied().unwrap_or(0)))
        .filter(|(_, added)| *added > 0)
        .collect()
}

/// The active subscriptions of `account` renewed after `at`: their next timer is the next
/// period's end, a month on.
fn renewed(account: &AccountId, at: i64) -> sea_orm::Select<subscription::Entity> {
    subscription::Entity::scoped(account)
        .filter(subscription::Column::DueAt.gt(at + 86_400_000))
        .filter(subscription::Column::NextChargeDate.gt(at))
        .filter(subscription::Column::Status.eq(Status::Active))
}
