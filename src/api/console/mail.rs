//! The test message an admin sends from the console to check the account's e-mail settings,
//! through its SMTP server and sender as the notices' worker sends (`notices::smtp`, its
//! addresses checked as a webhook's). What the server said is what the page says: sent,
//! refused with the server's words, or unknown: finding that out is the message's purpose, so
//! it is not tried again. (A customer's portal link is a notice: `actions::send_portal_link`.)

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

/// Sends one message to `to`: `hello`, then `body` as a paragraph.
pub async fn send(
    state: &AppState,
    account: &Account,
    to: &str,
    subject: &str,
    hello: &str,
    body: &str,
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
        merchant: &account.name,
    }
    .render()
    .map_err(|err| ApiError::Internal(Box::new(err)))?;
    let text = format!("{hello}\n\n{body}\n\n-- \n{}\n", account.name);
    let message = Message {
        to: Some(to.to_owned()),
        to_name: None,
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
