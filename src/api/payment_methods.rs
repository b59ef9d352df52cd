//! Payment methods of a customer (CONTRACT §4): a processor payment source, made here from a
//! card token or adopted by id. Only brand and last 4 digits are kept; no card data is stored.

use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiQuery};
use super::list::{ListOut, ListQuery};
use super::state::AppState;
use crate::domain::time::{from_millis, rfc3339};
use crate::ids::PaymentMethodId;
use crate::processor::client::{NewPaymentSource, ProcessorError};
use crate::store::charges::PaymentMethod;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_payment_method, list_payment_methods))
}

/// Either a card token with the acceptance token, or an existing payment source id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PaymentMethodIn {
    pub card_token: Option<String>,
    pub acceptance_token: Option<String>,
    pub accept_personal_auth: Option<String>,
    pub processor_payment_source_id: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PaymentMethodOut {
    pub id: String,
    pub customer_id: String,
    pub brand: Option<String>,
    pub last4: Option<String>,
    pub processor_payment_source_id: i64,
    pub created_at: String,
}

impl From<PaymentMethod> for PaymentMethodOut {
    fn from(method: PaymentMethod) -> Self {
        Self {
            created_at: rfc3339(from_millis(method.created_at)),
            id: method.id,
            customer_id: method.customer_id,
            brand: method.brand,
            last4: method.last4,
            processor_payment_source_id: method.processor_payment_source_id,
        }
    }
}

pub fn processor_error(err: ProcessorError) -> ApiError {
    match err {
        ProcessorError::Rejected { message, .. } => ApiError::Processor(message),
        ProcessorError::EnvironmentMismatch => ApiError::Processor(err.to_string()),
        other => ApiError::Processor(format!(
            "The payment processor could not be reached: {other}"
        )),
    }
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
    let customer =
        state.store.customer(&account, &id).await?.ok_or_else(|| {
            ApiError::not_found(format!("No customer with id `{id}`.")).param("id")
        })?;
    let credentials = state
        .charger
        .credentials(&caller.0)
        .map_err(processor_error)?;
    let source = match (
        body.card_token,
        body.acceptance_token,
        body.processor_payment_source_id,
    ) {
        (Some(token), Some(acceptance_token), None) => {
            let request = NewPaymentSource {
                token,
                customer_email: customer.email.clone(),
                acceptance_token,
                accept_personal_auth: body.accept_personal_auth,
            };
            state
                .processor
                .create_payment_source(&credentials, &request)
                .await
                .map_err(processor_error)?
        }
        (None, None, Some(source_id)) => state
            .processor
            .get_payment_source(&credentials, source_id)
            .await
            .map_err(processor_error)?,
        (Some(_), None, None) => {
            return Err(
                ApiError::bad_request("acceptance_token is required with card_token.")
                    .param("acceptance_token"),
            );
        }
        _ => {
            return Err(ApiError::bad_request(
                "Send either card_token with acceptance_token, or processor_payment_source_id.",
            ));
        }
    };
    let method = PaymentMethod {
        id: PaymentMethodId::generate().into_string(),
        account_id: caller.0.id.clone(),
        customer_id: customer.id,
        processor_payment_source_id: source.id,
        brand: source.brand,
        last4: source.last_four,
        created_at: chrono::Utc::now().timestamp_millis(),
    };
    let method = state.store.insert_payment_method(method).await?;
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
    if state.store.customer(&account, &id).await?.is_none() {
        return Err(ApiError::not_found(format!("No customer with id `{id}`.")).param("id"));
    }
    let page = state
        .store
        .list_payment_methods(&account, &id, &query.page()?)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |m| m.id.clone(),
        PaymentMethodOut::from,
    )))
}
