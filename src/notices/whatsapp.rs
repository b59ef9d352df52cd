//! A notice as a WhatsApp template message, and its sending. WhatsApp takes only templates the
//! merchant registered with Meta beforehand (their text is Meta's to approve), so what this
//! service sends is the template's name (the notice's kind) and its body's parameters, read
//! from the rows when the notice is sent, in the account's language; docs/notices.md gives the
//! templates to register.
//!
//! Where it goes: a sandbox account's messages go to the sandbox WhatsApp (the in-process one,
//! told of the account's number first, or the operator's `whatsapp_sandbox_url`), a live
//! account's to Meta (or the operator's `whatsapp_url`). Outcomes as `whatsapp::client` reads
//! them: sent with the wamid; refused for good → `failed` with Meta's message; unknown → tried
//! again with the e-mail's backoff.

use crate::config::Config;
use crate::documents::text::Locale;
use crate::domain::notices::{NoticeKind, NoticeLocale, NoticeSettings};
use crate::domain::subscription::Status;
use crate::egress::{AddressPolicy, GuardedClient};
use crate::store::notices::Notice;
use crate::store::{Store, StoreResult};
use crate::whatsapp::client::{self, Outcome};
use crate::whatsapp::sandbox::{PhoneNumber, SandboxWhatsapp};
use crate::whatsapp::wire::TemplateMessage;
use std::sync::Arc;
use std::time::Duration;

/// A parameter WhatsApp requires but the notice has nothing for (Meta refuses empty ones).
const NOTHING: &str = "-";

/// How WhatsApp messages leave: a client for the operator's URLs (the sandbox, a setting),
/// which may be private, and one for Meta's, public only.
pub struct Reach {
    operator: GuardedClient,
    meta: GuardedClient,
    /// The in-process sandbox, told of a sandbox account's number before it sends.
    sandbox: Option<Arc<SandboxWhatsapp>>,
}

impl Reach {
    pub fn new(config: &Config, sandbox: Option<Arc<SandboxWhatsapp>>) -> reqwest::Result<Self> {
        let timeout = Duration::from_millis(config.whatsapp_timeout_ms.max(100));
        let agent = concat!("billing/", env!("CARGO_PKG_VERSION"));
        Ok(Self {
            operator: GuardedClient::new(
                AddressPolicy::AllowPrivate,
                config.host_resolver(),
                timeout,
                agent,
            )?,
            meta: GuardedClient::new(
                AddressPolicy::PublicOnly,
                config.host_resolver(),
                timeout,
                agent,
            )?,
            sandbox,
        })
    }
}

/// What a sent template came to, with the recipient it went to.
pub struct Sent {
    pub outcome: Outcome,
    pub recipient: String,
}

/// Why nothing was sent.
pub enum Unsent {
    /// The rule that keeps it from going, as `suppressed_reason`.
    Suppressed(&'static str),
}

/// Composes and sends `notice` by WhatsApp.
pub async fn send(
    store: &Store,
    config: &Config,
    reach: &Reach,
    notice: &Notice,
    kind: NoticeKind,
    settings: &NoticeSettings,
) -> StoreResult<Result<Sent, Unsent>> {
    let whatsapp = &settings.whatsapp;
    let (Some(phone_number_id), Some(token)) = (&whatsapp.phone_number_id, &whatsapp.access_token)
    else {
        return Ok(Err(Unsent::Suppressed(
            "WhatsApp has no number or access token",
        )));
    };
    let account_id = &notice.account_id;
    let (Some(account), Some(customer)) = (
        store.account(account_id).await?,
        store.customer(account_id, &notice.customer_id).await?,
    ) else {
        return Ok(Err(Unsent::Suppressed("what it is about is gone")));
    };
    if !customer.whatsapp_opt_in {
        return Ok(Err(Unsent::Suppressed(
            "the customer did not opt in to WhatsApp",
        )));
    }
    let Some(phone) = customer.phone.clone().filter(|phone| !phone.is_empty()) else {
        return Ok(Err(Unsent::Suppressed("the customer has no phone")));
    };
    let public_url = config.public_url();
    let Some(body) = parameters(
        store,
        notice,
        kind,
        settings,
        &account.name,
        &customer.name,
        &public_url,
    )
    .await?
    else {
        return Ok(Err(Unsent::Suppressed("what it is about is gone")));
    };
    let language = match settings.locale {
        NoticeLocale::Es => "es",
        NoticeLocale::En => "en",
    };
    let message = TemplateMessage::new(&phone, kind.as_str(), language, body);
    let (base, operators) = config.whatsapp_base(account.sandbox);
    if account.sandbox
        && config.whatsapp_sandbox_url.is_none()
        && let Some(sandbox) = &reach.sandbox
    {
        // The in-process sandbox learns the number as the account has it now; refused only
        // when it serves as many numbers as it may, and then the send below says so.
        let _ = sandbox.register(PhoneNumber {
            phone_number_id: phone_number_id.clone(),
            access_token: token.clone(),
            app_secret: whatsapp.app_secret.clone(),
            webhook_url: Some(format!("{public_url}/webhooks/whatsapp/{account_id}")),
        });
    }
    let http = if operators {
        &reach.operator
    } else {
        &reach.meta
    };
    let outcome = client::send(http, &base, phone_number_id, token, &message).await;
    Ok(Ok(Sent {
        outcome,
        recipient: phone,
    }))
}

/// The template's body parameters for `kind`, in order (docs/notices.md lists them), or `None`
/// when what the notice is about is gone.
async fn parameters(
    store: &Store,
    notice: &Notice,
    kind: NoticeKind,
    settings: &NoticeSettings,
    merchant: &str,
    customer: &str,
    public_url: &str,
) -> StoreResult<Option<Vec<String>>> {
    let account_id = &notice.account_id;
    let locale = match settings.locale {
        NoticeLocale::Es => Locale::Es,
        NoticeLocale::En => Locale::En,
    };
    let es = locale == Locale::Es;
    let money = |cents: i64| crate::documents::sheet::money(cents, locale);
    let date = |ms: i64| crate::documents::sheet::date(ms, locale);
    let (customer, merchant) = (one_line(customer), one_line(merchant));
    Ok(Some(match kind {
        NoticeKind::Receipt => {
            let Some(invoice_id) = &notice.invoice_id else {
                return Ok(None);
            };
            let Some(invoice) = store.invoice(account_id, invoice_id).await? else {
                return Ok(None);
            };
            vec![
                customer,
                merchant,
                invoice.number.clone(),
                money(invoice.total_cents),
                date(invoice.issued_at),
                format!("{public_url}/invoices/{}", invoice.hosted_token),
            ]
        }
        NoticeKind::PaymentFailed => {
            let (Some(charge_id), Some(sub_id)) = (&notice.charge_id, &notice.subscription_id)
            else {
                return Ok(None);
            };
            let (Some(charge), Some(sub)) = (
                store.charge(account_id, charge_id).await?,
                store.subscription(account_id, sub_id).await?,
            ) else {
                return Ok(None);
            };
            let reason = charge
                .processor_message
                .as_deref()
                .map(one_line)
                .filter(|reason| !reason.is_empty())
                .unwrap_or_else(|| NOTHING.to_owned());
            let (mut next, mut ends, mut link) =
                (NOTHING.to_owned(), NOTHING.to_owned(), NOTHING.to_owned());
            if sub.status == Status::PastDue {
                link = super::message::pay_link(store, notice, &sub, public_url).await?;
                next = date(sub.next_charge_date);
                let account = store.account(account_id).await?;
                let retry_days = account
                    .map(|a| crate::domain::subscription::parse_retry_days(&a.dunning_retry_days))
                    .unwrap_or_default();
                if let (Some(first), Some(&last)) = (sub.first_failure_at, retry_days.last()) {
                    ends = date(first + last * 86_400_000);
                }
            }
            vec![
                customer,
                merchant,
                money(charge.amount_cents),
                reason,
                next,
                ends,
                link,
            ]
        }
        NoticeKind::SubscriptionCanceled => {
            let Some(sub_id) = &notice.subscription_id else {
                return Ok(None);
            };
            let Some(sub) = store.subscription(account_id, sub_id).await? else {
                return Ok(None);
            };
            let plan = store
                .plan(account_id, &sub.plan_id)
                .await?
                .map(|plan| one_line(&plan.name))
                .unwrap_or_else(|| NOTHING.to_owned());
            let by_customer = store.canceled_in_portal(account_id, sub_id).await?;
            let why = match (es, sub.failed_attempts > 0, by_customer) {
                (true, true, _) => "no pudimos cobrar sus pagos".to_owned(),
                (false, true, _) => "its payments could not be taken".to_owned(),
                (true, false, true) => "la cancelaste desde tu portal".to_owned(),
                (false, false, true) => "you canceled it from your portal".to_owned(),
                (true, false, false) => format!("{merchant} la canceló"),
                (false, false, false) => format!("{merchant} canceled it"),
            };
            vec![customer, plan, merchant, why]
        }
        NoticeKind::CardExpiring | NoticeKind::RenewalUpcoming | NoticeKind::TrialEnding => {
            return Ok(None);
        }
    }))
}

/// `text` as one template parameter: Meta refuses new lines, tabs and runs of spaces in them.
fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.is_empty() {
        NOTHING.to_owned()
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_is_one_line_and_never_empty() {
        assert_eq!(one_line("Plan\n  Pro\t anual"), "Plan Pro anual");
        assert_eq!(one_line("   "), "-");
    }
}
