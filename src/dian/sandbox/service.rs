//! The sandbox's `POST /WcfDianCustomerServices.svc`: a pending fault first, then the SOAP
//! request read and its WS-Security signature checked (a SOAP fault, HTTP 500, otherwise, as
//! DIAN answers), then the operation: `SendBillSync` (unzip, duplicate check, `validate`,
//! remember) or `GetStatus` (the remembered answer, or `66`).

use super::validate::{Passed, Refused, check};
use super::{Fault, SandboxDian};
use crate::dian::soap::envelope::{Operation, SOAP12, read_request};
use crate::dian::soap::response::{ACCEPTED, DianResponse, NOT_FOUND, REFUSED};
use crate::dian::soap::zip::unzip_first;
use crate::dian::verify::verify;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::sync::Arc;

const SOAP_TYPE: &str = "application/soap+xml; charset=utf-8";

pub(super) async fn serve(State(sandbox): State<Arc<SandboxDian>>, body: Bytes) -> Response {
    match sandbox.take_fault() {
        Some(Fault::Unavailable) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Some(Fault::Late) => tokio::time::sleep(sandbox.config.late_by).await,
        None => {}
    }
    // Reading, unzipping and verifying a stranger's document is bounded but not cheap: it runs
    // on the blocking pool, so that the async workers keep answering everyone else.
    tokio::task::spawn_blocking(move || answer(&sandbox, &body))
        .await
        .unwrap_or_else(|_| soap_fault("s:Receiver", "The request could not be processed."))
}

fn answer(sandbox: &SandboxDian, body: &[u8]) -> Response {
    let Ok(text) = std::str::from_utf8(body) else {
        return soap_fault("s:Sender", "The request is not UTF-8.");
    };
    let received = match read_request(text) {
        Ok(received) => received,
        Err(err) => return soap_fault("s:Sender", &err.to_string()),
    };
    if sandbox.config.check_ws_security {
        let header = received.tree.child(received.tree.root(), SOAP12, "Header");
        let signed = header.and_then(|h| verify(&received.tree, Some(h)).ok());
        if header.is_none() || signed.is_none() {
            return soap_fault(
                "s:Sender",
                "InvalidSecurity: the WS-Security signature does not verify.",
            );
        }
    }
    let name = received.operation.name();
    let answer = match received.operation {
        Operation::SendBillSync { content_file, .. } => sandbox.send_bill(&content_file),
        Operation::GetStatus { track_id } => sandbox.status(&track_id),
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, SOAP_TYPE)],
        answer.envelope(name),
    )
        .into_response()
}

impl SandboxDian {
    fn send_bill(&self, content_file: &str) -> DianResponse {
        let archive = STANDARD
            .decode(content_file.split_whitespace().collect::<String>())
            .map_err(|_| "contentFile no es base64".to_owned())
            .and_then(|bytes| unzip_first(&bytes).map_err(|err| err.to_string()))
            .and_then(|(_, xml)| {
                String::from_utf8(xml).map_err(|_| "el XML no es UTF-8".to_owned())
            });
        let xml = match archive {
            Ok(xml) => xml,
            Err(why) => {
                return refused(
                    None,
                    vec![format!(
                        "Regla: ZB01, Rechazo: El archivo no se pudo leer: {why}."
                    )],
                );
            }
        };
        let registry = self.state().registry.clone();
        let outcome = check(&xml, &registry);
        let mut state = self.state();
        let sent_key = match &outcome {
            Ok(passed) => Some(passed.key.clone()),
            Err(refused) => refused.key.clone(),
        };
        if let Some(key) = sent_key {
            *state.sends.entry(key).or_insert(0) += 1;
        }
        match outcome {
            Ok(Passed {
                key,
                number,
                seller_nit,
                invoice,
            }) => {
                let kind = if invoice {
                    "La Factura electrónica"
                } else {
                    "La Nota Crédito"
                };
                let number_key = (seller_nit, number.clone());
                if state.numbers.contains_key(&number_key)
                    || state.answers.get(&key).is_some_and(|a| a.is_valid)
                {
                    return refused(
                        Some(&key),
                        vec!["Regla: 90, Rechazo: Documento procesado anteriormente.".into()],
                    );
                }
                // DIAN's ApplicationResponse comes with its acceptance, base64, as DIAN's.
                let response = super::answer::application_response(
                    &number_key.0,
                    &number,
                    &key,
                    invoice,
                    chrono::Utc::now(),
                );
                let answer = DianResponse {
                    is_valid: true,
                    status_code: ACCEPTED.into(),
                    status_description: "Procesado Correctamente.".into(),
                    status_message: format!("{kind} {number}, ha sido autorizada."),
                    errors: Vec::new(),
                    document_key: Some(key.clone()),
                    xml_base64: Some(STANDARD.encode(response)),
                };
                state.numbers.insert(number_key, key.clone());
                state.answers.insert(key, answer.clone());
                answer
            }
            Err(Refused { key, rules }) => {
                let answer = refused(key.as_deref(), rules);
                if let Some(key) = key {
                    state.remember_refused(key, answer.clone());
                }
                answer
            }
        }
    }

    fn status(&self, track_id: &str) -> DianResponse {
        match self.state().answers.get(track_id) {
            Some(answer) => answer.clone(),
            None => DianResponse {
                is_valid: false,
                status_code: NOT_FOUND.into(),
                status_description: "TrackId no existe en los registros de la DIAN.".into(),
                ..DianResponse::default()
            },
        }
    }
}

fn refused(key: Option<&str>, rules: Vec<String>) -> DianResponse {
    DianResponse {
        is_valid: false,
        status_code: REFUSED.into(),
        status_description: "Validación contiene errores en campos mandatorios.".into(),
        status_message: "Documento con errores en campos mandatorios.".into(),
        errors: rules,
        document_key: key.map(str::to_owned),
        xml_base64: None,
    }
}

/// A SOAP 1.2 fault, HTTP 500, as DIAN answers a request it cannot take.
fn soap_fault(code: &str, reason: &str) -> Response {
    let body = format!(
        r#"<s:Envelope xmlns:s="{SOAP12}"><s:Body><s:Fault><s:Code><s:Value>{code}</s:Value></s:Code><s:Reason><s:Text xml:lang="en-US">{}</s:Text></s:Reason></s:Fault></s:Body></s:Envelope>"#,
        quick_xml::escape::escape(reason)
    );
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, SOAP_TYPE)],
        body,
    )
        .into_response()
}
