//! A sandbox under test, in-process or standalone, spoken to in raw HTTP (reqwest): the
//! protocol's own requests and answers, not our client's reading of them.
//!
//! `both_sandboxes!(name, …)` runs each `async fn name(sandbox: Sandbox)` three times: against
//! the standalone sandbox, and against the in-process one of a `TestApp` on SQLite and on
//! PostgreSQL, all with `quick()`'s timing.

use super::{SANDBOX_ADMIN_TOKEN, quick, standalone};
use crate::common::{ADMIN_TOKEN, TestApp, eventually, read};
use billing::processor::signature::integrity_signature;
use serde_json::{Value, json};
use std::time::Duration;

/// How long anything the sandbox does on its own (settling, approving) may take in a test.
pub(crate) const BOUND: Duration = Duration::from_secs(10);

/// A sandbox's base URL and the token that administers it.
pub(crate) struct Sandbox {
    base: String,
    admin_token: &'static str,
}

impl Sandbox {
    pub(crate) async fn standalone() -> Self {
        Self {
            base: standalone(quick()).await,
            admin_token: SANDBOX_ADMIN_TOKEN,
        }
    }

    pub(crate) fn in_process(app: &TestApp) -> Self {
        Self {
            base: app.url("/sandbox/processor/v1"),
            admin_token: ADMIN_TOKEN,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A new merchant whose events go to `events_url` (none when `None`).
    pub(crate) async fn merchant(&self, events_url: Option<&str>) -> Merchant {
        let response = reqwest::Client::new()
            .post(self.url("/_sandbox/merchants"))
            .bearer_auth(self.admin_token)
            .json(&json!({"events_url": events_url}))
            .send()
            .await
            .expect("send");
        let (status, keys) = read(response).await;
        assert_eq!(status, 201, "{keys}");
        let key = |name: &str| keys[name].as_str().expect(name).to_owned();
        Merchant {
            base: self.base.clone(),
            http: reqwest::Client::new(),
            public_key: key("public_key"),
            private_key: key("private_key"),
            integrity_secret: key("integrity_secret"),
            events_secret: key("events_secret"),
        }
    }
}

/// Runs each named `async fn(Sandbox)` against the standalone sandbox and the in-process one
/// (SQLite and PostgreSQL).
macro_rules! both_sandboxes {
    ($($name:ident),* $(,)?) => {
        mod standalone {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::protocol::sandbox::Sandbox::standalone().await).await;
                }
            )*
        }
        mod in_process {
            $crate::db_tests!(config = $crate::protocol::quick_in_process; $($name),*);
            $(
                async fn $name(app: $crate::common::TestApp) {
                    super::$name($crate::protocol::sandbox::Sandbox::in_process(&app)).await;
                }
            )*
        }
    };
}
pub(crate) use both_sandboxes;

/// Which of its keys a merchant's request carries.
#[derive(Clone, Copy)]
pub(crate) enum Key {
    Public,
    Private,
}

pub(crate) struct Merchant {
    base: String,
    http: reqwest::Client,
    pub(crate) public_key: String,
    pub(crate) private_key: String,
    pub(crate) integrity_secret: String,
    pub(crate) events_secret: String,
}

impl Merchant {
    pub(crate) async fn get(&self, path: &str, key: Key) -> (u16, Value) {
        let request = self.http.get(format!("{}{path}", self.base));
        read(self.bearer(request, key).send().await.expect("send")).await
    }

    pub(crate) async fn post(&self, path: &str, key: Key, body: Value) -> (u16, Value) {
        let request = self.http.post(format!("{}{path}", self.base)).json(&body);
        read(self.bearer(request, key).send().await.expect("send")).await
    }

    fn bearer(&self, request: reqwest::RequestBuilder, key: Key) -> reqwest::RequestBuilder {
        request.bearer_auth(match key {
            Key::Public => &self.public_key,
            Key::Private => &self.private_key,
        })
    }

    /// `GET merchants/info`'s `data`, with the public key in its header.
    pub(crate) async fn info(&self) -> Value {
        let response = self
            .http
            .get(format!("{}/merchants/info", self.base))
            .header("x-merchant-public-key", &self.public_key)
            .send()
            .await
            .expect("send");
        let (status, body) = read(response).await;
        assert_eq!(status, 200, "{body}");
        body["data"].clone()
    }

    /// The two acceptances a payment source needs, as `payment_sources` takes them.
    pub(crate) async fn acceptances(&self) -> Value {
        let info = self.info().await;
        json!({"acceptance_token": info["presigned_acceptance"]["acceptance_token"],
            "accept_personal_auth": info["presigned_personal_data_auth"]["acceptance_token"]})
    }

    pub(crate) async fn card_token(&self, number: &str) -> String {
        let card = json!({"number": number, "cvc": "123", "exp_month": "08", "exp_year": "30",
            "card_holder": "Ana Gómez"});
        let (status, body) = self.post("/tokens/cards", Key::Public, card).await;
        assert_eq!(status, 201, "{body}");
        body["data"]["id"].as_str().expect("id").to_owned()
    }

    /// A Nequi token for `phone_number`, once the customer has answered in the app: its id
    /// and final status.
    pub(crate) async fn nequi_token(&self, phone_number: &str) -> (String, String) {
        let (status, body) = self
            .post(
                "/tokens/nequi",
                Key::Public,
                json!({"phone_number": phone_number}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let id = body["data"]["id"].as_str().expect("id").to_owned();
        let status = self.nequi_status_when_final(&id).await;
        (id, status)
    }

    pub(crate) async fn nequi_status_when_final(&self, id: &str) -> String {
        let path = format!("/tokens/nequi/{id}");
        eventually(BOUND, || async {
            self.get(&path, Key::Public).await.1["data"]["status"] != "PENDING"
        })
        .await;
        let (_, body) = self.get(&path, Key::Public).await;
        body["data"]["status"].as_str().expect("status").to_owned()
    }

    /// `POST payment_sources` of `kind` with `token` and both acceptances.
    pub(crate) async fn payment_source(&self, kind: &str, token: &str) -> (u16, Value) {
        let mut body = self.acceptances().await;
        body["type"] = json!(kind);
        body["token"] = json!(token);
        body["customer_email"] = json!("ana@example.co");
        self.post("/payment_sources", Key::Private, body).await
    }

    /// The id of a new payment source of the card `number`.
    pub(crate) async fn card_source(&self, number: &str) -> i64 {
        let token = self.card_token(number).await;
        let (status, body) = self.payment_source("CARD", &token).await;
        assert_eq!(status, 201, "{body}");
        body["data"]["id"].as_i64().expect("id")
    }

    /// The id of a new payment source of the Nequi account `phone_number` (approved).
    pub(crate) async fn nequi_source(&self, phone_number: &str) -> i64 {
        let (token, status) = self.nequi_token(phone_number).await;
        assert_eq!(status, "APPROVED");
        let (status, body) = self.payment_source("NEQUI", &token).await;
        assert_eq!(status, 201, "{body}");
        body["data"]["id"].as_i64().expect("id")
    }

    /// `POST transactions` on `source` with the integrity signature; `extra` adds to (or
    /// replaces) the body's fields, `null` removes one.
    pub(crate) async fn transaction(
        &self,
        source: i64,
        reference: &str,
        amount_in_cents: i64,
        extra: Value,
    ) -> (u16, Value) {
        let signature =
            integrity_signature(reference, amount_in_cents, "COP", &self.integrity_secret);
        let mut body = json!({"amount_in_cents": amount_in_cents, "currency": "COP",
            "signature": signature, "customer_email": "ana@example.co", "reference": reference,
            "payment_source_id": source, "payment_method": {"installments": 1}});
        let fields = body.as_object_mut().expect("an object");
        for (field, value) in extra.as_object().into_iter().flatten() {
            if value.is_null() {
                fields.remove(field);
            } else {
                fields.insert(field.clone(), value.clone());
            }
        }
        self.post("/transactions", Key::Private, body).await
    }

    /// A transaction on `source` for `amount_in_cents`, once final: its body.
    pub(crate) async fn settled_transaction(
        &self,
        source: i64,
        reference: &str,
        amount_in_cents: i64,
    ) -> Value {
        let (status, body) = self
            .transaction(source, reference, amount_in_cents, json!({}))
            .await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["data"]["status"], "PENDING");
        let id = body["data"]["id"].as_str().expect("id");
        self.when_final(&format!("/transactions/{id}"), "PENDING")
            .await
    }

    /// The `data` at `path` once its status is no longer `pending`.
    pub(crate) async fn when_final(&self, path: &str, pending: &str) -> Value {
        eventually(BOUND, || async {
            self.get(path, Key::Private).await.1["data"]["status"] != pending
        })
        .await;
        self.get(path, Key::Private).await.1["data"].clone()
    }
}

/// Asserts Wompi's 422 naming `field`.
pub(crate) fn assert_invalid((status, body): (u16, Value), field: &str) {
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["type"], "INPUT_VALIDATION_ERROR", "{body}");
    assert!(
        body["error"]["messages"][field].is_array(),
        "names {field}: {body}"
    );
}
