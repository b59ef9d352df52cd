//! The OpenAPI document is generated from the code, covers every route, and says what the
//! server does: the errors every authenticated operation can answer, the bounds of `limit`,
//! the methods a path has. (schemathesis checks the rest against a running server:
//! `.ci/schemathesis`.)

use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::{Map, Value, json};

crate::db_tests!(
    openapi_covers_every_route,
    every_list_documents_the_limits_it_enforces,
    delete_on_a_plan_is_a_405_that_is_no_operation,
    whole_number_floats_are_integers_and_arrays_are_no_bodies,
    every_body_has_an_example_that_fits_its_schema,
    timestamps_are_date_times,
    operations_on_a_subscriptions_actor_document_the_503_of_a_moving_shard,
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
    ("get", "/v1/invoices"),
    ("get", "/v1/credit-notes"),
    ("get", "/v1/exports/invoices.csv"),
    ("get", "/v1/exports/documents.zip"),
    ("post", "/webhooks/processor/{developer_id}"),
    ("get", "/webhooks/whatsapp/{account_id}"),
    ("post", "/webhooks/whatsapp/{account_id}"),
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

/// Every request body and every response body carries an example, on its media type or on its
/// schema (or the component that schema refers to), and every example in the document, on a
/// media type or on a schema at any depth, validates against the schema it illustrates:
/// enums, patterns, bounds, formats, required fields, `additionalProperties: false`.
async fn every_body_has_an_example_that_fits_its_schema(app: TestApp) {
    let doc = document(&app).await;
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (path, method, operation) in operations(&doc) {
        let request = operation["requestBody"]["content"].as_object();
        let mut bodies: Vec<(String, &Value)> = request
            .into_iter()
            .flatten()
            .map(|(media, content)| (format!("request {media}"), content))
            .collect();
        for (status, response) in operation["responses"].as_object().into_iter().flatten() {
            let response = resolve(&doc, response);
            for (media, content) in response["content"].as_object().into_iter().flatten() {
                bodies.push((format!("{status} {media}"), content));
            }
        }
        for (place, content) in bodies {
            let here = format!("{method} {path} {place}");
            let examples = media_examples(content);
            if examples.is_empty() && schema_examples(resolve(&doc, &content["schema"])).is_empty()
            {
                missing.push(here);
                continue;
            }
            for (name, example) in examples {
                checked += 1;
                check(
                    &doc,
                    &content["schema"],
                    example,
                    &format!("{here} ({name})"),
                    &mut wrong,
                );
            }
        }
    }
    for_each_schema(&doc, &mut |at, schema| {
        for example in schema_examples(schema) {
            checked += 1;
            check(&doc, schema, example, at, &mut wrong);
        }
    });
    assert!(missing.is_empty(), "no example: {missing:#?}");
    assert!(
        wrong.is_empty(),
        "examples that do not fit their schema: {wrong:#?}"
    );
    assert!(checked > 100, "{checked} examples");

    // The check catches a wrong example: a subscription with a status it cannot have.
    let mut example = schema_examples(&doc["components"]["schemas"]["SubscriptionOut"])[0].clone();
    example["status"] = json!("suspended");
    let mut errors = Vec::new();
    let schema = json!({"$ref": "#/components/schemas/SubscriptionOut"});
    check(&doc, &schema, &example, "altered", &mut errors);
    assert_eq!(errors.len(), 1, "{errors:?}");
}

/// A timestamp in any schema of the document is a `date-time` string: every string property
/// named `*_at`, `*_period_start`, `*_period_end`, `*_date`, `*_end` or `created`.
async fn timestamps_are_date_times(app: TestApp) {
    let doc = document(&app).await;
    let mut plain = Vec::new();
    let mut timestamps = 0;
    for_each_schema(&doc, &mut |at, schema| {
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            let timestamp = name.ends_with("_at")
                || name.ends_with("period_start")
                || name.ends_with("period_end")
                || name.ends_with("_date")
                || name.ends_with("_end")
                || name == "created";
            let types = match &property["type"] {
                Value::Array(types) => types.clone(),
                other => vec![other.clone()],
            };
            if !timestamp || !types.contains(&json!("string")) {
                continue;
            }
            timestamps += 1;
            if property["format"] != "date-time" {
                plain.push(format!("{at}/properties/{name}"));
            }
        }
    });
    assert!(
        plain.is_empty(),
        "timestamps without format date-time: {plain:#?}"
    );
    assert!(timestamps > 20, "{timestamps} timestamps");
}

/// The operations that act on a subscription through its actor answer 503 with `Retry-After`
/// while the subscription's shard moves between nodes (nothing was done); the document says so.
async fn operations_on_a_subscriptions_actor_document_the_503_of_a_moving_shard(app: TestApp) {
    let doc = document(&app).await;
    let acting = [
        ("patch", "/v1/subscriptions/{id}"),
        ("post", "/v1/subscriptions/{id}/cancel"),
        ("post", "/v1/subscriptions/{id}/pause"),
        ("post", "/v1/subscriptions/{id}/resume"),
        ("post", "/v1/subscriptions/{id}/change-plan"),
        ("post", "/v1/subscriptions/{id}/change-plan/preview"),
        ("post", "/v1/subscriptions/{id}/charge-now"),
        ("post", "/v1/subscriptions/{id}/addons"),
        ("delete", "/v1/subscriptions/{id}/addons/{addon_id}"),
        ("post", "/v1/subscriptions/{id}/discount"),
        ("delete", "/v1/subscriptions/{id}/discount"),
        ("post", "/webhooks/processor/{developer_id}"),
    ];
    for (method, path) in acting {
        let unavailable = resolve(&doc, &doc["paths"][path][method]["responses"]["503"]);
        let here = format!("{method} {path}");
        assert!(
            unavailable["description"]
                .as_str()
                .is_some_and(|d| d.contains("shard is moving between nodes")),
            "{here}: {unavailable}"
        );
        let content = &unavailable["content"]["application/json"];
        assert_eq!(
            content["schema"]["$ref"], "#/components/schemas/ErrorBody",
            "{here}"
        );
        let examples = media_examples(content);
        assert!(!examples.is_empty(), "{here}");
        for (_, example) in examples {
            assert_eq!(example["error"]["type"], "api_error", "{here}");
        }
        let retry_after = &unavailable["headers"]["Retry-After"]["schema"];
        assert_eq!(retry_after["type"], "integer", "{here}");
    }
    // Meta's status webhook while the send it reports on is recording its wamid.
    let early = &doc["paths"]["/webhooks/whatsapp/{account_id}"]["post"]["responses"]["503"];
    assert_eq!(
        early["headers"]["Retry-After"]["schema"]["type"], "integer",
        "{early}"
    );
    // No other operation answers it.
    for (path, method, operation) in operations(&doc) {
        if !acting.contains(&(method, path))
            && path != "/readyz"
            && (path, method) != ("/webhooks/whatsapp/{account_id}", "post")
        {
            assert!(operation["responses"]["503"].is_null(), "{method} {path}");
        }
    }
}

fn operations(doc: &Value) -> impl Iterator<Item = (&str, &str, &Value)> {
    doc["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .flat_map(|(path, item)| {
            item.as_object()
                .into_iter()
                .flatten()
                .filter(|(method, _)| {
                    ["get", "put", "post", "patch", "delete"].contains(&method.as_str())
                })
                .map(move |(method, operation)| (path.as_str(), method.as_str(), operation))
        })
}

/// `value`, or what its `$ref` points at within `doc`.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => doc.pointer(pointer).unwrap_or(&Value::Null),
        None => value,
    }
}

/// The examples a media type gives: `example`, and the values of `examples`.
fn media_examples(content: &Value) -> Vec<(String, &Value)> {
    let single = content
        .get("example")
        .map(|example| ("example".to_owned(), example));
    let named = content["examples"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(name, example)| Some((name.clone(), example.get("value")?)));
    single.into_iter().chain(named).collect()
}

/// The examples a schema object gives (`examples`, or the older `example`).
fn schema_examples(schema: &Value) -> Vec<&Value> {
    let list = schema["examples"].as_array().into_iter().flatten();
    list.chain(schema.get("example")).collect()
}

/// Calls `visit` with every schema object of the document (components, parameters, bodies,
/// headers) and every schema nested in one, with where it is.
fn for_each_schema(doc: &Value, visit: &mut dyn FnMut(&str, &Value)) {
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        walk(&format!("#/components/schemas/{name}"), schema, visit);
    }
    for (path, method, operation) in operations(doc) {
        let at = format!("{method} {path}");
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            walk(
                &format!("{at} {}", parameter["name"]),
                &parameter["schema"],
                visit,
            );
        }
        let request = operation["requestBody"]["content"].as_object();
        for (media, content) in request.into_iter().flatten() {
            walk(&format!("{at} request {media}"), &content["schema"], visit);
        }
        for (status, response) in operation["responses"].as_object().into_iter().flatten() {
            for (media, content) in response["content"].as_object().into_iter().flatten() {
                walk(&format!("{at} {status} {media}"), &content["schema"], visit);
            }
            for (name, header) in response["headers"].as_object().into_iter().flatten() {
                walk(&format!("{at} {status} {name}"), &header["schema"], visit);
            }
        }
    }
}

fn walk(at: &str, schema: &Value, visit: &mut dyn FnMut(&str, &Value)) {
    let Some(object) = schema.as_object() else {
        return;
    };
    visit(at, schema);
    let map = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
    };
    for (name, property) in map("properties") {
        walk(&format!("{at}/properties/{name}"), property, visit);
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(inner) = object.get(key) {
            walk(&format!("{at}/{key}"), inner, visit);
        }
    }
    for key in ["allOf", "oneOf", "anyOf", "prefixItems"] {
        let list = object
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for (index, inner) in list.enumerate() {
            walk(&format!("{at}/{key}/{index}"), inner, visit);
        }
    }
}

/// Validates `example` against `schema` (draft 2020-12, formats asserted), resolving `$ref`s
/// into the document's components; a failure is pushed onto `wrong`.
fn check(doc: &Value, schema: &Value, example: &Value, at: &str, wrong: &mut Vec<String>) {
    let mut root = Map::new();
    root.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    if let Some(object) = schema.as_object() {
        root.extend(object.clone());
    } else {
        wrong.push(format!("{at}: the schema is not an object: {schema}"));
        return;
    }
    root.insert("components".into(), doc["components"].clone());
    let validator = match jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&Value::Object(root))
    {
        Ok(validator) => validator,
        Err(err) => {
            wrong.push(format!("{at}: the schema does not compile: {err}"));
            return;
        }
    };
    let errors: Vec<String> = validator
        .iter_errors(example)
        .map(|err| format!("{} at {}", err, err.instance_path()))
        .collect();
    if !errors.is_empty() {
        wrong.push(format!("{at}: {example} — {}", errors.join("; ")));
    }
}
