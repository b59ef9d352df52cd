//! Payment methods of a customer (CONTRACT §4): a processor payment source, made here from a
//! card token or an approved Nequi token with both of the customer's acceptances, or adopted
//! by id. Only the type, brand and last 4 digits are kept; no card data or phone is stored.

use super::openapi::schemas::{blank, constrain, not_blank, null, one_of_values};
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::processor_error;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery};
use crate::http::list::{ListOut, ListQuery};
use crate::http::payment_source::{SourceFields, SourceRequest};
use crate::http::state::AppState;
use crate::ids::{CustomerId, PaymentMethodId};
use crate::processor::client::SourceKind;
use crate::store::charges::PaymentMethod;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    let mut router =
        OpenApiRouter::new().routes(routes!(create_payment_method, list_payment_methods));
    constrain(router.get_openapi_mut(), "PaymentMethodIn", one_shape());
    router
}

/// The body's three shapes, exactly one of which a request matches (`source_of`): a card token
/// or a Nequi token, each with both acceptances and no other token, or an existing payment
/// source's id with no token.
fn one_shape() -> Schema {
    let token = |kinds: &[serde_json::Value], token: &str, other: &str| {
        let mut shape = ObjectBuilder::new()
            .property("type", one_of_values(kinds.iter().cloned()))
            .property(token, not_blank())
            .property(other, blank())
            .property("acceptance_token", not_blank())
            .property("accept_personal_auth", not_blank())
            .property("processor_payment_source_id", null())
            .required(token)
            .required("acceptance_token")
            .required("accept_personal_auth");
        if !kinds.contains(&serde_json::Value::Null) {
            shape = shape.required("type");
        }
        shape
    };
    let existing = ObjectBuilder::new()
        .property(
            "processor_payment_source_id",
            ObjectBuilder::new().schema_type(Type::Integer),
        )
        .property("card_token", blank())
        .property("nequi_token", blank())
        .required("processor_payment_source_id");
    OneOfBuilder::new()
        .item(token(
            &["card".into(), serde_json::Value::Null],
            "card_token",
            "nequi_token",
        ))
        .item(token(&["nequi".into()], "nequi_token", "card_token"))
        .item(existing)
        .build()
        .into()
}

/// A card or Nequi token with both acceptances, or an existing payment source id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "type": "card",
    "card_token": "tok_test_41978_b6E1a0b3C7f2d9E4A8c5F0e1B2d3C4a5",
    "acceptance_token": "eyJhbGciOiJIUzI1NiJ9.eyJjb250cmFjdF9pZCI6MSwicGVybWFsaW5rIjoiaHR0cHM6Ly93b21waS5jb20vYWNlcHRhY2lvbiJ9.Kq3c",
    "accept_personal_auth": "eyJhbGciOiJIUzI1NiJ9.eyJjb250cmFjdF9pZCI6MiwicGVybWFsaW5rIjoiaHR0cHM6Ly93b21waS5jb20vZGF0b3MifQ.Zm8w"
})))]
pub struct PaymentMethodIn {
    /// `card` (the default, with `card_token`) or `nequi` (with `nequi_token`).
    #[serde(rename = "type")]
    pub kind: Option<SourceKind>,
    /// The processor's card token (`tok_…`).
    pub card_token: Option<String>,
    /// The processor's Nequi token, once the customer approved it in the Nequi app.
    pub nequi_token: Option<String>,
    /// The processor's end-user policy token (`presigned_acceptance`), accepted by the customer.
    pub acceptance_token: Option<String>,
    /// The processor's personal-data authorization token (`presigned_personal_data_auth`),
    /// accepted by the customer.
    pub accept_personal_auth: Option<String>,
    /// Adopt a payment source made elsewhere (a migration): no token then.
    #[serde(default, deserialize_with = "crate::http::extract::optional_whole")]
    pub processor_payment_source_id: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "pm_0193a1f6c3b27a1d8e7f6a5b4c3d2e1f",
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "type": "card",
    "brand": "VISA",
    "last4": "4242",
    "processor_payment_source_id": 18342,
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct PaymentMethodOut {
    pub id: String,
    pub customer_id: String,
    #[serde(rename = "type")]
    pub kind: SourceKind,
    /// The card's network; null for Nequi.
    pub brand: Option<String>,
    /// The last four digits of the card, or of the Nequi phone number.
    pub last4: Option<String>,
    pub processor_payment_source_id: i64,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<PaymentMethod> for PaymentMethodOut {
    fn from(method: PaymentMethod) -> Self {
        Self {
            created_at: rfc3339(from_millis(method.created_at)),
            kind: SourceKind::from_stored(&method.kind),
            id: method.id.into_string(),
            customer_id: method.customer_id.into_string(),
            brand: method.brand,
            last4: method.last4,
            processor_payment_source_id: method.processor_payment_source_id,
        }
    }
}

/// What the body asks for: a new payment source from a token, or an existing one.
/// Where a new payment method's processor source comes from.
pub(super) enum Source {
    /// Made now from the customer's token and acceptances.
    New(SourceRequest),
    /// One the processor already has (a migration).
    Existing(i64),
}

/// Makes (or, for `Existing`, reads) the processor's payment source and stores the payment
/// method of `customer`: what `POST /v1/customers/{id}/payment-methods` and the portal's card
/// update both do.
pub(super) async fn add_payment_method(
    state: &AppState,
    account: &crate::store::accounts::Account,
    customer: crate::store::catalog::Customer,
    source: Source,
) -> ApiResult<PaymentMethod> {
    let credentials = state
        .charger
        .credentials(account)
        .map_err(processor_error)?;
    let source = match source {
        Source::New(request) => {
            let request = request.for_customer(customer.email.clone());
            state
                .processor
                .create_payment_source(&credentials, &request)
                .await
                .map_err(processor_error)?
        }
        Source::Existing(source_id) => state
            .processor
            .get_payment_source(&credentials, source_id)
            .await
            .map_err(processor_error)?,
    };
    let method = PaymentMethod {
        id: PaymentMethodId::generate(),
        account_id: account.id.clone(),
        customer_id: customer.id,
        processor_payment_source_id: source.id,
        brand: source.brand,
        last4: source.last_four,
        expires_at: source.expires_at,
        kind: source.kind.as_str().to_owned(),
        created_at: chrono::Utc::now().timestamp_millis(),
    };
    Ok(state.store.insert_payment_method(method).await?)
}

/// Reads the body's one valid shape, or says (400) which field is missing or extra.
fn source_of(body: PaymentMethodIn) -> ApiResult<Source> {
    let fields = SourceFields {
        kind: body.kind,
        card_token: body.card_token,
        nequi_token: body.nequi_token,
        acceptance_token: body.acceptance_token,
        accept_personal_auth: body.accept_personal_auth,
    };
    let Some(id) = body.processor_payment_source_id else {
        return Ok(Source::New(fields.parse()?));
    };
    if fields.has_token() {
        return Err(ApiError::bad_request(
            "Send either a token or processor_payment_source_id, not both.",
        )
        .param("processor_payment_source_id"));
    }
    Ok(Source::Existing(id))
}

/// Attach a payment method to a customer.
#[utoipa::path(post, path = "/v1/customers/{id}/payment-methods", tag = "customers", request_body = PaymentMethodIn,
    responses((status = 201, body = PaymentMethodOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "processor_error: the processor refused the card or token")))]
async fn create_payment_method(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PaymentMethodIn>,
) -> ApiResult<(StatusCode, Json<PaymentMethodOut>)> {
    let account = caller.account_id();
    let id = CustomerId::given(id);
    let customer =
        state.store.customer(account, &id).await?.ok_or_else(|| {
            ApiError::not_found(format!("No customer with id `{id}`.")).param("id")
        })?;
    let method = add_payment_method(&state, &caller.0, customer, source_of(body)?).await?;
    Ok((StatusCode::CREATED, Json(method.into())))
}

/// A customer's payment methods, newest first.
#[utoipa::path(get, path = "/v1/customers/{id}/payment-methods", tag = "customers", params(ListQuery),
    responses((status = 200, body = ListOut<PaymentMethodOut>), (status = 404, body = ErrorBody)))]
async fn list_payment_methods(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<PaymentMethodOut>>> {
    let account = caller.account_id();
    let id = CustomerId::given(id);
    if state.store.customer(account, &id).await?.is_none() {
        return Err(ApiError::not_found(format!("No customer with id `{id}`.")).param("id"));
    }
    let page = state
        .store
        .list_payment_methods(account, &id, &query.page()?)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |m| m.id.to_string(),
        PaymentMethodOut::from,
    )))
}
