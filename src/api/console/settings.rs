//! The account's settings as an admin sees and changes them: invoicing and DIAN (with the
//! numbering ranges and their warnings), notices (with a test message, in `actions`), the
//! portal, and the people with access. What an admin switches, and the forms of
//! `settings_fields` (the e-mail server, WhatsApp, the seller's data), are saved through the
//! API's own PATCHes (`/v1/account/portal`, `/v1/account/notices`, `/v1/account/invoicing`),
//! under the form's Idempotency-Key, and recorded with who did it.

use super::frame::{Chrome, failed, locale_of, page, problem};
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::settings_fields::{self, ShownForm};
use super::view::{day, int, items, message_of, text};
use super::{InnerApi, Role};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use askama::Template;
use axum::extract::{Path, State};
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
        .route("/console/settings/forms/{form}", post(save_form))
}

/// What the settings page shows, each read from the API once.
struct Answers {
    invoicing: Value,
    ranges: Value,
    notices: Value,
    portal: Value,
    people: Value,
}

impl Answers {
    async fn read(api: &InnerApi, caller: &ConsoleCaller) -> Result<Self, ApiError> {
        Ok(Answers {
            invoicing: api.get(caller, "/v1/account/invoicing").await?,
            ranges: api
                .get(caller, "/v1/account/invoicing/numbering-ranges")
                .await?,
            notices: api.get(caller, "/v1/account/notices").await?,
            portal: api.get(caller, "/v1/account/portal").await?,
            people: api.get(caller, "/v1/console-users").await?,
        })
    }

    /// The API's answer a settings form reads (the GET of the path it PATCHes).
    fn of_path(&self, path: &str) -> &Value {
        match path {
            "/v1/account/invoicing" => &self.invoicing,
            "/v1/account/portal" => &self.portal,
            _ => &self.notices,
        }
    }
}

/// The switches of the settings form: (field, words, where it is in the API's answers).
const SWITCHES: [(&str, &str, &str, &str); 10] = [
    ("email", "switch_email", "notices", "/email/enabled"),
    (
        "whatsapp",
        "switch_whatsapp",
        "notices",
        "/whatsapp/enabled",
    ),
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
fn toggles(answers: &Answers, t: Tr) -> Vec<(&'static str, &'static str, bool)> {
    SWITCHES
        .iter()
        .map(|(field, words, of, pointer)| {
            let from = if *of == "notices" {
                &answers.notices
            } else {
                &answers.portal
            };
            (
                *field,
                t.get(words),
                from.pointer(pointer).and_then(Value::as_bool) == Some(true),
            )
        })
        .collect()
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
    if let Some(refused) = refusal(&caller, &headers, &form) {
        return refused;
    }
    let key = posted(&form, "key");
    let on = |name: &str| form.get(name).is_some_and(|v| v == "on");
    let notices = json!({
        "email": {"enabled": on("email")},
        "whatsapp": {"enabled": on("whatsapp")},
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
        caller.finish(&state, &record, last.0.as_u16()).await?;
        Ok::<_, ApiError>(if last.0.is_success() {
            (t.get("saved").to_owned(), false)
        } else {
            (message_of(&last.1), true)
        })
    }
    .await;
    // The page shows the settings as they are now, not as the request found them.
    match (result, caller.refreshed(&state).await) {
        (Ok(flash), Ok(caller)) => settings_page(&api, &caller, Some(flash)).await,
        (Err(err), _) | (_, Err(err)) => err.into_response(),
    }
}

/// The form's field `name`, or nothing.
fn posted(form: &HashMap<String, String>, name: &str) -> String {
    form.get(name).cloned().unwrap_or_default()
}

/// Why an admin's settings form is refused, if it is: not from this origin, without the
/// session's token or a well-formed key (403), or not an admin's (403).
fn refusal(
    caller: &ConsoleCaller,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Option<Response> {
    let t = Tr(locale_of(caller));
    let fresh = crate::http::pages::same_origin(headers)
        && caller.csrf_ok(&posted(form, "csrf"))
        && super::view::is_key(&posted(form, "key"));
    if !fresh {
        return Some(problem(
            caller,
            StatusCode::FORBIDDEN,
            t.get("stale_form"),
            "/console/settings",
        ));
    }
    if !caller.role.may(Role::Admin) {
        return Some(problem(
            caller,
            StatusCode::FORBIDDEN,
            t.get("admins_only"),
            "/console",
        ));
    }
    None
}

/// Saves a form of `settings_fields` through the API's PATCH of its path: what was typed in,
/// at its place in the body; the page then says the API's answer.
async fn save_form(
    State(state): State<AppState>,
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let t = Tr(locale_of(&caller));
    let Some(def) = settings_fields::form(&id) else {
        return problem(
            &caller,
            StatusCode::NOT_FOUND,
            t.get("not_found"),
            "/console/settings",
        );
    };
    if let Some(refused) = refusal(&caller, &headers, &form) {
        return refused;
    }
    let Some(body) = settings_fields::body(def, &form) else {
        return settings_page(
            &api,
            &caller,
            Some((t.get("nothing_typed").to_owned(), false)),
        )
        .await;
    };
    let key = posted(&form, "key");
    let result = async {
        let action = format!("settings_{}", def.id);
        let record = caller
            .record(&state, &action, caller.account.id.as_str(), &key)
            .await?;
        let (status, answer) = api
            .call(&caller, Method::PATCH, def.path, Some(&body), Some(&key))
            .await?;
        caller.finish(&state, &record, status.as_u16()).await?;
        Ok::<_, ApiError>(if status.is_success() {
            (t.get("saved").to_owned(), false)
        } else {
            (message_of(&answer), true)
        })
    }
    .await;
    // The page shows the settings as they are now, not as the request found them.
    match (result, caller.refreshed(&state).await) {
        (Ok(flash), Ok(caller)) => settings_page(&api, &caller, Some(flash)).await,
        (Err(err), _) | (_, Err(err)) => err.into_response(),
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
    /// The forms of `settings_fields`, filled in.
    forms: Vec<ShownForm>,
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
    match Answers::read(api, caller).await {
        Ok(answers) => {
            let (sections, people) = settings_sections(&answers, caller, t);
            let toggles = toggles(&answers, t);
            let forms = settings_fields::FORMS
                .iter()
                .map(|def| settings_fields::shown(def, answers.of_path(def.path), t))
                .collect();
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
                forms,
            };
            page(StatusCode::OK, body.render())
        }
        Err(err) => failed(caller, err),
    }
}

/// The settings page's sections (invoicing and DIAN, notices, portal) and the account's
/// people, from the API's answers.
fn settings_sections(
    answers: &Answers,
    caller: &ConsoleCaller,
    t: Tr,
) -> (Vec<SettingsSection>, Vec<(String, &'static str, String)>) {
    let locale = locale_of(caller);
    let yes_no = |on: bool| t.get(if on { "on" } else { "off" }).to_owned();
    let invoicing = &answers.invoicing;
    let dian = &invoicing["dian"];
    let mut dian_lines = vec![
        (t.get("legal_name"), text(invoicing, "legal_name")),
        ("NIT", text(&invoicing["nit"], "number")),
        (t.get("tax_regime"), text(invoicing, "tax_regime")),
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
    for range in items(&answers.ranges) {
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
    let notices = &answers.notices;
    let portal = &answers.portal;
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
                (t.get("language"), text(notices, "locale")),
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
    let people = items(&answers.people)
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
    (sections, people)
}
