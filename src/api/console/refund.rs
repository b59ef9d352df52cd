//! A refund through the console: admins only, the amount typed in pesos as the person writes
//! them (all that is left when none is typed) and a reason, confirmed on a page of its own,
//! then sent to the API's `POST /v1/charges/{id}/refunds` under the form's Idempotency-Key as
//! every console action is (`actions`).

use super::actions::{ActionForm, ConfirmPage, act, refused};
use super::frame::{Chrome, locale_of, page, problem};
use super::i18n::Tr;
use super::session::ConsoleCaller;
use super::view::{is_id, message_of, money};
use super::{InnerApi, Role};
use crate::checkout::i18n::Locale;
use crate::http::state::AppState;
use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::{Extension, Form, Router};
use serde_json::json;

pub fn router() -> Router<AppState> {
    Router::new().route("/console/charges/{id}/refund", post(refund))
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
}
