//! What a PKCS#12 file may cost before it is read. A tenant sends the file, and decrypting it
//! runs a password-based key derivation per encrypted part, each as many rounds as the file
//! says: a small file of many parts can keep a core busy for minutes, and scrypt can ask for
//! a gibibyte. So the file's structure is read first, without any derivation, and refused when
//! it is larger, has more parts or asks for more rounds than a signing certificate needs
//! (`Budget`). The only derivations this module runs are those of encrypted safe contents,
//! each paid for from the budget before it runs, to count the parts inside them.
//!
//! It does not read the key or the certificate: p12-keystore does, once the file passed.

use cms::cert::x509::spki::AlgorithmIdentifierOwned;
use cms::content_info::ContentInfo;
use cms::encrypted_data::EncryptedData;
use der::asn1::{ContextSpecific, ObjectIdentifier, OctetString};
use der::{Decode, Encode};
use pkcs12::pbe_params::{EncryptedPrivateKeyInfo, Pkcs12PbeParams};
use pkcs12::pfx::Pfx;
use pkcs12::safe_bag::SafeContents;

const DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.1");
const ENCRYPTED_DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.6");
const SHROUDED_KEY_BAG: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.10.1.2");
const PBES2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.5.13");
const PBKDF2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.5.12");
const PBE_SHA1_3DES: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.1.3");
const PBE_SHA1_RC2_40: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.1.6");

/// The most a signing certificate's file may ask for. Certificates from Colombian authorities
/// and from `openssl pkcs12` are a few kilobytes, two or three safe contents, a handful of
/// bags and at most some hundred thousand rounds in all.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub bytes: usize,
    pub safe_contents: usize,
    pub bags: usize,
    /// Rounds of every derivation together (the MAC's, each encrypted part's; the legacy
    /// scheme derives twice, a key and an IV).
    pub rounds: u64,
}

impl Budget {
    pub const CERTIFICATE: Budget = Budget {
        bytes: 64 * 1024,
        safe_contents: 4,
        bags: 16,
        rounds: 3_000_000,
    };
}

/// Why a file is refused before it is decrypted.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the file is larger than {0} bytes")]
    Size(usize),
    #[error("the file is not a PKCS#12 file")]
    Structure,
    #[error("the file holds more than {0} safe contents")]
    SafeContents(usize),
    #[error("the file holds more than {0} bags")]
    Bags(usize),
    #[error("the file asks for more than {0} key derivation rounds")]
    Rounds(u64),
    #[error("the file is encrypted with a scheme that is not accepted")]
    Scheme,
}

/// Checks `data` against `budget`, with `password` to look inside encrypted safe contents.
pub fn check(data: &[u8], password: &str, budget: Budget) -> Result<(), Refused> {
    if data.len() > budget.bytes {
        return Err(Refused::Size(budget.bytes));
    }
    let mut spent = Spending {
        budget,
        rounds: 0,
        bags: 0,
    };
    let pfx = Pfx::from_der(data).map_err(|_| Refused::Structure)?;
    if let Some(mac) = &pfx.mac_data {
        spent.rounds(u64::try_from(mac.iterations).map_err(|_| Refused::Structure)?)?;
    }
    if pfx.auth_safe.content_type != DATA {
        return Err(Refused::Structure);
    }
    let safes = octets(&pfx.auth_safe)?;
    let safes: Vec<ContentInfo> = Vec::from_der(&safes).map_err(|_| Refused::Structure)?;
    if safes.len() > budget.safe_contents {
        return Err(Refused::SafeContents(budget.safe_contents));
    }
    for safe in &safes {
        let contents = match safe.content_type {
            DATA => octets(safe)?,
            ENCRYPTED_DATA => {
                let encrypted = safe
                    .content
                    .to_der()
                    .ok()
                    .and_then(|der| EncryptedData::from_der(&der).ok())
                    .ok_or(Refused::Structure)?;
                let info = encrypted.enc_content_info;
                let Some(ciphertext) = info.encrypted_content else {
                    continue;
                };
                let scheme = Scheme::of(&info.content_enc_alg)?;
                spent.rounds(scheme.rounds())?;
                scheme.decrypt(ciphertext.as_bytes(), password)?
            }
            _ => return Err(Refused::Structure),
        };
        spent.bags(&contents)?;
    }
    Ok(())
}

struct Spending {
    budget: Budget,
    rounds: u64,
    bags: usize,
}

impl Spending {
    fn rounds(&mut self, rounds: u64) -> Result<(), Refused> {
        self.rounds = self.rounds.saturating_add(rounds);
        if self.rounds > self.budget.rounds {
            return Err(Refused::Rounds(self.budget.rounds));
        }
        Ok(())
    }

    /// Counts the bags of one safe contents, and pays for each shrouded key's derivation.
    fn bags(&mut self, contents: &[u8]) -> Result<(), Refused> {
        let bags = SafeContents::from_der(contents).map_err(|_| Refused::Structure)?;
        self.bags += bags.len();
        if self.bags > self.budget.bags {
            return Err(Refused::Bags(self.budget.bags));
        }
        for bag in bags.iter().filter(|bag| bag.bag_id == SHROUDED_KEY_BAG) {
            let key: ContextSpecific<EncryptedPrivateKeyInfo> =
                ContextSpecific::from_der(&bag.bag_value).map_err(|_| Refused::Structure)?;
            self.rounds(Scheme::of(&key.value.encryption_algorithm)?.rounds())?;
        }
        Ok(())
    }
}

/// The content of a `data` content info.
fn octets(info: &ContentInfo) -> Result<Vec<u8>, Refused> {
    let der = info.content.to_der().map_err(|_| Refused::Structure)?;
    OctetString::from_der(&der)
        .map(|octets| octets.as_bytes().to_vec())
        .map_err(|_| Refused::Structure)
}

/// A password-based encryption scheme p12-keystore reads, with what it costs.
enum Scheme {
    Pbes2(pkcs5::pbes2::Parameters),
    Legacy {
        algorithm: ObjectIdentifier,
        params: Pkcs12PbeParams,
    },
}

impl Scheme {
    /// Reads the scheme `algorithm` names; PBES2 only with PBKDF2 (scrypt's memory is refused).
    fn of(algorithm: &AlgorithmIdentifierOwned) -> Result<Scheme, Refused> {
        let params = algorithm
            .parameters
            .as_ref()
            .and_then(|params| params.to_der().ok())
            .ok_or(Refused::Structure)?;
        match algorithm.oid {
            PBES2 => {
                let parsed =
                    pkcs5::pbes2::Parameters::from_der(&params).map_err(|_| Refused::Structure)?;
                if parsed.kdf.oid() != PBKDF2 {
                    return Err(Refused::Scheme);
                }
                Ok(Scheme::Pbes2(parsed))
            }
            PBE_SHA1_3DES | PBE_SHA1_RC2_40 => Ok(Scheme::Legacy {
                algorithm: algorithm.oid,
                params: Pkcs12PbeParams::from_der(&params).map_err(|_| Refused::Structure)?,
            }),
            _ => Err(Refused::Scheme),
        }
    }

    fn rounds(&self) -> u64 {
        match self {
            Scheme::Pbes2(params) => match &params.kdf {
                pkcs5::pbes2::Kdf::Pbkdf2(pbkdf2) => u64::from(pbkdf2.iteration_count),
                _ => u64::MAX,
            },
            // A key and an IV, each derived with the rounds.
            Scheme::Legacy { params, .. } => {
                u64::try_from(params.iterations).map_or(u64::MAX, |rounds| rounds * 2)
            }
        }
    }

    fn decrypt(&self, ciphertext: &[u8], password: &str) -> Result<Vec<u8>, Refused> {
        match self {
            Scheme::Pbes2(params) => params
                .decrypt(password.as_bytes(), ciphertext)
                .map_err(|_| Refused::Structure),
            Scheme::Legacy { algorithm, params } => {
                legacy_decrypt(*algorithm, params, ciphertext, password)
            }
        }
    }
}

/// PKCS#12's own scheme (RFC 7292 appendix B): a key and an IV derived from the password with
/// SHA-1, then 3DES or 40-bit RC2 in CBC mode.
fn legacy_decrypt(
    algorithm: ObjectIdentifier,
    params: &Pkcs12PbeParams,
    ciphertext: &[u8],
    password: &str,
) -> Result<Vec<u8>, Refused> {
    use cbc::cipher::{BlockModeDecrypt, KeyIvInit, block_padding::Pkcs7};
    use pkcs12::kdf::{Pkcs12KeyType, derive_key_utf8};
    let derive = |kind, length| {
        derive_key_utf8::<sha1::Sha1>(
            password,
            params.salt.as_bytes(),
            kind,
            params.iterations,
            length,
        )
        .map_err(|_| Refused::Structure)
    };
    let key_length = if algorithm == PBE_SHA1_3DES { 24 } else { 5 };
    let key = derive(Pkcs12KeyType::EncryptionKey, key_length)?;
    let iv = derive(Pkcs12KeyType::Iv, 8)?;
    let plain = if algorithm == PBE_SHA1_3DES {
        cbc::Decryptor::<des::TdesEde3>::new_from_slices(&key, &iv)
            .map_err(|_| Refused::Structure)?
            .decrypt_padded_vec::<Pkcs7>(ciphertext)
    } else {
        cbc::Decryptor::<rc2::Rc2>::new_from_slices(&key, &iv)
            .map_err(|_| Refused::Structure)?
            .decrypt_padded_vec::<Pkcs7>(ciphertext)
    };
    plain.map_err(|_| Refused::Structure)
}
