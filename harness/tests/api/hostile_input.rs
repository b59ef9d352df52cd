//! Issue 46: nothing a stranger or a tenant sends can stop the service. Each request here is
//! sent to the real binary, as a process of its own, so that what used to end the process
//! (a stack overflow aborts it; no panic layer can catch one) fails the test without taking
//! the others down, and each is followed by `/healthz`, which must still answer.

use crate::common::process::ServerProcess;
use crate::common::{Backend, database_url, read};
use crate::dian::{Made, PASSWORD, make_certificate};
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

/// The operator's health probe answers, within a bound.
async fn healthy(server: &ServerProcess) {
    let response = reqwest::Client::new()
        .get(format!("{}/healthz", server.base))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("the service still answers");
    assert_eq!(response.status(), 200);
}

/// A SOAP envelope whose body nests `depth` elements: 35 KB for 5,000.
fn nested_envelope(depth: usize) -> String {
    format!(
        r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Header/><s:Body>{}{}</s:Body></s:Envelope>"#,
        "<a>".repeat(depth),
        "</a>".repeat(depth)
    )
}

/// The finding (R1): a stranger's 5,000-deep envelope to the sandbox DIAN, mounted on every
/// node, overflowed the worker's stack while canonicalizing it, before any signature check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_envelope_to_the_sandbox_dian_is_refused_and_the_service_lives() {
    let Some(url) = database_url(Backend::Sqlite).await else {
        return;
    };
    let server = ServerProcess::start(&url, "warn").await;
    let client = reqwest::Client::new();
    for depth in [5_000, 100_000] {
        let response = client
            .post(format!(
                "{}/sandbox/dian/WcfDianCustomerServices.svc",
                server.base
            ))
            .header("content-type", "application/soap+xml; charset=utf-8")
            .body(nested_envelope(depth))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .expect("an answer, not a dropped connection");
        assert_eq!(response.status(), 500, "a SOAP fault, as DIAN answers");
        let body = response.text().await.expect("body");
        assert!(body.contains("s:Fault"), "{body}");
        healthy(&server).await;
    }
    server.stop().await;
}

/// The finding (R2): a tenant's PKCS#12 file asking for millions of key-derivation rounds was
/// decrypted in the request's handler. It is now refused, naming the field, before any
/// decryption; an ordinary certificate is still taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_asking_for_too_many_rounds_is_refused_before_it_is_decrypted() {
    let Some(made) = make_certificate() else {
        return;
    };
    let Some(url) = database_url(Backend::Sqlite).await else {
        return;
    };
    let server = ServerProcess::start(&url, "warn").await;
    let operator = server.app();
    let app = operator.as_account(&operator.create_account("Hostile").await);
    let costly = costly_p12(&made);
    let patch = |p12: &str| {
        json!({
            "legal_name": "Tienda Ejemplo S.A.S.",
            "nit": "900123456-8",
            "address": {"line": "Carrera 7 # 71-21", "city_code": "11001", "country": "CO"},
            "tax_regime": "responsable_iva",
            "dian": {"environment": "test", "software_id": "soft-1", "software_pin": "12345",
                "certificate": {"p12_base64": p12, "password": PASSWORD}}
        })
    };
    let (status, body) = read(
        app.request(Method::PATCH, "/v1/account/invoicing")
            .json(&patch(&costly))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "dian.certificate", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("rounds")),
        "{body}"
    );
    healthy(&server).await;
    let (status, body) = read(
        app.request(Method::PATCH, "/v1/account/invoicing")
            .json(&patch(&made.p12_base64))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "an ordinary certificate is taken: {body}");
    server.stop().await;
}

/// The test's certificate again, in the legacy scheme with a million rounds for the key and
/// a million for the certificates (each derived twice, a key and an IV): 4,000,000 rounds.
fn costly_p12(made: &Made) -> String {
    let pass = format!("pass:{PASSWORD}");
    let out = std::process::Command::new("openssl")
        .args([
            "pkcs12",
            "-export",
            "-legacy",
            "-iter",
            "1000000",
            "-inkey",
            "key.pem",
            "-in",
            "cert.pem",
            "-out",
            "costly.p12",
            "-passout",
            &pass,
        ])
        .current_dir(&made.dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .encode(std::fs::read(made.dir.join("costly.p12")).expect("written"))
}
