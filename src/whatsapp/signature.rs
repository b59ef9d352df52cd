//! `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body under the app secret>`, how
//! Meta signs every webhook it posts (and how the sandbox signs its own). The receiver checks
//! the digest of the bytes as received, before parsing them, in constant time.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The header's name, lower case as HTTP/2 carries it.
pub const HEADER: &str = "x-hub-signature-256";

/// The raw HMAC-SHA256 of `body` under `app_secret`.
fn digest(app_secret: &str, body: &[u8]) -> [u8; 32] {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()) else {
        // HMAC takes keys of any length; this branch cannot be reached.
        return [0; 32];
    };
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// The header's value for `body`.
pub fn sign(app_secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(digest(app_secret, body)))
}

/// Whether `header` (the header's value as received, if any) signs `body` under `app_secret`.
/// A missing, malformed or wrong signature is refused alike; the digests are compared in
/// constant time.
pub fn verify(app_secret: &str, body: &[u8], header: Option<&str>) -> bool {
    let Some(presented) = header.and_then(|value| value.trim().strip_prefix("sha256=")) else {
        return false;
    };
    let Ok(presented) = hex::decode(presented) else {
        return false;
    };
    if presented.len() != 32 || app_secret.is_empty() {
        return false;
    }
    presented.ct_eq(&digest(app_secret, body)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_matches_an_independent_hmac() {
        // python3 -c 'import hmac,hashlib;print(hmac.new(b"app_secret_1",
        //   b"{\"object\":\"whatsapp_business_account\"}", hashlib.sha256).hexdigest())'
        let body = br#"{"object":"whatsapp_business_account"}"#;
        assert_eq!(
            sign("app_secret_1", body),
            "sha256=8189c1f1edf7532cdae3143436019ee0fae00474f582025461bf5342afd9aeab"
        );
    }

    #[test]
    fn only_the_right_secret_over_the_same_bytes_verifies() {
        let body = br#"{"entry":[]}"#;
        let header = sign("s3cret", body);
        assert!(verify("s3cret", body, Some(&header)));
        assert!(verify("s3cret", body, Some(&format!(" {header} "))));
        assert!(!verify("other", body, Some(&header)));
        assert!(!verify("s3cret", br#"{"entry": []}"#, Some(&header)));
        assert!(!verify("s3cret", body, None));
        assert!(!verify(
            "s3cret",
            body,
            Some(header.trim_start_matches("sha256="))
        ));
        assert!(!verify("s3cret", body, Some("sha256=zz")));
        assert!(!verify("s3cret", body, Some(&header[..header.len() - 2])));
        assert!(
            !verify("", body, Some(&sign("", body))),
            "no secret, no trust"
        );
    }
}
