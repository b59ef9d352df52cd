//! Customers (CONTRACT §4, §11): who pays, and whom an invoice is made out to: a tax identity
//! (a NIT with DIAN's check digit), a legal name and an address with its DANE city code. An
//! invoice keeps the customer as they were when it was issued; a change here reaches only the
//! invoices issued after it.

use super::catalog::parse_name;
use crate::domain::tax_id::{TaxId, is_dane_city_code, nit_check_digit};
use crate::domain::text::{CONTROL, Email, Name, has_control};
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery, metadata_text, metadata_value};
use crate::http::list::{ListOut, ListQuery};
use crate::http::state::AppState;
use crate::ids::CustomerId;
use crate::store::catalog::{Customer, CustomerPatch};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_customer, list_customers))
        .routes(routes!(get_customer, update_customer))
}

/// A tax identity as sent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaxIdIn {
    /// CC, CE, NIT, PP, TI or DIE.
    #[serde(rename = "type")]
    #[schema(schema_with = super::openapi::schemas::tax_id_kind)]
    pub kind: String,
    /// A NIT as `900123456` or `900123456-8` (a check digit sent must be DIAN's); a CC or TI
    /// 3 to 15 digits; a CE, PP or DIE 3 to 20 letters or digits.
    #[schema(pattern = "^[0-9A-Za-z]{3,20}(-[0-9])?$")]
    pub number: String,
}

/// An address: its line, its DANE municipality code (`11001` is Bogotá) and its country.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddressIn {
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub line: String,
    #[schema(pattern = "^(0[5-9]|[1-9][0-9])[0-9]{3}$")]
    pub city_code: String,
    /// ISO 3166-1 alpha-2 (`CO`).
    #[schema(pattern = "^[A-Z]{2}$")]
    pub country: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "email": "ana.gomez@example.co",
    "name": "Ana Gómez",
    "metadata": {"crm_id": "A-1042"},
    "tax_id": {"type": "NIT", "number": "900123456-8"},
    "legal_name": "Gómez Asociados S.A.S.",
    "address": {"line": "Calle 93 # 11-26", "city_code": "11001", "country": "CO"}
})))]
pub struct CustomerIn {
    #[schema(format = Email, max_length = 254)]
    pub email: String,
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub name: String,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    pub tax_id: Option<TaxIdIn>,
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub legal_name: Option<String>,
    pub address: Option<AddressIn>,
    /// E.164 (`+573001234567`), for WhatsApp notices.
    #[schema(pattern = r"^\+[1-9][0-9]{7,14}$")]
    pub phone: Option<String>,
    /// Whether the customer agreed to WhatsApp notices (default false; CONTRACT §15).
    pub whatsapp_opt_in: Option<bool>,
}

/// Body of `PATCH /v1/customers/{id}`: what it names changes; the rest stays.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"tax_id": {"type": "CC", "number": "1020304050"}})))]
pub struct CustomerPatchIn {
    #[schema(format = Email, max_length = 254)]
    pub email: Option<String>,
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub name: Option<String>,
    pub tax_id: Option<TaxIdIn>,
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub legal_name: Option<String>,
    pub address: Option<AddressIn>,
    /// E.164 (`+573001234567`), for WhatsApp notices.
    #[schema(pattern = r"^\+[1-9][0-9]{7,14}$")]
    pub phone: Option<String>,
    /// Whether the customer agreed to WhatsApp notices (default false; CONTRACT §15).
    pub whatsapp_opt_in: Option<bool>,
}

/// A tax identity as stored, with DIAN's check digit for a NIT.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaxIdOut {
    #[serde(rename = "type")]
    #[schema(schema_with = super::openapi::schemas::tax_id_kind)]
    pub kind: String,
    pub number: String,
    /// A NIT's check digit (DIAN's modulo 11); null for other documents.
    pub check_digit: Option<u8>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "email": "ana.gomez@example.co",
    "name": "Ana Gómez",
    "metadata": {"crm_id": "A-1042"},
    "tax_id": {"type": "NIT", "number": "900123456", "check_digit": 8},
    "legal_name": "Gómez Asociados S.A.S.",
    "address": {"line": "Calle 93 # 11-26", "city_code": "11001", "country": "CO"},
    "phone": "+573001234567",
    "whatsapp_opt_in": false,
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct CustomerOut {
    pub id: String,
    #[schema(format = Email)]
    pub email: String,
    pub name: String,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Box<RawValue>>,
    /// Null: invoices are made out to the final consumer (`consumidor final`).
    pub tax_id: Option<TaxIdOut>,
    pub legal_name: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub address: Option<Box<RawValue>>,
    pub phone: Option<String>,
    pub whatsapp_opt_in: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<Customer> for CustomerOut {
    fn from(customer: Customer) -> Self {
        let tax_id = match (customer.tax_id_type, customer.tax_id_number) {
            (Some(kind), Some(number)) => Some(TaxIdOut {
                check_digit: (kind == "NIT").then(|| nit_check_digit(&number)).flatten(),
                kind,
                number,
            }),
            _ => None,
        };
        Self {
            metadata: metadata_value(customer.metadata.as_deref()),
            address: metadata_value(customer.address.as_deref()),
            created_at: rfc3339(from_millis(customer.created_at)),
            tax_id,
            legal_name: customer.legal_name,
            phone: customer.phone,
            whatsapp_opt_in: customer.whatsapp_opt_in,
            id: customer.id.into_string(),
            email: customer.email,
            name: customer.name,
        }
    }
}

pub(crate) fn parse_email(raw: &str) -> ApiResult<String> {
    Email::parse(raw)
        .map(Email::into_string)
        .map_err(|why| ApiError::bad_request(format!("email {why}.")).param("email"))
}

fn parse_tax_id(raw: &TaxIdIn) -> ApiResult<TaxId> {
    TaxId::parse(&raw.kind, &raw.number)
        .map_err(|why| ApiError::bad_request(format!("tax_id: {why}.")).param("tax_id"))
}

/// A legal name (a customer's or the seller's), as a name is parsed.
pub(super) fn parse_legal_name(raw: &str) -> ApiResult<String> {
    Name::parse(raw).map(Name::into_string).map_err(|why| {
        let why = if why == CONTROL {
            why
        } else {
            "must have a visible character and at most 200"
        };
        ApiError::bad_request(format!("legal_name {why}.")).param("legal_name")
    })
}

/// The address as stored (JSON), refused unless its city is a DANE code.
pub(super) fn parse_address(raw: &AddressIn) -> ApiResult<String> {
    let line = raw.line.trim();
    if line.is_empty() || line.chars().count() > 200 {
        return Err(
            ApiError::bad_request("address.line must have 1 to 200 characters.")
                .param("address.line"),
        );
    }
    if has_control(&raw.line) {
        return Err(ApiError::bad_request(format!("address.line {CONTROL}.")).param("address.line"));
    }
    if !is_dane_city_code(&raw.city_code) {
        return Err(ApiError::bad_request(
            "address.city_code must be a DANE municipality code (five digits, 11001 for Bogotá).",
        )
        .param("address.city_code"));
    }
    if raw.country.len() != 2 || !raw.country.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(ApiError::bad_request(
            "address.country must be an ISO 3166-1 alpha-2 code (CO).",
        )
        .param("address.country"));
    }
    serde_json::to_string(&AddressIn {
        line: line.to_owned(),
        city_code: raw.city_code.clone(),
        country: raw.country.clone(),
    })
    .map_err(|err| ApiError::Internal(Box::new(err)))
}

/// Create a customer.
#[utoipa::path(post, path = "/v1/customers", tag = "customers", request_body = CustomerIn,
    responses((status = 201, body = CustomerOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_customer(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CustomerIn>,
) -> ApiResult<(StatusCode, Json<CustomerOut>)> {
    let tax_id = body.tax_id.as_ref().map(parse_tax_id).transpose()?;
    let customer = Customer {
        id: CustomerId::generate(),
        account_id: caller.0.id.clone(),
        email: parse_email(&body.email)?,
        name: parse_name(&body.name)?,
        metadata: metadata_text(body.metadata)?,
        created_at: chrono::Utc::now().timestamp_millis(),
        tax_id_type: tax_id.as_ref().map(|id| id.kind.as_str().to_owned()),
        tax_id_number: tax_id.map(|id| id.number),
        legal_name: body
            .legal_name
            .as_deref()
            .map(parse_legal_name)
            .transpose()?,
        address: body.address.as_ref().map(parse_address).transpose()?,
        phone: body.phone.as_deref().map(parse_phone).transpose()?,
        whatsapp_opt_in: body.whatsapp_opt_in.unwrap_or(false),
    };
    let customer = state.store.insert_customer(customer).await?;
    Ok((StatusCode::CREATED, Json(customer.into())))
}

/// Change a customer's e-mail, name or invoicing details (invoices issued before keep theirs).
#[utoipa::path(patch, path = "/v1/customers/{id}", tag = "customers", request_body = CustomerPatchIn,
    responses((status = 200, body = CustomerOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn update_customer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CustomerPatchIn>,
) -> ApiResult<Json<CustomerOut>> {
    let patch = CustomerPatch {
        email: body.email.as_deref().map(parse_email).transpose()?,
        name: body.name.as_deref().map(parse_name).transpose()?,
        phone: body.phone.as_deref().map(parse_phone).transpose()?,
        whatsapp_opt_in: body.whatsapp_opt_in,
        ..invoicing_patch(
            body.tax_id.as_ref(),
            body.legal_name.as_deref(),
            body.address.as_ref(),
        )?
    };
    let id = CustomerId::given(id);
    state
        .store
        .update_customer(caller.account_id(), &id, patch)
        .await?
        .map(|c| Json(c.into()))
        .ok_or_else(|| no_customer(&id))
}

/// A change of whom invoices are made out to (the customer's PATCH and the portal's), each
/// field checked and a 400 naming the first bad one.
pub(super) fn invoicing_patch(
    tax_id: Option<&TaxIdIn>,
    legal_name: Option<&str>,
    address: Option<&AddressIn>,
) -> ApiResult<CustomerPatch> {
    let tax_id = tax_id.map(parse_tax_id).transpose()?;
    Ok(CustomerPatch {
        email: None,
        name: None,
        tax_id: tax_id.map(|id| (id.kind.as_str().to_owned(), id.number)),
        legal_name: legal_name.map(parse_legal_name).transpose()?,
        address: address.map(parse_address).transpose()?,
        phone: None,
        whatsapp_opt_in: None,
    })
}

/// A phone number in E.164: `+`, a country code not starting with 0, 8 to 15 digits in all.
fn parse_phone(raw: &str) -> ApiResult<String> {
    let digits = raw.strip_prefix('+').unwrap_or_default();
    let valid = (8..=15).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !digits.starts_with('0');
    if valid {
        Ok(raw.to_owned())
    } else {
        Err(ApiError::bad_request("phone must be in E.164 form, as +573001234567.").param("phone"))
    }
}

fn no_customer(id: &CustomerId) -> ApiError {
    ApiError::not_found(format!("No customer with id `{id}`.")).param("id")
}

/// List customers, newest first.
#[utoipa::path(get, path = "/v1/customers", tag = "customers", params(ListQuery),
    responses((status = 200, body = ListOut<CustomerOut>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_customers(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<CustomerOut>>> {
    let page = state
        .store
        .list_customers(caller.account_id(), &query.page()?)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |c| c.id.to_string(),
        CustomerOut::from,
    )))
}

/// Get a customer.
#[utoipa::path(get, path = "/v1/customers/{id}", tag = "customers",
    responses((status = 200, body = CustomerOut), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn get_customer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<CustomerOut>> {
    let id = CustomerId::given(id);
    state
        .store
        .customer(caller.account_id(), &id)
        .await?
        .map(|c| Json(c.into()))
        .ok_or_else(|| no_customer(&id))
}
