//! The plans PostgreSQL makes for the per-renewal lookups while a burst outruns the table's
//! statistics: a table that grew from nothing in the last minutes has none yet, and the
//! planner then guesses.

use crate::common::{Backend, database_url};
use billing::store::Store;
use billing::store::charges::seen_and_charge;
use billing::store::prefetch::period_charge_rows;
use sea_orm::sqlx::{AssertSqlSafe, Connection, Executor, Row, postgres::PgConnection, raw_sql};
use sea_orm::{DbBackend, QueryTrait};

/// 20,000 charges of one account inserted at once and never analysed, as in the first minutes
/// of a renewal burst: the event's lookup of its charge must still probe the reference's
/// unique index, not walk the account's charges.
#[tokio::test]
async fn an_event_finds_its_charge_by_its_reference_before_statistics_catch_up() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let store = Store::connect(&url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let mut conn = PgConnection::connect(&url).await.expect("connect");
    conn.execute(
        "SET session_replication_role = replica; \
         INSERT INTO charge_attempts (id, account_id, customer_id, payment_method_id, \
           amount_cents, fee_cents, reference, status, purpose, created_at, updated_at, \
           refunded_cents, refunding_cents) \
         SELECT 'ch_' || n, 'acct_burst', 'cus_1', 'pm_1', 5000, 100, 'ch_' || n, 'pending', \
           'subscription', n, n, 0, 0 FROM generate_series(1, 20000) AS n",
    )
    .await
    .expect("seed");
    let statement = DbBackend::Postgres.build(&seen_and_charge("checksum", "ch_19999"));
    conn.execute(raw_sql(AssertSqlSafe(format!(
        "PREPARE lookup AS {}",
        statement.sql
    ))))
    .await
    .expect("prepare");
    // The plan a pooled connection reuses once PostgreSQL settles on a generic one.
    conn.execute("SET plan_cache_mode = force_generic_plan")
        .await
        .expect("generic plans");
    let plan = conn
        .fetch_all("EXPLAIN (FORMAT TEXT) EXECUTE lookup('checksum', 'ch_19999')")
        .await
        .expect("explain")
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        plan.contains("charge_attempts_reference_key"),
        "the lookup probes the reference's unique index:\n{plan}"
    );
    // And it answers: the charge for its account, none for another.
    let ours = billing::ids::AccountId::from_stored("acct_burst".to_owned());
    let theirs = billing::ids::AccountId::from_stored("acct_other".to_owned());
    let (seen, charge) = store
        .event_seen_and_charge("checksum", &ours, "ch_19999")
        .await
        .expect("lookup");
    assert_eq!(
        (seen, charge.map(|c| c.id)),
        (false, Some("ch_19999".to_owned()))
    );
    let (seen, charge) = store
        .event_seen_and_charge("checksum", &theirs, "ch_19999")
        .await
        .expect("lookup");
    assert_eq!((seen, charge), (false, None));
}

/// A renewal batch reads its subscriptions' charges (`store::prefetch`): with 20,000 approved
/// charges of other subscriptions never analysed, at most the pending ones (charges in flight)
/// may be found by status; the approved ones come through the subscriptions' own index.
#[tokio::test]
async fn renewals_read_their_charges_through_the_subscriptions_index() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let store = Store::connect(&url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let mut conn = PgConnection::connect(&url).await.expect("connect");
    conn.execute(
        "SET session_replication_role = replica; \
         INSERT INTO charge_attempts (id, account_id, subscription_id, customer_id, \
           payment_method_id, amount_cents, fee_cents, reference, status, purpose, \
           period_start, created_at, updated_at, refunded_cents, refunding_cents) \
         SELECT 'ch_' || n, 'acct_burst', 'sub_' || n, 'cus_1', 'pm_1', 5000, 100, 'ch_' || n, \
           'approved', 'subscription', n, n, n, 0, 0 FROM generate_series(1, 20000) AS n",
    )
    .await
    .expect("seed");
    let ids: Vec<String> = (1..=3).map(|n| format!("sub_{n}")).collect();
    let statement = period_charge_rows(&ids, 0).build(DbBackend::Postgres);
    conn.execute(raw_sql(AssertSqlSafe(format!(
        "PREPARE rows AS {}",
        statement.sql
    ))))
    .await
    .expect("prepare");
    conn.execute("SET plan_cache_mode = force_generic_plan")
        .await
        .expect("generic plans");
    let plan = conn
        .fetch_all("EXPLAIN (FORMAT TEXT) EXECUTE rows('sub_1', 'sub_2', 'sub_3', 'pending', 0)")
        .await
        .expect("explain")
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        plan.matches("idx_charge_attempts_status").count() <= 1,
        "only the pending charges may be found by status:\n{plan}"
    );
}
