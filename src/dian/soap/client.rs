//! The web service's client: one signed SOAP request per call, through reqwest, to the
//! address configured (DIAN's for the environment, or another an operator sets). Whatever
//! does not come back as a readable `DianResponse` (a timeout, a connection error, a 5xx, a
//! SOAP fault, an unreadable body) is `Outcome::Unknown`, never a rejection.

use super::envelope::{Operation, request};
use super::response::{ACCEPTED, DUPLICATE_RULE, DianResponse, NOT_FOUND, REJECTIONS};
use crate::dian::certificate::Certificate;
use crate::dian::outcome::{Outcome, Unknown};
use crate::domain::dian::Environment;
use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;

/// DIAN's service for an environment.
pub fn default_address(environment: Environment) -> &'static str {
    match environment {
        Environment::Production => "https://vpfe.dian.gov.co/WcfDianCustomerServices.svc",
        Environment::Test => "https://vpfe-hab.dian.gov.co/WcfDianCustomerServices.svc",
    }
}

/// A client of one account's DIAN service: the address and the certificate that signs.
#[derive(Clone)]
pub struct SoapClient {
    http: reqwest::Client,
    address: String,
    certificate: Arc<Certificate>,
}

impl std::fmt::Debug for SoapClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoapClient")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl SoapClient {
    /// A client of `address`, giving up on an answer after `timeout`.
    pub fn new(
        address: impl Into<String>,
        certificate: Arc<Certificate>,
        timeout: Duration,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            http,
            address: address.into(),
            certificate,
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Sends `operation` and reads what DIAN answered.
    pub async fn call(&self, operation: &Operation) -> Outcome {
        let body = match request(operation, &self.address, &self.certificate, Utc::now()) {
            Ok(body) => body,
            Err(err) => return Outcome::Unknown(Unknown::Request(err.to_string())),
        };
        let content_type = format!(
            "application/soap+xml; charset=utf-8; action=\"{}\"",
            operation.action()
        );
        let sent = self
            .http
            .post(&self.address)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(err) if err.is_timeout() => return Outcome::Unknown(Unknown::Timeout),
            Err(err) => return Outcome::Unknown(Unknown::Transport(err.to_string())),
        };
        let status = response.status();
        let text = match response.text().await {
            Ok(text) => text,
            Err(err) if err.is_timeout() => return Outcome::Unknown(Unknown::Timeout),
            Err(err) => return Outcome::Unknown(Unknown::Transport(err.to_string())),
        };
        if !status.is_success() {
            return Outcome::Unknown(Unknown::Status(status.as_u16()));
        }
        match DianResponse::parse(&text) {
            Some(answer) => judge(answer),
            None => Outcome::Unknown(Unknown::Unreadable),
        }
    }
}

/// What an answer means: a positive list (docs/dian.md, "DIAN's answers"). `00` and valid is
/// acceptance; `99` and not valid is a rejection with DIAN's rules, unless one of them is rule
/// 90 (a document DIAN already has: asked about by its key); `66` of `GetStatus` is a key DIAN
/// does not know. Anything else (an "in process" status, a DIAN-side error in a 200, a code
/// we do not know, or `00` not valid) is unknown and asked about again: never a rejection.
pub fn judge(answer: DianResponse) -> Outcome {
    if answer.is_valid && answer.status_code == ACCEPTED {
        return Outcome::Accepted {
            document_key: answer.document_key,
            messages: answer.errors,
            application_response: answer.xml_base64,
        };
    }
    if answer.errors.iter().any(|e| e.starts_with(DUPLICATE_RULE)) {
        return Outcome::Unknown(Unknown::AlreadyReceived(answer.errors));
    }
    if answer.status_code == NOT_FOUND {
        return Outcome::Unknown(Unknown::NotFound);
    }
    if !answer.is_valid && REJECTIONS.contains(&answer.status_code.as_str()) {
        let mut messages = answer.errors;
        if messages.is_empty() {
            messages.push(answer.status_description);
        }
        return Outcome::Rejected {
            status_code: answer.status_code,
            messages,
        };
    }
    Outcome::Unknown(Unknown::NotFinal {
        code: answer.status_code,
        description: answer.status_description,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(is_valid: bool, code: &str, errors: &[&str]) -> DianResponse {
        DianResponse {
            is_valid,
            status_code: code.into(),
            status_description: "descripción".into(),
            errors: errors.iter().map(|e| (*e).to_owned()).collect(),
            ..DianResponse::default()
        }
    }

    #[test]
    fn only_dians_rejection_statuses_reject() {
        let refused = judge(answer(false, "99", &["Regla: FAD06, Rechazo: CUFE."]));
        assert!(matches!(refused, Outcome::Rejected { .. }), "{refused:?}");
        for (valid, code) in [
            (false, "98"),
            (false, "2"),
            (false, "500"),
            (true, "99"),
            (false, "00"),
            (false, ""),
        ] {
            let judged = judge(answer(valid, code, &["Error interno"]));
            assert!(
                matches!(judged, Outcome::Unknown(Unknown::NotFinal { .. })),
                "{valid} {code}: {judged:?}"
            );
        }
    }

    #[test]
    fn rule_90_is_asked_about_and_keeps_dians_messages() {
        let judged = judge(answer(
            false,
            "99",
            &["Regla: 90, Rechazo: Documento procesado anteriormente."],
        ));
        assert_eq!(
            judged,
            Outcome::Unknown(Unknown::AlreadyReceived(vec![
                "Regla: 90, Rechazo: Documento procesado anteriormente.".to_owned()
            ]))
        );
        assert_eq!(
            judge(answer(false, "66", &[])),
            Outcome::Unknown(Unknown::NotFound)
        );
    }
}
