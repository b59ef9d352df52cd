//! The multi-row statements a batch is made of: inserts, the subscriptions' conditional upsert,
//! the charges' settlement by CASE on their ids, events with their deliveries, and running a
//! step's statements together.

use super::super::StoreResult;
use super::super::charges::ChargeAttempt;
use super::super::entities::{charge_attempt, subscription};
use super::super::notice_sink::Known;
use super::super::subscriptions::{Event, Subscription};
use super::super::txn::StoreTxn;
use sea_orm::sea_query::{CaseStatement, Expr, ExprTrait, OnConflict, Query};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, Iterable,
    QueryTrait,
};

/// The statements inserting `rows` with what the fan-out's sinks add for them
/// (`store::fanout`: deliveries, notices), told what the batch knows of them (`known`); the
/// endpoints are noted on `txn`, to be told once it commits.
pub(super) async fn event_statements(
    txn: &StoreTxn,
    rows: Vec<&Event>,
    known: &Known<'_>,
) -> StoreResult<Vec<sea_orm::Statement>> {
    let (statements, touched) = super::super::fanout::statements(txn.conn(), &rows, known).await?;
    txn.touch(touched);
    Ok(statements)
}

/// One column's values for a multi-row UPDATE of charge attempts: a CASE branch per item.
pub(super) fn charge_case<'a, T: 'a>(
    items: impl IntoIterator<Item = &'a T>,
    charge_id: fn(&T) -> &str,
    value: fn(&T) -> sea_orm::Value,
) -> CaseStatement {
    items.into_iter().fold(CaseStatement::new(), |case, item| {
        case.case(
            Expr::col(charge_attempt::Column::Id).eq(charge_id(item)),
            Expr::val(value(item)),
        )
    })
}

/// The settlement of `charges` (each as it is to be stored), of those still pending only:
/// whichever writer moves a charge out of pending applies its outcome, once
/// (`settle_charge_in` alone does the same). It changes one row per charge still pending.
pub fn settle_pending(charges: &[&ChargeAttempt]) -> sea_orm::sea_query::UpdateStatement {
    let by_id = |value: fn(&ChargeAttempt) -> sea_orm::Value| {
        charge_case(charges.iter().copied(), |charge| charge.id.as_str(), value)
    };
    let mut update = Query::update();
    update
        .table(charge_attempt::Entity)
        .value(charge_attempt::Column::Status, by_id(|c| c.status.into()))
        .value(
            charge_attempt::Column::ProcessorStatus,
            by_id(|c| c.processor_status.clone().into()),
        )
        .value(
            charge_attempt::Column::ProcessorMessage,
            by_id(|c| c.processor_message.clone().into()),
        )
        .value(
            charge_attempt::Column::DeclineCode,
            by_id(|c| c.decline_code.into()),
        )
        .value(
            charge_attempt::Column::ProcessorTransactionId,
            reported_transaction(charges),
        )
        .value(
            charge_attempt::Column::UpdatedAt,
            by_id(|c| c.updated_at.into()),
        )
        .value(
            charge_attempt::Column::FinalizedAt,
            by_id(|c| c.finalized_at.into()),
        )
        .and_where(charge_attempt::Column::Id.is_in(charges.iter().map(|c| &c.id)))
        .and_where(still_pending())
        .and_where(same_transaction(charges));
    update
}

/// "The charge's stored transaction, if it has one, is the one reported": decided against the
/// row, whatever a caller's copy of it says, so that a report naming another transaction than
/// the one noted (by any node) settles nothing here, and alone is kept as a conflict
/// (`settle_charge_in`). A charge settled without a transaction id keeps the stored one.
pub(super) fn same_transaction(charges: &[&ChargeAttempt]) -> Expr {
    let stored = || Expr::col(charge_attempt::Column::ProcessorTransactionId);
    stored()
        .is_null()
        .or(stored().eq(reported_transaction(charges)))
}

/// Each charge's reported transaction id, or the stored one where none was reported (never
/// NULL over a noted one).
pub(super) fn reported_transaction(charges: &[&ChargeAttempt]) -> Expr {
    let stored = Expr::col(charge_attempt::Column::ProcessorTransactionId);
    let mut reported = CaseStatement::new();
    let mut any = false;
    for charge in charges {
        if let Some(transaction_id) = &charge.processor_transaction_id {
            reported = reported.case(
                Expr::col(charge_attempt::Column::Id).eq(&charge.id),
                Expr::val(transaction_id.as_str()),
            );
            any = true;
        }
    }
    // A CASE needs a WHEN: none reported, the stored one stays.
    if !any {
        return stored;
    }
    reported.finally(stored).into()
}

/// "The charge is still pending", written so that no plan answers it from the status index:
/// the charges are found by their keys and this only filters them. Until vacuum runs, that
/// index keeps an entry for the pending version of every charge settled since, and a
/// PostgreSQL bitmap scan of it visits every one of them: during a burst each settlement
/// read the pages of every charge of the burst so far (2.4 of its 3.4 ms, 20,000 charges into one).
pub(super) fn still_pending() -> Expr {
    Expr::cust(r#""charge_attempts"."status" || '' = 'pending'"#)
}

/// The conditional upsert saving `rows` (each with its `version` as read), and the rows as
/// it saves them. It changes one row for each row still at the version read, and none for a
/// row changed since: the caller counts.
pub(super) fn upsert_all(
    backend: sea_orm::DbBackend,
    rows: Vec<Subscription>,
) -> (sea_orm::Statement, Vec<Subscription>) {
    let rows: Vec<Subscription> = rows
        .into_iter()
        .map(|mut row| {
            row.version += 1;
            row
        })
        .collect();
    // Every row exists (it was read), so the upsert only ever updates, and only a row whose
    // version is still the one read: `excluded.version` is that plus one.
    let upsert = subscription::Entity::insert_many(
        rows.iter()
            .map(|row| row.clone().into_active_model().reset_all()),
    )
    .on_conflict(
        OnConflict::column(subscription::Column::Id)
            .update_columns(
                subscription::Column::iter().filter(|c| !matches!(c, subscription::Column::Id)),
            )
            .action_and_where(
                Expr::col((subscription::Entity, subscription::Column::Version))
                    .eq(Expr::cust("excluded.version - 1")),
            )
            .to_owned(),
    )
    .into_query();
    (backend.build(&upsert), rows)
}

/// Runs `statements` in order; the rows they changed, in all. On SQLite in one round trip to
/// the connection's thread: the statements joined into one string, their values in order
/// (SQLite binds each statement's `?` from where the one before stopped), so a batch's writes
/// cost one hand-off, not one per statement. Elsewhere one by one (PostgreSQL prepares one
/// statement at a time).
pub(super) async fn execute_together<C: ConnectionTrait>(
    conn: &C,
    statements: Vec<sea_orm::Statement>,
) -> StoreResult<u64> {
    let backend = conn.get_database_backend();
    if backend != sea_orm::DbBackend::Sqlite {
        let mut changed = 0;
        for statement in statements {
            changed += conn.execute_raw(statement).await?.rows_affected();
        }
        return Ok(changed);
    }
    let mut sql = String::new();
    let mut values = Vec::new();
    for statement in statements {
        sql.push_str(&statement.sql);
        sql.push_str(";\n");
        values.extend(statement.values.map(|v| v.0).unwrap_or_default());
    }
    if sql.is_empty() {
        return Ok(0);
    }
    let together = sea_orm::Statement::from_sql_and_values(backend, sql, values);
    Ok(conn.execute_raw(together).await?.rows_affected())
}
