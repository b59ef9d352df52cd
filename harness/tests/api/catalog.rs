//! CONTRACT §4: plans, add-ons and customers.

use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::json;

crate::db_tests!(
    plans_are_created_listed_and_patched,
    addons_share_the_plan_shape,
    customers_round_trip
);

async fn plans_are_created_listed_and_patched(app: TestApp) {
    let plan = app.create_plan("Pro", 4_990_000, 49_900_000).await;
    let id = plan["id"].as_str().expect("id");
    assert!(id.starts_with("plan_"));
    assert_eq!(plan["active"], true);
    assert_eq!(plan["metadata"], serde_json::Value::Null);
    assert!(
        plan["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );

    let patch = app
        .request(Method::PATCH, &format!("/v1/plans/{id}"))
        .json(&json!({"name": "Pro 2", "active": false}));
    let (status, patched) = read(patch.send().await.expect("send")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (patched["name"].clone(), patched["active"].clone()),
        (json!("Pro 2"), json!(false))
    );
    assert_eq!(patched["monthly_amount_cents"], 4_990_000);

    let bad_patch = app
        .request(Method::PATCH, &format!("/v1/plans/{id}"))
        .json(&json!({"monthly_amount_cents": 1}));
    let (status, body) = read(bad_patch.send().await.expect("send")).await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (400, json!("monthly_amount_cents"))
    );

    let (status, _) = read(app.get("/v1/plans/plan_missing").await).await;
    assert_eq!(status, 404);
}

async fn addons_share_the_plan_shape(app: TestApp) {
    let (status, addon) = read(app.post("/v1/addons", json!({"name": "Extra seat", "monthly_amount_cents": 500_000, "annual_amount_cents": 5_000_000})).await).await;
    assert_eq!(status, 201);
    let id = addon["id"].as_str().expect("id");
    assert!(id.starts_with("addon_"));
    let (_, list) = read(app.get("/v1/addons").await).await;
    assert_eq!(list["data"][0]["id"], id);
    // A plan id is not an add-on id.
    let plan = app.create_plan("P", 1, 1).await;
    let (status, _) = read(
        app.get(&format!("/v1/addons/{}", plan["id"].as_str().expect("id")))
            .await,
    )
    .await;
    assert_eq!(status, 404);
    let patch = app
        .request(Method::PATCH, &format!("/v1/addons/{id}"))
        .json(&json!({"active": false}));
    assert_eq!(
        read(patch.send().await.expect("send")).await.1["active"],
        false
    );
}

async fn customers_round_trip(app: TestApp) {
    let (status, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": "ana@example.co", "name": "Ana", "metadata": {"crm": "42"}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    let id = customer["id"].as_str().expect("id");
    assert!(id.starts_with("cus_"));
    let (status, fetched) = read(app.get(&format!("/v1/customers/{id}")).await).await;
    assert_eq!(status, 200);
    assert_eq!(fetched, customer);
}
