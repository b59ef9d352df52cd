//! Plans and add-ons (CONTRACT §4, their tax codes §11).

use crate::domain::tax::TaxCode;
use crate::domain::text::Name;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery, metadata_text, metadata_value};
use crate::http::list::{ListOut, ListQuery};
use crate::http::state::AppState;
use crate::ids::{AddonId, CatalogItemId, PlanId};
use crate::store::catalog::{CatalogItem, CatalogKind, CatalogPatch};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_plan, list_plans))
        .routes(with_fallback(
            routes!(get_plan, update_plan),
            plan_method_not_allowed,
        ))
        .routes(routes!(create_addon, list_addons))
        .routes(routes!(get_addon, update_addon))
}

/// The largest amount accepted: ten billion pesos, far from any overflow in fee arithmetic.
const MAX_AMOUNT_CENTS: i64 = 1_000_000_000_000;

/// Body of `POST /v1/plans` and `POST /v1/addons`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "name": "Plan Pro",
    "monthly_amount_cents": 4990000,
    "annual_amount_cents": 49900000,
    "metadata": {"tier": "pro"}
})))]
pub struct CatalogItemIn {
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub name: String,
    /// Integer cents of COP, > 0.
    #[schema(minimum = 1, maximum = 1e12)]
    #[serde(deserialize_with = "crate::http::extract::whole")]
    pub monthly_amount_cents: i64,
    /// Integer cents of COP, > 0.
    #[schema(minimum = 1, maximum = 1e12)]
    #[serde(deserialize_with = "crate::http::extract::whole")]
    pub annual_amount_cents: i64,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// How the tax-inclusive price splits into base and IVA on invoices; by default the
    /// account's `default_tax_code` (`iva_19` unless set).
    #[schema(schema_with = super::openapi::schemas::optional_tax_code)]
    pub tax_code: Option<String>,
}

/// Body of `PATCH` on a plan or add-on.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"name": "Plan Pro 2027", "active": true})))]
pub struct CatalogItemPatch {
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub name: Option<String>,
    pub active: Option<bool>,
    /// For charges that begin from now on.
    #[schema(schema_with = super::openapi::schemas::optional_tax_code)]
    pub tax_code: Option<String>,
}

/// A plan or an add-on.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "plan_0193a1f3a0b17c2d8e9f0a1b2c3d4e5f",
    "name": "Plan Pro",
    "monthly_amount_cents": 4990000,
    "annual_amount_cents": 49900000,
    "active": true,
    "tax_code": "iva_19",
    "metadata": {"tier": "pro"},
    "created_at": "2026-11-02T14:30:00Z"
})))]
pub struct CatalogItemOut {
    pub id: String,
    pub name: String,
    pub monthly_amount_cents: i64,
    pub annual_amount_cents: i64,
    pub active: bool,
    #[schema(schema_with = super::openapi::schemas::tax_code)]
    pub tax_code: TaxCode,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Box<RawValue>>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<CatalogItem> for CatalogItemOut {
    fn from(item: CatalogItem) -> Self {
        Self {
            metadata: metadata_value(item.metadata.as_deref()),
            created_at: rfc3339(from_millis(item.created_at)),
            id: item.id.to_string(),
            name: item.name,
            monthly_amount_cents: item.monthly_amount_cents,
            annual_amount_cents: item.annual_amount_cents,
            active: item.active,
            tax_code: item.tax_code,
        }
    }
}

pub(super) fn parse_name(raw: &str) -> ApiResult<String> {
    Name::parse(raw)
        .map(Name::into_string)
        .map_err(|why| ApiError::bad_request(format!("name {why}.")).param("name"))
}

fn check_amount(value: i64, field: &str) -> ApiResult<i64> {
    if value <= 0 || value > MAX_AMOUNT_CENTS {
        return Err(ApiError::bad_request(format!(
            "{field} must be an integer number of cents greater than 0 and at most {MAX_AMOUNT_CENTS}."
        ))
        .param(field));
    }
    Ok(value)
}

async fn create_item(
    state: &AppState,
    caller: &Caller,
    kind: CatalogKind,
    body: CatalogItemIn,
) -> ApiResult<(StatusCode, Json<CatalogItemOut>)> {
    let item = CatalogItem {
        id: match kind {
            CatalogKind::Plan => PlanId::generate().into(),
            CatalogKind::Addon => AddonId::generate().into(),
        },
        account_id: caller.0.id.clone(),
        kind: kind.as_str().to_owned(),
        name: parse_name(&body.name)?,
        monthly_amount_cents: check_amount(body.monthly_amount_cents, "monthly_amount_cents")?,
        annual_amount_cents: check_amount(body.annual_amount_cents, "annual_amount_cents")?,
        active: true,
        metadata: metadata_text(body.metadata)?,
        created_at: chrono::Utc::now().timestamp_millis(),
        tax_code: match body.tax_code.as_deref() {
            Some(raw) => parse_tax_code(raw)?,
            None => caller.0.default_tax_code,
        },
    };
    let item = state.store.insert_catalog_item(item).await?;
    Ok((StatusCode::CREATED, Json(item.into())))
}

async fn list_items(
    state: &AppState,
    caller: &Caller,
    kind: CatalogKind,
    query: ListQuery,
) -> ApiResult<Json<ListOut<CatalogItemOut>>> {
    let page = state
        .store
        .list_catalog_items(caller.account_id(), kind, &query.page()?)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |item| item.id.to_string(),
        CatalogItemOut::from,
    )))
}

async fn get_item(
    state: &AppState,
    caller: &Caller,
    id: &CatalogItemId,
) -> ApiResult<Json<CatalogItemOut>> {
    state
        .store
        .catalog_item(caller.account_id(), id)
        .await?
        .map(|item| Json(item.into()))
        .ok_or_else(|| not_found(id))
}

async fn update_item(
    state: &AppState,
    caller: &Caller,
    id: &CatalogItemId,
    body: CatalogItemPatch,
) -> ApiResult<Json<CatalogItemOut>> {
    let patch = CatalogPatch {
        name: body.name.as_deref().map(parse_name).transpose()?,
        active: body.active,
        tax_code: body.tax_code.as_deref().map(parse_tax_code).transpose()?,
    };
    state
        .store
        .update_catalog_item(caller.account_id(), id, patch)
        .await?
        .map(|item| Json(item.into()))
        .ok_or_else(|| not_found(id))
}

/// A tax code of CONTRACT §11, or a 400 naming `tax_code`.
fn parse_tax_code(raw: &str) -> ApiResult<TaxCode> {
    TaxCode::parse(raw).ok_or_else(|| {
        ApiError::bad_request(format!(
            "tax_code must be one of {}.",
            TaxCode::WORDS.join(", ")
        ))
        .param("tax_code")
    })
}

fn not_found(id: &CatalogItemId) -> ApiError {
    let noun = match id {
        CatalogItemId::Plan(_) => "plan",
        CatalogItemId::Addon(_) => "add-on",
    };
    ApiError::not_found(format!("No {noun} with id `{id}`.")).param("id")
}

/// Create a plan.
#[utoipa::path(post, path = "/v1/plans", tag = "plans", request_body = CatalogItemIn,
    responses((status = 201, body = CatalogItemOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CatalogItemIn>,
) -> ApiResult<(StatusCode, Json<CatalogItemOut>)> {
    create_item(&state, &caller, CatalogKind::Plan, body).await
}

/// List plans, newest first.
#[utoipa::path(get, path = "/v1/plans", tag = "plans", params(ListQuery),
    responses((status = 200, body = ListOut<CatalogItemOut>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_plans(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<CatalogItemOut>>> {
    list_items(&state, &caller, CatalogKind::Plan, query).await
}

/// Get a plan.
#[utoipa::path(get, path = "/v1/plans/{id}", tag = "plans",
    responses((status = 200, body = CatalogItemOut), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn get_plan(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<CatalogItemOut>> {
    get_item(&state, &caller, &PlanId::given(id).into()).await
}

/// Rename a plan or (de)activate it. An inactive plan cannot be subscribed to.
#[utoipa::path(patch, path = "/v1/plans/{id}", tag = "plans", request_body = CatalogItemPatch,
    responses((status = 200, body = CatalogItemOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn update_plan(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CatalogItemPatch>,
) -> ApiResult<Json<CatalogItemOut>> {
    update_item(&state, &caller, &PlanId::given(id).into(), body).await
}

/// Answers the methods a path's documented operations do not cover with `fallback`.
fn with_fallback<H, T>(
    routes: UtoipaMethodRouter<AppState>,
    fallback: H,
) -> UtoipaMethodRouter<AppState>
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    let (schemas, paths, method_router) = routes;
    (schemas, paths, method_router.fallback(fallback))
}

/// Any method but GET and PATCH on a plan: 405, with the methods that are allowed. Plans are
/// never deleted through the public API, so DELETE is no operation of the document either;
/// its 405 says where plans are deleted.
async fn plan_method_not_allowed(method: Method) -> Response {
    let message = if method == Method::DELETE {
        "Plans cannot be deleted through the API; deactivate it with PATCH {\"active\": false}, \
         or delete it from the dashboard when it has no subscriptions."
    } else {
        "Method not allowed on this path."
    };
    let mut response = ApiError::invalid(StatusCode::METHOD_NOT_ALLOWED, message).into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET,HEAD,PATCH"));
    response
}

/// Create an add-on.
#[utoipa::path(post, path = "/v1/addons", tag = "addons", request_body = CatalogItemIn,
    responses((status = 201, body = CatalogItemOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_addon(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CatalogItemIn>,
) -> ApiResult<(StatusCode, Json<CatalogItemOut>)> {
    create_item(&state, &caller, CatalogKind::Addon, body).await
}

/// List add-ons, newest first.
#[utoipa::path(get, path = "/v1/addons", tag = "addons", params(ListQuery),
    responses((status = 200, body = ListOut<CatalogItemOut>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_addons(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListOut<CatalogItemOut>>> {
    list_items(&state, &caller, CatalogKind::Addon, query).await
}

/// Get an add-on.
#[utoipa::path(get, path = "/v1/addons/{id}", tag = "addons",
    responses((status = 200, body = CatalogItemOut), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn get_addon(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<CatalogItemOut>> {
    get_item(&state, &caller, &AddonId::given(id).into()).await
}

/// Rename an add-on or (de)activate it. Existing attachments keep billing until detached.
#[utoipa::path(patch, path = "/v1/addons/{id}", tag = "addons", request_body = CatalogItemPatch,
    responses((status = 200, body = CatalogItemOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn update_addon(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CatalogItemPatch>,
) -> ApiResult<Json<CatalogItemOut>> {
    update_item(&state, &caller, &AddonId::given(id).into(), body).await
}
