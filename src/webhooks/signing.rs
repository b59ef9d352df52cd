//! `Service-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">`, keyed with the whole
//! secret string. This is the format Stripe-style verifiers accept unchanged.
//!
//! [`verify`] is the receiver's side, as the README and the tests describe it: what an
//! integrator's code must do with the header. It is fuzzed (`fuzz/`, target
//! `service_signature`): any header is refused or accepted without panicking, and only the
//! right secret and body are accepted.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// A new endpoint signing secret.
pub fn new_secret() -> String {
    crate::secrets::random_token("whsec_", 32)
}

/// Lowercase hex HMAC-SHA256 of `"{t}.{body}"` keyed with `secret`.
pub fn digest(secret: &str, t: i64, body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        // HMAC takes keys of any length; this branch cannot be reached.
        return String::new();
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The header value for `body` signed at `t`.
pub fn header(secret: &str, t: i64, body: &[u8]) -> String {
    format!("t={t},v1={}", digest(secret, t, body))
}

/// Why a `Service-Signature` header was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// No `t=<integer>` item, or an item that is not `key=value`.
    #[error("the signature header is malformed")]
    Malformed,
    /// `t` is further than the tolerance from the receiver's clock (a replay, or a bad clock).
    #[error("the signature's timestamp is outside the tolerance")]
    Stale,
    /// No `v1` is the HMAC of this body under this secret.
    #[error("no v1 signature matches")]
    Mismatch,
}

/// The parts of a header: `t` and every `v1` (a sender rotating its secret sends several).
/// Items of other schemes (`v0=`) are skipped, as Stripe's verifiers do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedHeader<'a> {
    pub t: i64,
    pub v1: Vec<&'a str>,
}

/// Splits `t=…,v1=…[,v1=…]`. Exactly one `t`, a decimal integer; at least one `v1`.
pub fn parse_header(header: &str) -> Result<ParsedHeader<'_>, VerifyError> {
    let mut t = None;
    let mut v1 = Vec::new();
    for item in header.split(',') {
        let (key, value) = item.split_once('=').ok_or(VerifyError::Malformed)?;
        match key {
            "t" if t.is_none() => {
                // `i64::from_str` accepts a leading `+`; a signer never writes one.
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(VerifyError::Malformed);
                }
                t = Some(value.parse::<i64>().map_err(|_| VerifyError::Malformed)?);
            }
            "t" => return Err(VerifyError::Malformed),
            "v1" => v1.push(value),
            _ => {}
        }
    }
    match (t, v1.is_empty()) {
        (Some(t), false) => Ok(ParsedHeader { t, v1 }),
        (None, _) => Err(VerifyError::Malformed),
        (Some(_), true) => Err(VerifyError::Mismatch),
    }
}

/// Checks a `Service-Signature` `header` over the raw `body`: `t` within `tolerance_secs` of
/// `now` (Unix seconds) and some `v1` equal to HMAC-SHA256(secret, "t.body"), compared in
/// constant time.
pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now: i64,
    tolerance_secs: u64,
) -> Result<(), VerifyError> {
    let parsed = parse_header(header)?;
    if now.abs_diff(parsed.t) > tolerance_secs {
        return Err(VerifyError::Stale);
    }
    let matches = |presented: &str| {
        // Wrong length or not hex: not a signature of ours, and nothing secret to time.
        let Ok(presented) = hex::decode(presented) else {
            return false;
        };
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
            return false;
        };
        mac.update(parsed.t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        // `verify_slice` compares in constant time.
        mac.verify_slice(&presented).is_ok()
    };
    if parsed.v1.iter().any(|v| matches(v)) {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_an_independent_hmac() {
        // Computed with Python: hmac.new(b"whsec_test", b"1700000000.{}", sha256).hexdigest()
        assert_eq!(
            digest("whsec_test", 1_700_000_000, b"{}"),
            "35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91"
        );
    }

    #[test]
    fn the_header_carries_t_and_the_digest_of_exactly_this_body() {
        let h = header("whsec_abc", 1_700_000_000, b"{\"a\":1}");
        assert_eq!(
            h,
            format!(
                "t=1700000000,v1={}",
                digest("whsec_abc", 1_700_000_000, b"{\"a\":1}")
            )
        );
        assert_ne!(
            digest("whsec_abc", 1_700_000_000, b"{\"a\":1}"),
            digest("whsec_abc", 1_700_000_000, b"{\"a\":2}")
        );
        assert_ne!(
            digest("whsec_abc", 1_700_000_000, b"{}"),
            digest("whsec_abd", 1_700_000_000, b"{}")
        );
    }

    const NOW: i64 = 1_700_000_000;

    /// Found by the fuzz target `service_signature`: HMAC pads its key with zeros, so the
    /// secrets `"k"` and `"k\0"` sign alike. Harmless for ours, which hold no zero byte and
    /// all have one length.
    #[test]
    fn secrets_differing_only_by_trailing_zero_bytes_are_one_key_and_ours_have_none() {
        let h = header("k", NOW, b"x");
        assert_eq!(verify("k\0", &h, b"x", NOW, 0), Ok(()));
        let secret = new_secret();
        assert_eq!(secret.len(), "whsec_".len() + 32);
        assert!(
            secret
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        );
    }

    #[test]
    fn our_header_verifies_and_another_body_secret_or_time_does_not() {
        let h = header("whsec_abc", NOW, b"{}");
        assert_eq!(verify("whsec_abc", &h, b"{}", NOW + 300, 300), Ok(()));
        assert_eq!(
            verify("whsec_abc", &h, b"{} ", NOW, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify("whsec_abd", &h, b"{}", NOW, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify("whsec_abc", &h, b"{}", NOW + 301, 300),
            Err(VerifyError::Stale)
        );
    }

    #[test]
    fn a_rotated_secret_verifies_through_any_of_several_v1() {
        let old = digest("whsec_old", NOW, b"x");
        let new = digest("whsec_new", NOW, b"x");
        let h = format!("t={NOW},v1={old},v1={new},v0=ignored");
        assert_eq!(verify("whsec_new", &h, b"x", NOW, 0), Ok(()));
        assert_eq!(verify("whsec_old", &h, b"x", NOW, 0), Ok(()));
    }

    #[test]
    fn a_truncated_or_uppercase_signature_is_judged_on_its_bytes() {
        let d = digest("whsec_abc", NOW, b"x");
        let short = format!("t={NOW},v1={}", &d[..32]);
        assert_eq!(
            verify("whsec_abc", &short, b"x", NOW, 0),
            Err(VerifyError::Mismatch)
        );
        let upper = format!("t={NOW},v1={}", d.to_uppercase());
        assert_eq!(verify("whsec_abc", &upper, b"x", NOW, 0), Ok(()));
    }

    #[test]
    fn malformed_headers_are_refused() {
        let d = digest("s", NOW, b"");
        for bad in [
            String::new(),
            format!("v1={d}"),
            format!("t=+{NOW},v1={d}"),
            format!("t={NOW},t={NOW},v1={d}"),
            format!("t= {NOW},v1={d}"),
            format!("t={NOW};v1={d}"),
            "t=99999999999999999999,v1=00".to_owned(),
        ] {
            assert_eq!(
                verify("s", &bad, b"", NOW, 300),
                Err(VerifyError::Malformed),
                "{bad}"
            );
        }
        assert_eq!(
            verify("s", &format!("t={NOW}"), b"", NOW, 300),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn extreme_timestamps_are_stale_not_an_overflow() {
        let h = header("s", 0, b"");
        assert_eq!(verify("s", &h, b"", i64::MIN, 300), Err(VerifyError::Stale));
        let h = header("s", i64::MAX, b"");
        assert_eq!(verify("s", &h, b"", i64::MIN, u64::MAX), Ok(()));
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        /// The 64-byte block HMAC-SHA256 actually keys with (RFC 2104): keys that differ only
        /// by trailing zero bytes, or a long key and its SHA-256, are one key.
        fn hmac_key(secret: &str) -> Vec<u8> {
            use sha2::Digest;
            let mut key = if secret.len() > 64 {
                Sha256::digest(secret.as_bytes()).to_vec()
            } else {
                secret.as_bytes().to_vec()
            };
            key.resize(64, 0);
            key
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// The fuzz target `service_signature`'s properties, bounded.
            #[test]
            fn header_verifies_exactly_its_secret_and_body(
                secret in ".{0,40}",
                other_secret in ".{0,40}",
                t in 0..=i64::MAX,
                body in proptest::collection::vec(any::<u8>(), 0..200),
                other_body in proptest::collection::vec(any::<u8>(), 0..200),
            ) {
                let h = header(&secret, t, &body);
                prop_assert_eq!(verify(&secret, &h, &body, t, 0), Ok(()));
                if other_body != body {
                    prop_assert_eq!(verify(&secret, &h, &other_body, t, 0), Err(VerifyError::Mismatch));
                }
                if hmac_key(&other_secret) != hmac_key(&secret) {
                    prop_assert_eq!(verify(&other_secret, &h, &body, t, 0), Err(VerifyError::Mismatch));
                }
            }

            #[test]
            fn any_header_is_judged_without_panicking(
                h in "(t=-?[0-9]{0,20}|v1=[0-9a-f]{0,70}|v0=.{0,5}|.{0,10})(,(t=[0-9]{0,20}|v1=[0-9a-fA-F]{0,70}|.{0,10})){0,4}",
                now in any::<i64>(),
                tolerance in any::<u64>(),
            ) {
                let _ = verify("whsec_x", &h, b"{}", now, tolerance);
            }
        }
    }
}
