//! Notices to customers (CONTRACT §15): their kinds and channels, each account's settings and
//! how a `PATCH` merges into them, and which kinds are collection messages (Ley 2300 de 2023).
//! The settings are kept as JSON on the account; a secret in them (the SMTP password, the
//! WhatsApp access token, app secret and verify token) is never answered, only whether it is
//! set.

use serde::{Deserialize, Serialize};
use serde_json::Value;

crate::domain::vocabulary! {
    /// What a notice tells the customer.
    pub enum NoticeKind {
        /// An approved charge's invoice (with DIAN on, once DIAN accepted it).
        Receipt => "receipt",
        /// A subscription's declined charge: a collection message.
        PaymentFailed => "payment_failed",
        /// A card that expires before the next charge.
        CardExpiring => "card_expiring",
        /// An annual subscription renews in 7 days.
        RenewalUpcoming => "renewal_upcoming",
        /// A trial longer than 7 days ends in 7 days.
        TrialEnding => "trial_ending",
        /// A subscription was canceled.
        SubscriptionCanceled => "subscription_canceled",
        /// A link to the customer's portal, sent by a person of the merchant's from the
        /// console (CONTRACT §17).
        PortalLink => "portal_link",
    }
}

impl NoticeKind {
    /// Whether Ley 2300 de 2023 governs it: a message about money owed.
    pub fn is_collection(self) -> bool {
        self == NoticeKind::PaymentFailed
    }
}

crate::domain::vocabulary! {
    /// How a notice reaches the customer.
    pub enum Channel {
        Email => "email",
        Whatsapp => "whatsapp",
    }
}

crate::domain::vocabulary! {
    /// Where a notice stands.
    pub enum NoticeStatus {
        /// Waiting for its instant (or its next attempt).
        Scheduled => "scheduled",
        Sent => "sent",
        /// Refused for good (an SMTP 5xx), or out of attempts.
        Failed => "failed",
        /// Not sent, by rule (no address, no opt-in, the kind turned off): `suppressed_reason`.
        Suppressed => "suppressed",
    }
}

crate::domain::vocabulary! {
    /// How the SMTP connection is protected.
    pub enum SmtpSecurity {
        /// Plain text (a relay on a private network, a local sink).
        None => "none",
        /// Plain text upgraded by STARTTLS, required.
        Starttls => "starttls",
        /// TLS from the first byte (port 465).
        Tls => "tls",
    }
}

/// The merchant's SMTP server (or the operator's relay).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Smtp {
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    pub security: SmtpSecurity,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    pub enabled: bool,
    #[serde(default)]
    pub from_address: Option<String>,
    #[serde(default)]
    pub from_name: Option<String>,
    #[serde(default)]
    pub reply_to: Option<String>,
    #[serde(default)]
    pub smtp: Option<Smtp>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhatsappSettings {
    pub enabled: bool,
    #[serde(default)]
    pub phone_number_id: Option<String>,
    #[serde(default)]
    pub access_token: Option<String>,
    /// The Meta app's secret, which signs its webhooks (`X-Hub-Signature-256`).
    #[serde(default)]
    pub app_secret: Option<String>,
    /// What Meta's webhook handshake must present (`hub.verify_token`).
    #[serde(default)]
    pub verify_token: Option<String>,
}

/// Which kinds are sent (all by default).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kinds {
    pub receipt: bool,
    pub payment_failed: bool,
    pub card_expiring: bool,
    pub renewal_upcoming: bool,
    pub trial_ending: bool,
    pub subscription_canceled: bool,
}

impl Kinds {
    pub fn on(&self, kind: NoticeKind) -> bool {
        match kind {
            NoticeKind::Receipt => self.receipt,
            NoticeKind::PaymentFailed => self.payment_failed,
            NoticeKind::CardExpiring => self.card_expiring,
            NoticeKind::RenewalUpcoming => self.renewal_upcoming,
            NoticeKind::TrialEnding => self.trial_ending,
            NoticeKind::SubscriptionCanceled => self.subscription_canceled,
            // Asked for by a person, one at a time: no switch of its own.
            NoticeKind::PortalLink => true,
        }
    }
}

crate::domain::vocabulary! {
    /// The language of the account's notices.
    pub enum NoticeLocale {
        Es => "es",
        En => "en",
    }
}

/// An account's notice settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoticeSettings {
    pub email: EmailSettings,
    pub whatsapp: WhatsappSettings,
    pub locale: NoticeLocale,
    pub kinds: Kinds,
}

impl Default for NoticeSettings {
    /// Both channels off (nothing is sent until the merchant says how), Spanish, every kind.
    fn default() -> Self {
        Self {
            email: EmailSettings {
                enabled: false,
                from_address: None,
                from_name: None,
                reply_to: None,
                smtp: None,
            },
            whatsapp: WhatsappSettings {
                enabled: false,
                phone_number_id: None,
                access_token: None,
                app_secret: None,
                verify_token: None,
            },
            locale: NoticeLocale::Es,
            kinds: Kinds {
                receipt: true,
                payment_failed: true,
                card_expiring: true,
                renewal_upcoming: true,
                trial_ending: true,
                subscription_canceled: true,
            },
        }
    }
}

/// Why a merged configuration is refused: the field (dotted) and what is wrong.
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

fn invalid(field: &str, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}

impl NoticeSettings {
    /// The stored settings (the defaults when none or unreadable: nothing is sent).
    pub fn from_stored(raw: Option<&str>) -> Self {
        raw.and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or_default()
    }

    /// The channels that send, in order.
    pub fn channels(&self) -> impl Iterator<Item = Channel> + '_ {
        [
            (Channel::Email, self.email.enabled),
            (Channel::Whatsapp, self.whatsapp.enabled),
        ]
        .into_iter()
        .filter_map(|(channel, on)| on.then_some(channel))
    }

    /// `patch` (a JSON object as sent) merged into these settings: objects field by field at
    /// every level, a `null` leaves a field as it is, anything else replaces it; then the
    /// whole checked (`check`).
    pub fn merged(&self, patch: &Value) -> Result<Self, Invalid> {
        let mut merged = serde_json::to_value(self).map_err(|err| invalid("", err.to_string()))?;
        merge(&mut merged, patch);
        let settings: Self = serde_json::from_value(merged)
            .map_err(|err| invalid(&field_of(&err.to_string()), err.to_string()))?;
        settings.check()?;
        Ok(settings)
    }

    /// What a channel needs before it can be on: e-mail an address to send from and a server;
    /// WhatsApp the phone number id and the access token.
    pub fn check(&self) -> Result<(), Invalid> {
        let email = &self.email;
        for (field, value) in [
            ("email.from_address", &email.from_address),
            ("email.reply_to", &email.reply_to),
        ] {
            if let Some(address) = value
                && crate::domain::text::Email::parse(address).is_err()
            {
                return Err(invalid(field, "must be a valid e-mail address"));
            }
        }
        if let Some(name) = &email.from_name
            && crate::domain::text::Name::parse(name).is_err()
        {
            return Err(invalid(
                "email.from_name",
                "must be 1 to 200 characters with no control character",
            ));
        }
        if let Some(smtp) = &email.smtp {
            let host_ok = !smtp.host.is_empty()
                && smtp.host.len() <= 253
                && smtp
                    .host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
            if !host_ok {
                return Err(invalid(
                    "email.smtp.host",
                    "must be a host name or an address",
                ));
            }
            if smtp.port == 0 {
                return Err(invalid("email.smtp.port", "must be 1 to 65535"));
            }
            if smtp.password.is_some() && smtp.username.is_none() {
                return Err(invalid(
                    "email.smtp.username",
                    "a password needs a username",
                ));
            }
        }
        if email.enabled {
            if email.from_address.is_none() {
                return Err(invalid(
                    "email.from_address",
                    "e-mail on needs an address to send from",
                ));
            }
            if email.smtp.is_none() {
                return Err(invalid("email.smtp", "e-mail on needs an SMTP server"));
            }
        }
        let whatsapp = &self.whatsapp;
        if let Some(id) = &whatsapp.phone_number_id
            && (id.is_empty() || id.len() > 32 || !id.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(invalid(
                "whatsapp.phone_number_id",
                "must be Meta's numeric id",
            ));
        }
        if let Some(token) = &whatsapp.access_token
            && (token.is_empty() || token.len() > 1024 || token.chars().any(char::is_control))
        {
            return Err(invalid(
                "whatsapp.access_token",
                "must be Meta's access token",
            ));
        }
        for (field, value) in [
            ("whatsapp.app_secret", &whatsapp.app_secret),
            ("whatsapp.verify_token", &whatsapp.verify_token),
        ] {
            if let Some(secret) = value
                && (secret.is_empty() || secret.len() > 256 || secret.chars().any(char::is_control))
            {
                return Err(invalid(
                    field,
                    "must be 1 to 256 characters with no control character",
                ));
            }
        }
        if whatsapp.enabled
            && (whatsapp.phone_number_id.is_none() || whatsapp.access_token.is_none())
        {
            return Err(invalid(
                "whatsapp",
                "WhatsApp on needs phone_number_id and access_token",
            ));
        }
        Ok(())
    }
}

/// JSON merge with `null` as "not sent".
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    continue;
                }
                match base.get_mut(key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge(existing, value);
                    }
                    _ => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, patch) if !patch.is_null() => *base = patch.clone(),
        _ => {}
    }
}

/// The field serde's message names (`unknown field `x``, `missing field `y``), else none.
fn field_of(message: &str) -> String {
    message
        .split('`')
        .nth(1)
        .map(str::to_owned)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smtp() -> Value {
        json!({"host": "smtp.example.co", "port": 587, "username": "u", "password": "p",
               "security": "starttls"})
    }

    #[test]
    fn nothing_is_sent_until_a_channel_is_turned_on() {
        let settings = NoticeSettings::default();
        assert_eq!(settings.channels().count(), 0);
        assert!(NoticeKind::ALL.iter().all(|kind| settings.kinds.on(*kind)));
        assert_eq!(NoticeSettings::from_stored(Some("not json")), settings);
    }

    #[test]
    fn a_patch_merges_nested_fields_and_null_leaves_them() {
        let on = NoticeSettings::default()
            .merged(
                &json!({"email": {"enabled": true, "from_address": "cobros@tienda.co",
                "smtp": smtp()}}),
            )
            .expect("valid");
        assert_eq!(on.channels().collect::<Vec<_>>(), vec![Channel::Email]);
        let changed = on
            .merged(&json!({"email": {"smtp": {"port": 2525, "password": null}},
                "kinds": {"receipt": false}, "locale": "en"}))
            .expect("valid");
        let smtp = changed.email.smtp.as_ref().expect("smtp");
        assert_eq!(smtp.port, 2525);
        assert_eq!(smtp.password.as_deref(), Some("p"), "null leaves it");
        assert_eq!(smtp.host, "smtp.example.co");
        assert!(!changed.kinds.receipt && changed.kinds.payment_failed);
        assert_eq!(changed.locale, NoticeLocale::En);
    }

    #[test]
    fn a_channel_on_needs_what_it_sends_with() {
        let err = NoticeSettings::default()
            .merged(&json!({"email": {"enabled": true}}))
            .expect_err("no address");
        assert_eq!(err.field, "email.from_address");
        let err = NoticeSettings::default()
            .merged(&json!({"whatsapp": {"enabled": true, "phone_number_id": "123"}}))
            .expect_err("no token");
        assert_eq!(err.field, "whatsapp");
        let err = NoticeSettings::default()
            .merged(&json!({"email": {"smtp": {"host": "h", "port": 25, "security": "ssl"}}}))
            .expect_err("no such security");
        assert!(err.message.contains("unknown variant"), "{err:?}");
        let err = NoticeSettings::default()
            .merged(&json!({"colour": "red"}))
            .expect_err("unknown");
        assert_eq!(err.field, "colour");
    }

    #[test]
    fn only_a_failed_payment_is_a_collection_message() {
        let collection: Vec<_> = NoticeKind::ALL
            .iter()
            .filter(|kind| kind.is_collection())
            .collect();
        assert_eq!(collection, vec![&NoticeKind::PaymentFailed]);
    }
}
