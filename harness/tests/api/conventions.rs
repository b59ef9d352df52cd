//! CONTRACT §3: ids, errors, JSON rejections, pagination, metadata, idempotency, rate limits.

use crate::common::{TestApp, read};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    malformed_json_is_400,
    a_body_of_only_whitespace_is_malformed_but_an_empty_one_is_an_empty_object,
    unknown_missing_and_mistyped_fields_are_named,
    unknown_path_is_404_and_wrong_method_is_405,
    the_internal_routes_look_like_an_unknown_path_to_strangers,
    metadata_over_60_kb_is_refused_and_nothing_is_created,
    metadata_is_kept_as_sent,
    pagination_walks_every_page_newest_first,
    bad_limit_is_400,
    idempotent_replay_returns_the_first_response,
    idempotency_key_with_another_body_is_refused,
    concurrent_duplicates_run_once,
    rate_limit_answers_429_with_retry_after,
    operator_can_raise_the_rate_limit,
);

async fn malformed_json_is_400(app: TestApp) {
    let response = app
        .request(Method::POST, "/v1/plans")
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .expect("send");
    let (status, body) = read(response).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Malformed JSON"))
    );
}

/// An empty body reads as `{}` (a bare POST of an action whose fields are all optional); a
/// body of only whitespace is no JSON text and is malformed (schemathesis, issue 32).
async fn a_body_of_only_whitespace_is_malformed_but_an_empty_one_is_an_empty_object(app: TestApp) {
    let plan = app.create_plan("P", 100, 1000).await;
    let path = format!("/v1/plans/{}", plan["id"].as_str().expect("id"));
    for blank in ["\n", " ", "\r\n\t"] {
        let response = app
            .request(Method::PATCH, &path)
            .header("content-type", "application/json")
            .body(blank)
            .send()
            .await
            .expect("send");
        let (status, body) = read(response).await;
        assert_eq!(status, 400, "{blank:?}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request");
    }
    let empty = app
        .request(Method::PATCH, &path)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("send");
    let (status, body) = read(empty).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["name"], "P");
}

async fn unknown_missing_and_mistyped_fields_are_named(app: TestApp) {
    let cases = [
        (
            json!({"name": "P", "monthly_amount_cents": 1, "annual_amount_cents": 1, "colour": "red"}),
            "colour",
        ),
        (
            json!({"name": "P", "annual_amount_cents": 1}),
            "monthly_amount_cents",
        ),
        (
            json!({"name": "P", "monthly_amount_cents": "100", "annual_amount_cents": 1}),
            "monthly_amount_cents",
        ),
        (
            json!({"name": "P", "monthly_amount_cents": 10.5, "annual_amount_cents": 1}),
            "monthly_amount_cents",
        ),
        (
            json!({"name": "P", "monthly_amount_cents": 0, "annual_amount_cents": 1}),
            "monthly_amount_cents",
        ),
        (
            json!({"name": "", "monthly_amount_cents": 1, "annual_amount_cents": 1}),
            "name",
        ),
    ];
    for (body, field) in cases {
        let (status, error) = read(app.post("/v1/plans", body.clone()).await).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(error["error"]["type"], "invalid_request", "{body}");
        assert_eq!(error["error"]["param"], field, "{body}");
    }
    let (status, error) = read(
        app.post("/v1/customers", json!({"email": "nope", "name": "A"}))
            .await,
    )
    .await;
    assert_eq!(
        (status, error["error"]["param"].clone()),
        (400, json!("email"))
    );
    let (_, list) = read(app.get("/v1/plans").await).await;
    assert_eq!(list["data"], json!([]), "no rejected request left a trace");
}

async fn unknown_path_is_404_and_wrong_method_is_405(app: TestApp) {
    let (status, body) = read(app.get("/v1/nothing-here").await).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "invalid_request");

    let plan = app.create_plan("P", 100, 1000).await;
    let delete = app.request(
        Method::DELETE,
        &format!("/v1/plans/{}", plan["id"].as_str().expect("id")),
    );
    let (status, body) = read(delete.send().await.expect("send")).await;
    assert_eq!(status, 405);
    assert_eq!(body["error"]["type"], "invalid_request");

    let put = app
        .request(Method::PUT, "/v1/customers")
        .send()
        .await
        .expect("send");
    let (status, body) = read(put).await;
    assert_eq!(status, 405);
    assert_eq!(body["error"]["type"], "invalid_request");
}

/// A response as a stranger can compare it: status, headers (without those that differ on
/// every response) and body.
struct Seen {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

async fn seen(response: reqwest::Response) -> Seen {
    let status = response.status().as_u16();
    let mut headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| !["date", "x-request-id", "content-length"].contains(&name.as_str()))
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_owned(), value)
        })
        .collect();
    headers.sort();
    let body = response.text().await.expect("body");
    Seen {
        status,
        headers,
        body,
    }
}

/// CONTRACT §3 (issue 32, point 3): without the cluster's secret, the nodes' internal routes
/// answer exactly what an unknown path answers, whatever the method and body: on SQLite,
/// where there is no cluster, and on PostgreSQL, where the stranger's secret is wrong.
async fn the_internal_routes_look_like_an_unknown_path_to_strangers(app: TestApp) {
    let unknown = "/internal/v1/nothing-here";
    let methods = [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::OPTIONS,
    ];
    let bodies: [(Option<&str>, &str); 5] = [
        (None, ""),
        (Some("application/json"), "{"),
        (Some("application/json"), r#"{"type":"due"}"#),
        (Some("application/json"), r#"{"type":"released"}"#),
        (Some("text/plain"), "hello"),
    ];
    for path in [
        "/internal/v1/actors/sub_x/messages",
        "/internal/v1/broadcast",
    ] {
        for method in &methods {
            for (content_type, body) in &bodies {
                for secret in [None, Some("cls_wrong")] {
                    let send = |to: &str| {
                        let mut request = app
                            .client
                            .request(method.clone(), app.url(to))
                            .header(billing::actors::forward::EPOCH_HEADER, "1")
                            .body(body.to_string());
                        if let Some(content_type) = content_type {
                            request = request.header("content-type", *content_type);
                        }
                        if let Some(secret) = secret {
                            request =
                                request.header(billing::actors::forward::SECRET_HEADER, secret);
                        }
                        async move { seen(request.send().await.expect("send")).await }
                    };
                    let what = format!(
                        "{method} {path}, {content_type:?} body of {} bytes, secret {secret:?}",
                        body.len()
                    );
                    let expected = send(unknown).await;
                    let got = send(path).await;
                    assert_eq!(got.status, 404, "{what}: {}", got.body);
                    assert_eq!(got.status, expected.status, "{what}");
                    assert_eq!(got.headers, expected.headers, "{what}");
                    assert_eq!(got.body, expected.body.replace(unknown, path), "{what}");
                }
            }
        }
    }
}

async fn metadata_over_60_kb_is_refused_and_nothing_is_created(app: TestApp) {
    // {"k":"…"} is 8 bytes of framing: 61,433 characters make 61,441 bytes, one too many.
    let too_big = json!({"k": "x".repeat(61_433)});
    assert_eq!(too_big.to_string().len(), 61_441);
    let (status, body) = read(
        app.post(
            "/v1/customers",
            json!({"email": "a@b.co", "name": "A", "metadata": too_big}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "metadata");
    let (_, list) = read(app.get("/v1/customers").await).await;
    assert_eq!(list["data"], json!([]));

    let just_fits = json!({"k": "x".repeat(61_432)});
    let response = app
        .post(
            "/v1/customers",
            json!({"email": "a@b.co", "name": "A", "metadata": just_fits}),
        )
        .await;
    assert_eq!(response.status(), 201);

    let (status, body) = read(
        app.post(
            "/v1/customers",
            json!({"email": "a@b.co", "name": "A", "metadata": [1]}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (400, json!("metadata"))
    );
}

async fn metadata_is_kept_as_sent(app: TestApp) {
    let metadata = json!({"z": 1, "a": {"nested": [true, null, "ü"]}});
    let (status, created) = read(
        app.post("/v1/plans", json!({"name": "M", "monthly_amount_cents": 5, "annual_amount_cents": 50, "metadata": metadata})).await,
    )
    .await;
    assert_eq!(status, 201);
    let (_, fetched) = read(
        app.get(&format!(
            "/v1/plans/{}",
            created["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    assert_eq!(fetched["metadata"], metadata);
    assert_eq!(
        fetched["metadata"].to_string(),
        metadata.to_string(),
        "key order kept"
    );
}

async fn pagination_walks_every_page_newest_first(app: TestApp) {
    let mut created = Vec::new();
    for i in 0..25 {
        let customer = read(
            app.post(
                "/v1/customers",
                json!({"email": format!("c{i}@x.co"), "name": format!("C{i}")}),
            )
            .await,
        )
        .await
        .1;
        created.push(customer["id"].as_str().expect("id").to_owned());
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/customers?limit=10&cursor={c}"),
            None => "/v1/customers?limit=10".to_owned(),
        };
        let (status, page) = read(app.get(&path).await).await;
        assert_eq!(status, 200);
        pages += 1;
        let data = page["data"].as_array().expect("data");
        seen.extend(
            data.iter()
                .map(|c| c["id"].as_str().expect("id").to_owned()),
        );
        if !page["has_more"].as_bool().expect("has_more") {
            assert!(page["next_cursor"].is_null());
            break;
        }
        cursor = Some(page["next_cursor"].as_str().expect("cursor").to_owned());
    }
    assert_eq!(pages, 3);
    created.reverse();
    assert_eq!(seen, created, "every customer once, newest first");
    let (_, default_page) = read(app.get("/v1/customers").await).await;
    assert_eq!(default_page["data"].as_array().map(Vec::len), Some(10));
}

async fn bad_limit_is_400(app: TestApp) {
    for query in ["limit=0", "limit=101", "limit=abc", "colour=red"] {
        let (status, body) = read(app.get(&format!("/v1/plans?{query}")).await).await;
        assert_eq!(status, 400, "{query}");
        assert_eq!(body["error"]["type"], "invalid_request");
        assert!(body["error"]["param"].is_string(), "{query}: {body}");
    }
}

fn plan_body() -> Value {
    json!({"name": "Idem", "monthly_amount_cents": 100, "annual_amount_cents": 1000})
}

async fn idempotent_replay_returns_the_first_response(app: TestApp) {
    let send = || {
        app.request(Method::POST, "/v1/plans")
            .header("Idempotency-Key", "key-1")
            .json(&plan_body())
            .send()
    };
    let first = send().await.expect("send");
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.expect("json");
    let second = send().await.expect("send");
    assert_eq!(second.status(), 201);
    assert_eq!(
        second
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(second.json::<Value>().await.expect("json"), first);
    let (_, list) = read(app.get("/v1/plans").await).await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1));

    // Errors are replayed too: the same bad request under one key gets the same answer.
    let bad = || {
        app.request(Method::POST, "/v1/plans")
            .header("Idempotency-Key", "key-2")
            .json(&json!({"name": "x"}))
            .send()
    };
    assert_eq!(bad().await.expect("send").status(), 400);
    assert_eq!(bad().await.expect("send").status(), 400);
}

async fn idempotency_key_with_another_body_is_refused(app: TestApp) {
    let response = app
        .request(Method::POST, "/v1/plans")
        .header("Idempotency-Key", "k")
        .json(&plan_body())
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 201);
    let other = json!({"name": "Other", "monthly_amount_cents": 100, "annual_amount_cents": 1000});
    let response = app
        .request(Method::POST, "/v1/plans")
        .header("Idempotency-Key", "k")
        .json(&other)
        .send()
        .await
        .expect("send");
    let (status, body) = read(response).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "idempotency_error");
}

async fn concurrent_duplicates_run_once(app: TestApp) {
    let requests = (0..10).map(|_| {
        app.request(Method::POST, "/v1/plans")
            .header("Idempotency-Key", "race")
            .json(&plan_body())
            .send()
    });
    let responses = futures::future::join_all(requests).await;
    let mut ids = std::collections::BTreeSet::new();
    for response in responses {
        // CONTRACT §3: a duplicate that arrives while the first runs is answered 409; one
        // that arrives after it, the first's response.
        let (status, body) = read(response.expect("send")).await;
        match status {
            201 => {
                ids.insert(body["id"].as_str().expect("id").to_owned());
            }
            409 => assert_eq!(body["error"]["type"], "idempotency_error", "{body}"),
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(
        ids.len(),
        1,
        "every duplicate that got an answer saw the same plan"
    );
    let (_, list) = read(app.get("/v1/plans").await).await;
    assert_eq!(
        list["data"].as_array().map(Vec::len),
        Some(1),
        "the plan was created once"
    );
}

async fn rate_limit_answers_429_with_retry_after(app: TestApp) {
    for i in 0..100 {
        assert_eq!(app.get("/v1/account").await.status(), 200, "request {i}");
    }
    let response = app.get("/v1/account").await;
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&retry_after));
    let (_, body) = read(response).await;
    assert_eq!(body["error"]["type"], "rate_limit");
    // The limit is per key: another account is unaffected.
    let other = app.create_account("Other").await;
    let response = app
        .client
        .get(app.url("/v1/account"))
        .bearer_auth(other["api_key"].as_str().expect("key"))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
}

async fn operator_can_raise_the_rate_limit(app: TestApp) {
    // A first request, so that the key's account is cached before the operator's change.
    assert_eq!(app.get("/v1/account").await.status(), 200);
    let response = app
        .admin(
            Method::PATCH,
            &format!("/admin/accounts/{}", app.account_id),
        )
        .json(&json!({"rate_limit_per_minute": 150}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    for i in 1..150 {
        assert_eq!(app.get("/v1/account").await.status(), 200, "request {i}");
    }
    assert_eq!(app.get("/v1/account").await.status(), 429);
}
