//! Round trips through the sandbox DIAN over real HTTP, with our client and emitter: an
//! invoice and its credit note accepted and then found by `GetStatus`, a number sent twice,
//! each refusal (schema, CUFE, CUDE, signature, range, range dates, signing time), and the
//! faults a client must take as unknown (a 503, an answer later than its timeout, a SOAP
//! fault, a key DIAN does not know).

use super::fixtures::{self, PASSWORD};
use crate::dian::certificate::Certificate;
use crate::dian::document::{Document, Kind, NumberingRange};
use crate::dian::emitter::{DianEmitter, DianService, Outcome, Unknown};
use crate::dian::sandbox::{AdminAuth, Fault, SERVICE_PATH, SandboxDian, SandboxDianConfig};
use crate::dian::signature::sign;
use crate::dian::soap::client::SoapClient;
use crate::dian::ubl;
use chrono::{Duration, NaiveDate, Utc};
use std::sync::Arc;
use tokio::net::TcpListener;

struct Running {
    sandbox: Arc<SandboxDian>,
    service: DianService,
    certificate: Arc<Certificate>,
    address: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A sandbox on a port of its own, told of the fixtures' range and software, and our service
/// pointed at it; `None` (skipped) without `openssl` to make the certificate.
async fn start(timeout_ms: u64) -> Option<Running> {
    let generated = fixtures::generate_certificate()?;
    let p12 = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        &generated.legacy_p12,
    );
    let certificate =
        Arc::new(Certificate::from_p12_base64(&p12, PASSWORD).expect("legacy p12 reads"));
    let config = SandboxDianConfig {
        late_by: std::time::Duration::from_secs(2),
        ..SandboxDianConfig::default()
    };
    let sandbox = SandboxDian::new(config, AdminAuth::from_token("admin"));
    sandbox.register_range("900123456", fixtures::range());
    let old = NumberingRange {
        prefix: "SETQ".into(),
        valid_from: NaiveDate::from_ymd_opt(2020, 1, 1).expect("date"),
        valid_to: NaiveDate::from_ymd_opt(2020, 12, 31).expect("date"),
        ..fixtures::range()
    };
    sandbox.register_range("900123456", old);
    sandbox.register_software(&fixtures::software().id, &fixtures::software().pin);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let address = format!(
        "http://{}{SERVICE_PATH}",
        listener.local_addr().expect("address")
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(Arc::clone(&sandbox).serve(listener, async move {
        let _ = stopped.await;
    }));
    let client = SoapClient::new(
        address.clone(),
        Arc::clone(&certificate),
        std::time::Duration::from_millis(timeout_ms),
    )
    .expect("client");
    Some(Running {
        sandbox,
        service: DianService::new(Arc::clone(&certificate), client),
        certificate,
        address,
        _stop: stop,
    })
}

/// A document issued a minute ago (the sandbox compares signing and issue times).
fn recent(mut document: Document) -> Document {
    document.issued_at = Utc::now();
    document
}

fn rule(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Rejected { messages, .. } => messages.first().cloned().unwrap_or_default(),
        other => format!("not rejected: {other:?}"),
    }
}

#[tokio::test]
async fn an_invoice_and_its_credit_note_are_accepted_once_and_found_again() {
    let Some(running) = start(5_000).await else {
        return;
    };
    let invoice = recent(fixtures::invoice(990_000_010));
    let signed = running.service.sign(&invoice, Utc::now()).expect("signs");
    let outcome = running.service.submit(&invoice, &signed).await;
    let cufe = invoice.unique_code();
    let Outcome::Accepted {
        document_key,
        messages,
        application_response: Some(response),
    } = outcome
    else {
        panic!("accepted with an ApplicationResponse: {outcome:?}");
    };
    assert_eq!((document_key, messages), (Some(cufe.clone()), vec![]));
    let response = String::from_utf8(
        base64::engine::Engine::decode(&base64::engine::general_purpose::STANDARD, response)
            .expect("base64"),
    )
    .expect("UTF-8");
    assert!(response.contains("<ApplicationResponse"), "{response}");
    assert!(response.contains(&cufe), "it names the CUFE: {response}");
    assert!(matches!(
        running.service.status(&cufe).await,
        Outcome::Accepted { .. }
    ));

    let mut note = recent(fixtures::credit_note(&invoice));
    note.issued_at = Utc::now();
    let signed_note = running.service.sign(&note, Utc::now()).expect("signs");
    let outcome = running.service.submit(&note, &signed_note).await;
    assert!(matches!(outcome, Outcome::Accepted { .. }), "{outcome:?}");

    // The same number again, sent as it was or changed: DIAN has it; ask GetStatus.
    let again = running.service.submit(&invoice, &signed).await;
    assert!(
        matches!(&again, Outcome::Unknown(Unknown::AlreadyReceived(messages)) if messages[0].starts_with("Regla: 90")),
        "{again:?}"
    );
    let mut changed = invoice.clone();
    changed.note = Some("otra".into());
    let signed = running.service.sign(&changed, Utc::now()).expect("signs");
    assert!(matches!(
        running.service.submit(&changed, &signed).await,
        Outcome::Unknown(Unknown::AlreadyReceived(_))
    ));
}

/// Writes `document`, lets `edit` change the unsigned text, signs it at `signing_time`.
fn signed_with(
    running: &Running,
    document: &Document,
    edit: impl Fn(String) -> String,
    signing_time: chrono::DateTime<Utc>,
) -> Vec<u8> {
    let unsigned = edit(ubl::write(document).expect("writes"));
    sign(&unsigned, &running.certificate, signing_time)
        .expect("signs")
        .into_bytes()
}

#[tokio::test]
async fn the_sandbox_refuses_what_dian_refuses() {
    let Some(running) = start(5_000).await else {
        return;
    };
    let now = Utc::now();
    let service = &running.service;

    let invoice = recent(fixtures::invoice(990_000_020));
    let without_time = signed_with(
        &running,
        &invoice,
        |t| {
            let start = t.find("<cbc:IssueTime>").expect("IssueTime");
            let end = t.find("</cbc:IssueTime>").expect("end") + "</cbc:IssueTime>".len();
            format!("{}{}", &t[..start], &t[end..])
        },
        now,
    );
    assert!(rule(&service.submit(&invoice, &without_time).await).starts_with("Regla: ZB01"));

    let cufe = invoice.unique_code();
    let wrong_cufe = signed_with(
        &running,
        &invoice,
        |t| t.replace(&cufe, &"0".repeat(96)),
        now,
    );
    assert!(rule(&service.submit(&invoice, &wrong_cufe).await).starts_with("Regla: FAD06"));

    let signed = String::from_utf8(signed_with(&running, &invoice, |t| t, now)).expect("utf8");
    let tampered = signed.replacen("Plan Pro", "Plan Max", 1).into_bytes();
    assert!(rule(&service.submit(&invoice, &tampered).await).starts_with("Regla: ZE02"));

    let late_signature = signed_with(&running, &invoice, |t| t, now + Duration::days(3));
    assert!(rule(&service.submit(&invoice, &late_signature).await).starts_with("Regla: FAD09e"));

    let beyond = recent(fixtures::invoice(995_000_001));
    let signed = service.sign(&beyond, now).expect("signs");
    assert!(rule(&service.submit(&beyond, &signed).await).starts_with("Regla: FAB10b"));

    let mut expired = recent(fixtures::invoice(990_000_021));
    if let Kind::Invoice { range, .. } = &mut expired.kind {
        range.prefix = "SETQ".into();
    }
    let signed = service.sign(&expired, now).expect("signs");
    assert!(rule(&service.submit(&expired, &signed).await).starts_with("Regla: FAB07b"));

    let mut unknown = recent(fixtures::invoice(990_000_022));
    if let Kind::Invoice { range, .. } = &mut unknown.kind {
        range.resolution_number = "18760000999".into();
    }
    let signed = service.sign(&unknown, now).expect("signs");
    assert!(rule(&service.submit(&unknown, &signed).await).starts_with("Regla: FAB05c"));

    let mut note = recent(fixtures::credit_note(&invoice));
    note.issued_at = now;
    note.software.pin = "99999".into();
    let signed = service.sign(&note, now).expect("signs");
    assert!(rule(&service.submit(&note, &signed).await).starts_with("Regla: CAD06"));

    // A refused document is remembered: GetStatus answers the same refusal.
    assert!(rule(&service.status(&cufe).await).starts_with("Regla: FAD09e"));
}

#[tokio::test]
async fn failures_of_the_service_are_unknown_never_rejections() {
    let Some(running) = start(300).await else {
        return;
    };
    let invoice = recent(fixtures::invoice(990_000_030));
    let signed = running.service.sign(&invoice, Utc::now()).expect("signs");

    running.sandbox.fail_next(Fault::Unavailable, 1);
    assert_eq!(
        running.service.submit(&invoice, &signed).await,
        Outcome::Unknown(Unknown::Status(503))
    );

    running.sandbox.fail_next(Fault::Late, 1);
    assert_eq!(
        running.service.submit(&invoice, &signed).await,
        Outcome::Unknown(Unknown::Timeout)
    );

    assert_eq!(
        running.service.status(&"a".repeat(96)).await,
        Outcome::Unknown(Unknown::NotFound)
    );

    // A request without a WS-Security signature: DIAN's SOAP fault, HTTP 500.
    let unsigned = r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:wcf="http://wcf.dian.colombia"><s:Header/><s:Body><wcf:GetStatus><wcf:trackId>x</wcf:trackId></wcf:GetStatus></s:Body></s:Envelope>"#;
    let answer = reqwest::Client::new()
        .post(&running.address)
        .header("content-type", "application/soap+xml; charset=utf-8")
        .body(unsigned)
        .send()
        .await
        .expect("answers");
    assert_eq!(answer.status().as_u16(), 500);
    assert!(
        answer
            .text()
            .await
            .expect("body")
            .contains("InvalidSecurity")
    );

    // After the faults, the document goes through.
    assert!(matches!(
        running.service.submit(&invoice, &signed).await,
        Outcome::Accepted { .. }
    ));
}

#[tokio::test]
async fn a_document_with_a_control_character_is_not_well_formed_and_refused() {
    let Some(running) = start(5_000).await else {
        return;
    };
    let invoice = recent(fixtures::invoice(990_000_030));
    // Our signer reads what it signs, and refuses it too.
    let mut with_control = invoice.clone();
    with_control.seller.legal_name = "Tienda\u{1}Ejemplo S.A.S.".into();
    assert!(running.service.sign(&with_control, Utc::now()).is_err());
    // Somebody else's document, signed, then given a control character.
    let signed = running.service.sign(&invoice, Utc::now()).expect("signs");
    let name = invoice.seller.legal_name.as_bytes();
    let at = signed
        .windows(name.len())
        .position(|window| window == name)
        .expect("the seller's name is in the document");
    let mut broken = signed.clone();
    broken.insert(at + 1, 0x01);
    let outcome = running.service.submit(&invoice, &broken).await;
    assert!(rule(&outcome).starts_with("Regla: ZB01"), "{outcome:?}");
}
