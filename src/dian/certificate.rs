//! The seller's signing certificate: a PKCS#12 file (`p12_base64`, `password`) read into its
//! X.509 certificate and RSA private key. PBES2 with AES and the legacy PKCS#12 schemes
//! (3DES for the key, RC2 or 3DES for the certificate) are both read (p12-keystore). The key
//! signs with RSA-SHA256 (ring); nothing prints it: `Debug` shows the subject only.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use p12_keystore::{KeyStore, Pkcs12ImportPolicy};
use ring::signature::{self, RsaKeyPair, UnparsedPublicKey};
use sha2::{Digest, Sha256};
use x509_parser::prelude::{FromDer, X509Certificate};

/// Why a certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("the certificate is not base64")]
    Base64,
    #[error("the PKCS#12 file is refused: {0}")]
    Bounds(#[from] super::pkcs12_bounds::Refused),
    #[error("the PKCS#12 file cannot be read with this password: {0}")]
    Pkcs12(String),
    #[error("the PKCS#12 file holds no private key with its certificate")]
    NoKey,
    #[error("the certificate cannot be read: {0}")]
    X509(String),
    #[error("the private key is not an RSA key ring can sign with: {0}")]
    Key(String),
    #[error("signing failed")]
    Sign,
    #[error("the certificate could not be read now")]
    Busy,
}

/// A certificate with its private key, ready to sign.
pub struct Certificate {
    der: Vec<u8>,
    key: RsaKeyPair,
    subject: String,
    issuer: String,
    serial: String,
    not_after: i64,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("subject", &self.subject)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl Certificate {
    /// Reads a base64 PKCS#12 file (the API's `p12_base64`).
    pub fn from_p12_base64(p12_base64: &str, password: &str) -> Result<Self, CertificateError> {
        let compact: String = p12_base64.split_whitespace().collect();
        let data = STANDARD
            .decode(compact)
            .map_err(|_| CertificateError::Base64)?;
        Self::from_pkcs12(&data, password)
    }

    /// Reads a PKCS#12 file: its first private key and that key's certificate. The file is
    /// held to `Budget::CERTIFICATE` before anything is decrypted; still, reading one takes
    /// milliseconds to a second of a core: async callers run it on the blocking pool
    /// (`read_off_the_workers`).
    pub fn from_pkcs12(data: &[u8], password: &str) -> Result<Self, CertificateError> {
        super::pkcs12_bounds::check(data, password, super::pkcs12_bounds::Budget::CERTIFICATE)?;
        let store = KeyStore::from_pkcs12(data, password, Pkcs12ImportPolicy::Strict)
            .map_err(|err| CertificateError::Pkcs12(err.to_string()))?;
        let (_, chain) = store.private_key_chain().ok_or(CertificateError::NoKey)?;
        let certificate = chain.certs().first().ok_or(CertificateError::NoKey)?;
        let key = RsaKeyPair::from_pkcs8(chain.key().as_der())
            .map_err(|err| CertificateError::Key(err.to_string()))?;
        let der = certificate.as_der().to_vec();
        let info = CertificateInfo::read(&der)?;
        Ok(Self {
            der,
            key,
            subject: info.subject,
            issuer: info.issuer,
            serial: info.serial,
            not_after: info.not_after,
        })
    }

    /// `from_p12_base64` on the blocking pool, one file at a time per process: a tenant's
    /// upload never occupies an async worker, and many at once queue instead of taking every
    /// core.
    pub async fn read_off_the_workers(
        p12_base64: String,
        password: String,
    ) -> Result<Self, CertificateError> {
        static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
        let _turn = ONE_AT_A_TIME
            .acquire()
            .await
            .map_err(|_| CertificateError::Busy)?;
        tokio::task::spawn_blocking(move || Self::from_p12_base64(&p12_base64, &password))
            .await
            .map_err(|_| CertificateError::Busy)?
    }

    /// The certificate, DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The certificate, base64 DER (`ds:X509Certificate`, `wsse:BinarySecurityToken`).
    pub fn base64(&self) -> String {
        STANDARD.encode(&self.der)
    }

    /// Base64 SHA-256 of the DER (`xades:CertDigest`).
    pub fn digest_sha256(&self) -> String {
        STANDARD.encode(Sha256::digest(&self.der))
    }

    /// The issuer's name, RFC 4514 (`ds:X509IssuerName`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The serial number, decimal (`ds:X509SerialNumber`).
    pub fn serial(&self) -> &str {
        &self.serial
    }

    /// When the certificate stops being valid, Unix seconds.
    pub fn not_after(&self) -> i64 {
        self.not_after
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 of `message`.
    pub fn sign_sha256(&self, message: &[u8]) -> Result<Vec<u8>, CertificateError> {
        let mut out = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                message,
                &mut out,
            )
            .map_err(|_| CertificateError::Sign)?;
        Ok(out)
    }
}

/// What a signature names of a certificate, read from its DER.
#[derive(Clone, Debug)]
pub struct CertificateInfo {
    pub subject: String,
    pub issuer: String,
    pub serial: String,
    pub not_after: i64,
    /// The subject's public key as the certificate holds it (RSA: PKCS#1 `RSAPublicKey`).
    pub public_key: Vec<u8>,
}

impl CertificateInfo {
    pub fn read(der: &[u8]) -> Result<Self, CertificateError> {
        let (_, cert) = X509Certificate::from_der(der)
            .map_err(|err| CertificateError::X509(err.to_string()))?;
        Ok(Self {
            subject: rfc4514(cert.subject()),
            issuer: rfc4514(cert.issuer()),
            serial: cert.tbs_certificate.serial.to_string(),
            not_after: cert.validity().not_after.timestamp(),
            public_key: cert.public_key().subject_public_key.data.to_vec(),
        })
    }

    /// Whether `signature` is this certificate's RSA-SHA256 signature of `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &self.public_key)
            .verify(message, signature)
            .is_ok()
    }
}

/// A name as RFC 4514 writes it: the last RDN first, short names for the common attributes,
/// others as dotted OIDs.
fn rfc4514(name: &x509_parser::x509::X509Name<'_>) -> String {
    let mut parts = Vec::new();
    for rdn in name.iter_rdn() {
        let attributes: Vec<String> = rdn
            .iter()
            .map(|attribute| {
                let oid = attribute.attr_type().to_id_string();
                let short = match oid.as_str() {
                    "2.5.4.3" => "CN".to_owned(),
                    "2.5.4.6" => "C".to_owned(),
                    "2.5.4.7" => "L".to_owned(),
                    "2.5.4.8" => "ST".to_owned(),
                    "2.5.4.9" => "STREET".to_owned(),
                    "2.5.4.10" => "O".to_owned(),
                    "2.5.4.11" => "OU".to_owned(),
                    "0.9.2342.19200300.100.1.25" => "DC".to_owned(),
                    "0.9.2342.19200300.100.1.1" => "UID".to_owned(),
                    _ => oid,
                };
                let value = attribute.as_str().unwrap_or_default();
                format!("{short}={}", escape_rdn_value(value))
            })
            .collect();
        parts.push(attributes.join("+"));
    }
    parts.reverse();
    parts.join(",")
}

fn escape_rdn_value(value: &str) -> String {
    let mut out = String::new();
    let last = value.chars().count().saturating_sub(1);
    for (index, ch) in value.chars().enumerate() {
        let special = matches!(ch, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (index == 0 && (ch == '#' || ch == ' '))
            || (index == last && ch == ' ');
        if special {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdn_values_escape_what_rfc_4514_reserves() {
        assert_eq!(escape_rdn_value("Tienda, S.A.S."), "Tienda\\, S.A.S.");
        assert_eq!(escape_rdn_value("#1 "), "\\#1\\ ");
    }

    #[test]
    fn a_wrong_password_or_garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            Certificate::from_p12_base64("%%%", "x"),
            Err(CertificateError::Base64)
        ));
        assert!(Certificate::from_pkcs12(b"not a pfx", "x").is_err());
    }
}
