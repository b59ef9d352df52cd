//! A tenant's PKCS#12 file is held to `Budget::CERTIFICATE` before anything in it is decrypted:
//! files that would keep a core busy (many encrypted keys, many rounds) are refused, the
//! certificates `openssl` makes (either scheme) pass.

use super::fixtures::{PASSWORD, generate_certificate};
use crate::dian::certificate::{Certificate, CertificateError};
use crate::dian::pkcs12_bounds::{Budget, Refused, check};
use p12_keystore::{KeyStore, KeyStoreEntry, Pkcs12ImportPolicy};

/// The generated certificate's key and chain stored `copies` times, each key encrypted with
/// `rounds` rounds: what p12-keystore's own writer makes of it.
fn crafted(p12: &[u8], copies: usize, rounds: u32) -> Vec<u8> {
    let read = KeyStore::from_pkcs12(p12, PASSWORD, Pkcs12ImportPolicy::Strict).expect("reads");
    let (_, chain) = read.private_key_chain().expect("a key");
    let mut store = KeyStore::new();
    for copy in 0..copies {
        store.add_entry(
            &format!("copy-{copy}"),
            KeyStoreEntry::PrivateKeyChain(chain.clone()),
        );
    }
    store
        .writer(PASSWORD)
        .encryption_iterations(rounds)
        .mac_iterations(2048)
        .write()
        .expect("writes")
}

#[test]
fn the_certificates_openssl_makes_pass_in_either_scheme() {
    let Some(generated) = generate_certificate() else {
        return;
    };
    for p12 in [&generated.aes_p12, &generated.legacy_p12] {
        assert_eq!(check(p12, PASSWORD, Budget::CERTIFICATE), Ok(()));
    }
}

/// Before the bound, three keys of a million rounds each (and the certificates' part, another
/// million) were all derived in the request's handler.
#[test]
fn a_file_asking_for_more_rounds_than_the_budget_is_refused_before_any_key_is_derived() {
    let Some(generated) = generate_certificate() else {
        return;
    };
    let costly = crafted(&generated.aes_p12, 3, 1_000_000);
    assert_eq!(
        check(&costly, PASSWORD, Budget::CERTIFICATE),
        Err(Refused::Rounds(Budget::CERTIFICATE.rounds))
    );
    assert!(matches!(
        Certificate::from_pkcs12(&costly, PASSWORD),
        Err(CertificateError::Bounds(Refused::Rounds(_)))
    ));
}

#[test]
fn a_file_of_many_keys_is_refused() {
    let Some(generated) = generate_certificate() else {
        return;
    };
    let many = crafted(&generated.aes_p12, 12, 2048);
    assert_eq!(
        check(&many, PASSWORD, Budget::CERTIFICATE),
        Err(Refused::Bags(Budget::CERTIFICATE.bags))
    );
}

#[test]
fn a_large_file_or_one_that_is_not_pkcs12_is_refused() {
    let large = vec![0x30; Budget::CERTIFICATE.bytes + 1];
    assert_eq!(
        check(&large, PASSWORD, Budget::CERTIFICATE),
        Err(Refused::Size(Budget::CERTIFICATE.bytes))
    );
    assert_eq!(
        check(b"not a certificate", PASSWORD, Budget::CERTIFICATE),
        Err(Refused::Structure)
    );
}
