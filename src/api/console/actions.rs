//! What people do through the console. Each action is a form posted twice: the first post
//! answers a page saying what will happen (a plan change with the API's own preview of what it
//! charges now), the second, with `confirm=yes`, does it. Both posts are checked on the
//! server: the session's CSRF token, a same-origin post, and the person's role (support acts
//! on subscriptions; only an admin refunds). The action is recorded (`console_actions`) with
//! who took it before it is sent, then sent to the API itself (`InnerApi`) under the form's
//! Idempotency-Key, in the person's own Idempotency scope: a form posted again (a double
//! click, a reload) replays the first answer instead of acting twice. The API's answer is
//! added to the record and shown on the subscription's page.

use super::frame::{Chrome, locale_of, page, problem};
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{is_id, is_key, message_of, money, text};
use super::{InnerApi, Role};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Form, Router};
use serde::Deserialize;
use serde_json::{Value, json};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/console/subscriptions/{id}/{action}",
            post(on_subscription),
        )
        .route("/console/settings/test-email", post(test_email))
}

#[derive(Deserialize)]
pub struct ActionForm {
    #[serde(default)]
    pub(super) csrf: String,
    #[serde(default)]
    pub(super) key: String,
    pub(super) confirm: Option<String>,
    pub(super) plan_id: Option<String>,
    pub(super) proration_date: Option<String>,
    pub(super) at_period_end: Option<String>,
    pub(super) amount: Option<String>,
    pub(super) amount_cents: Option<i64>,
    pub(super) reason: Option<String>,
    pub(super) subscription_id: Option<String>,
    pub(super) to: Option<String>,
}

/// A select on a confirmation page: its field's name, its label, its options (value, words).
pub(super) type Choice = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

#[derive(Template)]
#[template(path = "api/console/templates/confirm.html")]
pub(super) struct ConfirmPage {
    pub(super) lang: &'static str,
    pub(super) t: Tr,
    pub(super) title: String,
    pub(super) chrome: Chrome,
    pub(super) lines: Vec<String>,
    pub(super) action: String,
    pub(super) fields: Vec<(&'static str, String)>,
    pub(super) choice: Option<Choice>,
    pub(super) note: Option<(&'static str, &'static str)>,
    pub(super) button: &'static str,
    pub(super) button_class: &'static str,
    pub(super) back: String,
}

/// The checks every post meets before anything else: a same-origin post carrying the
/// session's CSRF token, by a person whose role may do `needed`, with a key of ours.
pub(super) fn refused(
    caller: &ConsoleCaller,
    headers: &HeaderMap,
    form: &ActionForm,
    needed: Role,
    back: &str,
) -> Option<Response> {
    let t = Tr(locale_of(caller));
    if !crate::http::pages::same_origin(headers) || !caller.csrf_ok(&form.csrf) {
        return Some(problem(
            caller,
            StatusCode::FORBIDDEN,
            t.get("stale_form"),
            back,
        ));
    }
    if !caller.role.may(needed) {
        return Some(problem(
            caller,
            StatusCode::FORBIDDEN,
            t.get(if needed == Role::Admin {
                "admins_only"
            } else {
                "support_only"
            }),
            back,
        ));
    }
    if !is_key(&form.key) {
        return Some(problem(
            caller,
            StatusCode::BAD_REQUEST,
            t.get("stale_form"),
            back,
        ));
    }
    None
}

async fn on_subscription(
    State(state): State<AppState>,
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let t = Tr(locale_of(&caller));
    let back = format!("/console/subscriptions/{id}");
    let known = [
        "cancel",
        "pause",
        "resume",
        "charge-now",
        "change-plan",
        "portal-link",
    ];
    if !is_id(&id) || !known.contains(&action.as_str()) {
        return problem(
            &caller,
            StatusCode::NOT_FOUND,
            t.get("not_found"),
            "/console",
        );
    }
    if let Some(refusal) = refused(&caller, &headers, &form, Role::Support, &back) {
        return refusal;
    }
    match subscription_action(&state, &api, &caller, &id, &action, &form).await {
        Ok(response) => response,
        Err(err) => super::frame::failed(&caller, err),
    }
}

async fn subscription_action(
    state: &AppState,
    api: &InnerApi,
    caller: &ConsoleCaller,
    id: &str,
    action: &str,
    form: &ActionForm,
) -> Result<Response, ApiError> {
    let locale = locale_of(caller);
    let t = Tr(locale);
    let back = format!("/console/subscriptions/{id}");
    let sub = api.get(caller, &format!("/v1/subscriptions/{id}")).await?;
    let confirmed = form.confirm.as_deref() == Some("yes");
    let mut confirm = ConfirmPage {
        lang: t.code(),
        t,
        title: String::new(),
        chrome: Chrome::of(caller, t, "customers"),
        lines: Vec::new(),
        action: format!("/console/subscriptions/{id}/{action}"),
        fields: vec![("key", form.key.clone())],
        choice: None,
        note: None,
        button: t.get("confirm"),
        button_class: "",
        back: back.clone(),
    };
    let (record, path, body): (&'static str, String, Value) = match action {
        "cancel" => {
            if !confirmed {
                confirm.title = t.get("confirm_cancel").to_owned();
                confirm.lines.push(format!(
                    "{} {}",
                    t.get("period_ends_on"),
                    super::view::day(&text(&sub, "current_period_end"), locale)
                ));
                confirm.choice = Some((
                    "at_period_end",
                    t.get("when"),
                    vec![
                        ("true", t.get("at_period_end")),
                        ("false", t.get("immediately")),
                    ],
                ));
                confirm.button = t.get("cancel");
                confirm.button_class = "danger";
                return Ok(page(StatusCode::OK, confirm.render()));
            }
            let at_period_end = form.at_period_end.as_deref() != Some("false");
            (
                "cancel",
                format!("/v1/subscriptions/{id}/cancel"),
                json!({"at_period_end": at_period_end}),
            )
        }
        "pause" | "resume" | "charge-now" => {
            if !confirmed {
                confirm.title = t
                    .get(match action {
                        "pause" => "confirm_pause",
                        "resume" => "confirm_resume",
                        _ => "confirm_charge_now",
                    })
                    .to_owned();
                return Ok(page(StatusCode::OK, confirm.render()));
            }
            (
                match action {
                    "pause" => "pause",
                    "resume" => "resume",
                    _ => "charge_now",
                },
                format!("/v1/subscriptions/{id}/{action}"),
                json!({}),
            )
        }
        "portal-link" => {
            if !confirmed {
                let customer = customer_of(api, caller, &sub).await?;
                confirm.title = format!(
                    "{} {}",
                    t.get("confirm_portal_link"),
                    text(&customer, "email")
                );
                confirm.lines.push(t.get("portal_link_explain").to_owned());
                confirm.button = t.get("send");
                return Ok(page(StatusCode::OK, confirm.render()));
            }
            return send_portal_link(state, api, caller, id, &sub, &form.key).await;
        }
        _ => {
            let Some(plan_id) = form.plan_id.clone().filter(|p| is_id(p)) else {
                return Ok(problem(
                    caller,
                    StatusCode::BAD_REQUEST,
                    t.get("choose_plan"),
                    &back,
                ));
            };
            if !confirmed {
                let (status, preview) = api
                    .call(
                        caller,
                        Method::POST,
                        &format!("/v1/subscriptions/{id}/change-plan/preview"),
                        Some(&json!({"plan_id": plan_id})),
                        None,
                    )
                    .await?;
                if !status.is_success() {
                    return super::subscription::render(
                        state,
                        api,
                        caller,
                        id,
                        Some((message_of(&preview), true)),
                    )
                    .await;
                }
                let cents = preview["prorated_amount_cents"]
                    .as_i64()
                    .unwrap_or_default();
                confirm.title = t.get("confirm_change_plan").to_owned();
                confirm
                    .lines
                    .push(if preview["immediate_charge"].as_bool() == Some(true) {
                        format!("{} {}", t.get("charged_now"), money(cents, locale))
                    } else {
                        format!("{} {}", t.get("credited_next"), money(cents.abs(), locale))
                    });
                confirm.fields.push(("plan_id", plan_id));
                confirm
                    .fields
                    .push(("proration_date", text(&preview, "proration_date")));
                return Ok(page(StatusCode::OK, confirm.render()));
            }
            let mut body = json!({"plan_id": plan_id});
            if let Some(date) = form.proration_date.as_deref().filter(|d| !d.is_empty()) {
                body["proration_date"] = json!(date);
            }
            (
                "change_plan",
                format!("/v1/subscriptions/{id}/change-plan"),
                body,
            )
        }
    };
    let (status, answer) = act(state, api, caller, record, id, &path, &body, &form.key).await?;
    let flash = if status.is_success() {
        t.get("action_done").to_owned()
    } else {
        message_of(&answer)
    };
    super::subscription::render(state, api, caller, id, Some((flash, !status.is_success()))).await
}

/// The customer of a subscription, as the API answers it.
async fn customer_of(
    api: &InnerApi,
    caller: &ConsoleCaller,
    sub: &Value,
) -> Result<Value, ApiError> {
    let customer_id = text(sub, "customer_id");
    if !is_id(&customer_id) {
        return Err(ApiError::not_found("The subscription has no customer."));
    }
    api.get(caller, &format!("/v1/customers/{customer_id}"))
        .await
}

/// Sends the customer a link to their portal: a notice of its own (`portal_link`, by
/// e-mail, once per person and form key), tried at once through the notices' worker, which
/// makes the link (an hour long) as it sends it. The page says what came of it; an unknown
/// outcome is tried again by the worker with the same `Message-ID` (CONTRACT §15), and the
/// customer's page shows the notice as it stands.
async fn send_portal_link(
    state: &AppState,
    api: &InnerApi,
    caller: &ConsoleCaller,
    id: &str,
    sub: &Value,
    key: &str,
) -> Result<Response, ApiError> {
    use crate::domain::notices::NoticeStatus;
    let t = Tr(locale_of(caller));
    let customer = crate::ids::CustomerId::parse(&text(sub, "customer_id"))
        .ok_or_else(|| ApiError::not_found("The subscription has no customer."))?;
    let record = caller.record(state, "portal_link", id, key).await?;
    if !state
        .store
        .notice_settings(&caller.account.id)
        .await?
        .email
        .enabled
    {
        caller.finish(state, &record, 422).await?;
        let flash = (t.get("mail_off").to_owned(), true);
        return super::subscription::render(state, api, caller, id, Some(flash)).await;
    }
    let queued = state
        .store
        .queue_portal_link(
            &caller.account.id,
            &customer,
            crate::ids::SubscriptionId::parse(id).as_ref(),
            &format!("portal_link:{}:{key}", caller.user.id),
            caller.now_ms,
        )
        .await?;
    let notice = state.notices.send_now(&queued).await?.unwrap_or(queued);
    let said = |field: Option<String>| field.unwrap_or_default();
    let (status, flash, bad) = match NoticeStatus::parse(&notice.status) {
        Some(NoticeStatus::Sent) => (
            200,
            format!("{} {}", t.get("mail_sent"), said(notice.recipient)),
            false,
        ),
        Some(NoticeStatus::Failed) => (
            422,
            format!("{} {}", t.get("mail_refused"), said(notice.last_error)),
            true,
        ),
        Some(NoticeStatus::Suppressed) => (
            422,
            format!(
                "{} {}",
                t.get("mail_not_sent"),
                said(notice.suppressed_reason)
            ),
            true,
        ),
        _ => (202, t.get("mail_retrying").to_owned(), true),
    };
    caller.finish(state, &record, status).await?;
    super::subscription::render(state, api, caller, id, Some((flash, bad))).await
}

/// A test message to the address a person gives (their own by default), through the
/// account's e-mail settings: admins only, checked and recorded as every action is.
async fn test_email(
    State(state): State<AppState>,
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    let t = Tr(locale_of(&caller));
    if let Some(refusal) = refused(&caller, &headers, &form, Role::Admin, "/console/settings") {
        return refusal;
    }
    let to = form
        .to
        .as_deref()
        .map(str::trim)
        .filter(|to| !to.is_empty())
        .unwrap_or(&caller.user.email)
        .to_owned();
    let result = async {
        let to = crate::api::customers::parse_email(&to)?;
        let record = caller
            .record(&state, "test_email", caller.account.id.as_str(), &form.key)
            .await?;
        let words = Tr(super::mail::customer_locale(&state, &caller.account).await?);
        let sent = super::mail::send(
            &state,
            &caller.account,
            &to,
            &format!("{} {}", words.get("test_mail_subject"), caller.account.name),
            &format!("{},", words.get("hello_plain")),
            words.get("test_mail_body"),
        )
        .await?;
        let status = match sent {
            super::mail::Delivery::Sent => 200,
            super::mail::Delivery::Refused(_) | super::mail::Delivery::Off => 422,
            super::mail::Delivery::Unknown(_) => 504,
        };
        caller.finish(&state, &record, status).await?;
        Ok(sent.words(t, &to))
    }
    .await;
    let flash = match result {
        Ok(flash) => flash,
        Err(ApiError::InvalidRequest { message, .. }) => (message, true),
        Err(err) => return err.into_response(),
    };
    super::settings::settings_page(&api, &caller, Some(flash)).await
}

/// Records the action with who took it, sends it to the API under the form's key, and adds
/// the API's answer to the record.
#[allow(clippy::too_many_arguments)]
pub(super) async fn act(
    state: &AppState,
    api: &InnerApi,
    caller: &ConsoleCaller,
    action: &'static str,
    object_id: &str,
    path: &str,
    body: &Value,
    key: &str,
) -> Result<(StatusCode, Value), ApiError> {
    let record = caller.record(state, action, object_id, key).await?;
    let (status, answer) = api
        .call(caller, Method::POST, path, Some(body), Some(key))
        .await?;
    caller.finish(state, &record, status.as_u16()).await?;
    Ok((status, answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_key_the_pages_made_is_sent() {
        assert!(is_key("con_abc123-refund-ch_1"));
        assert!(!is_key("abc"));
        assert!(!is_key("con_a b"));
        assert!(!is_key(&format!("con_{}", "a".repeat(200))));
    }
}
