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
    fn sha256_matches_a_known_digest() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
