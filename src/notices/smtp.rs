//! E-mail through the merchant's SMTP server (lettre). The server's host is a tenant's input:
//! its addresses are checked as a webhook URL's are (`egress`), when the settings are saved and
//! again before every connection, which goes to the checked address (TLS still verifies the
//! host's name). One message, one connection: SMTP's answer says what happened to it.
//!
//! Outcomes: the server's 250 after the message is `Sent`; a 5xx reply is `Refused` (the server
//! said no, for good); anything else (a 4xx, a refused or dropped connection, a timeout,
//! a TLS failure) is `Unknown`: the message may have arrived, and it is tried again.

use super::message::Message;
use crate::domain::notices::{EmailSettings, Smtp, SmtpSecurity};
use crate::egress::{self, AddressPolicy, HostResolver, ResolveError};
use crate::ids::NoticeId;
use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// What one message came to at the server.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// A 5xx reply (or an address no server would take): its text.
    Refused(String),
    Unknown(String),
}

/// Where and how long a message may go.
pub struct Reach {
    pub policy: AddressPolicy,
    pub resolver: Arc<dyn HostResolver>,
    pub timeout: Duration,
}

/// A notice's `Message-ID`: its id at this service's host, the same on every attempt.
pub fn message_id(id: &NoticeId, public_url: &str) -> String {
    let host = url::Url::parse(public_url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "billing.invalid".to_owned());
    format!("<{id}@{host}>")
}

/// Whether `host` may be an account's SMTP server under `policy`: an address literal must be
/// permitted, a name must resolve to permitted addresses only.
pub async fn check_host(
    host: &str,
    policy: AddressPolicy,
    resolver: &dyn HostResolver,
) -> Result<(), String> {
    address(host, policy, resolver).await.map(|_| ())
}

async fn address(
    host: &str,
    policy: AddressPolicy,
    resolver: &dyn HostResolver,
) -> Result<IpAddr, String> {
    let refused = || {
        "the SMTP host is a private or loopback address, which this server does not allow"
            .to_owned()
    };
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        return if policy.permits(ip.to_canonical()) {
            Ok(ip)
        } else {
            Err(refused())
        };
    }
    match egress::resolve_checked(resolver, host, policy).await {
        Ok(addrs) => addrs
            .into_iter()
            .next()
            .ok_or_else(|| "the SMTP host could not be resolved".to_owned()),
        Err(ResolveError::Refused(_)) => Err(refused()),
        Err(ResolveError::Unresolvable(_)) => Err("the SMTP host could not be resolved".into()),
    }
}

/// Sends `message` through `server` as `email` says (from, reply-to).
pub async fn send(
    server: &Smtp,
    email: &EmailSettings,
    message: &Message,
    message_id: &str,
    reach: &Reach,
) -> Outcome {
    let built = match build(email, message, message_id) {
        Ok(built) => built,
        Err(why) => return Outcome::Refused(why),
    };
    let ip = match address(&server.host, reach.policy, reach.resolver.as_ref()).await {
        Ok(ip) => ip,
        // The host answered nothing permitted now (a DNS change): unknown, asked again.
        Err(why) => return Outcome::Unknown(why),
    };
    let tls = |wrapped: bool| match TlsParameters::new(server.host.clone()) {
        Ok(parameters) if wrapped => Ok(Tls::Wrapper(parameters)),
        Ok(parameters) => Ok(Tls::Required(parameters)),
        Err(err) => Err(format!("TLS could not be set up: {err}")),
    };
    let tls = match server.security {
        SmtpSecurity::None => Ok(Tls::None),
        SmtpSecurity::Starttls => tls(false),
        SmtpSecurity::Tls => tls(true),
    };
    let tls = match tls {
        Ok(tls) => tls,
        Err(why) => return Outcome::Unknown(why),
    };
    let mut transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(ip.to_string())
        .port(server.port)
        .timeout(Some(reach.timeout))
        .tls(tls);
    if let (Some(user), Some(password)) = (&server.username, &server.password) {
        transport = transport.credentials(Credentials::new(user.clone(), password.clone()));
    }
    let transport = transport.build();
    let sent = tokio::time::timeout(reach.timeout * 2, transport.send(built)).await;
    match sent {
        Ok(Ok(_)) => Outcome::Sent,
        Ok(Err(err)) if err.is_permanent() => Outcome::Refused(err.to_string()),
        Ok(Err(err)) => Outcome::Unknown(err.to_string()),
        Err(_) => Outcome::Unknown("the SMTP server did not answer in time".into()),
    }
}

/// The MIME message: text and HTML alternatives, then the attachments.
fn build(
    email: &EmailSettings,
    message: &Message,
    message_id: &str,
) -> Result<lettre::Message, String> {
    let from_address = email
        .from_address
        .as_deref()
        .ok_or("no address to send from")?
        .parse()
        .map_err(|err| format!("the address to send from is refused: {err}"))?;
    let from = Mailbox::new(email.from_name.clone(), from_address);
    let to_address = message
        .to
        .as_deref()
        .ok_or("no address to send to")?
        .parse()
        .map_err(|err| format!("the customer's address is refused: {err}"))?;
    let to = Mailbox::new(message.to_name.clone(), to_address);
    let mut builder = lettre::Message::builder()
        .from(from)
        .to(to)
        .subject(message.subject.clone())
        .message_id(Some(message_id.to_owned()));
    if let Some(reply_to) = &email.reply_to {
        let reply_to = reply_to
            .parse()
            .map_err(|err| format!("the reply-to address is refused: {err}"))?;
        builder = builder.reply_to(Mailbox::new(None, reply_to));
    }
    let body = MultiPart::alternative_plain_html(message.text.clone(), message.html.clone());
    let mut mixed = MultiPart::mixed().multipart(body);
    for file in &message.attachments {
        let kind = ContentType::parse(file.content_type)
            .map_err(|err| format!("an attachment's type: {err}"))?;
        let part: SinglePart = Attachment::new(file.name.clone()).body(file.bytes.clone(), kind);
        mixed = mixed.singlepart(part);
    }
    builder
        .multipart(mixed)
        .map_err(|err| format!("the message could not be built: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_id_names_the_notice_at_this_host() {
        let id = NoticeId::parse("ntc_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b").expect("an id");
        assert_eq!(
            message_id(&id, "https://billing.tienda.co"),
            "<ntc_0193a1f9c4d57e6f8a9b0c1d2e3f4a5b@billing.tienda.co>"
        );
        assert!(message_id(&id, "not a url").ends_with("@billing.invalid>"));
    }

    #[tokio::test]
    async fn a_private_smtp_host_is_refused_unless_allowed() {
        let resolver = crate::egress::system_resolver();
        let public = AddressPolicy::PublicOnly;
        assert!(
            check_host("127.0.0.1", public, resolver.as_ref())
                .await
                .is_err()
        );
        assert!(
            check_host("10.1.2.3", public, resolver.as_ref())
                .await
                .is_err()
        );
        assert!(
            check_host("[::1]", public, resolver.as_ref())
                .await
                .is_err()
        );
        let private = AddressPolicy::AllowPrivate;
        assert!(
            check_host("127.0.0.1", private, resolver.as_ref())
                .await
                .is_ok()
        );
        assert!(
            check_host("localhost", public, resolver.as_ref())
                .await
                .is_err()
        );
    }
}
