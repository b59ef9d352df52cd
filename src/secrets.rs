//! Generation and hashing of credentials. API keys and the admin token are long random
//! strings, so one SHA-256 is enough to store them safely (no password stretching needed);
//! comparisons of hashes run in constant time.

use rand::Rng;
use rand::distr::Alphanumeric;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// `prefix` followed by `len` random alphanumeric characters.
pub fn random_token(prefix: &str, len: usize) -> String {
    let suffix: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect();
    format!("{prefix}{suffix}")
}

/// Lowercase hex SHA-256 of `value`.
pub fn sha256_hex(value: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(value.as_ref()))
}

/// Constant-time equality of two strings (length is not secret).
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// The fewest characters an operator's own admin token may have, and the fewest different
/// ones among them. The token opens every account and is tried against from anywhere; a short
/// or repetitive one could be guessed, so the service refuses to start with it.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 24;
const MIN_ADMIN_TOKEN_DISTINCT: usize = 8;

/// Why an admin token given by the operator (`--admin-token`, also the standalone sandboxes')
/// is too weak to serve with; `Ok` for one that is long and varied enough.
pub fn check_admin_token(token: &str) -> Result<(), String> {
    let chars: Vec<char> = token.chars().collect();
    let mut distinct = chars.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if chars.len() < MIN_ADMIN_TOKEN_CHARS || distinct.len() < MIN_ADMIN_TOKEN_DISTINCT {
        return Err(format!(
            "the admin token must have at least {MIN_ADMIN_TOKEN_CHARS} characters, \
             {MIN_ADMIN_TOKEN_DISTINCT} of them different (leave it unset to have one generated)"
        ));
    }
    if chars.iter().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the admin token must not contain white space or control characters".into());
    }
    Ok(())
}

/// A new API key for a sandbox or live account.
pub fn new_api_key(sandbox: bool) -> String {
    random_token(if sandbox { "sk_test_" } else { "sk_live_" }, 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_carry_their_mode() {
        assert!(new_api_key(true).starts_with("sk_test_"));
        assert!(new_api_key(false).starts_with("sk_live_"));
        assert_ne!(new_api_key(true), new_api_key(true));
    }

    #[test]
    fn admin_tokens_must_be_long_and_varied() {
        assert!(check_admin_token("test-admin-token-0123456789").is_ok());
        assert!(check_admin_token(&random_token("adm_", 40)).is_ok());
        for weak in [
            "admin",
            "hunter2hunter2",
            &"a".repeat(40),
            &"ab12".repeat(10),
        ] {
            assert!(check_admin_token(weak).is_err(), "{weak} accepted");
        }
        assert!(check_admin_token("correct horse battery staple").is_err());
    }

    #[test]
    fn sha256_matches_a_known_digest() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// Debug of every type outside the store that holds a credential shows none of it (the
    /// store's rows: `store::secret`).
    mod debug_is_redacted {
        const SECRET: &str = "SECRETsecretSECRETsecret0123456789";

        fn shows_no_secret(debug: String) {
            assert!(!debug.contains(SECRET), "{debug}");
            assert!(!debug.contains("4242424242424242"), "{debug}");
        }

        #[test]
        fn config_hides_the_admin_token_and_the_database_password() {
            let mut config = crate::config::Config::new(format!(
                "postgres://billing:{SECRET}@db.internal/billing"
            ));
            config.admin_token = Some(SECRET.to_owned());
            let debug = format!("{config:?}");
            shows_no_secret(debug.clone());
            assert!(debug.contains("db.internal"), "{debug}");
        }

        #[test]
        fn processor_keys_show_only_the_public_key() {
            let keys = crate::processor::sandbox::MerchantKeys {
                public_key: "pub_test_visible".into(),
                private_key: format!("prv_test_{SECRET}"),
                events_secret: format!("test_events_{SECRET}"),
                integrity_secret: format!("test_integrity_{SECRET}"),
            };
            let debug = format!("{keys:?}");
            shows_no_secret(debug.clone());
            assert!(debug.contains("pub_test_visible"));
            let credentials = crate::processor::client::ProcessorCredentials::new(
                "http://processor",
                "pub_test_visible",
                format!("prv_test_{SECRET}"),
                SECRET,
            )
            .expect("credentials");
            shows_no_secret(format!("{credentials:?}"));
            let given: crate::api::accounts::ProcessorIn =
                serde_json::from_value(serde_json::json!({
                "public_key": "pub_test_visible", "private_key": format!("prv_test_{SECRET}"),
                "events_secret": SECRET, "integrity_secret": SECRET}))
                .expect("processor in");
            shows_no_secret(format!("{given:?}"));
            let account: crate::api::accounts::AccountIn =
                serde_json::from_value(serde_json::json!({
                "name": "Shop", "processor": {"public_key": "pub_test_visible",
                "private_key": SECRET, "events_secret": SECRET, "integrity_secret": SECRET}}))
                .expect("account in");
            shows_no_secret(format!("{account:?}"));
        }

        #[test]
        fn an_api_key_and_a_webhook_secret_in_a_response_do_not_show() {
            let account = crate::api::accounts::AccountOut {
                id: "acct_1".into(),
                name: "Shop".into(),
                sandbox: true,
                api_key: Some(format!("sk_test_{SECRET}")),
                processor: crate::api::accounts::ProcessorOut {
                    base_url: "http://processor".into(),
                    public_key: "pub_test_visible".into(),
                },
                fee: crate::api::accounts::FeeOut {
                    percent_bps: 0,
                    fixed_cents: 0,
                },
                rate_limit_per_minute: 100,
                status_rate_limit_per_minute: 20,
                created_at: "2026-01-01T00:00:00Z".into(),
            };
            shows_no_secret(format!("{account:?}"));
            let endpoint = crate::api::webhook_endpoints::EndpointOut {
                id: "we_1".into(),
                url: "https://example.com/hooks".into(),
                events: vec![],
                active: true,
                secret: Some(format!("whsec_{SECRET}")),
                created_at: "2026-01-01T00:00:00Z".into(),
            };
            shows_no_secret(format!("{endpoint:?}"));
        }

        #[test]
        fn a_card_shows_its_last_four_digits_only() {
            let card = crate::processor::client::CardDetails {
                number: "4242 4242 4242 4242".into(),
                cvc: "987".into(),
                exp_month: "08".into(),
                exp_year: "30".into(),
                card_holder: "Ana".into(),
            };
            let debug = format!("{card:?}");
            shows_no_secret(debug.clone());
            assert!(
                !debug.contains("4242 4242") && !debug.contains("987"),
                "{debug}"
            );
            assert!(debug.contains("\"4242\""), "{debug}");
        }
    }
}
