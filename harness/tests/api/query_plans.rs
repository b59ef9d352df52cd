//! The plans PostgreSQL makes for the per-renewal lookups while a burst outruns the table's
//! statistics: a table that grew from nothing in the last minutes has none yet, and the
//! planner then guesses.

use crate::common::{Backend, database_url};
use billing::domain::charge_status::ChargeStatus;
use billing::ids::AccountId;
use billing::store::Store;
use billing::store::batch::settle_pending;
use billing::store::charges::seen_and_charge;
use billing::store::prefetch::period_charge_rows;
use sea_orm::sea_query::PostgresQueryBuilder;
use sea_orm::sqlx::{AssertSqlSafe, Connection, Executor, Row, postgres::PgConnection, raw_sql};
use sea_orm::{DbBackend, Statement};

/// A migrated schema whose `charge_attempts` holds 20,000 charges of one account (`ch_N`, of
/// `sub_N`, in `status`), inserted at once and never analysed; and a connection to it.
async fn unanalysed_charges(status: &str) -> Option<(Store, PgConnection)> {
    let url = database_url(Backend::Postgres).await?;
    let store = Store::connect(&url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let mut conn = PgConnection::connect(&url).await.expect("connect");
    conn.execute(raw_sql(AssertSqlSafe(format!(
        "SET session_replication_role = replica; \
         INSERT INTO charge_attempts (id, account_id, subscription_id, customer_id, \
           payment_method_id, amount_cents, fee_cents, reference, status, purpose, \
           period_start, created_at, updated_at, refunded_cents, refunding_cents) \
         SELECT 'ch_' || n, 'acct_burst', 'sub_' || n, 'cus_1', 'pm_1', 5000, 100, 'ch_' || n, \
           '{status}', 'renewal', n, n, n, 0, 0 FROM generate_series(1, 20000) AS n"
    ))))
    .await
    .expect("seed");
    Some((store, conn))
}

/// The generic plan of `statement` run with `arguments` (SQL literals): the plan a pooled
/// connection reuses once PostgreSQL settles on one.
async fn generic_plan(conn: &mut PgConnection, statement: Statement, arguments: &str) -> String {
    conn.execute(raw_sql(AssertSqlSafe(format!(
        "DEALLOCATE ALL; PREPARE lookup AS {}; SET plan_cache_mode = force_generic_plan",
        statement.sql
    ))))
    .await
    .expect("prepare");
    explain(conn, &format!("EXECUTE lookup({arguments})")).await
}

/// PostgreSQL's plan of `sql`, which must touch `charge_attempts`.
async fn explain(conn: &mut PgConnection, sql: &str) -> String {
    let plan = conn
        .fetch_all(raw_sql(AssertSqlSafe(format!(
            "EXPLAIN (FORMAT TEXT) {sql}"
        ))))
        .await
        .expect("explain")
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        plan.contains("on charge_attempts"),
        "a plan of the statement:\n{plan}"
    );
    plan
}

/// An event's lookup of its charge (by reference, with whether the event was seen) probes the
/// reference's unique index, not a walk of the account's charges; and it answers.
#[tokio::test]
async fn an_event_finds_its_charge_by_its_reference_before_statistics_catch_up() {
    let Some((store, mut conn)) = unanalysed_charges("pending").await else {
        return;
    };
    let statement = DbBackend::Postgres.build(&seen_and_charge("checksum", "ch_19999"));
    let plan = generic_plan(&mut conn, statement, "'checksum', 'ch_19999'").await;
    assert!(
        plan.contains("charge_attempts_reference_key"),
        "the lookup probes the reference's unique index:\n{plan}"
    );
    // The charge for its account, none for another.
    let ours = AccountId::parse("acct_burst").expect("an account's id");
    let theirs = AccountId::parse("acct_other").expect("an account's id");
    let (seen, charge) = store
        .event_seen_and_charge("checksum", &ours, "ch_19999")
        .await
        .expect("lookup");
    assert_eq!(
        (seen, charge.map(|c| c.id.into_string())),
        (false, Some("ch_19999".to_owned()))
    );
    let (seen, charge) = store
        .event_seen_and_charge("checksum", &theirs, "ch_19999")
        .await
        .expect("lookup");
    assert_eq!((seen, charge), (false, None));
}

/// A renewal batch reads its subscriptions' charges (`store::prefetch`): with 20,000 approved
/// charges of other subscriptions, at most the pending ones (charges in flight) may be found
/// by status; the approved ones come through the subscriptions' own index.
#[tokio::test]
async fn renewals_read_their_charges_through_the_subscriptions_index() {
    let Some((_store, mut conn)) = unanalysed_charges("approved").await else {
        return;
    };
    let ids: Vec<billing::ids::SubscriptionId> = (1..=3)
        .map(|n| billing::ids::SubscriptionId::parse(&format!("sub_{n}")).expect("an id"))
        .collect();
    let statement = sea_orm::QueryTrait::build(&period_charge_rows(&ids, 0), DbBackend::Postgres);
    let plan = generic_plan(
        &mut conn,
        statement,
        "'sub_1', 'sub_2', 'sub_3', 'pending', 0",
    )
    .await;
    assert!(
        plan.matches("idx_charge_attempts_status").count() <= 1,
        "only the pending charges may be found by status:\n{plan}"
    );
}

/// A batch of outcomes settles its charges found by their keys: the pending check only
/// filters them. Answered from the status index instead, a settlement would visit every entry
/// of that index whose charge was pending when written, each charge settled since included
/// until vacuum removes them: during a burst, every charge of the burst so far.
#[tokio::test]
async fn a_batch_of_outcomes_finds_its_charges_by_their_keys() {
    let Some((store, mut conn)) = unanalysed_charges("pending").await else {
        return;
    };
    let mut charges = Vec::new();
    for n in 1..=40 {
        let mut charge = store
            .charge_by_id(
                &billing::ids::ChargeAttemptId::parse(&format!("ch_{n}")).expect("a charge's id"),
            )
            .await
            .expect("read")
            .expect("a charge");
        charge.status = ChargeStatus::Approved;
        charge.processor_status = Some("APPROVED".to_owned());
        charge.finalized_at = Some(30_000);
        charges.push(charge);
    }
    let settling: Vec<_> = charges.iter().collect();
    let sql = settle_pending(&settling).to_string(PostgresQueryBuilder);
    let plan = explain(&mut conn, &sql).await;
    assert!(
        plan.contains("charge_attempts_pkey") && !plan.contains("idx_charge_attempts_status"),
        "the charges are found by their keys:\n{plan}"
    );
    // And the statement settles exactly the charges still pending.
    conn.execute(raw_sql(AssertSqlSafe(
        "UPDATE charge_attempts SET status = 'declined' WHERE id = 'ch_40'".to_owned(),
    )))
    .await
    .expect("settle one elsewhere");
    let settled = conn
        .execute(raw_sql(AssertSqlSafe(sql)))
        .await
        .expect("settle");
    assert_eq!(settled.rows_affected(), 39);
    let declined = store
        .charge_by_id(&billing::ids::ChargeAttemptId::parse("ch_40").expect("a charge\'s id"))
        .await
        .expect("read");
    assert_eq!(declined.map(|c| c.status), Some(ChargeStatus::Declined));
}
