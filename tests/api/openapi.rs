//! The OpenAPI document is generated from the code and covers every route.

use crate::common::{TestApp, read};

crate::db_tests!(openapi_covers_every_route);

/// Every route of the service, as (method, path template).
const ROUTES: &[(&str, &str)] = &[
    ("post", "/admin/accounts"),
    ("patch", "/admin/accounts/{id}"),
    ("post", "/admin/accounts/{id}/balance/top-ups"),
    ("get", "/admin/actors"),
    ("get", "/admin/charge-conflicts"),
    ("delete", "/admin/plans/{id}"),
    ("get", "/v1/account"),
    ("get", "/v1/balance"),
    ("get", "/v1/balance/transactions"),
    ("post", "/v1/plans"),
    ("get", "/v1/plans"),
    ("get", "/v1/plans/{id}"),
    ("patch", "/v1/plans/{id}"),
    ("delete", "/v1/plans/{id}"),
    ("post", "/v1/addons"),
    ("get", "/v1/addons"),
    ("get", "/v1/addons/{id}"),
    ("patch", "/v1/addons/{id}"),
    ("post", "/v1/customers"),
    ("get", "/v1/customers"),
    ("get", "/v1/customers/{id}"),
    ("post", "/v1/customers/{id}/payment-methods"),
    ("get", "/v1/customers/{id}/payment-methods"),
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
    }
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
}
