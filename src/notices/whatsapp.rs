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

use super::facts::{self, Facts, Parties, Why};
use crate::config::Config;
use crate::documents::text::Locale;
use crate::domain::notices::{NoticeKind, NoticeLocale, NoticeSettings};
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
    (settings, now): (&NoticeSettings, i64),
) -> StoreResult<Result<Sent, Unsent>> {
    if kind == NoticeKind::PortalLink {
        return Ok(Err(Unsent::Suppressed("a portal link goes by e-mail only")));
    }
    let whatsapp = &settings.whatsapp;
    let (Some(phone_number_id), Some(token)) = (&whatsapp.phone_number_id, &whatsapp.access_token)
    else {
        return Ok(Err(Unsent::Suppressed(
            "WhatsApp has no number or access token",
        )));
    };
    let account_id = &notice.account_id;
    let public_url = config.public_url();
    let locale = super::message::locale_of(settings);
    let carried = (locale, facts::Carried::Words);
    let Some((parties, facts)) =
        facts::read(store, notice, kind, carried, (&public_url, now)).await?
    else {
        return Ok(Err(Unsent::Suppressed("what it is about is gone")));
    };
    if !parties.whatsapp_opt_in {
        return Ok(Err(Unsent::Suppressed(
            "the customer did not opt in to WhatsApp",
        )));
    }
    let Some(phone) = parties.phone.clone() else {
        return Ok(Err(Unsent::Suppressed("the customer has no phone")));
    };
    let body = parameters(&parties, &facts, locale);
    let language = match settings.locale {
        NoticeLocale::Es => "es",
        NoticeLocale::En => "en",
    };
    let message = TemplateMessage::new(&phone, kind.as_str(), language, body);
    let (base, operators) = config.whatsapp_base(parties.sandbox);
    if parties.sandbox
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

/// The template's body parameters for what `facts` tell, in order (docs/notices.md lists
/// them); a parameter with nothing to say is `-`.
pub fn parameters(parties: &Parties, facts: &Facts, locale: Locale) -> Vec<String> {
    let es = locale == Locale::Es;
    let money = |cents: i64| crate::documents::sheet::money(cents, locale);
    let date = |ms: i64| crate::documents::sheet::date(ms, locale);
    let (customer, merchant) = (one_line(&parties.customer), one_line(&parties.merchant));
    match facts {
        Facts::Receipt(receipt) => vec![
            customer,
            merchant,
            one_line(&receipt.number),
            money(receipt.total_cents),
            date(receipt.issued_at),
            receipt.hosted_url.clone(),
        ],
        Facts::PaymentFailed(failed) => {
            let reason = failed
                .reason
                .as_ref()
                .map(|reason| one_line(super::message::reason_words(reason, locale)))
                .unwrap_or_else(|| NOTHING.to_owned());
            let (mut next, mut ends, mut link) =
                (NOTHING.to_owned(), NOTHING.to_owned(), NOTHING.to_owned());
            if let Some(dunning) = &failed.dunning {
                next = match dunning.next_try {
                    Some(at) => date(at),
                    None if es => "ninguno, necesitamos una tarjeta nueva".to_owned(),
                    None => "none, we need a new card".to_owned(),
                };
                if let Some(at) = dunning.ends {
                    ends = date(at);
                }
                link = dunning.link.clone();
            }
            vec![
                customer,
                merchant,
                money(failed.amount_cents),
                reason,
                next,
                ends,
                link,
            ]
        }
        Facts::Canceled { plan, why } => {
            let why = match (es, why) {
                (true, Why::Unpaid) => "no pudimos cobrar sus pagos".to_owned(),
                (false, Why::Unpaid) => "its payments could not be taken".to_owned(),
                (true, Why::Customer) => "la cancelaste desde tu portal".to_owned(),
                (false, Why::Customer) => "you canceled it from your portal".to_owned(),
                (true, Why::Merchant) => format!("{merchant} la canceló"),
                (false, Why::Merchant) => format!("{merchant} canceled it"),
            };
            vec![customer, one_line(plan), merchant, why]
        }
        Facts::Reminder(reminder) => {
            let mut body = vec![
                customer,
                merchant,
                one_line(&reminder.plan),
                money(reminder.amount_cents),
                date(reminder.charge_at),
            ];
            if let Some(link) = &reminder.link {
                body.push(one_line(&reminder.card));
                body.push(link.clone());
            }
            body
        }
        // Never sent on WhatsApp (`send` suppresses it); its parameters for completeness.
        Facts::PortalLink { url, .. } => vec![customer, merchant, url.clone()],
    }
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
