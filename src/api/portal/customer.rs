//! The JSON behind the portal's page, under the session's token (CONTRACT §13): the customer's
//! objects in the API's shapes, and the actions. Each action checks the configuration in force
//! now, then does what the API's action does (`api::subscriptions`, `api::payment_methods`,
//! `api::customers`) and records where it came from. Another customer's object is 404.

use super::session::{PortalCaller, limit_session, require_session};
use crate::actors::{ActionError, Command};
use crate::api::customers::{AddressIn, CustomerOut, TaxIdIn, invoicing_patch};
use crate::api::invoices::{CreditNoteOut, InvoiceOut};
use crate::api::payment_methods::{PaymentMethodOut, Source, add_payment_method};
use crate::api::subscriptions::actions::{
    ChargeOut, PreviewOut, action_after_charge, parse_proration_date, settled_charge,
};
use crate::api::subscriptions::{SubscriptionOut, act, action_error};
use crate::domain::portal::{CancelMode, PortalConfig};
use crate::domain::subscription::Status;
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::ApiJson;
use crate::http::payment_source::SourceFields;
use crate::http::state::AppState;
use crate::ids::{DocumentId, PlanId, SubscriptionId};
use crate::processor::client::SourceKind;
use crate::store::PageRequest;
use crate::store::invoices::InvoiceFilter;
use crate::store::portal::NewPortalAction;
use crate::store::subscriptions::{Subscription, SubscriptionFilter};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use serde::{Deserialize, Serialize};

/// How many of each kind of object the page shows (newest first).
const SHOWN: u64 = 100;

pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .route(
            "/portal/{token}/api/customer",
            get(customer).patch(update_customer),
        )
        .route(
            "/portal/{token}/api/subscriptions/{id}/cancel",
            post(cancel),
        )
        .route(
            "/portal/{token}/api/subscriptions/{id}/payment-method",
            post(replace_payment_method),
        )
        .route(
            "/portal/{token}/api/subscriptions/{id}/change-plan",
            post(change_plan),
        )
        .route(
            "/portal/{token}/api/subscriptions/{id}/change-plan/preview",
            post(preview_change_plan),
        )
        // Each request meets, in this order (the last layer added runs first): the session,
        // its rate limit, then the API's Idempotency-Keys (which read the account the session
        // put in place, and keep the keys in the session's own namespace).
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::layers::idempotent_posts,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), limit_session))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_session,
        ))
        // Outermost: every answer, a refusal of the session included, is never cached.
        .layer(middleware::map_response(crate::http::pages::no_store))
}

/// Everything the page shows, as `GET /portal/{token}/api/customer` answers it.
#[derive(Debug, Serialize)]
pub struct PortalCustomerOut {
    pub customer: CustomerOut,
    pub subscriptions: Vec<SubscriptionOut>,
    pub payment_methods: Vec<PaymentMethodOut>,
    /// Empty while the account's `invoice_history` is off.
    pub invoices: Vec<InvoiceOut>,
    pub credit_notes: Vec<CreditNoteOut>,
}

/// The customer's objects: the page's data and the JSON's.
pub(super) async fn customer_data(
    state: &AppState,
    portal: &PortalCaller,
    config: &PortalConfig,
) -> ApiResult<PortalCustomerOut> {
    let account = portal.account_id();
    let store = &state.store;
    let page = PageRequest {
        limit: SHOWN,
        cursor: None,
    };
    let customer = store
        .customer(account, portal.customer_id())
        .await?
        .ok_or(ApiError::PortalSession)?;
    let subscriptions = store
        .list_subscriptions(
            account,
            &SubscriptionFilter {
                status: None,
                customer_id: Some(customer.id.clone()),
                plan_id: None,
            },
            &page,
        )
        .await?
        .items;
    let payment_methods = store
        .list_payment_methods(account, &customer.id, &page)
        .await?
        .items;
    let public_url = state.config.public_url();
    let mut invoices = Vec::new();
    let mut credit_notes = Vec::new();
    if config.invoice_history.enabled {
        let filter = InvoiceFilter {
            customer_id: Some(customer.id.clone()),
            subscription_id: None,
            charge_id: None,
            issued: Default::default(),
        };
        let invoice_rows = store.list_invoices(account, &filter, &page).await?.items;
        let mut note_rows = Vec::new();
        for invoice in &invoice_rows {
            note_rows.extend(store.credit_notes_of_invoice(&invoice.id).await?);
        }
        // With DIAN, the API's shapes carry the DIAN number and the `dian` object.
        let ids: Vec<DocumentId> = invoice_rows
            .iter()
            .map(|invoice| invoice.id.clone().into())
            .chain(note_rows.iter().map(|note| note.id.clone().into()))
            .collect();
        let docs = store.dian_documents(account, &ids).await?;
        for note in note_rows {
            let doc = docs.get(&DocumentId::from(note.id.clone()));
            credit_notes.push(CreditNoteOut::of(note, &public_url)?.with_dian(doc));
        }
        for invoice in invoice_rows {
            let doc = docs.get(&DocumentId::from(invoice.id.clone()));
            invoices.push(InvoiceOut::of(invoice, &public_url)?.with_dian(doc));
        }
    }
    // The merchant's metadata is theirs, not the customer's: the shapes stay the API's, the
    // metadata is withheld.
    let mut customer = CustomerOut::from(customer);
    customer.metadata = None;
    Ok(PortalCustomerOut {
        customer,
        subscriptions: subscriptions
            .into_iter()
            .map(|sub| SubscriptionOut {
                metadata: None,
                ..sub.into()
            })
            .collect(),
        payment_methods: payment_methods.into_iter().map(Into::into).collect(),
        invoices,
        credit_notes,
    })
}

async fn customer(
    State(state): State<AppState>,
    portal: PortalCaller,
) -> ApiResult<Json<PortalCustomerOut>> {
    let config = config(&state, &portal).await?;
    Ok(Json(customer_data(&state, &portal, &config).await?))
}

/// 403 `invalid_request`: the account's configuration does not offer `what`.
fn disabled(what: &str) -> ApiError {
    ApiError::invalid(
        StatusCode::FORBIDDEN,
        format!("{what} is not offered in this portal."),
    )
}

/// The session's customer's subscription `id`, or 404 (another customer's too).
async fn theirs(
    state: &AppState,
    portal: &PortalCaller,
    id: &SubscriptionId,
) -> ApiResult<Subscription> {
    state
        .store
        .subscription(portal.account_id(), id)
        .await?
        .filter(|sub| sub.customer_id == *portal.customer_id())
        .ok_or_else(|| ApiError::not_found(format!("No subscription with id `{id}`.")).param("id"))
}

/// Records an action that took effect. Its record failing does not undo it, so the answer
/// stays the action's; the failure is logged for operators.
async fn record(
    state: &AppState,
    portal: &PortalCaller,
    subscription_id: Option<&SubscriptionId>,
    action: &'static str,
    detail: serde_json::Value,
) {
    let recorded = state
        .store
        .record_portal_action(NewPortalAction {
            session: &portal.session,
            subscription_id,
            action,
            detail: Some(detail),
            now_ms: portal.now_ms,
        })
        .await;
    if let Err(err) = recorded {
        tracing::error!(error = %err, session = %portal.session.id, action, "a portal action took effect but was not recorded");
    }
}

async fn config(state: &AppState, portal: &PortalCaller) -> ApiResult<PortalConfig> {
    Ok(state.store.portal_config(portal.account_id()).await?)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelIn {
    /// Why the customer leaves, in their words (at most 500 characters).
    pub reason: Option<String>,
}

/// Cancels as the account's configuration says: at the period's end (access until then) or
/// at once.
async fn cancel(
    State(state): State<AppState>,
    portal: PortalCaller,
    caller: Caller,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<CancelIn>,
) -> ApiResult<Json<SubscriptionOut>> {
    let id = SubscriptionId::given(id);
    let config = config(&state, &portal).await?;
    if !config.cancel.enabled {
        return Err(disabled("Cancelling"));
    }
    let reason = body
        .reason
        .map(|reason| reason.trim().to_owned())
        .filter(|reason| !reason.is_empty());
    if reason.as_ref().is_some_and(|r| r.chars().count() > 500) {
        return Err(ApiError::bad_request("reason takes at most 500 characters.").param("reason"));
    }
    theirs(&state, &portal, &id).await?;
    let at_period_end = config.cancel.mode == CancelMode::AtPeriodEnd;
    let outcome = act(&state, &caller, &id, Command::Cancel { at_period_end }).await?;
    record(
        &state,
        &portal,
        Some(&id),
        "subscription_cancel",
        serde_json::json!({"reason": reason, "mode": config.cancel.mode}),
    )
    .await;
    Ok(Json(outcome.subscription.into()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentMethodIn {
    /// `card` (default) or `nequi`.
    #[serde(rename = "type")]
    pub kind: Option<SourceKind>,
    pub card_token: Option<String>,
    pub nequi_token: Option<String>,
    pub acceptance_token: Option<String>,
    pub accept_personal_auth: Option<String>,
}

/// What replacing a payment method answers: the subscription as it now is, the new method,
/// and, for a past-due subscription, the retry of its outstanding charge.
#[derive(Debug, Serialize)]
pub struct PaymentMethodReplaced {
    pub subscription: SubscriptionOut,
    pub payment_method: PaymentMethodOut,
    /// The retry made at once (`past_due` only); null when none was made.
    pub charge: Option<ChargeOut>,
}

/// Makes a payment method from the browser's token, makes it the subscription's, and, in
/// `past_due`, retries the outstanding charge with it at once.
async fn replace_payment_method(
    State(state): State<AppState>,
    portal: PortalCaller,
    caller: Caller,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<PaymentMethodIn>,
) -> ApiResult<Json<PaymentMethodReplaced>> {
    let id = SubscriptionId::given(id);
    if !config(&state, &portal).await?.payment_method_update.enabled {
        return Err(disabled("Changing the payment method"));
    }
    let sub = theirs(&state, &portal, &id).await?;
    if sub.status == Status::Canceled {
        return Err(ApiError::conflict(format!(
            "A {} subscription takes no payment method.",
            sub.status
        )));
    }
    let request = SourceFields {
        kind: body.kind,
        card_token: body.card_token,
        nequi_token: body.nequi_token,
        acceptance_token: body.acceptance_token,
        accept_personal_auth: body.accept_personal_auth,
    }
    .parse()?;
    let customer = state
        .store
        .customer(portal.account_id(), portal.customer_id())
        .await?
        .ok_or(ApiError::PortalSession)?;
    let method =
        add_payment_method(&state, &portal.account, customer, Source::New(request)).await?;
    let command = Command::SetPaymentMethod {
        payment_method_id: method.id.clone(),
    };
    let mut outcome = act(&state, &caller, &id, command).await?;
    let mut charge = None;
    if outcome.subscription.status == Status::PastDue {
        match state.runtime.act(&id, Command::ChargeNow).await {
            Ok(retried) => {
                if let Some(started) = retried.charge {
                    let settled = settled_charge(&state, portal.account_id(), started).await?;
                    charge = Some(ChargeOut::from(settled));
                }
                outcome.subscription = state
                    .store
                    .subscription(portal.account_id(), &id)
                    .await?
                    .unwrap_or(retried.subscription);
            }
            // A retry already under way (the schedule's own): it carries on, and the next one
            // uses the new method.
            Err(ActionError::Conflict(_) | ActionError::InsufficientBalance) => {}
            Err(err) => return Err(action_error(err)),
        }
    }
    record(
        &state,
        &portal,
        Some(&id),
        "payment_method_update",
        serde_json::json!({
            "payment_method_id": method.id,
            "retried_charge_id": charge.as_ref().map(|c| c.id.clone()),
        }),
    )
    .await;
    Ok(Json(PaymentMethodReplaced {
        subscription: outcome.subscription.into(),
        payment_method: method.into(),
        charge,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanIn {
    pub plan_id: String,
    /// The preview's `proration_date`: the switch is charged what the page showed.
    pub proration_date: Option<String>,
}

/// The plan switch the configuration offers: the plan must be one of its `plan_ids`.
async fn offered(state: &AppState, portal: &PortalCaller, plan_id: &PlanId) -> ApiResult<bool> {
    let config = config(state, portal).await?;
    if !config.plan_switch.enabled {
        return Err(disabled("Switching plan"));
    }
    if !config.may_switch_to(plan_id) {
        return Err(ApiError::invalid(
            StatusCode::FORBIDDEN,
            format!("Switching to plan `{plan_id}` is not offered in this portal."),
        )
        .param("plan_id"));
    }
    Ok(config.plan_switch.prorate)
}

/// Switches plan (same cycle), prorated as the configuration says; an upgrade's proration is
/// charged at once and the switch takes effect when it is approved, as the API's.
async fn change_plan(
    State(state): State<AppState>,
    portal: PortalCaller,
    caller: Caller,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<PlanIn>,
) -> ApiResult<Response> {
    let id = SubscriptionId::given(id);
    let plan_id = PlanId::given(body.plan_id);
    let prorate = offered(&state, &portal, &plan_id).await?;
    let proration_at = parse_proration_date(body.proration_date.as_deref())?;
    theirs(&state, &portal, &id).await?;
    let command = Command::ChangePlan {
        plan_id: plan_id.clone(),
        cycle: None,
        prorate,
        proration_at,
        quantity: None,
    };
    let outcome = act(&state, &caller, &id, command).await?;
    // 200, or 202 while the upgrade's charge is pending (it applies once approved); a declined
    // one is an error here, with nothing changed and nothing to record.
    let answer = action_after_charge(&state, &caller, outcome).await?;
    record(
        &state,
        &portal,
        Some(&id),
        "plan_switch",
        serde_json::json!({"plan_id": plan_id, "prorate": prorate}),
    )
    .await;
    Ok(answer)
}

/// What switching to a plan would charge now. Changes nothing.
async fn preview_change_plan(
    State(state): State<AppState>,
    portal: PortalCaller,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<PlanIn>,
) -> ApiResult<Json<PreviewOut>> {
    let id = SubscriptionId::given(id);
    let plan_id = PlanId::given(body.plan_id);
    let prorate = offered(&state, &portal, &plan_id).await?;
    theirs(&state, &portal, &id).await?;
    let at = state.runtime.clock().now_ms(portal.account_id()).await?;
    let amount = if prorate {
        state
            .runtime
            .preview(&id, &plan_id, None, Some(at))
            .await
            .map_err(action_error)?
    } else {
        0
    };
    Ok(Json(PreviewOut::at(amount, at)))
}

/// What a customer may change of themselves: whom their invoices are made out to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomerPatchIn {
    pub tax_id: Option<TaxIdIn>,
    pub legal_name: Option<String>,
    pub address: Option<AddressIn>,
}

/// Changes the customer's invoicing data (invoices issued before keep theirs).
async fn update_customer(
    State(state): State<AppState>,
    portal: PortalCaller,
    ApiJson(body): ApiJson<CustomerPatchIn>,
) -> ApiResult<Response> {
    let patch = invoicing_patch(
        body.tax_id.as_ref(),
        body.legal_name.as_deref(),
        body.address.as_ref(),
    )?;
    let changed: Vec<&str> = [
        ("tax_id", patch.tax_id.is_some()),
        ("legal_name", patch.legal_name.is_some()),
        ("address", patch.address.is_some()),
    ]
    .into_iter()
    .filter_map(|(field, sent)| sent.then_some(field))
    .collect();
    let customer = state
        .store
        .update_customer(portal.account_id(), portal.customer_id(), patch)
        .await?
        .ok_or(ApiError::PortalSession)?;
    record(
        &state,
        &portal,
        None,
        "customer_update",
        serde_json::json!({"fields": changed}),
    )
    .await;
    Ok(Json(CustomerOut::from(customer)).into_response())
}
