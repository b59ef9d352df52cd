//! The `Idempotency-Key` header's validation (`billing::http::idempotency::parse_key`).
//!
//! Properties: no panic on any bytes; a key is accepted exactly when it is 1 to 255 printable
//! ASCII characters, and then unchanged.
#![no_main]

use billing::http::idempotency::{MAX_KEY_LEN, parse_key};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|raw: &[u8]| {
    let expected = !raw.is_empty()
        && raw.len() <= MAX_KEY_LEN
        && raw.iter().all(|b| (0x20..=0x7e).contains(b));
    match parse_key(raw) {
        Ok(key) => {
            assert!(expected, "accepted {raw:?}");
            assert_eq!(key.as_bytes(), raw);
        }
        Err(_) => assert!(!expected, "refused {raw:?}"),
    }
});
