//! The `Service-Signature` header (`t=<unix>,v1=<hex>`) as a receiver verifies it
//! (`billing::webhooks::signing::verify`).
//!
//! Properties:
//! - any header, body, clock and tolerance are judged without panicking;
//! - `header(secret, t, body)` verifies for that secret and body within the tolerance;
//! - any other body, any other secret, or a clock beyond the tolerance fails. "Other" as an
//!   HMAC key: HMAC pads a key to 64 bytes with zeros and hashes a longer one, so `"k"` and
//!   `"k\0"` (or a long key and its SHA-256) are one key. The fuzzer found that on its first
//!   run; our secrets (`whsec_` + 32 alphanumerics) have neither form.
#![no_main]

use arbitrary::Arbitrary;
use billing::webhooks::signing::{VerifyError, header, parse_header, verify};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Input {
    Arbitrary {
        header: String,
        body: Vec<u8>,
        now: i64,
        tolerance: u64,
    },
    Ours {
        secret: String,
        other_secret: String,
        /// Real Unix time is never negative.
        t: u32,
        skew: i16,
        tolerance: u16,
        body: Vec<u8>,
        other_body: Vec<u8>,
    },
}

/// The 64-byte block HMAC-SHA256 actually keys with (RFC 2104).
fn hmac_key(secret: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut key = if secret.len() > 64 {
        Sha256::digest(secret.as_bytes()).to_vec()
    } else {
        secret.as_bytes().to_vec()
    };
    key.resize(64, 0);
    key
}

fuzz_target!(|input: Input| match input {
    Input::Arbitrary {
        header,
        body,
        now,
        tolerance,
    } => {
        let _ = parse_header(&header);
        let verdict = verify("whsec_fuzz", &header, &body, now, tolerance);
        // Without the secret nothing can be forged (short of inverting HMAC-SHA256).
        assert_ne!(verdict, Ok(()), "an arbitrary header verified: {header:?}");
    }
    Input::Ours {
        secret,
        other_secret,
        t,
        skew,
        tolerance,
        body,
        other_body,
    } => {
        let t = i64::from(t);
        let now = t + i64::from(skew);
        let tolerance = u64::from(tolerance);
        let signed = header(&secret, t, &body);
        let fresh = now.abs_diff(t) <= tolerance;
        let verdict = verify(&secret, &signed, &body, now, tolerance);
        if fresh {
            assert_eq!(verdict, Ok(()), "{signed}");
        } else {
            assert_eq!(verdict, Err(VerifyError::Stale), "{signed}");
        }
        if other_body != body {
            assert_ne!(
                verify(&secret, &signed, &other_body, now, tolerance),
                Ok(())
            );
        }
        if hmac_key(&other_secret) != hmac_key(&secret) {
            assert_ne!(
                verify(&other_secret, &signed, &body, now, tolerance),
                Ok(())
            );
        }
    }
});
