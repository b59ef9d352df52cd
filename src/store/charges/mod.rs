//! Payment methods, charge attempts with their fee reservations, and processor events.
//!
//! A processor event is recorded (by checksum) in the transaction that applies its effect, so
//! the row exists exactly when its outcome was applied: a copy that arrives later is known, and
//! one that arrived before a crash, unapplied, is applied when the processor sends it again.
//!
//! The fee lifecycle of a charge, each step one transaction:
//! 1. `begin_charge`: reserve the projected fee (`available -= fee`, `reserved += fee`, only if
//!    `available >= fee`) and insert the ChargeAttempt as `pending`.
//! 2. `settle_charge`: move the attempt from `pending` to its final status with a conditional
//!    UPDATE; only the caller whose UPDATE matched applies the money: on approval the
//!    reservation is consumed and a `fee` ledger row written (unique per charge), otherwise
//!    the reservation goes back to `available`. Any later report of the same outcome finds the
//!    attempt already final and changes nothing.

pub mod conflicts;
mod limits;

pub use limits::Overrun;

use super::entities::{account, charge_attempt, payment_method, processor_event};
use super::{Page, PageRequest, Store, StoreError, StoreResult, fetch_page};
use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::ChargeStatus;
use crate::domain::decline::Decline;
use crate::ids::{
    AccountId, ChargeAttemptId, CustomerId, PaymentMethodId, SubscriptionId, WebhookEndpointId,
};
use crate::store::Scoped;
use conflicts::{Report, contradicts, insert_conflict_in};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder,
    sea_query::{Expr, ExprTrait},
};

pub use charge_attempt::Model as ChargeAttempt;
pub use payment_method::Model as PaymentMethod;
pub use processor_event::Model as ProcessorEvent;

/// What a new charge is for and how much it is.
#[derive(Clone, Debug)]
pub struct NewCharge {
    pub account: AccountId,
    pub subscription_id: Option<SubscriptionId>,
    pub customer_id: CustomerId,
    pub payment_method_id: PaymentMethodId,
    pub amount_cents: i64,
    pub fee_cents: i64,
    pub purpose: ChargePurpose,
    pub period_start: Option<i64>,
    /// JSON of the change the charge is for, applied when it is approved.
    pub pending_change: Option<String>,
    /// What the charge is for, line by line, adding up to `amount_cents` (its invoice's
    /// lines); empty: one line of the whole amount at the account's default tax code.
    pub lines: Vec<super::invoices::DraftLine>,
    pub now_ms: i64,
}

/// A charge could not begin.
#[derive(Debug, thiserror::Error)]
pub enum BeginChargeError {
    #[error("the balance does not cover the projected fee")]
    InsufficientBalance,
    /// The period already has a pending or approved charge (`charge_attempts_live_period`).
    #[error("the period already has a live charge")]
    PeriodTaken,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The final status a processor's raw status settles a charge to (`ChargeStatus::from_processor`).
pub fn final_status(raw: &str) -> Option<ChargeStatus> {
    ChargeStatus::from_processor(raw)
}

impl ChargeAttempt {
    /// Whether the charge is in `status` (the column admits no other value: migration 000016).
    pub fn is(&self, status: ChargeStatus) -> bool {
        self.status == status
    }
}

/// The outcome of `settle_charge`.
#[derive(Clone, Debug)]
pub struct Settled {
    pub charge: ChargeAttempt,
    /// True only for the one call that applied the outcome.
    pub newly: bool,
    /// True when the outcome contradicted the one already recorded: nothing moved, and a
    /// conflict was written in the caller's transaction (which must then commit it).
    pub conflict: bool,
    /// The endpoints given deliveries of the invoice's event, for the caller's transaction to
    /// wake once it commits.
    pub touched: Vec<WebhookEndpointId>,
}

impl Store {
    pub async fn insert_payment_method(&self, method: PaymentMethod) -> StoreResult<PaymentMethod> {
        let model: payment_method::ActiveModel = method.into();
        Ok(model.insert(self.writer()).await?)
    }

    pub async fn payment_method(
        &self,
        account: &AccountId,
        id: &PaymentMethodId,
    ) -> StoreResult<Option<PaymentMethod>> {
        Ok(payment_method::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    pub async fn list_payment_methods(
        &self,
        account: &AccountId,
        customer_id: &CustomerId,
        page: &PageRequest,
    ) -> StoreResult<Page<PaymentMethod>> {
        let select = payment_method::Entity::scoped(account)
            .filter(payment_method::Column::CustomerId.eq(customer_id));
        fetch_page(self.conn(), select, payment_method::Column::Id, page).await
    }

    /// Reserves the fee and records the pending attempt, in one transaction.
    pub async fn begin_charge(&self, new: NewCharge) -> Result<ChargeAttempt, BeginChargeError> {
        let txn = self.begin().await?;
        let charge = begin_charge_in(txn.conn(), new).await?;
        txn.commit().await?;
        Ok(charge)
    }

    /// The last settled charge of a subscription, by when it began (pending ones aside).
    pub async fn last_settled_charge(
        &self,
        account: &AccountId,
        subscription_id: &SubscriptionId,
    ) -> StoreResult<Option<ChargeAttempt>> {
        Ok(charge_attempt::Entity::scoped(account)
            .filter(charge_attempt::Column::SubscriptionId.eq(subscription_id))
            .filter(charge_attempt::Column::Status.ne(ChargeStatus::Pending))
            .order_by_desc(charge_attempt::Column::CreatedAt)
            .order_by_desc(charge_attempt::Column::Id)
            .one(self.conn())
            .await?)
    }

    pub async fn charge(
        &self,
        account: &AccountId,
        id: &ChargeAttemptId,
    ) -> StoreResult<Option<ChargeAttempt>> {
        Ok(charge_attempt::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// Notes the processor's transaction id and raw status of a still-pending attempt.
    pub async fn record_processor_transaction(
        &self,
        charge_id: &ChargeAttemptId,
        transaction_id: &str,
        raw_status: &str,
        now_ms: i64,
    ) -> StoreResult<()> {
        let txn = self.begin().await?;
        charge_attempt::Entity::update_many()
            .col_expr(
                charge_attempt::Column::ProcessorTransactionId,
                transaction_id.into(),
            )
            .col_expr(charge_attempt::Column::ProcessorStatus, raw_status.into())
            .col_expr(charge_attempt::Column::UpdatedAt, now_ms.into())
            .filter(charge_attempt::Column::Id.eq(charge_id))
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
            .exec(txn.conn())
            .await?;
        txn.commit().await
    }

    /// Forgets the transaction id noted on a still-pending charge, only while it is
    /// `transaction_id`: the processor answered that it holds no such transaction and none
    /// under the charge's reference (`Charger::recheck`).
    pub async fn forget_processor_transaction(
        &self,
        charge_id: &ChargeAttemptId,
        transaction_id: &str,
    ) -> StoreResult<()> {
        let txn = self.begin().await?;
        charge_attempt::Entity::update_many()
            .col_expr(
                charge_attempt::Column::ProcessorTransactionId,
                Option::<String>::None.into(),
            )
            .filter(charge_attempt::Column::Id.eq(charge_id))
            .filter(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
            .filter(charge_attempt::Column::ProcessorTransactionId.eq(transaction_id))
            .exec(txn.conn())
            .await?;
        txn.commit().await
    }

    /// Applies a final outcome exactly once (see the module doc).
    pub async fn settle_charge(
        &self,
        charge_id: &ChargeAttemptId,
        raw_status: &str,
        message: Option<&str>,
        transaction_id: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<Option<Settled>> {
        let txn = self.begin().await?;
        let settled = settle_charge_in(
            txn.conn(),
            self.issuing,
            charge_id,
            raw_status,
            message,
            transaction_id,
            now_ms,
        )
        .await?;
        if let Some(settled) = &settled {
            txn.touch(settled.touched.iter().cloned());
        }
        txn.commit().await?;
        Ok(settled)
    }

    /// Whether a processor event with this checksum has already been applied.
    pub async fn processor_event_seen(&self, checksum: &str) -> StoreResult<bool> {
        Ok(processor_event::Entity::find_by_id(checksum)
            .one(self.conn())
            .await?
            .is_some())
    }

    /// Whether a processor event with this checksum has already been applied, and the charge of
    /// `account` that `reference` names: the ingress's two questions about an event, asked in
    /// one statement (one round trip for every event of a burst).
    pub async fn event_seen_and_charge(
        &self,
        checksum: &str,
        account: &AccountId,
        reference: &str,
    ) -> StoreResult<(bool, Option<ChargeAttempt>)> {
        use sea_orm::FromQueryResult;
        let conn = self.conn();
        let row = conn
            .query_one(&seen_and_charge(checksum, reference))
            .await?
            .ok_or_else(|| StoreError::Db(sea_orm::DbErr::RecordNotFound("one row".into())))?;
        let seen: bool = row.try_get("", "seen")?;
        let charge = charge_attempt::Model::from_query_result_optional(&row, "")?
            .filter(|charge| charge.account_id == *account);
        Ok((seen, charge))
    }

    /// Records a processor event whose effect is applied (or that has none), in a unit of its
    /// own; false when its checksum was already recorded.
    pub async fn record_processor_event(&self, event: ProcessorEvent) -> StoreResult<bool> {
        let txn = self.begin().await?;
        let first = record_processor_event_in(txn.conn(), event).await?;
        txn.commit().await?;
        Ok(first)
    }

    pub async fn count_processor_events(&self, account: &AccountId) -> StoreResult<u64> {
        use sea_orm::PaginatorTrait;
        Ok(processor_event::Entity::scoped(account)
            .count(self.conn())
            .await?)
    }
}

/// Inserts the event unless its checksum is already there; true when inserted.
pub(crate) async fn record_processor_event_in<C: ConnectionTrait>(
    conn: &C,
    event: ProcessorEvent,
) -> StoreResult<bool> {
    let Some(insert) = insert_processor_events(conn.get_database_backend(), vec![event]) else {
        return Ok(false);
    };
    Ok(conn.execute_raw(insert).await?.rows_affected() == 1)
}

/// The statement inserting the events whose checksums are not there yet; `None` for none.
pub(crate) fn insert_processor_events(
    backend: sea_orm::DbBackend,
    events: Vec<ProcessorEvent>,
) -> Option<sea_orm::Statement> {
    use sea_orm::QueryTrait;
    use sea_orm::sea_query::OnConflict;
    if events.is_empty() {
        return None;
    }
    Some(
        processor_event::Entity::insert_many(
            events
                .into_iter()
                .map(|event| event.into_active_model().reset_all()),
        )
        .on_conflict(
            OnConflict::column(processor_event::Column::Checksum)
                .do_nothing()
                .to_owned(),
        )
        .build(backend),
    )
}

pub(crate) async fn begin_charge_in<C: ConnectionTrait>(
    conn: &C,
    new: NewCharge,
) -> Result<ChargeAttempt, BeginChargeError> {
    // The reservation comes first: on SQLite it takes the write lock at once, so the
    // transaction never has to upgrade a read lock.
    let reserved = account::Entity::update_many()
        .col_expr(
            account::Column::AvailableCents,
            Expr::col(account::Column::AvailableCents).sub(new.fee_cents),
        )
        .col_expr(
            account::Column::ReservedCents,
            Expr::col(account::Column::ReservedCents).add(new.fee_cents),
        )
        .filter(account::Column::Id.eq(&new.account))
        .filter(account::Column::AvailableCents.gte(new.fee_cents))
        .exec(conn)
        .await
        .map_err(StoreError::from)?;
    if reserved.rows_affected == 0 {
        return Err(BeginChargeError::InsufficientBalance);
    }
    let charge = attempt_of(new).into_active_model().reset_all();
    match charge.insert(conn).await.map_err(StoreError::from) {
        Ok(charge) => Ok(charge),
        Err(err) if err.is_unique_violation() => Err(BeginChargeError::PeriodTaken),
        Err(err) => Err(err.into()),
    }
}

/// The reason code a charge settled to `status` with the processor's `message` keeps: a
/// declined one's reason (`Decline::read`), none for any other.
pub fn decline_code(status: ChargeStatus, message: Option<&str>) -> Option<Decline> {
    (status == ChargeStatus::Declined).then(|| Decline::read(message))
}

/// The pending attempt `new` begins, as it is inserted.
pub(super) fn attempt_of(new: NewCharge) -> ChargeAttempt {
    let id = ChargeAttemptId::generate();
    ChargeAttempt {
        // The reference is the attempt's own id: unique, and stable across retries of the
        // processor call, which is what lets a retry find instead of re-create.
        reference: id.to_string(),
        id,
        account_id: new.account,
        subscription_id: new.subscription_id,
        customer_id: new.customer_id,
        payment_method_id: new.payment_method_id,
        amount_cents: new.amount_cents,
        fee_cents: new.fee_cents,
        processor_transaction_id: None,
        status: ChargeStatus::Pending,
        processor_status: None,
        processor_message: None,
        purpose: new.purpose,
        period_start: new.period_start,
        invoice_lines: (!new.lines.is_empty())
            .then(|| serde_json::to_string(&new.lines).ok())
            .flatten(),
        created_at: new.now_ms,
        // Real time, not the account's test clock: the reconciler measures staleness with it.
        updated_at: chrono::Utc::now().timestamp_millis(),
        finalized_at: None,
        pending_change: new.pending_change,
        refunded_cents: 0,
        refunding_cents: 0,
        decline_code: None,
    }
}

/// The ledger row of an approved charge's fee: what left the reservation.
pub(super) fn fee_ledger_row(
    charge: &ChargeAttempt,
    now_ms: i64,
) -> super::balance::BalanceTransaction {
    super::balance::ledger_row(
        &charge.account_id,
        "fee",
        -charge.fee_cents,
        Some(charge.id.clone()),
        &format!(
            "Fee for charge {} of {} cents",
            charge.id, charge.amount_cents
        ),
        now_ms,
    )
}

pub(crate) async fn settle_charge_in<C: ConnectionTrait>(
    conn: &C,
    issuing: super::Issuing,
    charge_id: &ChargeAttemptId,
    raw_status: &str,
    message: Option<&str>,
    transaction_id: Option<&str>,
    now_ms: i64,
) -> StoreResult<Option<Settled>> {
    let Some(status) = final_status(raw_status) else {
        return Ok(None);
    };
    let mut update = charge_attempt::Entity::update_many()
        .col_expr(charge_attempt::Column::Status, status.into())
        .col_expr(charge_attempt::Column::ProcessorStatus, raw_status.into())
        .col_expr(
            charge_attempt::Column::ProcessorMessage,
            message.map(str::to_owned).into(),
        )
        .col_expr(
            charge_attempt::Column::DeclineCode,
            decline_code(status, message).into(),
        )
        .col_expr(charge_attempt::Column::UpdatedAt, now_ms.into())
        .col_expr(charge_attempt::Column::FinalizedAt, Some(now_ms).into());
    if let Some(transaction_id) = transaction_id {
        update = update.col_expr(
            charge_attempt::Column::ProcessorTransactionId,
            transaction_id.into(),
        );
    }
    // A report naming another transaction than the one stored (noted from the post's answer
    // or an earlier report, by whichever node) is not about this charge's money: decided
    // here, against the row, never against a copy a node keeps.
    if let Some(transaction_id) = transaction_id {
        update = update.filter(
            sea_orm::Condition::any()
                .add(charge_attempt::Column::ProcessorTransactionId.is_null())
                .add(charge_attempt::Column::ProcessorTransactionId.eq(transaction_id)),
        );
    }
    // RETURNING: the one caller whose UPDATE matched gets the settled row in the same
    // statement; anyone else reads what is stored.
    let applied = update
        .filter(charge_attempt::Column::Id.eq(charge_id))
        .filter(charge_attempt::Column::Status.eq(ChargeStatus::Pending))
        .exec_with_returning(conn)
        .await?;
    let Some(charge) = applied.into_iter().next() else {
        let Some(stored) = charge_attempt::Entity::find_by_id(charge_id.clone())
            .one(conn)
            .await?
        else {
            return Ok(None);
        };
        if let (Some(reported), Some(known)) = (transaction_id, &stored.processor_transaction_id)
            && stored.is(ChargeStatus::Pending)
            && known != reported
        {
            // Moves nothing; kept for operators, as the ingress keeps a mismatch it sees.
            let report = Report {
                kind: "mismatch",
                reported_status: Some(raw_status.to_owned()),
                transaction_id: Some(reported.to_owned()),
                amount_cents: None,
                currency: None,
                event_checksum: None,
                detail: format!(
                    "the processor reported transaction {reported} for a charge whose transaction is {known}"
                ),
            };
            insert_conflict_in(conn, &stored, report, now_ms).await?;
            return Ok(Some(Settled {
                charge: stored,
                newly: false,
                conflict: true,
                touched: Vec::new(),
            }));
        }
        // A processor's report about the transaction (it names one) that contradicts what is
        // recorded moves nothing, and is kept for operators: never dropped silently.
        let conflict = transaction_id.is_some() && contradicts(stored.status, raw_status);
        if conflict {
            let report = Report {
                kind: "outcome",
                reported_status: Some(raw_status.to_owned()),
                transaction_id: transaction_id.map(str::to_owned),
                amount_cents: None,
                currency: None,
                event_checksum: None,
                detail: format!(
                    "the processor reported {raw_status} for a charge recorded {}",
                    stored.status
                ),
            };
            insert_conflict_in(conn, &stored, report, now_ms).await?;
        }
        return Ok(Some(Settled {
            charge: stored,
            newly: false,
            touched: Vec::new(),
            conflict,
        }));
    };
    // Counted when applied; a transaction that then rolls back (a database error) would be
    // counted once too often, which an operator's dashboard can live with.
    metrics::counter!("charge_outcomes_total", "outcome" => status.as_str()).increment(1);
    let account = &charge.account_id;
    let fee = charge.fee_cents;
    let counters = account::Entity::update_many()
        .col_expr(
            account::Column::ReservedCents,
            Expr::col(account::Column::ReservedCents).sub(fee),
        )
        .filter(account::Column::Id.eq(account));
    let mut touched = Vec::new();
    if status == ChargeStatus::Approved {
        counters.exec(conn).await?;
        let row = fee_ledger_row(&charge, now_ms);
        super::balance::insert_ledger_row(conn, row).await?;
        // Its invoice, in the same transaction (`store::invoices`); a checkout's, once the
        // same transaction has made its customer and subscription (`StoreTxn::issue_invoice`
        // from `checkout_settlement::finish`).
        if charge.purpose != ChargePurpose::Checkout && issuing == super::Issuing::Issued {
            touched = super::invoices::issue_with_events(conn, &charge).await?;
        }
    } else {
        counters
            .col_expr(
                account::Column::AvailableCents,
                Expr::col(account::Column::AvailableCents).add(fee),
            )
            .exec(conn)
            .await?;
    }
    Ok(Some(Settled {
        charge,
        newly: true,
        conflict: false,
        touched,
    }))
}

/// One row: whether the processor event `checksum` is recorded (`seen`) and the columns of the
/// charge `reference` names, NULL when none does. The charge is found by its reference alone
/// (unique) and its account checked by the caller: with the account in the statement,
/// PostgreSQL may plan (from statistics taken before a burst of charges) a walk of the
/// account's `(account_id, id)` index filtered by reference, every charge of the account
/// read for each event.
pub fn seen_and_charge(checksum: &str, reference: &str) -> sea_orm::sea_query::SelectStatement {
    use sea_orm::Iterable;
    use sea_orm::sea_query::{Alias, JoinType, Query};
    let seen = Query::select()
        .expr(Expr::cust("1"))
        .from(processor_event::Entity)
        .and_where(Expr::col(processor_event::Column::Checksum).eq(checksum))
        .to_owned();
    let one = Query::select()
        .expr_as(Expr::cust("1"), Alias::new("one"))
        .to_owned();
    let mut select = Query::select();
    select
        .expr_as(Expr::exists(seen), Alias::new("seen"))
        .from_subquery(one, Alias::new("one"))
        .join(
            JoinType::LeftJoin,
            charge_attempt::Entity,
            Expr::col((charge_attempt::Entity, charge_attempt::Column::Reference)).eq(reference),
        );
    for column in charge_attempt::Column::iter() {
        select.column((charge_attempt::Entity, column));
    }
    select
}
