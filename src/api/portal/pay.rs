//! `GET /pay/{token}`: the link a failed payment's notice carries (CONTRACT §15). While its
//! subscription is `past_due` it opens a portal session on the card update of that
//! subscription (an hour, as any session) and sends the customer there; afterwards it says
//! there is nothing to pay. A card's expiry reminder carries one too, open while the expiring
//! card is still the subscription's. The token is the credential (only its hash is kept); the answer is
//! never cached and sends no `Referer`.

use super::{SESSION_TTL_MS, TOKEN_LEN, TOKEN_PREFIX};
use crate::domain::portal::FlowKind;
use crate::domain::subscription::Status;
use crate::http::state::AppState;
use crate::ids::PortalSessionId;
use crate::secrets::{random_token, sha256_hex};
use crate::store::portal::PortalSession;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

pub fn router() -> Router<AppState> {
    Router::new().route("/pay/{token}", get(pay))
}

async fn pay(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    match open(&state, &token).await {
        Ok(Some(url)) => {
            secured((StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response())
        }
        Ok(None) => page(
            StatusCode::NOT_FOUND,
            "Este enlace no está activo / This link is not active",
            "No hay un pago pendiente para este enlace. / There is no payment due for this link.",
        ),
        Err(err) => {
            tracing::error!(error = %err, "a payment link failed");
            page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Error",
                "Inténtalo de nuevo en un momento. / Try again in a moment.",
            )
        }
    }
}

/// The portal URL the link opens now, if it opens one.
async fn open(state: &AppState, token: &str) -> crate::store::StoreResult<Option<String>> {
    let shaped = token
        .strip_prefix(crate::notices::message::PAY_TOKEN_PREFIX)
        .is_some_and(|rest| rest.len() == 43 && rest.bytes().all(|b| b.is_ascii_alphanumeric()));
    if !shaped {
        return Ok(None);
    }
    let store = &state.store;
    let Some(link) = store.pay_link(&sha256_hex(token)).await? else {
        return Ok(None);
    };
    let account = &link.account_id;
    let due = store
        .subscription(account, &link.subscription_id)
        .await?
        .is_some_and(|sub| {
            let open = match &link.payment_method_id {
                // A card's expiry reminder: while that card is still the one charged.
                Some(card) => {
                    sub.default_payment_method_id == *card
                        && matches!(
                            sub.status,
                            Status::Active | Status::Trialing | Status::PastDue
                        )
                }
                None => sub.status == Status::PastDue,
            };
            open && sub.customer_id == link.customer_id
        });
    if !due
        || !store
            .portal_config(account)
            .await?
            .payment_method_update
            .enabled
    {
        return Ok(None);
    }
    let locale = store
        .notice_settings(account)
        .await?
        .locale
        .as_str()
        .to_owned();
    let now = state.runtime.clock().now_ms(account).await?;
    let session_token = random_token(TOKEN_PREFIX, TOKEN_LEN);
    store
        .insert_portal_session(PortalSession {
            id: PortalSessionId::generate(),
            account_id: account.clone(),
            customer_id: link.customer_id,
            token_hash: sha256_hex(&session_token),
            return_url: None,
            locale: Some(locale),
            flow_type: Some(FlowKind::PaymentMethodUpdate.as_str().to_owned()),
            flow_subscription_id: Some(link.subscription_id),
            expires_at: now + SESSION_TTL_MS,
            created_at: now,
        })
        .await?;
    Ok(Some(format!(
        "{}/portal/{session_token}",
        state.config.public_url()
    )))
}

fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"es\"><meta charset=\"utf-8\"><meta name=\"viewport\" \
         content=\"width=device-width, initial-scale=1\"><title>{title}</title><main><h1>{title}</h1>\
         <p>{text}</p></main></html>"
    );
    secured((status, Html(html)).into_response())
}

fn secured(response: Response) -> Response {
    crate::http::pages::harden(
        response,
        "default-src 'none'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'",
    )
}
