//! What a request asks a new processor payment source to be made from: a card token or an
//! approved Nequi token, with both of the customer's acceptances (the processor's end-user
//! policy and the personal-data authorization). `POST /v1/customers/{id}/payment-methods` and
//! the hosted checkout's `POST /checkout/{id}/complete` both read their bodies through
//! `SourceFields::parse`, so they answer a missing or mismatched field alike: 400 naming it
//! in `param`. Whether the processor accepts the tokens is the processor's to say.

use super::error::{ApiError, ApiResult};
use crate::processor::client::{NewPaymentSource, SourceKind};

/// The body's fields about the source, as sent (each optional on the wire).
pub(crate) struct SourceFields {
    /// `card` when absent.
    pub kind: Option<SourceKind>,
    pub card_token: Option<String>,
    pub nequi_token: Option<String>,
    pub acceptance_token: Option<String>,
    pub accept_personal_auth: Option<String>,
}

/// A well-formed request for a payment source: its kind, the token of that kind, and both
/// acceptances.
#[derive(Debug)]
pub(crate) struct SourceRequest {
    pub kind: SourceKind,
    pub token: String,
    pub acceptance_token: String,
    pub accept_personal_auth: String,
}

fn present(value: &Option<String>) -> bool {
    value.as_deref().is_some_and(|v| !v.trim().is_empty())
}

impl SourceFields {
    /// Whether a card or Nequi token was sent at all.
    pub fn has_token(&self) -> bool {
        present(&self.card_token) || present(&self.nequi_token)
    }

    /// The request, or a 400 naming the first field that is missing (or blank), or the token
    /// of the other kind when it was sent too.
    pub fn parse(self) -> ApiResult<SourceRequest> {
        let kind = self.kind.unwrap_or(SourceKind::Card);
        let (token, token_param, other, other_param) = match kind {
            SourceKind::Card => (
                self.card_token,
                "card_token",
                self.nequi_token,
                "nequi_token",
            ),
            SourceKind::Nequi => (
                self.nequi_token,
                "nequi_token",
                self.card_token,
                "card_token",
            ),
        };
        if present(&other) {
            return Err(ApiError::bad_request(format!(
                "{other_param} does not go with type `{}`.",
                kind.as_str()
            ))
            .param(other_param));
        }
        let required = |value: Option<String>, param: &'static str| {
            value
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| ApiError::bad_request(format!("{param} is required.")).param(param))
        };
        Ok(SourceRequest {
            kind,
            token: required(token, token_param)?,
            acceptance_token: required(self.acceptance_token, "acceptance_token")?,
            accept_personal_auth: required(self.accept_personal_auth, "accept_personal_auth")?,
        })
    }
}

impl SourceRequest {
    /// What the processor is asked for, on behalf of the customer with `customer_email`.
    pub fn for_customer(self, customer_email: String) -> NewPaymentSource {
        NewPaymentSource {
            kind: self.kind,
            token: self.token,
            customer_email,
            acceptance_token: self.acceptance_token,
            accept_personal_auth: self.accept_personal_auth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(kind: Option<SourceKind>, card: &str, nequi: &str) -> SourceFields {
        let some = |v: &str| (!v.is_empty()).then(|| v.to_owned());
        SourceFields {
            kind,
            card_token: some(card),
            nequi_token: some(nequi),
            acceptance_token: Some("acc".into()),
            accept_personal_auth: Some("pd".into()),
        }
    }

    /// The `param` of the 400 that `fields` get, or `None` when they are accepted.
    fn refused_param(fields: SourceFields) -> Option<String> {
        match fields.parse() {
            Err(ApiError::InvalidRequest { status, param, .. }) => {
                assert_eq!(status, axum::http::StatusCode::BAD_REQUEST);
                param
            }
            Err(other) => Some(format!("unexpected error {other}")),
            Ok(_) => None,
        }
    }

    #[test]
    fn a_card_is_the_default_kind() {
        let request = fields(None, "tok_1", "").parse().expect("valid");
        assert_eq!(
            (request.kind, request.token.as_str()),
            (SourceKind::Card, "tok_1")
        );
    }

    #[test]
    fn a_nequi_source_takes_the_nequi_token() {
        let request = fields(Some(SourceKind::Nequi), "", "nequi_1")
            .parse()
            .expect("valid");
        assert_eq!(
            (request.kind, request.token.as_str()),
            (SourceKind::Nequi, "nequi_1")
        );
    }

    #[test]
    fn the_missing_or_mismatched_field_is_named() {
        assert_eq!(
            refused_param(fields(None, "", "")).as_deref(),
            Some("card_token")
        );
        assert_eq!(
            refused_param(fields(Some(SourceKind::Nequi), "", "")).as_deref(),
            Some("nequi_token")
        );
        assert_eq!(
            refused_param(fields(None, "tok_1", "nequi_1")).as_deref(),
            Some("nequi_token")
        );
        assert_eq!(
            refused_param(fields(Some(SourceKind::Nequi), "tok_1", "nequi_1")).as_deref(),
            Some("card_token")
        );
        let mut blank_personal = fields(None, "tok_1", "");
        blank_personal.accept_personal_auth = Some("  ".into());
        assert_eq!(
            refused_param(blank_personal).as_deref(),
            Some("accept_personal_auth")
        );
        let mut no_acceptance = fields(None, "tok_1", "");
        no_acceptance.acceptance_token = None;
        assert_eq!(
            refused_param(no_acceptance).as_deref(),
            Some("acceptance_token")
        );
    }
}
