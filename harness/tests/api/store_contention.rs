//! Issue 32, item 4: writes that contend for the database. On PostgreSQL a unit of work that
//! holds a connection of the pool never waits for a second one: checkout settlements running
//! together on a pool of two connections all finish (each used to read the account from the
//! pool inside its own transaction, so two of them held both connections and waited for a
//! third for ever).

use crate::checkout::{new_session, plan};
use crate::checkout_payment::pay;
use crate::common::{TestApp, assert_invariants};
use serde_json::json;
use std::time::Duration;

crate::db_tests!(config = crate::store_contention::small_pool;
    checkout_settlements_together_on_a_pool_of_two_all_complete,
);

pub(crate) fn small_pool(config: &mut billing::config::Config) {
    config.database_pool_size = Some(2);
}

async fn checkout_settlements_together_on_a_pool_of_two_all_complete(app: TestApp) {
    let plan = plan(&app, true).await;
    let mut sessions = Vec::new();
    for _ in 0..6 {
        let session = new_session(&app, &plan, json!({})).await;
        sessions.push(session["id"].as_str().expect("id").to_owned());
    }
    let payments = sessions.iter().map(|id| pay(&app, id, "4242424242424242"));
    let paid = tokio::time::timeout(Duration::from_secs(25), futures::future::join_all(payments))
        .await
        .expect("the payments hang: settlements wait for connections their pool does not have");
    for (status, out) in paid {
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["status"], "complete", "{out}");
    }
    assert_invariants(&app).await;
}
