//! The OpenAPI document is generated from the code, covers every route, and says what the
//! server does: the errors every authenticated operation can answer, the bounds of `limit`,
//! the methods a path has. (schemathesis checks the rest against a running server:
//! `.ci/schemathesis`.)

use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    openapi_covers_every_route,
    every_list_documents_the_limits_it_enforces,
    delete_on_a_plan_is_a_405_that_is_no_operation,
    whole_number_floats_are_integers_and_arrays_are_no_bodies,
);

/// Every route of the service, as (method, path template).
const ROUTES: &[(&str, &str)] = &[
    ("post", "/admin/accounts"),
    ("patch", "/admin/accounts/{id}"),
    ("post", "/admin/accounts/{id}/balance/top-ups"),
    ("get", "/admin/actors"),
    ("get", "/admin/charge-conflicts"),
    ("get", "/admin/cluster"),
    ("delete", "/admin/plans/{id}"),
    ("get", "/v1/account"),
    ("get", "/v1/balance"),
    ("get", "/v1/balance/transactions"),
    ("post", "/v1/plans"),
    ("get", "/v1/plans"),
    ("get", "/v1/plans/{id}"),
    ("patch", "/v1/plans/{id}"),
    ("post", "/v1/addons"),
    ("get", "/v1/addons"),
    ("get", "/v1/addons/{id}"),
    ("patch", "/v1/addons/{id}"),
    ("post", "/v1/customers"),
    ("get", "/v1/customers"),
    ("get", "/v1/customers/{id}"),
    ("post", "/v1/customers/{id}/payment-methods"),
    ("get", "/v1/customers/{id}/payment-methods"),
    ("get", "/v1/charges"),
    ("get", "/v1/charges/{id}"),
    ("post", "/v1/charges/{id}/refunds"),
    ("get", "/v1/charges/{id}/refunds"),
    ("get", "/v1/refunds/{id}"),
    ("post", "/webhooks/processor/{developer_id}"),
    ("post", "/v1/subscriptions"),
    ("get", "/v1/subscriptions"),
    ("get", "/v1/subscriptions/{id}"),
    ("patch", "/v1/subscriptions/{id}"),
    ("post", "/v1/subscriptions/{id}/cancel"),
    ("post", "/v1/subscriptions/{id}/pause"),
    ("post", "/v1/subscriptions/{id}/resume"),
    ("post", "/v1/subscriptions/{id}/change-plan"),
    ("post", "/v1/subscriptions/{id}/change-plan/preview"),
    ("post", "/v1/subscriptions/{id}/charge-now"),
    ("post", "/v1/subscriptions/{id}/addons"),
    ("get", "/v1/subscriptions/{id}/addons"),
    ("delete", "/v1/subscriptions/{id}/addons/{addon_id}"),
    ("post", "/v1/checkout-sessions"),
    ("get", "/v1/checkout-sessions"),
    ("get", "/v1/checkout-sessions/{id}"),
    ("get", "/v1/checkout-sessions/{id}/status"),
    ("post", "/checkout/{id}/complete"),
    ("get", "/v1/events"),
    ("get", "/v1/events/{id}"),
    ("post", "/v1/events/{id}/redeliver"),
    ("post", "/v1/webhook-endpoints"),
    ("get", "/v1/webhook-endpoints"),
    ("get", "/v1/webhook-endpoints/{id}"),
    ("patch", "/v1/webhook-endpoints/{id}"),
    ("delete", "/v1/webhook-endpoints/{id}"),
    ("get", "/v1/webhook-endpoints/{id}/deliveries"),
    ("get", "/v1/test-helpers/clock"),
    ("post", "/v1/test-helpers/clock/advance"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
];

async fn openapi_covers_every_route(app: TestApp) {
    let response = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .expect("send");
    let (status, doc) = read(response).await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    // OpenAPI requires a description on every response; generated clients refuse without.
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            for (status, response) in operation["responses"].as_object().into_iter().flatten() {
                assert!(
                    response["description"]
                        .as_str()
                        .is_some_and(|d| !d.trim().is_empty()),
                    "{method} {path} {status} has no description"
                );
            }
        }
    }
    for (method, path) in ROUTES {
        let operation = &doc["paths"][path][method];
        assert!(
            operation.is_object(),
            "{method} {path} missing from /openapi.json"
        );
        let responses = operation["responses"].as_object().expect("responses");
        if ["/v1", "/admin", "/webhooks", "/checkout"]
            .iter()
            .any(|prefix| path.starts_with(prefix))
        {
            assert!(
                responses.keys().any(|code| code.starts_with('4')),
                "{method} {path} documents no error response"
            );
        }
        // What the authentication, rate-limit and Idempotency-Key layers answer.
        let mut layer_statuses = vec![];
        if path.starts_with("/v1") || path.starts_with("/admin") {
            layer_statuses.extend(["401", "429", "500"]);
        }
        if path.starts_with("/v1") && *method == "post" {
            layer_statuses.extend(["400", "409"]);
            let parameters = operation["parameters"].as_array().into_iter().flatten();
            assert!(
                parameters
                    .into_iter()
                    .any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header"),
                "{method} {path} does not document Idempotency-Key"
            );
        }
        for status in layer_statuses {
            assert_eq!(
                responses[status]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorBody",
                "{method} {path} {status}"
            );
        }
    }
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    // A listed object has the schema of the same object read alone.
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        if let Some(item) = name.strip_prefix("ListOut_") {
            assert_eq!(
                schema["properties"]["data"]["items"]["$ref"],
                format!("#/components/schemas/{item}"),
                "{name}"
            );
        }
    }
    let types = &doc["components"]["schemas"]["ErrorType"]["enum"];
    assert_eq!(
        types,
        &json!([
            "invalid_request",
            "authentication_error",
            "insufficient_balance",
            "processor_error",
            "rate_limit",
            "idempotency_error",
            "api_error"
        ])
    );
}

async fn document(app: &TestApp) -> Value {
    let response = app.client.get(app.url("/openapi.json")).send().await;
    let (status, doc) = read(response.expect("send")).await;
    assert_eq!(status, 200);
    doc
}

/// `limit` is documented as 1 to 100 on every list, and those are the bounds the server keeps.
async fn every_list_documents_the_limits_it_enforces(app: TestApp) {
    let doc = document(&app).await;
    let mut lists = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let parameters = item["get"]["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(limit) = parameters.iter().find(|p| p["name"] == "limit") else {
            continue;
        };
        lists += 1;
        assert_eq!(
            (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
            (&json!(1), &json!(100)),
            "{path}"
        );
    }
    assert!(lists >= 12, "{lists} lists");
    for (limit, expected) in [(0, 400), (1, 200), (100, 200), (101, 400)] {
        let response = app.get(&format!("/v1/plans?limit={limit}")).await;
        let (status, body) = read(response).await;
        assert_eq!(status, expected, "limit={limit}: {body}");
    }
}

/// Plans are deleted only from the dashboard: DELETE answers 405 naming the methods a plan has,
/// and the document has no such operation.
async fn delete_on_a_plan_is_a_405_that_is_no_operation(app: TestApp) {
    let doc = document(&app).await;
    let plan = &doc["paths"]["/v1/plans/{id}"];
    assert!(plan["get"].is_object() && plan["patch"].is_object());
    assert!(plan["delete"].is_null());
    for method in [Method::DELETE, Method::PUT, Method::OPTIONS] {
        let response = app
            .request(method.clone(), "/v1/plans/plan_0")
            .send()
            .await
            .expect("send");
        let allow = response.headers().get("allow").cloned();
        let (status, body) = read(response).await;
        assert_eq!(status, 405, "{method}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request");
        assert_eq!(allow.expect("Allow").to_str().ok(), Some("GET,HEAD,PATCH"));
    }
    let (_, body) = read(
        app.request(Method::DELETE, "/v1/plans/plan_0")
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("dashboard")
    );
}

/// JSON has one number type: `1500.0` is the integer 1500, as the document's `integer` says;
/// `1500.5` is not. A body is an object, never an array of field values.
async fn whole_number_floats_are_integers_and_arrays_are_no_bodies(app: TestApp) {
    let plan = |monthly: Value| json!({"name": "Basic", "monthly_amount_cents": monthly, "annual_amount_cents": 15000});
    let (status, created) = read(app.post("/v1/plans", plan(json!(1500.0))).await).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["monthly_amount_cents"], 1500);
    let (status, body) = read(app.post("/v1/plans", plan(json!(1500.5))).await).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "monthly_amount_cents");
    let path = format!("/v1/plans/{}", created["id"].as_str().expect("id"));
    let response = app
        .request(Method::PATCH, &path)
        .json(&json!([null, null]))
        .send()
        .await
        .expect("send");
    let (status, body) = read(response).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request");
}
