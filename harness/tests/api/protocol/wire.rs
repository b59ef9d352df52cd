//! The sandbox as Wompi answers in 2026, in-process and standalone: acceptance tokens from
//! `merchants/info`, payment sources that need both acceptances, Nequi tokens the customer
//! accepts, transactions on card and Nequi sources, and the event retry schedule.

use super::EVENT_RETRY_DELAYS;
use super::sandbox::{BOUND, Key, Sandbox, assert_invalid, both_sandboxes};
use crate::common::eventually;
use crate::common::receiver::{Receiver, Reply};
use billing::processor::signature::checksum_matches;
use serde_json::{Value, json};

both_sandboxes!(
    merchants_info_answers_two_different_acceptances_for_the_public_key_header,
    a_payment_source_needs_both_acceptances,
    a_nequi_token_is_pending_until_the_customer_answers,
    a_nequi_payment_source_is_charged_without_a_payment_method,
    recurrent_is_recorded_as_sent,
    a_card_transaction_needs_its_installments,
    a_reference_is_used_once_even_after_a_decline,
    an_event_is_sent_again_on_the_retry_schedule_until_answered_200,
);

async fn merchants_info_answers_two_different_acceptances_for_the_public_key_header(
    sandbox: Sandbox,
) {
    let merchant = sandbox.merchant(None).await;
    let info = merchant.info().await;
    assert_eq!(info["public_key"], merchant.public_key.as_str());
    let policy = &info["presigned_acceptance"];
    let personal = &info["presigned_personal_data_auth"];
    assert_eq!(policy["type"], "END_USER_POLICY");
    assert_eq!(personal["type"], "PERSONAL_DATA_AUTH");
    for document in [policy, personal] {
        assert!(document["acceptance_token"].is_string(), "{document}");
        assert!(document["permalink"].is_string(), "{document}");
    }
    assert_ne!(policy["acceptance_token"], personal["acceptance_token"]);

    let http = reqwest::Client::new();
    for header in [None, Some("pub_test_nobody")] {
        let mut request = http.get(sandbox.url("/merchants/info"));
        if let Some(key) = header {
            request = request.header("x-merchant-public-key", key);
        }
        let (status, body) = crate::common::read(request.send().await.expect("send")).await;
        assert_eq!(status, 404, "{header:?}: {body}");
        assert_eq!(body["error"]["type"], "NOT_FOUND_ERROR", "{body}");
    }
    // The path Wompi retired is gone.
    let retired = http
        .get(sandbox.url(&format!("/merchants/{}", merchant.public_key)))
        .send()
        .await
        .expect("send");
    assert_eq!(retired.status(), 404);
}

async fn a_payment_source_needs_both_acceptances(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let token = merchant.card_token("4242424242424242").await;
    let accepted = merchant.acceptances().await;
    let body = |acceptance: Value, personal: Value| {
        json!({"type": "CARD", "token": token, "customer_email": "ana@example.co",
            "acceptance_token": acceptance, "accept_personal_auth": personal})
    };
    let (policy, personal) = (
        accepted["acceptance_token"].clone(),
        accepted["accept_personal_auth"].clone(),
    );
    let refused = [
        (body(Value::Null, personal.clone()), "acceptance_token"),
        (body(policy.clone(), Value::Null), "accept_personal_auth"),
        // Each token is checked for its own document.
        (body(personal.clone(), policy.clone()), "acceptance_token"),
        (body(policy.clone(), policy.clone()), "accept_personal_auth"),
    ];
    for (refused, field) in refused {
        let answer = merchant
            .post("/payment_sources", Key::Private, refused)
            .await;
        assert_invalid(answer, field);
    }
    let (status, made) = merchant
        .post("/payment_sources", Key::Private, body(policy, personal))
        .await;
    assert_eq!(status, 201, "{made}");
    let source = &made["data"];
    assert_eq!(source["type"], "CARD");
    assert_eq!(source["status"], "AVAILABLE");
    assert_eq!(
        source["public_data"],
        json!({"type": "CARD", "brand": "VISA", "last_four": "4242", "exp_month": "08",
            "exp_year": "30"})
    );
    let id = source["id"].as_i64().expect("id");
    let (status, read) = merchant
        .get(&format!("/payment_sources/{id}"), Key::Private)
        .await;
    assert_eq!(status, 200, "{read}");
    // Read back from its id alone, which does not carry the card's expiry (only the token does).
    let mut made_public = source["public_data"].clone();
    if let Some(fields) = made_public.as_object_mut() {
        fields.remove("exp_month");
        fields.remove("exp_year");
    }
    assert_eq!(read["data"]["public_data"], made_public);
}

async fn a_nequi_token_is_pending_until_the_customer_answers(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let (status, made) = merchant
        .post(
            "/tokens/nequi",
            Key::Public,
            json!({"phone_number": "3991111111"}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["status"], "CREATED");
    assert_eq!(made["data"]["status"], "PENDING");
    assert_eq!(made["data"]["phone_number"], "3991111111");
    let id = made["data"]["id"].as_str().expect("id");
    assert!(id.starts_with("nequi_test_"), "{id}");
    let (status, read) = merchant
        .get(&format!("/tokens/nequi/{id}"), Key::Public)
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["data"]["status"], "PENDING");
    // Not yet accepted in the app: no payment source from it.
    assert_invalid(merchant.payment_source("NEQUI", id).await, "token");
    assert_eq!(merchant.nequi_status_when_final(id).await, "APPROVED");

    let (declined, status) = merchant.nequi_token("3992222222").await;
    assert_eq!(status, "DECLINED");
    assert_invalid(merchant.payment_source("NEQUI", &declined).await, "token");

    for wrong in ["2991111111", "399111111", "39911111112", "399111111x"] {
        let answer = merchant
            .post("/tokens/nequi", Key::Public, json!({"phone_number": wrong}))
            .await;
        assert_invalid(answer, "phone_number");
    }
    // The public key, as for card tokens: the private key is not it.
    let (status, _) = merchant
        .post(
            "/tokens/nequi",
            Key::Private,
            json!({"phone_number": "3991111111"}),
        )
        .await;
    assert_eq!(status, 401);
}

async fn a_nequi_payment_source_is_charged_without_a_payment_method(sandbox: Sandbox) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let merchant = sandbox.merchant(Some(&receiver.url)).await;
    let source = merchant.nequi_source("3991111111").await;
    let (status, read) = merchant
        .get(&format!("/payment_sources/{source}"), Key::Private)
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["data"]["type"], "NEQUI");
    assert_eq!(
        read["data"]["public_data"],
        json!({"type": "NEQUI", "phone_number": "3991111111"})
    );
    let (status, made) = merchant
        .transaction(source, "nequi-1", 25_000, json!({"payment_method": null}))
        .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["data"]["payment_method_type"], "NEQUI");
    let id = made["data"]["id"].as_str().expect("id");
    let settled = merchant
        .when_final(&format!("/transactions/{id}"), "PENDING")
        .await;
    assert_eq!(settled["status"], "APPROVED");
    eventually(BOUND, || async { receiver.count() == 1 }).await;
    let event: Value = serde_json::from_slice(&receiver.received()[0].body).expect("json");
    assert_eq!(
        event["data"]["transaction"]["payment_method_type"], "NEQUI",
        "{event}"
    );

    // Any other number is approved in the app, and its payments end in ERROR.
    let other = merchant.nequi_source("3001234567").await;
    let settled = merchant.settled_transaction(other, "nequi-2", 25_000).await;
    assert_eq!(settled["status"], "ERROR");
}

async fn recurrent_is_recorded_as_sent(sandbox: Sandbox) {
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    let merchant = sandbox.merchant(Some(&receiver.url)).await;
    let source = merchant.card_source("4242424242424242").await;
    for (reference, recurrent, sent) in [
        ("rec-true", json!(true), true),
        ("rec-false", json!(false), false),
        ("rec-absent", Value::Null, false),
    ] {
        let (status, made) = merchant
            .transaction(source, reference, 10_000, json!({"recurrent": recurrent}))
            .await;
        assert_eq!(status, 201, "{made}");
        assert_eq!(made["data"]["recurrent"], sent, "{reference}: {made}");
        let id = made["data"]["id"].as_str().expect("id");
        let settled = merchant
            .when_final(&format!("/transactions/{id}"), "PENDING")
            .await;
        assert_eq!(settled["recurrent"], sent, "{reference}: {settled}");
    }
    eventually(BOUND, || async { receiver.count() == 3 }).await;
    for received in receiver.received() {
        let event: Value = serde_json::from_slice(&received.body).expect("json");
        let tx = &event["data"]["transaction"];
        assert_eq!(tx["recurrent"], tx["reference"] == "rec-true", "{event}");
    }
}

async fn a_card_transaction_needs_its_installments(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let source = merchant.card_source("4242424242424242").await;
    for (reference, payment_method) in [
        ("no-method", Value::Null),
        ("no-installments", json!({})),
        ("zero-installments", json!({"installments": 0})),
    ] {
        let answer = merchant
            .transaction(
                source,
                reference,
                10_000,
                json!({"payment_method": payment_method}),
            )
            .await;
        assert_invalid(answer, "payment_method");
    }
    let (status, made) = merchant
        .transaction(
            source,
            "three-installments",
            10_000,
            json!({"payment_method": {"installments": 3}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["data"]["payment_method_type"], "CARD");
}

async fn a_reference_is_used_once_even_after_a_decline(sandbox: Sandbox) {
    let merchant = sandbox.merchant(None).await;
    let declining = merchant.card_source("4111111111111111").await;
    let settled = merchant
        .settled_transaction(declining, "once-only", 10_000)
        .await;
    assert_eq!(settled["status"], "DECLINED");
    let approving = merchant.card_source("4242424242424242").await;
    let again = merchant
        .transaction(approving, "once-only", 10_000, json!({}))
        .await;
    assert_invalid(again, "reference");
    let (_, found) = merchant
        .get("/transactions?reference=once-only", Key::Private)
        .await;
    assert_eq!(found["data"].as_array().map(Vec::len), Some(1), "{found}");
    assert_eq!(found["data"][0]["status"], "DECLINED");
}

async fn an_event_is_sent_again_on_the_retry_schedule_until_answered_200(sandbox: Sandbox) {
    let receiver = Receiver::start(
        &[Reply::Status(500), Reply::Status(503)],
        Reply::Status(200),
    )
    .await;
    let merchant = sandbox.merchant(Some(&receiver.url)).await;
    let source = merchant.card_source("4242424242424242").await;
    merchant
        .settled_transaction(source, "retried", 10_000)
        .await;
    eventually(BOUND, || async { receiver.count() == 3 }).await;
    let received = receiver.received();
    for pair in received.windows(2) {
        assert_eq!(pair[0].body, pair[1].body, "the same event each time");
    }
    let event: Value = serde_json::from_slice(&received[0].body).expect("json");
    let checksum = event["signature"]["checksum"].as_str().expect("checksum");
    assert!(checksum_matches(&event, checksum, &merchant.events_secret));
    for (i, delay) in EVENT_RETRY_DELAYS.iter().enumerate() {
        let waited = received[i + 1].at - received[i].at;
        assert!(
            waited >= *delay,
            "attempt {} came {waited:?} after the one before, not {delay:?}",
            i + 2
        );
    }
}
