//! Notices to customers (CONTRACT §15): `GET`/`PATCH /v1/account/notices` (how the account's
//! notices are sent; a PATCH merges nested fields; the SMTP password and the WhatsApp token are
//! never answered, only whether they are set), and the notices themselves, `GET /v1/notices`
//! and `GET /v1/notices/{id}`; `GET /v1/notices/preview` shows what a kind says, about made-up
//! data.

use crate::domain::notices::{NoticeSettings, SmtpSecurity};
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiJson, ApiQuery};
use crate::http::list::{ListOut, page_request};
use crate::http::state::AppState;
use crate::ids::{CustomerId, NoticeId, SubscriptionId};
use crate::store::notices::{Notice, NoticeFilter, SettingsError};
use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_notice_settings, update_notice_settings))
        .routes(routes!(list_notices))
        .routes(routes!(preview_notice))
        .routes(routes!(get_notice))
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SmtpIn {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 253, pattern = "^[A-Za-z0-9.:-]+$")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65535)]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 320)]
    pub username: Option<String>,
    /// Kept, never answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1024)]
    pub password: Option<String>,
    /// `none`, `starttls` or `tls`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::api::openapi::schemas::optional_smtp_security)]
    pub security: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmailIn {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = Email, max_length = 254)]
    pub from_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub from_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = Email, max_length = 254)]
    pub reply_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smtp: Option<SmtpIn>,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WhatsappIn {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[0-9]{1,32}$")]
    pub phone_number_id: Option<String>,
    /// Kept, never answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1024)]
    pub access_token: Option<String>,
    /// The Meta app's secret, which signs the status webhooks this service receives at
    /// `/webhooks/whatsapp/{account_id}`. Kept, never answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 256)]
    pub app_secret: Option<String>,
    /// What Meta's webhook handshake (`hub.verify_token`) must present. Kept, never answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 256)]
    pub verify_token: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KindsIn {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_failed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_expiring: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewal_upcoming: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial_ending: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_canceled: Option<bool>,
}

/// Body of `PATCH /v1/account/notices`: what it names changes, at any depth.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "email": {"enabled": true, "from_address": "cobros@tienda.example.co", "from_name": "Tienda",
        "smtp": {"host": "smtp.tienda.example.co", "port": 587, "username": "cobros",
            "password": "secreto", "security": "starttls"}},
    "locale": "es"
})))]
pub struct NoticeSettingsIn {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<EmailIn>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whatsapp: Option<WhatsappIn>,
    /// `es` or `en`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::api::openapi::schemas::optional_notice_locale)]
    pub locale: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kinds: Option<KindsIn>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SmtpOut {
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    /// Whether a password is kept (it is never answered).
    pub password_set: bool,
    #[schema(schema_with = crate::api::openapi::schemas::smtp_security)]
    pub security: SmtpSecurity,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EmailOut {
    pub enabled: bool,
    pub from_address: Option<String>,
    pub from_name: Option<String>,
    pub reply_to: Option<String>,
    pub smtp: Option<SmtpOut>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WhatsappOut {
    pub enabled: bool,
    pub phone_number_id: Option<String>,
    /// Whether an access token is kept (it is never answered).
    pub access_token_set: bool,
    /// Whether an app secret is kept (it is never answered).
    pub app_secret_set: bool,
    /// Whether a verify token is kept (it is never answered).
    pub verify_token_set: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct KindsOut {
    pub receipt: bool,
    pub payment_failed: bool,
    pub card_expiring: bool,
    pub renewal_upcoming: bool,
    pub trial_ending: bool,
    pub subscription_canceled: bool,
}

/// How the account's notices are sent.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "email": {"enabled": false, "from_address": null, "from_name": null, "reply_to": null, "smtp": null},
    "whatsapp": {"enabled": false, "phone_number_id": null, "access_token_set": false,
        "app_secret_set": false, "verify_token_set": false},
    "locale": "es",
    "kinds": {"receipt": true, "payment_failed": true, "card_expiring": true,
        "renewal_upcoming": true, "trial_ending": true, "subscription_canceled": true}
})))]
pub struct NoticeSettingsOut {
    pub email: EmailOut,
    pub whatsapp: WhatsappOut,
    /// `es` or `en`.
    pub locale: String,
    pub kinds: KindsOut,
}

impl From<NoticeSettings> for NoticeSettingsOut {
    fn from(settings: NoticeSettings) -> Self {
        let email = settings.email;
        let kinds = settings.kinds;
        Self {
            email: EmailOut {
                enabled: email.enabled,
                from_address: email.from_address,
                from_name: email.from_name,
                reply_to: email.reply_to,
                smtp: email.smtp.map(|smtp| SmtpOut {
                    host: smtp.host,
                    port: smtp.port,
                    username: smtp.username,
                    password_set: smtp.password.is_some(),
                    security: smtp.security,
                }),
            },
            whatsapp: WhatsappOut {
                enabled: settings.whatsapp.enabled,
                phone_number_id: settings.whatsapp.phone_number_id,
                access_token_set: settings.whatsapp.access_token.is_some(),
                app_secret_set: settings.whatsapp.app_secret.is_some(),
                verify_token_set: settings.whatsapp.verify_token.is_some(),
            },
            locale: settings.locale.as_str().to_owned(),
            kinds: KindsOut {
                receipt: kinds.receipt,
                payment_failed: kinds.payment_failed,
                card_expiring: kinds.card_expiring,
                renewal_upcoming: kinds.renewal_upcoming,
                trial_ending: kinds.trial_ending,
                subscription_canceled: kinds.subscription_canceled,
            },
        }
    }
}

/// How the caller's notices are sent.
#[utoipa::path(get, path = "/v1/account/notices", tag = "notices",
    responses((status = 200, body = NoticeSettingsOut), (status = 401, body = ErrorBody)))]
async fn get_notice_settings(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<NoticeSettingsOut>> {
    let settings = state.store.notice_settings(caller.account_id()).await?;
    Ok(Json(settings.into()))
}

/// Change how the caller's notices are sent: nested fields merge; nothing is sent through a
/// channel until it is `enabled`. An SMTP host on a loopback or private address is refused
/// where webhook URLs to such addresses are.
#[utoipa::path(patch, path = "/v1/account/notices", tag = "notices", request_body = NoticeSettingsIn,
    responses((status = 200, body = NoticeSettingsOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn update_notice_settings(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NoticeSettingsIn>,
) -> ApiResult<Json<NoticeSettingsOut>> {
    if let Some(host) = body
        .email
        .as_ref()
        .and_then(|email| email.smtp.as_ref())
        .and_then(|smtp| smtp.host.as_deref())
    {
        let policy = state.config.webhook_policy(caller.0.sandbox);
        let resolver = state.config.host_resolver();
        crate::notices::smtp::check_host(host, policy, resolver.as_ref())
            .await
            .map_err(|why| ApiError::bad_request(why).param("email.smtp.host"))?;
    }
    let patch = serde_json::to_value(&body)
        .map_err(|err| ApiError::bad_request(format!("The settings do not read: {err}.")))?;
    match state
        .store
        .update_notice_settings(caller.account_id(), &patch)
        .await
    {
        Ok(settings) => Ok(Json(settings.into())),
        Err(SettingsError::Invalid(invalid)) => Err(ApiError::bad_request(format!(
            "{} {}.",
            invalid.field, invalid.message
        ))
        .param(invalid.field)),
        Err(SettingsError::Store(err)) => Err(err.into()),
    }
}

/// A notice to a customer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "ntc_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b", "kind": "receipt", "channel": "email",
    "to": "ana.gomez@example.co", "subject": "Recibo de Tienda: factura SETT12",
    "status": "sent", "scheduled_for": "2026-12-02T14:30:00Z", "sent_at": "2026-12-02T14:30:01Z",
    "attempts": 1, "last_error": null, "suppressed_reason": null,
    "customer_id": "cus_0193a1f5d1e27f3a9b8c7d6e5f4a3b2c",
    "subscription_id": "sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a",
    "invoice_id": "in_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b", "charge_id": null,
    "created_at": "2026-12-02T14:30:00Z", "delivered_at": null, "read_at": null
})))]
pub struct NoticeOut {
    pub id: String,
    /// `receipt`, `payment_failed`, `card_expiring`, `renewal_upcoming`, `trial_ending` or
    /// `subscription_canceled`.
    pub kind: String,
    /// `email` or `whatsapp`.
    pub channel: String,
    /// The address or phone it went to (null until it is sent or suppressed).
    pub to: Option<String>,
    pub subject: Option<String>,
    /// `scheduled`, `sent`, `failed` or `suppressed`.
    pub status: String,
    #[schema(format = DateTime)]
    pub scheduled_for: String,
    #[schema(format = DateTime)]
    pub sent_at: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub suppressed_reason: Option<String>,
    pub customer_id: String,
    pub subscription_id: Option<String>,
    pub invoice_id: Option<String>,
    pub charge_id: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When WhatsApp reported the message delivered (WhatsApp only; null until then).
    #[schema(format = DateTime)]
    pub delivered_at: Option<String>,
    /// When WhatsApp reported the message read (WhatsApp only; null until then).
    #[schema(format = DateTime)]
    pub read_at: Option<String>,
}

impl From<Notice> for NoticeOut {
    fn from(notice: Notice) -> Self {
        let at = |ms: i64| rfc3339(from_millis(ms));
        Self {
            id: notice.id.into_string(),
            kind: notice.kind,
            channel: notice.channel,
            to: notice.recipient,
            subject: notice.subject,
            status: notice.status,
            scheduled_for: at(notice.scheduled_for),
            sent_at: notice.sent_at.map(at),
            attempts: notice.attempts,
            last_error: notice.last_error,
            suppressed_reason: notice.suppressed_reason,
            customer_id: notice.customer_id.into_string(),
            subscription_id: notice.subscription_id.map(|id| id.into_string()),
            invoice_id: notice.invoice_id.map(|id| id.into_string()),
            charge_id: notice.charge_id.map(|id| id.into_string()),
            created_at: at(notice.created_at),
            delivered_at: notice.delivered_at.map(at),
            read_at: notice.read_at.map(at),
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NoticeListQuery {
    pub customer_id: Option<String>,
    pub subscription_id: Option<String>,
    #[param(schema_with = crate::api::openapi::schemas::optional_notice_kind)]
    pub kind: Option<String>,
    #[param(schema_with = crate::api::openapi::schemas::optional_notice_status)]
    pub status: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    pub cursor: Option<String>,
}

/// The caller's notices, newest first.
#[utoipa::path(get, path = "/v1/notices", tag = "notices", params(NoticeListQuery),
    responses((status = 200, body = ListOut<NoticeOut>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_notices(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<NoticeListQuery>,
) -> ApiResult<Json<ListOut<NoticeOut>>> {
    use crate::domain::notices::{NoticeKind, NoticeStatus};
    if let Some(kind) = &query.kind
        && NoticeKind::parse(kind).is_none()
    {
        return Err(ApiError::bad_request(format!(
            "kind must be one of {}.",
            NoticeKind::WORDS.join(", ")
        ))
        .param("kind"));
    }
    if let Some(status) = &query.status
        && NoticeStatus::parse(status).is_none()
    {
        return Err(ApiError::bad_request(format!(
            "status must be one of {}.",
            NoticeStatus::WORDS.join(", ")
        ))
        .param("status"));
    }
    let filter = NoticeFilter {
        customer_id: query.customer_id.map(CustomerId::given),
        subscription_id: query.subscription_id.map(SubscriptionId::given),
        kind: query.kind,
        status: query.status,
    };
    let page = page_request(query.limit, query.cursor)?;
    let page = state
        .store
        .list_notices(caller.account_id(), &filter, &page)
        .await?;
    Ok(Json(ListOut::from_page(
        page,
        |n| n.id.to_string(),
        NoticeOut::from,
    )))
}

/// One notice.
#[utoipa::path(get, path = "/v1/notices/{id}", tag = "notices",
    responses((status = 200, body = NoticeOut), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_notice(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<NoticeOut>> {
    let id = NoticeId::given(id);
    state
        .store
        .notice(caller.account_id(), &id)
        .await?
        .map(|n| Json(n.into()))
        .ok_or_else(|| ApiError::not_found(format!("No notice with id `{id}`.")).param("id"))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PreviewQuery {
    /// The kind to show; `receipt` when absent.
    #[param(schema_with = crate::api::openapi::schemas::optional_notice_kind)]
    pub kind: Option<String>,
    /// The language; the account's setting when absent.
    #[param(schema_with = crate::api::openapi::schemas::optional_notice_locale)]
    pub locale: Option<String>,
}

/// A preview's e-mail.
#[derive(Debug, Serialize, ToSchema)]
pub struct PreviewEmail {
    pub subject: String,
    /// The plain-text part.
    pub text: String,
    /// The HTML part, a whole document.
    pub html: String,
}

/// A preview's WhatsApp template message: the template (registered with Meta under the kind's
/// name) and its body's parameters, in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct PreviewWhatsapp {
    pub template: String,
    /// `es` or `en`.
    pub language: String,
    pub parameters: Vec<String>,
}

/// What a kind of notice says, rendered from made-up data (a customer "Ana María Pérez", $ 49.900)
/// with the account's name, in the account's language or the one asked.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "kind": "payment_failed", "locale": "es",
    "email": {"subject": "No pudimos cobrar tu pago a Tienda",
        "text": "Hola Ana María Pérez,\n\nNo pudimos cobrar tu pago a Tienda\n\n…",
        "html": "<!DOCTYPE html><html lang=\"es\">…</html>"},
    "whatsapp": {"template": "payment_failed", "language": "es",
        "parameters": ["Ana María Pérez", "Tienda", "$ 49.900,00", "Fondos insuficientes",
            "4 de diciembre de 2026", "9 de diciembre de 2026",
            "https://pagos.tienda.example.co/pay/pay_preview"]}
})))]
pub struct NoticePreviewOut {
    pub kind: String,
    /// `es` or `en`.
    pub locale: String,
    pub email: PreviewEmail,
    pub whatsapp: PreviewWhatsapp,
}

/// What a kind of notice says, about made-up data: nothing is read but the account's name and
/// settings, nothing is written or sent. A receipt's attachment (the invoice's PDF or DIAN's
/// ZIP) is not drawn.
#[utoipa::path(get, path = "/v1/notices/preview", tag = "notices", params(PreviewQuery),
    responses((status = 200, body = NoticePreviewOut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn preview_notice(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<PreviewQuery>,
) -> ApiResult<Json<NoticePreviewOut>> {
    use crate::domain::notices::{NoticeKind, NoticeLocale};
    let Some(kind) = NoticeKind::parse(query.kind.as_deref().unwrap_or("receipt")) else {
        return Err(ApiError::bad_request(format!(
            "kind must be one of {}.",
            NoticeKind::WORDS.join(", ")
        ))
        .param("kind"));
    };
    let locale = match query.locale.as_deref() {
        Some(word) => NoticeLocale::parse(word).ok_or_else(|| {
            ApiError::bad_request(format!(
                "locale must be one of {}.",
                NoticeLocale::WORDS.join(", ")
            ))
            .param("locale")
        })?,
        None => {
            state
                .store
                .notice_settings(caller.account_id())
                .await?
                .locale
        }
    };
    let now = state.runtime.clock().now_ms(caller.account_id()).await?;
    let (parties, facts) =
        crate::notices::facts::sample(kind, &caller.0.name, &state.config.public_url(), now);
    let words = crate::notices::message::locale_for(locale);
    let email = crate::notices::message::render(&parties, &facts, words)?;
    let parameters = crate::notices::whatsapp::parameters(&parties, &facts, words);
    Ok(Json(NoticePreviewOut {
        kind: kind.as_str().to_owned(),
        locale: locale.as_str().to_owned(),
        email: PreviewEmail {
            subject: email.subject,
            text: email.text,
            html: email.html,
        },
        whatsapp: PreviewWhatsapp {
            template: kind.as_str().to_owned(),
            language: locale.as_str().to_owned(),
            parameters,
        },
    }))
}
