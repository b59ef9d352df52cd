//! Statuses, cycles and charge purposes are closed vocabularies in the database (migration
//! 000016): each column takes every value of the service's own and refuses any other, on both
//! databases, so no reader ever meets a value it must guess about.

use crate::common::{TestApp, read};
use crate::refunds::charges;
use crate::subscriptions::{shop, subscribe};
use billing::store::Store;
use migration::m20261126_000016_closed_vocabularies::VOCABULARIES;
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::json;

crate::db_tests!(each_closed_column_takes_its_values_and_refuses_any_other);

/// Sets `table.column` to `value` on every row in a transaction rolled back: whether the
/// database accepted it.
async fn accepted(store: &Store, table: &str, column: &str, value: &str) -> bool {
    let (_, writer) = store.raw_connections();
    let txn = writer.begin().await.expect("begin");
    let written = txn
        .execute_unprepared(&format!("UPDATE {table} SET {column} = '{value}'"))
        .await;
    txn.rollback().await.expect("rollback");
    match written {
        Ok(result) => {
            assert!(result.rows_affected() > 0, "{table} has a row to test");
            true
        }
        Err(err) => {
            assert!(
                err.to_string().contains("_known"),
                "{table}.{column}: {err}"
            );
            false
        }
    }
}

async fn each_closed_column_takes_its_values_and_refuses_any_other(app: TestApp) {
    // A subscription, its first charge and a refund of it: a row in each closed table.
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let (list, _) = charges(
        &app,
        &format!("subscription_id={}", sub["id"].as_str().expect("id")),
    )
    .await;
    let charge = list[0]["id"].as_str().expect("charge id");
    let (status, refund) = read(
        app.post(
            &format!("/v1/charges/{charge}/refunds"),
            json!({"amount_cents": 100}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{refund}");

    let store = Store::connect(&app.database_url).await.expect("connect");
    for (table, column, values) in VOCABULARIES {
        for value in values {
            assert!(
                accepted(&store, table, column, value).await,
                "{table}.{column} refused its own value {value}"
            );
        }
        for stranger in ["", "Active", "cancelled", "unknown"] {
            assert!(
                !accepted(&store, table, column, stranger).await,
                "{table}.{column} took {stranger:?}"
            );
        }
    }
}
