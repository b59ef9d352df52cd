//! The seller's invoicing settings (CONTRACT §11): `GET` and `PATCH /v1/account/invoicing`:
//! the legal name, NIT, address and tax regime invoices are issued under, and the tax code of a
//! plan or add-on created without one, and DIAN's settings (§12, `api::dian`: checked, their
//! secrets stored and never returned; `dian` reads null while DIAN is off).

use super::customers::{AddressIn, parse_address};
use crate::domain::tax::{TaxCode, TaxRegime};
use crate::domain::tax_id::TaxId;
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;
use crate::store::accounts::Account;
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_invoicing, update_invoicing))
}

/// Body of `PATCH /v1/account/invoicing`: what it names changes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "legal_name": "Tienda Ejemplo S.A.S.",
    "nit": "900123456-8",
    "address": {"line": "Carrera 7 # 71-21", "city_code": "11001", "country": "CO"},
    "tax_regime": "responsable_iva",
    "default_tax_code": "iva_19"
})))]
pub struct InvoicingIn {
    #[schema(
        pattern = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$",
        max_length = 200
    )]
    pub legal_name: Option<String>,
    /// `900123456` or `900123456-8` (a check digit sent must be DIAN's).
    #[schema(schema_with = super::openapi::schemas::optional_nit)]
    pub nit: Option<String>,
    pub address: Option<AddressIn>,
    #[schema(schema_with = super::openapi::schemas::optional_tax_regime)]
    pub tax_regime: Option<String>,
    #[schema(schema_with = super::openapi::schemas::optional_tax_code)]
    pub default_tax_code: Option<String>,
    /// Turns DIAN's electronic invoicing on (or replaces its settings); it needs the seller's
    /// legal name, NIT, address and tax regime.
    pub dian: Option<super::dian::DianIn>,
}

/// A NIT with its check digit.
#[derive(Debug, Serialize, ToSchema)]
pub struct NitOut {
    pub number: String,
    pub check_digit: u8,
}

/// The seller's invoicing settings.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "legal_name": "Tienda Ejemplo S.A.S.",
    "nit": {"number": "900123456", "check_digit": 8},
    "address": {"line": "Carrera 7 # 71-21", "city_code": "11001", "country": "CO"},
    "tax_regime": "responsable_iva",
    "default_tax_code": "iva_19",
    "dian": null
})))]
pub struct InvoicingOut {
    pub legal_name: Option<String>,
    pub nit: Option<NitOut>,
    #[schema(value_type = Option<Object>)]
    pub address: Option<serde_json::Value>,
    #[schema(schema_with = super::openapi::schemas::optional_tax_regime)]
    pub tax_regime: Option<String>,
    #[schema(schema_with = super::openapi::schemas::tax_code)]
    pub default_tax_code: TaxCode,
    /// DIAN's settings, without secrets; null while DIAN's electronic invoicing is off.
    pub dian: Option<super::dian::DianSettingsOut>,
}

impl InvoicingOut {
    fn of(account: &Account) -> Self {
        let seller = account.seller();
        Self {
            nit: seller.nit.and_then(|number| {
                let nit = TaxId::parse("NIT", &number).ok()?;
                Some(NitOut {
                    number: nit.number,
                    check_digit: nit.check_digit?,
                })
            }),
            legal_name: seller.legal_name,
            address: seller.address,
            tax_regime: seller.tax_regime,
            default_tax_code: account.default_tax_code,
            dian: super::dian::DianSettingsOut::of(account),
        }
    }
}

/// The caller's invoicing settings.
#[utoipa::path(get, path = "/v1/account/invoicing", tag = "account",
    responses((status = 200, body = InvoicingOut), (status = 401, body = ErrorBody)))]
async fn get_invoicing(caller: Caller) -> Json<InvoicingOut> {
    Json(InvoicingOut::of(&caller.0))
}

/// Change the caller's invoicing settings; what the body does not name stays.
#[utoipa::path(patch, path = "/v1/account/invoicing", tag = "account", request_body = InvoicingIn,
    responses((status = 200, body = InvoicingOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn update_invoicing(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<InvoicingIn>,
) -> ApiResult<Json<InvoicingOut>> {
    let mut seller = caller.0.seller();
    if let Some(name) = &body.legal_name {
        seller.legal_name = Some(super::customers::parse_legal_name(name)?);
    }
    if let Some(nit) = &body.nit {
        let nit = TaxId::parse("NIT", nit)
            .map_err(|why| ApiError::bad_request(format!("nit: {why}.")).param("nit"))?;
        seller.nit = Some(nit.number);
    }
    if let Some(address) = &body.address {
        let stored = parse_address(address)?;
        seller.address =
            Some(serde_json::from_str(&stored).map_err(|err| ApiError::Internal(Box::new(err)))?);
    }
    if let Some(regime) = &body.tax_regime {
        let regime = TaxRegime::parse(regime).ok_or_else(|| {
            ApiError::bad_request(format!(
                "tax_regime must be one of {}.",
                TaxRegime::WORDS.join(", ")
            ))
            .param("tax_regime")
        })?;
        seller.tax_regime = Some(regime.as_str().to_owned());
    }
    let default_tax_code = match body.default_tax_code.as_deref() {
        Some(raw) => TaxCode::parse(raw).ok_or_else(|| {
            ApiError::bad_request(format!(
                "default_tax_code must be one of {}.",
                TaxCode::WORDS.join(", ")
            ))
            .param("default_tax_code")
        })?,
        None => caller.0.default_tax_code,
    };
    let dian = match &body.dian {
        Some(dian) => {
            let now = chrono::Utc::now().timestamp_millis();
            Some(super::dian::parse_dian(dian, &seller, now).await?)
        }
        None => None,
    };
    let mut account = state
        .store
        .update_invoicing(caller.account_id(), &seller, default_tax_code)
        .await?;
    if let Some((settings, secrets)) = dian {
        account = state
            .store
            .enable_dian(caller.account_id(), &settings, secrets)
            .await?;
    }
    // Every node drops its cached copy before this answers: the next request, wherever it
    // lands, creates plans with the new default.
    state.keys.forget_account(&account.id);
    state.runtime.account_changed(&account.id).await?;
    Ok(Json(InvoicingOut::of(&account)))
}
