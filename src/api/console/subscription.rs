//! A subscription as the console shows it: what it is, the actions a person's role allows
//! (each posted to `actions`), its charges with their refunds, and its timeline: the API's
//! events, newest first, beside what people did through the console and who they were.
//! Also the settings page's sections, read from the API.

use super::frame::{Chrome, failed, locale_of, method_words, page, problem, status_words};
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{day, int, is_id, items, moment, money, text};
use super::{InnerApi, Role};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use std::collections::HashMap;

pub fn router() -> Router<AppState> {
    Router::new().route("/console/subscriptions/{id}", get(show))
}

/// The account's plans by id: their names (the newest hundred).
pub async fn plan_names(
    api: &InnerApi,
    caller: &ConsoleCaller,
) -> Result<HashMap<String, String>, ApiError> {
    Ok(names_of(&newest_plans(api, caller).await?))
}

/// The account's newest hundred plans, as the API answers them.
async fn newest_plans(
    api: &InnerApi,
    caller: &ConsoleCaller,
) -> Result<Vec<serde_json::Value>, ApiError> {
    Ok(items(&api.get(caller, "/v1/plans?limit=100").await?))
}

fn names_of(plans: &[serde_json::Value]) -> HashMap<String, String> {
    plans
        .iter()
        .map(|plan| (text(plan, "id"), text(plan, "name")))
        .collect()
}

pub struct ChargeRow {
    pub id: String,
    pub date: String,
    pub amount: String,
    pub status: String,
    pub refunded: String,
    pub refundable: bool,
    pub refundable_left: String,
}

#[derive(Template)]
#[template(path = "api/console/templates/subscription.html")]
struct SubscriptionPage {
    lang: &'static str,
    t: Tr,
    title: String,
    chrome: Chrome,
    id: String,
    customer_id: String,
    customer_name: String,
    plan: String,
    status: String,
    status_class: &'static str,
    amount: String,
    period: String,
    next: String,
    period_end: String,
    cancel_at_period_end: bool,
    failed_attempts: i64,
    may_act: bool,
    may_refund: bool,
    /// Path word, label, button class.
    simple_actions: Vec<(&'static str, &'static str, &'static str)>,
    plans: Vec<(String, String)>,
    /// A fresh Idempotency-Key per page view: a form posted twice is one action.
    key: String,
    charges: Vec<ChargeRow>,
    timeline: Vec<(String, String)>,
}

async fn show(
    State(state): State<AppState>,
    Extension(api): Extension<InnerApi>,
    caller: ConsoleCaller,
    Path(id): Path<String>,
) -> Response {
    if !is_id(&id) {
        let t = Tr(locale_of(&caller));
        return problem(
            &caller,
            StatusCode::NOT_FOUND,
            t.get("not_found"),
            "/console/customers",
        );
    }
    match render(&state, &api, &caller, &id, None).await {
        Ok(response) => response,
        Err(err) => failed(&caller, err),
    }
}

/// The page of subscription `id`, with `flash` (what an action just did) on top.
pub async fn render(
    state: &AppState,
    api: &InnerApi,
    caller: &ConsoleCaller,
    id: &str,
    flash: Option<(String, bool)>,
) -> Result<Response, ApiError> {
    let locale = locale_of(caller);
    let t = Tr(locale);
    let sub = api.get(caller, &format!("/v1/subscriptions/{id}")).await?;
    let customer_id = text(&sub, "customer_id");
    let customer = if is_id(&customer_id) {
        api.get(caller, &format!("/v1/customers/{customer_id}"))
            .await?
    } else {
        serde_json::Value::Null
    };
    let newest = newest_plans(api, caller).await?;
    let plans = names_of(&newest);
    let plan_id = text(&sub, "plan_id");
    let status_word = text(&sub, "status");
    let (status, status_class) = status_words(t, &status_word);
    let charges_list = api
        .get(
            caller,
            &format!("/v1/charges?subscription_id={id}&limit=100"),
        )
        .await?;
    let charges = items(&charges_list)
        .iter()
        .map(|charge| {
            let amount = int(charge, "amount_cents");
            let refunded = int(charge, "refunded_amount_cents");
            let state = text(charge, "status");
            ChargeRow {
                id: text(charge, "id"),
                date: day(&text(charge, "created_at"), locale),
                amount: money(amount, locale),
                status: t
                    .find(&format!("charge_{state}"))
                    .unwrap_or(&state)
                    .to_owned(),
                refunded: money(refunded, locale),
                refundable: state == "approved" && refunded < amount,
                refundable_left: money(amount - refunded, locale),
            }
        })
        .collect();
    let mut timeline: Vec<(i64, String, String)> = items(
        &api.get(
            caller,
            &format!("/v1/events?subscription_id={id}&limit=100"),
        )
        .await?,
    )
    .iter()
    .map(|event| {
        let kind = text(event, "type");
        let at = text(event, "created_at");
        (
            super::view::ms(&at),
            moment(&at, locale),
            t.find(&format!("event_{}", kind.replace('.', "_")))
                .map_or_else(|| kind.clone(), str::to_owned),
        )
    })
    .collect();
    let mut ids = vec![id.to_owned()];
    ids.extend(items(&charges_list).iter().map(|c| text(c, "id")));
    let done = console_actions(state, caller, &ids).await?;
    timeline.extend(done);
    timeline.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    let may_act = caller.role.may(Role::Support) && status_word != "canceled";
    let mut simple_actions = Vec::new();
    if may_act {
        match status_word.as_str() {
            "paused" => simple_actions.push(("resume", t.get("resume"), "")),
            "active" | "trialing" => simple_actions.push(("pause", t.get("pause"), "secondary")),
            _ => {}
        }
        if status_word == "past_due" || status_word == "active" {
            simple_actions.push(("charge-now", t.get("charge_now"), "secondary"));
        }
        simple_actions.push(("portal-link", t.get("portal_link"), "secondary"));
        simple_actions.push(("cancel", t.get("cancel"), "danger"));
    }
    let method = if is_id(&customer_id) {
        items(
            &api.get(
                caller,
                &format!("/v1/customers/{customer_id}/payment-methods?limit=100"),
            )
            .await?,
        )
        .iter()
        .find(|m| text(m, "id") == text(&sub, "default_payment_method_id"))
        .map(|m| method_words(t, m))
        .unwrap_or_default()
    } else {
        String::new()
    };
    let cycle = text(&sub, "cycle");
    // Its plan is among the newest hundred already read, or read alone.
    let plan_json = match newest.into_iter().find(|plan| text(plan, "id") == plan_id) {
        Some(plan) => Some(plan),
        None => api.get(caller, &format!("/v1/plans/{plan_id}")).await.ok(),
    };
    let amount = plan_json
        .as_ref()
        .map(|plan| {
            let field = if cycle == "annual" {
                "annual_amount_cents"
            } else {
                "monthly_amount_cents"
            };
            money(int(plan, field) * int(&sub, "quantity").max(1), locale)
        })
        .unwrap_or_default();
    let mut chrome = Chrome::of(caller, t, "customers");
    if let Some((message, bad)) = flash {
        chrome.flash = Some(message);
        chrome.flash_bad = bad;
    }
    let plan_name = plans
        .get(&plan_id)
        .cloned()
        .unwrap_or_else(|| plan_id.clone());
    let body = SubscriptionPage {
        lang: t.code(),
        t,
        title: plan_name.clone(),
        chrome,
        id: id.to_owned(),
        customer_name: text(&customer, "name"),
        customer_id,
        plan: plan_name,
        status,
        status_class,
        amount: if method.is_empty() {
            amount
        } else {
            format!("{amount} · {method}")
        },
        period: format!(
            "{} – {}",
            day(&text(&sub, "current_period_start"), locale),
            day(&text(&sub, "current_period_end"), locale)
        ),
        next: day(&text(&sub, "next_charge_date"), locale),
        period_end: day(&text(&sub, "current_period_end"), locale),
        cancel_at_period_end: sub["cancel_at_period_end"].as_bool() == Some(true),
        failed_attempts: int(&sub, "failed_attempts"),
        may_act,
        may_refund: caller.role.may(Role::Admin),
        simple_actions,
        plans: if may_act {
            let mut others: Vec<(String, String)> = plans
                .into_iter()
                .filter(|(other, _)| *other != plan_id)
                .collect();
            others.sort_by(|a, b| a.1.cmp(&b.1));
            others
        } else {
            Vec::new()
        },
        key: crate::secrets::random_token("con_", 24),
        charges,
        timeline: timeline
            .into_iter()
            .map(|(_, at, what)| (at, what))
            .collect(),
    };
    Ok(page(StatusCode::OK, body.render()))
}

/// What people did on these objects through the console, as timeline entries naming them.
async fn console_actions(
    state: &AppState,
    caller: &ConsoleCaller,
    ids: &[String],
) -> Result<Vec<(i64, String, String)>, ApiError> {
    let t = Tr(locale_of(caller));
    let locale = locale_of(caller);
    let store = &state.store;
    let account = &caller.account.id;
    let actions = store.console_actions_on(account, ids).await?;
    let mut people: HashMap<crate::ids::ConsoleUserId, String> = HashMap::new();
    let mut out = Vec::new();
    for action in actions {
        if !people.contains_key(&action.user_id) {
            let email = store
                .console_user(account, &action.user_id)
                .await?
                .map(|u| u.email)
                .unwrap_or_default();
            people.insert(action.user_id.clone(), email);
        }
        let who = people.get(&action.user_id).cloned().unwrap_or_default();
        let answer = match action.status {
            Some(code) if (200..300).contains(&code) => t.get("done"),
            Some(_) => t.get("refused"),
            None => t.get("unanswered"),
        };
        let what = t
            .find(&format!("action_{}", action.action))
            .unwrap_or(&action.action);
        out.push((
            action.created_at,
            moment(
                &crate::domain::time::rfc3339(crate::domain::time::from_millis(action.created_at)),
                locale,
            ),
            format!("{what} · {who} · {answer}"),
        ));
    }
    Ok(out)
}
