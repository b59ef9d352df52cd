//! [`Secret`]: a column whose value is a credential (an account's processor private key,
//! events secret and integrity secret; a webhook endpoint's signing secret). It is stored and
//! read as text, and its `Debug` prints `Secret(..)`: sea-orm derives `Debug` for every
//! entity's `ActiveModel` and that impl cannot be replaced, so the type of the field is the one
//! place that keeps such a row's secrets out of a log line. Code that needs the value derefs it
//! to `&str` or converts it into a `String`.

use sea_orm::DeriveValueType;

#[derive(Clone, PartialEq, Eq, DeriveValueType)]
pub struct Secret(String);

impl Secret {
    /// The credential itself, for the one place that uses it (signing, a processor call).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Secret {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl From<Secret> for String {
    fn from(secret: Secret) -> Self {
        secret.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::AccountId;
    use crate::store::entities::{account, webhook_endpoint};
    use sea_orm::{ActiveModelTrait, IntoActiveModel};

    const SECRETS: [&str; 7] = [
        "prv_test_PRIVATEprivatePRIVATE",
        "test_events_EVENTSeventsEVENTS",
        "test_integrity_INTEGRITYintegrity",
        "whsec_SIGNINGsigningSIGNING",
        "pin-SOFTWAREpinPIN",
        "MIIP12certificateBASE64",
        "p12-PASSWORDpassword",
    ];

    fn no_secret_in(text: &str) {
        for secret in SECRETS {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }

    fn account_row() -> account::Model {
        account::Model {
            id: AccountId::parse("acct_1").expect("an account's id"),
            name: "Shop".into(),
            sandbox: true,
            api_key_hash: "hash".into(),
            processor_base_url: None,
            processor_public_key: "pub_test_public".into(),
            processor_private_key: SECRETS[0].into(),
            processor_events_secret: SECRETS[1].into(),
            processor_integrity_secret: SECRETS[2].into(),
            fee_percent_bps: 0,
            fee_fixed_cents: 0,
            rate_limit_per_minute: 100,
            status_rate_limit_per_minute: 20,
            clock_offset_ms: 0,
            dunning_retry_days: "1".into(),
            available_cents: 0,
            reserved_cents: 0,
            created_at: 0,
            default_tax_code: crate::domain::tax::TaxCode::Iva19,
            invoicing: None,
            notices: None,
            portal: None,
            dian: None,
            dian_software_pin: Some(SECRETS[4].into()),
            dian_certificate: Some(SECRETS[5].into()),
            dian_certificate_password: Some(SECRETS[6].into()),
        }
    }

    fn endpoint_row() -> webhook_endpoint::Model {
        webhook_endpoint::Model {
            id: crate::ids::WebhookEndpointId::parse("we_1").expect("an endpoint's id"),
            account_id: AccountId::parse("acct_1").expect("an account's id"),
            url: "https://example.com/hooks".into(),
            secret: SECRETS[3].into(),
            events: "[]".into(),
            active: true,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn a_secret_debugs_redacted_and_keeps_its_value() {
        let secret = Secret::from(SECRETS[0]);
        no_secret_in(&format!("{secret:?}"));
        assert_eq!(secret.expose(), SECRETS[0]);
        assert_eq!(&*secret, SECRETS[0]);
        assert_eq!(String::from(secret), SECRETS[0]);
    }

    #[test]
    fn rows_and_active_models_holding_secrets_debug_without_them() {
        let account = account_row();
        no_secret_in(&format!("{account:?} {account:#?}"));
        let active = account.into_active_model().reset_all();
        no_secret_in(&format!("{active:?}"));
        let endpoint = endpoint_row();
        no_secret_in(&format!("{endpoint:?}"));
        no_secret_in(&format!("{:?}", endpoint.into_active_model().reset_all()));
    }
}
