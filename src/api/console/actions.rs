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
use super::view::{is_id, message_of, money, text};
use super::{InnerApi, Role};
use crate::checkout::i18n::Locale;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::ids::ConsoleActionId;
use crate::store::console::ConsoleAction;
use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
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
        .route("/console/charges/{id}/refund", post(refund))
}

#[derive(Deserialize)]
pub struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    key: String,
    confirm: Option<String>,
    plan_id: Option<String>,
    proration_date: Option<String>,
    at_period_end: Option<String>,
    amount: Option<String>,
    amount_cents: Option<i64>,
    reason: Option<String>,
    subscription_id: Option<String>,
}

/// A select on a confirmation page: its field's name, its label, its options (value, words).
type Choice = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

#[derive(Template)]
#[template(path = "api/console/templates/confirm.html")]
struct ConfirmPage {
    lang: &'static str,
    t: Tr,
    title: String,
    chrome: Chrome,
    lines: Vec<String>,
    action: String,
    fields: Vec<(&'static str, String)>,
    choice: Option<Choice>,
    note: Option<(&'static str, &'static str)>,
    button: &'static str,
    button_class: &'static str,
    back: String,
}

/// An Idempotency-Key the console's pages made (`con_…`, a suffix naming the action).
fn is_key(raw: &str) -> bool {
    raw.starts_with("con_")
        && raw.len() <= 120
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The checks every post meets before anything else: a same-origin post carrying the
/// session's CSRF token, by a person whose role may do `needed`, with a key of ours.
fn refused(
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
        "portal-link" => (
            "portal_link",
            "/v1/portal-sessions".to_owned(),
            json!({"customer_id": text(&sub, "customer_id"), "locale": "es"}),
        ),
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
        if record == "portal_link" {
            format!("{} {}", t.get("portal_link_made"), text(&answer, "url"))
        } else {
            t.get("action_done").to_owned()
        }
    } else {
        message_of(&answer)
    };
    super::subscription::render(state, api, caller, id, Some((flash, !status.is_success()))).await
}

/// Records the action with who took it, sends it to the API under the form's key, and adds
/// the API's answer to the record.
#[allow(clippy::too_many_arguments)]
async fn act(
    state: &AppState,
    api: &InnerApi,
    caller: &ConsoleCaller,
    action: &'static str,
    object_id: &str,
    path: &str,
    body: &Value,
    key: &str,
) -> Result<(StatusCode, Value), ApiError> {
    let record = ConsoleActionId::generate();
    state
        .store
        .record_console_action(ConsoleAction {
            id: record.clone(),
            account_id: caller.account.id.clone(),
            user_id: caller.user.id.clone(),
            action: action.to_owned(),
            object_id: object_id.to_owned(),
            idempotency_key: key.to_owned(),
            status: None,
            created_at: caller.now_ms,
        })
        .await?;
    let (status, answer) = api
        .call(caller, Method::POST, path, Some(body), Some(key))
        .await?;
    state
        .store
        .finish_console_action(&record, status.as_u16())
        .await?;
    Ok((status, answer))
}

/// Pesos as a person types them in their language (`10.000,50` in Spanish, `10,000.50` in
/// English, with or without `$`), as cents; `None` for anything else or not above zero.
pub fn parse_pesos(raw: &str, locale: Locale) -> Option<i64> {
    let cleaned: String = raw
        .trim()
        .trim_start_matches('$')
        .trim_start_matches("COP")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let (group, decimal) = match locale {
        Locale::Es => ('.', ','),
        Locale::En => (',', '.'),
    };
    let (whole, cents) = match cleaned.split_once(decimal) {
        Some((whole, cents)) => (whole.to_owned(), cents.to_owned()),
        None => (cleaned.clone(), String::new()),
    };
    let groups: Vec<&str> = whole.split(group).collect();
    let grouped_well = groups.len() == 1
        || (!groups[0].is_empty()
            && groups[0].len() <= 3
            && groups[1..].iter().all(|g| g.len() == 3));
    let digits: String = groups.concat();
    if !grouped_well
        || digits.is_empty()
        || digits.len() > 15
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || cents.len() > 2
        || !cents.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let pesos: i64 = digits.parse().ok()?;
    let cents: i64 = match cents.len() {
        0 => 0,
        1 => cents.parse::<i64>().ok()? * 10,
        _ => cents.parse().ok()?,
    };
    let total = pesos.checked_mul(100)?.checked_add(cents)?;
    (total > 0).then_some(total)
}

/// A refund of a charge: admins only, the amount (all that is left when none is typed) and a
/// reason confirmed on a page of its own.
async fn refund(
    State(state): State<AppState>,
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    let locale = locale_of(&caller);
    let t = Tr(locale);
    let subscription = form
        .subscription_id
        .clone()
        .filter(|s| is_id(s))
        .unwrap_or_default();
    let back = if subscription.is_empty() {
        "/console".to_owned()
    } else {
        format!("/console/subscriptions/{subscription}")
    };
    if !is_id(&id) {
        return problem(&caller, StatusCode::NOT_FOUND, t.get("not_found"), &back);
    }
    if let Some(refusal) = refused(&caller, &headers, &form, Role::Admin, &back) {
        return refusal;
    }
    let typed = form.amount.as_deref().map(str::trim).unwrap_or_default();
    let amount = if typed.is_empty() {
        None
    } else {
        match parse_pesos(typed, locale) {
            Some(cents) => Some(cents),
            None => return problem(&caller, StatusCode::BAD_REQUEST, t.get("bad_amount"), &back),
        }
    };
    let result = async {
        let charge = api.get(&caller, &format!("/v1/charges/{id}")).await?;
        let left = charge["amount_cents"].as_i64().unwrap_or_default()
            - charge["refunded_amount_cents"].as_i64().unwrap_or_default();
        let cents = amount.unwrap_or(left);
        if form.confirm.as_deref() != Some("yes") {
            let mut fields = vec![
                ("key", form.key.clone()),
                ("amount_cents", format!("{cents}")),
                ("subscription_id", subscription.clone()),
            ];
            fields.retain(|(_, v)| !v.is_empty());
            let body = ConfirmPage {
                lang: t.code(),
                t,
                title: t.get("confirm_refund").to_owned(),
                chrome: Chrome::of(&caller, t, "customers"),
                lines: vec![
                    format!("{} {}", t.get("refund_of"), money(cents, locale)),
                    format!(
                        "{} {}",
                        t.get("charge_of"),
                        money(charge["amount_cents"].as_i64().unwrap_or_default(), locale)
                    ),
                ],
                action: format!("/console/charges/{id}/refund"),
                fields,
                choice: None,
                note: Some(("reason", t.get("reason"))),
                button: t.get("refund"),
                button_class: "danger",
                back: back.clone(),
            };
            return Ok(page(StatusCode::OK, body.render()));
        }
        // The confirmation carries the amount in cents, as the first page computed it.
        let Some(cents) = form.amount_cents.filter(|c| *c > 0) else {
            return Ok(problem(
                &caller,
                StatusCode::BAD_REQUEST,
                t.get("bad_amount"),
                &back,
            ));
        };
        let mut body = json!({"amount_cents": cents});
        if let Some(reason) = form
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty())
        {
            body["reason"] = json!(reason.chars().take(500).collect::<String>());
        }
        let (status, answer) = act(
            &state,
            &api,
            &caller,
            "refund",
            &id,
            &format!("/v1/charges/{id}/refunds"),
            &body,
            &form.key,
        )
        .await?;
        let flash = if status.is_success() {
            t.get("refund_done").to_owned()
        } else {
            message_of(&answer)
        };
        if subscription.is_empty() {
            return Ok(problem(&caller, status, &flash, "/console"));
        }
        super::subscription::render(
            &state,
            &api,
            &caller,
            &subscription,
            Some((flash, !status.is_success())),
        )
        .await
    }
    .await;
    result.unwrap_or_else(|err| super::frame::failed(&caller, err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pesos_read_as_each_language_writes_them() {
        assert_eq!(parse_pesos("10.000", Locale::Es), Some(1_000_000));
        assert_eq!(parse_pesos("$ 10.000,5", Locale::Es), Some(1_000_050));
        assert_eq!(parse_pesos("10000", Locale::Es), Some(1_000_000));
        assert_eq!(parse_pesos("10,000.50", Locale::En), Some(1_000_050));
        assert_eq!(parse_pesos("COP 49,900", Locale::En), Some(4_990_000));
        assert_eq!(
            parse_pesos("10.00", Locale::Es),
            None,
            "a Spanish group has three digits"
        );
        assert_eq!(parse_pesos("1,2,3", Locale::Es), None);
        assert_eq!(parse_pesos("0", Locale::Es), None);
        assert_eq!(parse_pesos("-5", Locale::Es), None);
        assert_eq!(parse_pesos("1e9", Locale::En), None);
        assert_eq!(parse_pesos("9999999999999999", Locale::En), None);
        assert_eq!(parse_pesos("", Locale::En), None);
    }

    #[test]
    fn only_a_key_the_pages_made_is_sent() {
        assert!(is_key("con_abc123-refund-ch_1"));
        assert!(!is_key("abc"));
        assert!(!is_key("con_a b"));
        assert!(!is_key(&format!("con_{}", "a".repeat(200))));
    }
}
