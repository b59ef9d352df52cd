//! Refunds at the processor: `POST /refunds` for an approved transaction, total or partial, and
//! asking about one afterwards. Answers come back as a `ProcessorOutcome<Refund>`, read exactly
//! as a transaction's (see `outcome`): only a final status settles a refund, a definite refusal
//! (a 4xx other than 408/409/425/429) means nothing was refunded, anything else is unknown.
//!
//! Wompi's refunds carry no reference of ours, so an unknown answer to a post cannot be looked
//! up by reference: it is looked up among the transaction's refunds (`refunds_of`). Our service
//! keeps at most one refund of a charge in flight, which makes that lookup unambiguous; and it
//! never posts a refund twice on its own (a second post would refund twice).

use super::client::{ProcessorClient, ProcessorCredentials, ProcessorError, decode};
use super::outcome::{ProcessorOutcome, Reported};
use serde::Deserialize;
use serde_json::json;

#[derive(Clone, Debug)]
pub struct NewRefund {
    pub transaction_id: String,
    pub amount_in_cents: i64,
    pub reason: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Refund {
    /// The processor's id (Wompi sends a number or a string).
    #[serde(deserialize_with = "id_text")]
    pub id: String,
    #[serde(default)]
    pub transaction_id: Option<String>,
    pub amount_in_cents: i64,
    /// PENDING, APPROVED, DECLINED (or ERROR).
    pub status: String,
    #[serde(default)]
    pub status_message: Option<String>,
}

impl Reported for Refund {
    fn id(&self) -> &str {
        &self.id
    }
    fn status(&self) -> &str {
        &self.status
    }
    fn status_message(&self) -> Option<&str> {
        self.status_message.as_deref()
    }
}

fn id_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::String(text) => Ok(text),
        serde_json::Value::Number(number) => Ok(number.to_string()),
        other => Err(serde::de::Error::custom(format!("refund id {other}"))),
    }
}

impl ProcessorClient {
    /// Posts a refund once and says what came of it. Never retried here, and never looked up
    /// by itself: the caller records it pending and asks `refunds_of` later.
    pub async fn create_refund(
        &self,
        creds: &ProcessorCredentials,
        refund: &NewRefund,
    ) -> ProcessorOutcome<Refund> {
        let mut body = json!({
            "transaction_id": refund.transaction_id,
            "amount_in_cents": refund.amount_in_cents,
        });
        if let Some(reason) = &refund.reason {
            body["reason"] = json!(reason);
        }
        let request = self
            .http
            .post(format!("{}/refunds", creds.base_url))
            .bearer_auth(&creds.private_key)
            .json(&body);
        match self.send(request).await {
            Ok(data) => match decode::<Refund>(data) {
                Ok(refund) => ProcessorOutcome::of_record(refund),
                Err(err) => ProcessorOutcome::Unknown(err.to_string()),
            },
            Err(err) => ProcessorOutcome::of_post_error(&err),
        }
    }

    /// A refund by the processor's id.
    pub async fn refund(
        &self,
        creds: &ProcessorCredentials,
        id: &str,
    ) -> Result<Refund, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/refunds/{id}", creds.base_url))
            .bearer_auth(&creds.private_key);
        decode(self.send(request).await?)
    }

    /// Every refund of a transaction.
    pub async fn refunds_of(
        &self,
        creds: &ProcessorCredentials,
        transaction_id: &str,
    ) -> Result<Vec<Refund>, ProcessorError> {
        let request = self
            .http
            .get(format!("{}/refunds", creds.base_url))
            .query(&[("transaction_id", transaction_id)])
            .bearer_auth(&creds.private_key);
        decode(self.send(request).await?)
    }
}
