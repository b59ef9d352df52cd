//! The account's settings as an admin sees and changes them: invoicing and DIAN (with the
//! numbering ranges and their warnings), notices (with a test message, in `actions`), the
//! portal, and the people with access. What an admin switches is saved through the API's own
//! `PATCH /v1/account/portal` and `PATCH /v1/account/notices`, under the form's
//! Idempotency-Key, and recorded with who did it.

use super::frame::{Chrome, failed, locale_of, page, problem};
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{day, int, items, message_of, text};
use super::{InnerApi, Role};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use serde_json::{Value, json};
use std::collections::HashMap;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/settings", get(settings))
        .route("/console/settings/switches", post(save))
}

/// The switches of the settings form: (field, words, where it is in the API's answers).
const SWITCHES: [(&str, &str, &str, &str); 9] = [
    ("email", "switch_email", "notices", "/email/enabled"),
    ("receipt", "notice_receipt", "notices", "/kinds/receipt"),
    (
        "payment_failed",
        "notice_payment_failed",
        "notices",
        "/kinds/payment_failed",
    ),
    (
        "card_expiring",
        "notice_card_expiring",
        "notices",
        "/kinds/card_expiring",
    ),
    (
        "renewal_upcoming",
        "notice_renewal_upcoming",
        "notices",
        "/kinds/renewal_upcoming",
    ),
    (
        "trial_ending",
        "notice_trial_ending",
        "notices",
        "/kinds/trial_ending",
    ),
    (
        "subscription_canceled",
        "notice_subscription_canceled",
        "notices",
        "/kinds/subscription_canceled",
    ),
    (
        "portal_cancel",
        "portal_cancel",
        "portal",
        "/cancel/enabled",
    ),
    (
        "portal_method",
        "portal_method",
        "portal",
        "/payment_method_update/enabled",
    ),
];

/// Each switch as it is now.
async fn toggles(
    api: &InnerApi,
    caller: &ConsoleCaller,
    t: Tr,
) -> Result<Vec<(&'static str, &'static str, bool)>, ApiError> {
    let notices = api.get(caller, "/v1/account/notices").await?;
    let portal = api.get(caller, "/v1/account/portal").await?;
    Ok(SWITCHES
        .iter()
        .map(|(field, words, of, pointer)| {
            let from = if *of == "notices" { &notices } else { &portal };
            (
                *field,
                t.get(words),
                from.pointer(pointer).and_then(Value::as_bool) == Some(true),
            )
        })
        .collect())
}

/// Saves the switches: what the form says on (a checkbox sent) or off (not sent).
async fn save(
    State(state): State<AppState>,
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let t = Tr(locale_of(&caller));
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    let key = field("key");
    let key_ok = super::view::is_key(&key);
    if !crate::http::pages::same_origin(&headers) || !caller.csrf_ok(&field("csrf")) || !key_ok {
        return problem(
            &caller,
            StatusCode::FORBIDDEN,
            t.get("stale_form"),
            "/console/settings",
        );
    }
    if !caller.role.may(Role::Admin) {
        return problem(
            &caller,
            StatusCode::FORBIDDEN,
            t.get("admins_only"),
            "/console",
        );
    }
    let on = |name: &str| form.get(name).is_some_and(|v| v == "on");
    let notices = json!({
        "email": {"enabled": on("email")},
        "kinds": {
            "receipt": on("receipt"),
            "payment_failed": on("payment_failed"),
            "card_expiring": on("card_expiring"),
            "renewal_upcoming": on("renewal_upcoming"),
            "trial_ending": on("trial_ending"),
            "subscription_canceled": on("subscription_canceled"),
        }
    });
    let portal = json!({
        "cancel": {"enabled": on("portal_cancel")},
        "payment_method_update": {"enabled": on("portal_method")},
    });
    let result = async {
        let record = caller
            .record(&state, "settings", caller.account.id.as_str(), &key)
            .await?;
        let mut last = (StatusCode::OK, Value::Null);
        for (path, body, suffix) in [
            ("/v1/account/notices", &notices, "notices"),
            ("/v1/account/portal", &portal, "portal"),
        ] {
            last = api
                .call(
                    &caller,
                    Method::PATCH,
                    path,
                    Some(body),
                    Some(&format!("{key}-{suffix}")),
                )
                .await?;
            if !last.0.is_success() {
                break;
            }
        }
        state
            .store
            .finish_console_action(&record, last.0.as_u16())
            .await?;
        Ok::<_, ApiError>(if last.0.is_success() {
            (t.get("saved").to_owned(), false)
        } else {
            (message_of(&last.1), true)
        })
    }
    .await;
    match result {
        Ok(flash) => settings_page(&api, &caller, Some(flash)).await,
        Err(err) => err.into_response(),
    }
}

pub struct SettingsSection {
    pub title: &'static str,
    /// Whether the notices' test message form goes here.
    pub test_email: bool,
    pub lines: Vec<(&'static str, String)>,
    pub warnings: Vec<String>,
}

#[derive(Template)]
#[template(path = "api/console/templates/settings.html")]
struct SettingsPage {
    lang: &'static str,
    t: Tr,
    title: &'static str,
    chrome: Chrome,
    sections: Vec<SettingsSection>,
    people: Vec<(String, &'static str, String)>,
    /// The test message form's Idempotency-Key.
    key: String,
    email: String,
    /// The switches an admin may turn: field, words, whether on.
    toggles: Vec<(&'static str, &'static str, bool)>,
}

/// The account's invoicing, DIAN, notices and portal settings as they are, and its people.
/// Only an admin opens it (settings are theirs).
async fn settings(Extension(api): Extension<InnerApi>, caller: ConsoleCaller) -> Response {
    settings_page(&api, &caller, None).await
}

/// The settings page, with `flash` (what a test message came to) on top.
pub async fn settings_page(
    api: &InnerApi,
    caller: &ConsoleCaller,
    flash: Option<(String, bool)>,
) -> Response {
    let t = Tr(locale_of(caller));
    if !caller.role.may(Role::Admin) {
        return problem(
            caller,
            StatusCode::FORBIDDEN,
            t.get("admins_only"),
            "/console",
        );
    }
    match (
        settings_sections(api, caller, t).await,
        toggles(api, caller, t).await,
    ) {
        (Ok((sections, people)), Ok(toggles)) => {
            let mut chrome = Chrome::of(caller, t, "settings");
            if let Some((message, bad)) = flash {
                chrome.flash = Some(message);
                chrome.flash_bad = bad;
            }
            let body = SettingsPage {
                lang: t.code(),
                t,
                title: t.get("nav_settings"),
                chrome,
                sections,
                people,
                key: crate::secrets::random_token("con_", 24),
                email: caller.user.email.clone(),
                toggles,
            };
            page(StatusCode::OK, body.render())
        }
        (Err(err), _) | (_, Err(err)) => failed(caller, err),
    }
}

/// The settings page's sections (invoicing and DIAN, notices, portal) and the account's
/// people, read from the API.
pub async fn settings_sections(
    api: &InnerApi,
    caller: &ConsoleCaller,
    t: Tr,
) -> Result<(Vec<SettingsSection>, Vec<(String, &'static str, String)>), ApiError> {
    let locale = locale_of(caller);
    let yes_no = |on: bool| t.get(if on { "on" } else { "off" }).to_owned();
    let invoicing = api.get(caller, "/v1/account/invoicing").await?;
    let dian = &invoicing["dian"];
    let mut dian_lines = vec![
        (t.get("legal_name"), text(&invoicing, "legal_name")),
        ("NIT", text(&invoicing["nit"], "number")),
        (t.get("tax_regime"), text(&invoicing, "tax_regime")),
        ("DIAN", yes_no(dian["enabled"].as_bool() == Some(true))),
    ];
    let mut warnings = Vec::new();
    if !dian.is_null() {
        dian_lines.push((t.get("environment"), text(dian, "environment")));
        dian_lines.push((
            t.get("certificate_expires"),
            day(&text(&dian["certificate"], "expires_at"), locale),
        ));
    }
    let ranges = api
        .get(caller, "/v1/account/invoicing/numbering-ranges")
        .await?;
    for range in items(&ranges) {
        dian_lines.push((
            t.get("numbering_range"),
            format!(
                "{} {}–{} · {} {} · {} {}",
                text(&range, "prefix"),
                int(&range, "from"),
                int(&range, "to"),
                t.get("remaining"),
                int(&range, "remaining"),
                t.get("valid_to"),
                day(&text(&range, "valid_to"), locale)
            ),
        ));
        if range["warning"].as_bool() == Some(true) {
            warnings.push(format!(
                "{} {}",
                t.get("range_near_end"),
                text(&range, "prefix")
            ));
        }
    }
    let notices = api.get(caller, "/v1/account/notices").await?;
    let portal = api.get(caller, "/v1/account/portal").await?;
    let sections = vec![
        SettingsSection {
            title: t.get("invoicing_and_dian"),
            test_email: false,
            lines: dian_lines,
            warnings,
        },
        SettingsSection {
            title: t.get("notices"),
            test_email: true,
            lines: vec![
                (
                    "E-mail",
                    yes_no(notices["email"]["enabled"].as_bool() == Some(true)),
                ),
                (t.get("sender"), text(&notices["email"], "from_address")),
                (
                    "WhatsApp",
                    yes_no(notices["whatsapp"]["enabled"].as_bool() == Some(true)),
                ),
                (t.get("language"), text(&notices, "locale")),
            ],
            warnings: Vec::new(),
        },
        SettingsSection {
            title: t.get("portal"),
            test_email: false,
            lines: vec![
                (
                    t.get("portal_cancel"),
                    yes_no(portal["cancel"]["enabled"].as_bool() == Some(true)),
                ),
                (
                    t.get("portal_switch"),
                    yes_no(portal["plan_switch"]["enabled"].as_bool() == Some(true)),
                ),
                (
                    t.get("portal_method"),
                    yes_no(portal["payment_method_update"]["enabled"].as_bool() == Some(true)),
                ),
                (
                    t.get("portal_invoices"),
                    yes_no(portal["invoice_history"]["enabled"].as_bool() == Some(true)),
                ),
            ],
            warnings: Vec::new(),
        },
    ];
    let people = items(&api.get(caller, "/v1/console-users").await?)
        .iter()
        .map(|person| {
            let role = text(person, "role");
            let status = text(person, "status");
            (
                text(person, "email"),
                t.get(match role.as_str() {
                    "admin" => "role_admin",
                    "support" => "role_support",
                    _ => "role_accountant",
                }),
                t.find(&format!("person_{status}"))
                    .unwrap_or(&status)
                    .to_owned(),
            )
        })
        .collect();
    Ok((sections, people))
}
