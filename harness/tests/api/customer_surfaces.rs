//! What a customer's browser reaches without an API key (issue 46): the portal's JSON is never
//! cached and its Idempotency-Keys are the session's own, never the merchant's; the hosted
//! invoice's PDFs are drawn within a limit; and a document prints its seller as it was issued.

use crate::common::{TestApp, read};
use crate::invoice_documents::{bytes_of, invoiced, pdf_text};
use crate::portal::{open, path_of};
use crate::subscriptions::{shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(
    the_portals_json_is_never_cached,
    portal_idempotency_keys_are_the_sessions_own,
    the_hosted_invoices_pdf_is_drawn_within_a_limit,
    a_document_prints_its_seller_as_issued,
);

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

fn cache_control(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn the_portals_json_is_never_cached(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = id(&subscribe(&app, &shop, &method, json!({})).await);
    let portal = path_of(&app, &open(&app, &shop.customer, json!({})).await);
    let answers = [
        app.client
            .get(app.url(&format!("{portal}/api/customer")))
            .send()
            .await
            .expect("send"),
        app.client
            .patch(app.url(&format!("{portal}/api/customer")))
            .json(&json!({"legal_name": "Ana S.A.S."}))
            .send()
            .await
            .expect("send"),
        app.client
            .post(app.url(&format!("{portal}/api/subscriptions/{sub}/cancel")))
            .json(&json!({}))
            .send()
            .await
            .expect("send"),
        // A refusal too: it says whose session it was.
        app.client
            .get(app.url("/portal/bpt_unknown/api/customer"))
            .send()
            .await
            .expect("send"),
    ];
    for answer in answers {
        assert_eq!(
            cache_control(&answer),
            "no-store",
            "{} {}",
            answer.url(),
            answer.status()
        );
    }
}

async fn portal_idempotency_keys_are_the_sessions_own(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let first = id(&subscribe(&app, &shop, &method, json!({})).await);
    let second = id(&subscribe(&app, &shop, &method, json!({})).await);
    let keyed = |method: Method, path: String, body: Value| {
        app.client
            .request(method, app.url(&path))
            .header("Idempotency-Key", "order-42")
            .json(&body)
    };
    // The merchant's key first.
    let merchant = || {
        keyed(
            Method::POST,
            "/v1/customers".to_owned(),
            json!({"email": "otra@example.co", "name": "Otra"}),
        )
        .bearer_auth(&app.api_key)
    };
    let (status, customer) = read(merchant().send().await.expect("send")).await;
    assert_eq!(status, 201, "{customer}");
    // A customer's portal request under the same key is neither refused nor the merchant's
    // answer, and it is replayed to that session only.
    let session = path_of(&app, &open(&app, &shop.customer, json!({})).await);
    let cancel = |session: &str, sub: &str| {
        keyed(
            Method::POST,
            format!("{session}/api/subscriptions/{sub}/cancel"),
            json!({}),
        )
    };
    let answer = cancel(&session, &first).send().await.expect("send");
    assert!(!answer.headers().contains_key("idempotent-replayed"));
    let (status, cancelled) = read(answer).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["id"], first);
    let again = cancel(&session, &first).send().await.expect("send");
    assert!(again.headers().contains_key("idempotent-replayed"));
    // Another session of the same customer has keys of its own.
    let other = path_of(&app, &open(&app, &shop.customer, json!({})).await);
    let (status, cancelled) = read(cancel(&other, &second).send().await.expect("send")).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["id"], second);
    // And the merchant's key still answers the merchant's first response.
    let replayed = merchant().send().await.expect("send");
    assert!(replayed.headers().contains_key("idempotent-replayed"));
    let (status, again) = read(replayed).await;
    assert_eq!((status, again), (201, customer));
}

/// The hosted PDFs (no API key) are drawn at most 20 times a minute per invoice: a stranger
/// holding one link cannot keep the workers drawing.
async fn the_hosted_invoices_pdf_is_drawn_within_a_limit(app: TestApp) {
    let invoice = invoiced(&app).await;
    let hosted = invoice["hosted_url"].as_str().expect("hosted_url");
    let mut statuses = Vec::new();
    for _ in 0..21 {
        let response = app
            .client
            .get(format!("{hosted}/pdf"))
            .send()
            .await
            .expect("send");
        if response.status() == 429 {
            assert!(response.headers().contains_key("retry-after"));
        }
        statuses.push(response.status().as_u16());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        20,
        "{statuses:?}"
    );
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    // The merchant's own download, behind the API key, is the API's to limit.
    let pdf_url = invoice["pdf_url"].as_str().expect("pdf_url");
    let (status, _, _) = bytes_of(
        app.client
            .get(pdf_url)
            .bearer_auth(&app.api_key)
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200);
}

/// An invoice is the seller's statement as issued: a later change of the account's invoicing
/// data reaches the invoices issued after it, never the PDF or page of one issued before.
async fn a_document_prints_its_seller_as_issued(app: TestApp) {
    let invoice = invoiced(&app).await;
    let (status, changed) = read(
        app.request(Method::PATCH, "/v1/account/invoicing")
            .json(
                &json!({"legal_name": "Otra Razón Social S.A.S.", "nit": "901458652",
                "address": {"line": "Avenida 68 # 1-1", "city_code": "11001", "country": "CO"}}),
            )
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    let hosted = invoice["hosted_url"].as_str().expect("hosted_url");
    let page = app
        .client
        .get(hosted)
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("text");
    assert!(page.contains("Café Montaña S.A.S."), "{page}");
    assert!(page.contains("900.123.456"), "{page}");
    assert!(!page.contains("Otra Razón Social"), "{page}");
    let pdf_url = invoice["pdf_url"].as_str().expect("pdf_url");
    let (status, _, pdf) = bytes_of(
        app.client
            .get(pdf_url)
            .bearer_auth(&app.api_key)
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200);
    if let Some(text) = pdf_text(&pdf, "seller-as-issued") {
        assert!(text.contains("Café Montaña S.A.S."), "{text}");
        assert!(text.contains("Calle 10 # 43-12"), "{text}");
        assert!(!text.contains("Otra Razón Social"), "{text}");
        assert!(!text.contains("901.458.652"), "{text}");
    }
}
