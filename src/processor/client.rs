//! Our client of the processor's REST API (Wompi's protocol as of 2026), with an account's
//! credentials: acceptance tokens (`merchants/info`: the end-user policy and the personal-data
//! authorization, both required for a payment source), card and Nequi tokens, and payment
//! sources here; transactions, and what their answers mean, in `transactions`; refunds in
//! `refunds`.

use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

// Transactions live in `transactions`; their types are named from here too.

/// The processor environment, told by the key prefixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Environment {
    Sandbox,
    Production,
}

impl Environment {
    fn of(public_key: &str, private_key: &str) -> Result<Self, ProcessorError> {
        let public = if public_key.starts_with("pub_test_") {
            Environment::Sandbox
        } else if public_key.starts_with("pub_prod_") {
            Environment::Production
        } else {
            return Err(ProcessorError::EnvironmentMismatch);
        };
        let private_ok = match public {
            Environment::Sandbox => private_key.starts_with("prv_test_"),
            Environment::Production => private_key.starts_with("prv_prod_"),
        };
        if private_ok {
            Ok(public)
        } else {
            Err(ProcessorError::EnvironmentMismatch)
        }
    }
}

/// An account's processor credentials. Debug never prints the secrets.
#[derive(Clone)]
pub struct ProcessorCredentials {
    pub base_url: String,
    pub public_key: String,
    pub(super) private_key: String,
    pub(super) integrity_secret: String,
    pub environment: Environment,
}

impl std::fmt::Debug for ProcessorCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorCredentials")
            .field("base_url", &self.base_url)
            .field("public_key", &self.public_key)
            .field("environment", &self.environment)
            .finish_non_exhaustive()
    }
}

impl ProcessorCredentials {
    pub fn new(
        base_url: impl Into<String>,
        public_key: impl Into<String>,
        private_key: impl Into<String>,
        integrity_secret: impl Into<String>,
    ) -> Result<Self, ProcessorError> {
        let (public_key, private_key) = (public_key.into(), private_key.into());
        let environment = Environment::of(&public_key, &private_key)?;
        Ok(Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            public_key,
            private_key,
            integrity_secret: integrity_secret.into(),
            environment,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    #[error("processor unreachable")]
    Network(#[source] reqwest::Error),
    #[error("processor answered {status}: {message}")]
    Rejected { status: u16, message: String },
    #[error("processor keys belong to different environments (test vs prod)")]
    EnvironmentMismatch,
    #[error("unexpected processor answer: {0}")]
    Decode(String),
}

/// The two documents a customer accepts before a payment source is made: the processor's
/// end-user policy (`presigned_acceptance`) and the authorization to process personal data
/// (`presigned_personal_data_auth`, Ley 1581 de 2012). Each token is sent back as accepted.
#[derive(Clone, Debug)]
pub struct AcceptanceTokens {
    pub acceptance_token: String,
    pub permalink: String,
    pub personal_auth_token: String,
    pub personal_auth_permalink: String,
}

/// What a payment source charges: a card, or a Nequi account (a phone number).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Card,
    Nequi,
}

impl SourceKind {
    /// The processor's name of it (`type` of a payment source).
    pub fn processor_type(self) -> &'static str {
        match self {
            SourceKind::Card => "CARD",
            SourceKind::Nequi => "NEQUI",
        }
    }

    /// As stored (`payment_methods.kind`) and shown by our API.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Card => "card",
            SourceKind::Nequi => "nequi",
        }
    }

    /// A stored kind; rows made before Nequi are cards.
    pub fn from_stored(kind: &str) -> Self {
        if kind == "nequi" {
            SourceKind::Nequi
        } else {
            SourceKind::Card
        }
    }
}

/// A card as typed. `Debug` shows its last four digits only, never the number or the CVC.
#[derive(Clone)]
pub struct CardDetails {
    pub number: String,
    pub cvc: String,
    pub exp_month: String,
    pub exp_year: String,
    pub card_holder: String,
}

impl std::fmt::Debug for CardDetails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits: Vec<char> = self.number.chars().filter(char::is_ascii_digit).collect();
        let last_four: String = digits[digits.len().saturating_sub(4)..].iter().collect();
        f.debug_struct("CardDetails")
            .field("last_four", &last_four)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct CardToken {
    pub id: String,
    pub brand: Option<String>,
    pub last_four: Option<String>,
}

/// A Nequi token: `PENDING` until the customer accepts (or refuses) in the Nequi app, then
/// `APPROVED` or `DECLINED`.
#[derive(Clone, Debug, Deserialize)]
pub struct NequiToken {
    pub id: String,
    pub status: String,
    #[serde(default)]
    pub phone_number: Option<String>,
}

/// A payment source to make from a card or an approved Nequi token, with both acceptances.
#[derive(Clone, Debug)]
pub struct NewPaymentSource {
    pub kind: SourceKind,
    pub token: String,
    pub customer_email: String,
    pub acceptance_token: String,
    pub accept_personal_auth: String,
}

#[derive(Clone, Debug)]
pub struct PaymentSource {
    pub id: i64,
    pub kind: SourceKind,
    pub status: String,
    /// The card's network; none for Nequi.
    pub brand: Option<String>,
    /// The last four digits of the card, or of the Nequi phone number.
    pub last_four: Option<String>,
    /// A card's end (`public_data.exp_month`, `exp_year`): the first instant, Colombian time,
    /// after its expiry month; none for Nequi or when the processor does not say.
    pub expires_at: Option<i64>,
}

/// A transaction to post (`ProcessorClient::create_transaction`).
#[derive(Clone, Debug)]
pub struct NewTransaction {
    pub amount_in_cents: i64,
    pub currency: String,
    pub reference: String,
    pub payment_source_id: i64,
    /// A card is charged in one installment (`payment_method`); a Nequi source needs none.
    pub source_kind: SourceKind,
    pub customer_email: String,
    /// Credential-on-file: true for the subscription's fixed periodic amount charged on its
    /// schedule, false for one-off amounts (see `domain::charge_purpose`).
    pub recurrent: bool,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Transaction {
    pub id: String,
    /// PENDING, APPROVED, DECLINED, VOIDED or ERROR.
    pub status: String,
    pub reference: String,
    pub amount_in_cents: i64,
    /// Wompi always sends it; an event without it is taken as COP (the amount is what the
    /// event's checksum signs).
    #[serde(default)]
    pub currency: Option<String>,
    #[serde(default)]
    pub status_message: Option<String>,
}

impl Transaction {
    pub fn is_final(&self) -> bool {
        self.status != "PENDING"
    }
}

/// One HTTP client for every account's calls (cheap to clone).
#[derive(Clone)]
pub struct ProcessorClient {
    pub(super) http: reqwest::Client,
    /// How long one call may take (`with_timeout`).
    timeout: Duration,
}

/// How long one call may take before its outcome counts as unknown.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

impl ProcessorClient {
    pub fn new() -> Result<Self, ProcessorError> {
        Self::with_timeout(DEFAULT_TIMEOUT)
    }

    /// A client whose calls give up after `timeout` (`Config::processor_timeout_ms`).
    pub fn with_timeout(timeout: Duration) -> Result<Self, ProcessorError> {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .timeout(timeout)
            .build()
            .map_err(ProcessorError::Network)?;
        Ok(Self { http, timeout })
    }

    /// How long one call may take before its outcome counts as unknown: no post of ours is
    /// still on its way from this client longer than that after it was sent.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn acceptance_tokens(
        &self,
        creds: &ProcessorCredentials,
    ) -> Result<AcceptanceTokens, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/merchants/info", creds.base_url))
            .header("x-merchant-public-key", &creds.public_key);
        let data = self.send(request).await?;
        let field = |section: &str, field: &str| {
            data[section][field]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| ProcessorError::Decode(format!("no {section}.{field}")))
        };
        Ok(AcceptanceTokens {
            acceptance_token: field("presigned_acceptance", "acceptance_token")?,
            permalink: field("presigned_acceptance", "permalink")?,
            personal_auth_token: field("presigned_personal_data_auth", "acceptance_token")?,
            personal_auth_permalink: field("presigned_personal_data_auth", "permalink")?,
        })
    }

    pub async fn tokenize_card(
        &self,
        creds: &ProcessorCredentials,
        card: &CardDetails,
    ) -> Result<CardToken, ProcessorError> {
        let body = json!({"number": card.number, "cvc": card.cvc, "exp_month": card.exp_month,
            "exp_year": card.exp_year, "card_holder": card.card_holder});
        let request = self
            .http
            .post(format!("{}/tokens/cards", creds.base_url))
            .bearer_auth(&creds.public_key)
            .json(&body);
        decode(self.send(request).await?)
    }

    /// Asks the customer's Nequi app to approve future charges: a token `PENDING` until they do.
    pub async fn tokenize_nequi(
        &self,
        creds: &ProcessorCredentials,
        phone_number: &str,
    ) -> Result<NequiToken, ProcessorError> {
        let request = self
            .http
            .post(format!("{}/tokens/nequi", creds.base_url))
            .bearer_auth(&creds.public_key)
            .json(&json!({"phone_number": phone_number}));
        decode(self.send(request).await?)
    }

    /// A Nequi token's status now.
    pub async fn nequi_token(
        &self,
        creds: &ProcessorCredentials,
        id: &str,
    ) -> Result<NequiToken, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/tokens/nequi/{id}", creds.base_url))
            .bearer_auth(&creds.public_key);
        decode(self.send(request).await?)
    }

    pub async fn create_payment_source(
        &self,
        creds: &ProcessorCredentials,
        source: &NewPaymentSource,
    ) -> Result<PaymentSource, ProcessorError> {
        let body = json!({"type": source.kind.processor_type(), "token": source.token,
            "customer_email": source.customer_email, "acceptance_token": source.acceptance_token,
            "accept_personal_auth": source.accept_personal_auth});
        let request = self
            .http
            .post(format!("{}/payment_sources", creds.base_url))
            .bearer_auth(&creds.private_key)
            .json(&body);
        payment_source(self.send(request).await?)
    }

    pub async fn get_payment_source(
        &self,
        creds: &ProcessorCredentials,
        id: i64,
    ) -> Result<PaymentSource, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/payment_sources/{id}", creds.base_url))
            .bearer_auth(&creds.private_key);
        payment_source(self.send(request).await?)
    }

    /// Sends a request and returns its `data`, or the processor's own error message.
    pub(super) async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Value, ProcessorError> {
        let response = request.send().await.map_err(ProcessorError::Network)?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body.get("data").cloned().unwrap_or(Value::Null));
        }
        Err(ProcessorError::Rejected {
            status: status.as_u16(),
            message: error_message(&body),
        })
    }
}

/// Wompi's errors carry `error.reason` or `error.messages` (field → list of messages).
fn error_message(body: &Value) -> String {
    let error = &body["error"];
    if let Some(reason) = error["reason"].as_str() {
        return reason.to_owned();
    }
    if let Some(messages) = error["messages"].as_object() {
        return messages
            .iter()
            .map(|(field, list)| {
                let texts: Vec<&str> = list
                    .as_array()
                    .map(|l| l.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                format!("{field}: {}", texts.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ");
    }
    error["type"]
        .as_str()
        .map_or_else(|| "no error message".to_owned(), str::to_owned)
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(data: Value) -> Result<T, ProcessorError> {
    serde_json::from_value(data).map_err(|err| ProcessorError::Decode(err.to_string()))
}

/// A payment source as the processor shows it: a card's `public_data` has `brand` and
/// `last_four`, a Nequi account's its `phone_number`.
fn payment_source(data: Value) -> Result<PaymentSource, ProcessorError> {
    let public = &data["public_data"];
    let kind = match data["type"].as_str().or(public["type"].as_str()) {
        Some("NEQUI") => SourceKind::Nequi,
        _ => SourceKind::Card,
    };
    let last_four = match kind {
        SourceKind::Card => public["last_four"].as_str().map(str::to_owned),
        SourceKind::Nequi => public["phone_number"].as_str().map(|phone| {
            let digits: Vec<char> = phone.chars().filter(char::is_ascii_digit).collect();
            digits[digits.len().saturating_sub(4)..].iter().collect()
        }),
    };
    Ok(PaymentSource {
        id: data["id"]
            .as_i64()
            .ok_or_else(|| ProcessorError::Decode("payment source without id".into()))?,
        kind,
        status: data["status"].as_str().unwrap_or_default().to_owned(),
        brand: match kind {
            SourceKind::Card => public["brand"].as_str().map(str::to_owned),
            SourceKind::Nequi => None,
        },
        last_four,
        expires_at: match kind {
            SourceKind::Card => card_end(&public["exp_month"], &public["exp_year"]),
            SourceKind::Nequi => None,
        },
    })
}

/// The first instant (Colombian time) after a card's expiry month, from the processor's
/// `exp_month` ("08") and two-digit `exp_year` ("30"); none when either is not a valid one.
pub fn card_end(month: &Value, year: &Value) -> Option<i64> {
    let number = |v: &Value| -> Option<u32> {
        v.as_str()
            .and_then(|t| t.parse().ok())
            .or(v.as_u64().and_then(|n| u32::try_from(n).ok()))
    };
    let (month, year) = (number(month)?, number(year)?);
    if !(1..=12).contains(&month) || year > 99 {
        return None;
    }
    let year = 2000 + i32::try_from(year).ok()?;
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    let first = chrono::NaiveDate::from_ymd_opt(next_year, next_month, 1)?.and_hms_opt(0, 0, 0)?;
    let local = first
        .and_local_timezone(crate::domain::dian::COLOMBIA)
        .single()?;
    Some(local.timestamp_millis())
}

#[cfg(test)]
mod card_end_tests {
    use super::card_end;
    use serde_json::json;

    fn utc(text: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(text)
            .expect("rfc3339")
            .timestamp_millis()
    }

    #[test]
    fn a_card_lives_through_its_expiry_month_in_colombian_time() {
        // 08/30: valid all of August 2030, Bogotá's clock (UTC−5).
        assert_eq!(
            card_end(&json!("08"), &json!("30")),
            Some(utc("2030-09-01T05:00:00Z"))
        );
        // December rolls the year over.
        assert_eq!(
            card_end(&json!("12"), &json!("26")),
            Some(utc("2027-01-01T05:00:00Z"))
        );
        assert_eq!(
            card_end(&json!(3), &json!(29)),
            Some(utc("2029-04-01T05:00:00Z"))
        );
    }

    #[test]
    fn what_is_not_a_month_and_a_two_digit_year_says_nothing() {
        for (month, year) in [
            (json!("13"), json!("30")),
            (json!("00"), json!("30")),
            (json!("08"), json!("2030")),
            (json!(null), json!("30")),
            (json!("ago"), json!("30")),
        ] {
            assert_eq!(card_end(&month, &year), None, "{month} {year}");
        }
    }
}
