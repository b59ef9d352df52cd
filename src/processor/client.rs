//! Our client of the processor's REST API (Wompi's protocol), with an account's credentials.
//!
//! Creating a transaction never double-charges: the reference is unique per ChargeAttempt, a
//! failed call is retried only after looking the reference up, and a "reference already used"
//! answer returns the existing transaction.

use super::signature::integrity_signature;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

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
    private_key: String,
    integrity_secret: String,
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

#[derive(Clone, Debug)]
pub struct AcceptanceTokens {
    pub acceptance_token: String,
    pub permalink: String,
    pub personal_auth_token: Option<String>,
    pub personal_auth_permalink: Option<String>,
}

#[derive(Clone, Debug)]
pub struct CardDetails {
    pub number: String,
    pub cvc: String,
    pub exp_month: String,
    pub exp_year: String,
    pub card_holder: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CardToken {
    pub id: String,
    pub brand: Option<String>,
    pub last_four: Option<String>,
}

#[derive(Clone, Debug)]
pub struct NewPaymentSource {
    pub token: String,
    pub customer_email: String,
    pub acceptance_token: String,
    pub accept_personal_auth: Option<String>,
}

#[derive(Clone, Debug)]
pub struct PaymentSource {
    pub id: i64,
    pub status: String,
    pub brand: Option<String>,
    pub last_four: Option<String>,
}

#[derive(Clone, Debug)]
pub struct NewTransaction {
    pub amount_in_cents: i64,
    pub currency: String,
    pub reference: String,
    pub payment_source_id: i64,
    pub customer_email: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Transaction {
    pub id: String,
    /// PENDING, APPROVED, DECLINED, VOIDED or ERROR.
    pub status: String,
    pub reference: String,
    pub amount_in_cents: i64,
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
    http: reqwest::Client,
    attempts: u32,
}

impl ProcessorClient {
    pub fn new() -> Result<Self, ProcessorError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(ProcessorError::Network)?;
        Ok(Self { http, attempts: 3 })
    }

    pub async fn acceptance_tokens(
        &self,
        creds: &ProcessorCredentials,
    ) -> Result<AcceptanceTokens, ProcessorError> {
        let url = format!("{}/merchants/{}", creds.base_url, creds.public_key);
        let data = self.send(self.http.get(url)).await?;
        let token = |section: &str, field: &str| data[section][field].as_str().map(str::to_owned);
        Ok(AcceptanceTokens {
            acceptance_token: token("presigned_acceptance", "acceptance_token")
                .ok_or_else(|| ProcessorError::Decode("no presigned_acceptance".into()))?,
            permalink: token("presigned_acceptance", "permalink").unwrap_or_default(),
            personal_auth_token: token("presigned_personal_data_auth", "acceptance_token"),
            personal_auth_permalink: token("presigned_personal_data_auth", "permalink"),
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

    pub async fn create_payment_source(
        &self,
        creds: &ProcessorCredentials,
        source: &NewPaymentSource,
    ) -> Result<PaymentSource, ProcessorError> {
        let mut body = json!({"type": "CARD", "token": source.token, "customer_email": source.customer_email,
            "acceptance_token": source.acceptance_token});
        if let Some(personal) = &source.accept_personal_auth {
            body["accept_personal_auth"] = json!(personal);
        }
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

    /// Creates the transaction for `tx.reference`, or finds the one already made for it.
    pub async fn create_transaction(
        &self,
        creds: &ProcessorCredentials,
        tx: &NewTransaction,
    ) -> Result<Transaction, ProcessorError> {
        let body = json!({
            "amount_in_cents": tx.amount_in_cents,
            "currency": tx.currency,
            "signature": integrity_signature(&tx.reference, tx.amount_in_cents, &tx.currency, &creds.integrity_secret),
            "customer_email": tx.customer_email,
            "payment_method": {"installments": 1},
            "reference": tx.reference,
            "payment_source_id": tx.payment_source_id,
            "recurrent": true,
        });
        let mut last_error = None;
        for attempt in 0..self.attempts {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                // The previous call may have reached the processor: never create twice.
                match self
                    .find_transaction_by_reference(creds, &tx.reference)
                    .await
                {
                    Ok(Some(existing)) => return Ok(existing),
                    Ok(None) => {}
                    Err(err) if retryable(&err) => {
                        last_error = Some(err);
                        continue;
                    }
                    Err(err) => return Err(err),
                }
            }
            let request = self
                .http
                .post(format!("{}/transactions", creds.base_url))
                .bearer_auth(&creds.private_key)
                .json(&body);
            match self.send(request).await {
                Ok(data) => return decode(data),
                Err(ProcessorError::Rejected {
                    status: 422,
                    message,
                }) if message.contains("reference") => {
                    return match self
                        .find_transaction_by_reference(creds, &tx.reference)
                        .await?
                    {
                        Some(existing) => Ok(existing),
                        None => Err(ProcessorError::Rejected {
                            status: 422,
                            message,
                        }),
                    };
                }
                Err(err) if retryable(&err) => last_error = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last_error.unwrap_or_else(|| ProcessorError::Decode("no attempt made".into())))
    }

    pub async fn get_transaction(
        &self,
        creds: &ProcessorCredentials,
        id: &str,
    ) -> Result<Transaction, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/transactions/{id}", creds.base_url))
            .bearer_auth(&creds.private_key);
        decode(self.send(request).await?)
    }

    pub async fn find_transaction_by_reference(
        &self,
        creds: &ProcessorCredentials,
        reference: &str,
    ) -> Result<Option<Transaction>, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/transactions", creds.base_url))
            .query(&[("reference", reference)])
            .bearer_auth(&creds.private_key);
        let data = self.send(request).await?;
        let list: Vec<Transaction> = decode(data)?;
        Ok(list.into_iter().find(|tx| tx.reference == reference))
    }

    /// Sends a request and returns its `data`, or the processor's own error message.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, ProcessorError> {
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

fn retryable(err: &ProcessorError) -> bool {
    match err {
        ProcessorError::Network(_) => true,
        ProcessorError::Rejected { status, .. } => *status >= 500,
        _ => false,
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

fn decode<T: serde::de::DeserializeOwned>(data: Value) -> Result<T, ProcessorError> {
    serde_json::from_value(data).map_err(|err| ProcessorError::Decode(err.to_string()))
}

fn payment_source(data: Value) -> Result<PaymentSource, ProcessorError> {
    let public = &data["public_data"];
    Ok(PaymentSource {
        id: data["id"]
            .as_i64()
            .ok_or_else(|| ProcessorError::Decode("payment source without id".into()))?,
        status: data["status"].as_str().unwrap_or_default().to_owned(),
        brand: public["brand"].as_str().map(str::to_owned),
        last_four: public["last_four"].as_str().map(str::to_owned),
    })
}
