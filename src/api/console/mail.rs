//! E-mail a person sends from the console, through the account's own notice settings (its SMTP
//! server, its sender), as the notices' worker sends (`notices::smtp`, its addresses checked as
//! a webhook's): a customer's portal link, and a test message to check the settings. What the
//! server said is what the page says: sent, refused with the server's words, or unknown (it
//! may have arrived: the person may look before sending again). Nothing is retried behind
//! their back, so a message they did not see the end of is never sent twice unasked.

use super::i18n::Tr;
use crate::checkout::i18n::Locale;
use crate::domain::notices::NoticeLocale;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::notices::message::Message;
use crate::notices::smtp;
use crate::store::accounts::Account;
use askama::Template;
use std::time::Duration;

/// How a message ended, as the page tells it.
pub enum Delivery {
    Sent,
    Refused(String),
    Unknown(String),
    /// The account sends no e-mail (its channel off, or no server).
    Off,
}

impl Delivery {
    /// The person's words for it, naming the address.
    pub fn words(&self, t: Tr, to: &str) -> (String, bool) {
        match self {
            Delivery::Sent => (format!("{} {to}", t.get("mail_sent")), false),
            Delivery::Refused(why) => (format!("{} {why}", t.get("mail_refused")), true),
            Delivery::Unknown(why) => (format!("{} ({why})", t.get("mail_unknown")), true),
            Delivery::Off => (t.get("mail_off").to_owned(), true),
        }
    }
}

#[derive(Template)]
#[template(path = "api/console/templates/mail.html")]
struct MailPage<'a> {
    lang: &'static str,
    title: &'a str,
    hello: &'a str,
    body: &'a str,
    link: Option<(&'a str, &'a str)>,
    merchant: &'a str,
}

/// The language the account writes to its customers in.
pub async fn customer_locale(state: &AppState, account: &Account) -> Result<Locale, ApiError> {
    let settings = state.store.notice_settings(&account.id).await?;
    Ok(match settings.locale {
        NoticeLocale::En => Locale::En,
        NoticeLocale::Es => Locale::Es,
    })
}

/// Sends one message to `to`: `body` as a paragraph, `link` (its label, its URL) as a button
/// and a line of the plain text.
#[allow(clippy::too_many_arguments)]
pub async fn send(
    state: &AppState,
    account: &Account,
    to: &str,
    to_name: Option<&str>,
    subject: &str,
    hello: &str,
    body: &str,
    link: Option<(&str, &str)>,
) -> Result<Delivery, ApiError> {
    let settings = state.store.notice_settings(&account.id).await?;
    let Some(server) = settings
        .email
        .smtp
        .as_ref()
        .filter(|_| settings.email.enabled)
    else {
        return Ok(Delivery::Off);
    };
    let locale = match settings.locale {
        NoticeLocale::En => Locale::En,
        NoticeLocale::Es => Locale::Es,
    };
    let html = MailPage {
        lang: locale.code(),
        title: subject,
        hello,
        body,
        link,
        merchant: &account.name,
    }
    .render()
    .map_err(|err| ApiError::Internal(Box::new(err)))?;
    let mut text = format!("{hello}\n\n{body}\n");
    if let Some((label, url)) = link {
        text.push_str(&format!("\n{label}: {url}\n"));
    }
    text.push_str(&format!("\n-- \n{}\n", account.name));
    let message = Message {
        to: Some(to.to_owned()),
        to_name: to_name.map(str::to_owned),
        subject: subject.to_owned(),
        text,
        html,
        attachments: Vec::new(),
        sandbox: account.sandbox,
    };
    let host = url::Url::parse(&state.config.public_url())
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_else(|| "billing.invalid".to_owned());
    let message_id = format!("<{}@{host}>", crate::secrets::random_token("console_", 24));
    let reach = smtp::Reach {
        policy: state.config.webhook_policy(account.sandbox),
        resolver: state.config.host_resolver(),
        timeout: Duration::from_millis(state.config.smtp_timeout_ms.max(100)),
    };
    Ok(
        match smtp::send(server, &settings.email, &message, &message_id, &reach).await {
            smtp::Outcome::Sent => Delivery::Sent,
            smtp::Outcome::Refused(why) => Delivery::Refused(why),
            smtp::Outcome::Unknown(why) => Delivery::Unknown(why),
        },
    )
}
