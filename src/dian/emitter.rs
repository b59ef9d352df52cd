//! The interface the charge path will use (`DianEmitter`): sign a document (the exact bytes to
//! keep, serve as `GET …/xml` and send), submit the signed bytes, ask about a document by its
//! key. An answer is one of three outcomes: accepted, rejected with DIAN's messages, or
//! unknown (asked about again later, never taken as a rejection). `DianService` is ours: the
//! signer and the SOAP client of one account.

pub use super::outcome::{Outcome, Unknown};

use super::certificate::Certificate;
use super::document::{Document, Kind};
use super::signature::{SignError, sign};
use super::soap::client::SoapClient;
use super::soap::envelope::Operation;
use super::soap::zip::zip_one;
use super::ubl::{WriteError, write};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Datelike, Utc};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Why a document could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Sign(#[from] SignError),
}

/// A future of an outcome, boxed so that the trait can be used as `dyn DianEmitter`.
pub type Pending<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

pub trait DianEmitter: Send + Sync {
    /// The document written and signed at `signing_time`: the exact bytes to keep and send.
    fn sign(&self, document: &Document, signing_time: DateTime<Utc>) -> Result<Vec<u8>, EmitError>;

    /// Sends the signed bytes of `document` for validation (`SendBillSync`).
    fn submit<'a>(&'a self, document: &'a Document, signed: &'a [u8]) -> Pending<'a>;

    /// Asks about the document whose CUFE or CUDE is `key` (`GetStatus`).
    fn status<'a>(&'a self, key: &'a str) -> Pending<'a>;
}

/// Our emitter: one account's certificate, signing and talking to its DIAN service.
#[derive(Clone, Debug)]
pub struct DianService {
    certificate: Arc<Certificate>,
    client: SoapClient,
}

impl DianService {
    pub fn new(certificate: Arc<Certificate>, client: SoapClient) -> Self {
        Self {
            certificate,
            client,
        }
    }
}

impl DianEmitter for DianService {
    fn sign(&self, document: &Document, signing_time: DateTime<Utc>) -> Result<Vec<u8>, EmitError> {
        let unsigned = write(document)?;
        Ok(sign(&unsigned, &self.certificate, signing_time)?.into_bytes())
    }

    fn submit<'a>(&'a self, document: &'a Document, signed: &'a [u8]) -> Pending<'a> {
        Box::pin(async move {
            let (xml_name, zip_name) = file_names(document);
            let archive = match zip_one(&xml_name, signed) {
                Ok(archive) => archive,
                Err(err) => return Outcome::Unknown(Unknown::Request(err.to_string())),
            };
            let operation = Operation::SendBillSync {
                file_name: zip_name,
                content_file: STANDARD.encode(archive),
            };
            self.client.call(&operation).await
        })
    }

    fn status<'a>(&'a self, key: &'a str) -> Pending<'a> {
        Box::pin(async move {
            let operation = Operation::GetStatus {
                track_id: key.to_owned(),
            };
            self.client.call(&operation).await
        })
    }
}

/// The names the annex gives the XML and its ZIP: the kind (`fv`, `nc`; `z` for the ZIP),
/// the seller's NIT in ten digits, `000` (own software), the year's last two digits, and the
/// document's consecutive number in eight hexadecimal digits.
pub fn file_names(document: &Document) -> (String, String) {
    let (kind, consecutive) = match &document.kind {
        Kind::Invoice { consecutive, .. } => ("fv", u64::try_from(*consecutive).unwrap_or(0)),
        Kind::CreditNote { number, .. } => {
            let digits: String = number.chars().filter(char::is_ascii_digit).collect();
            ("nc", digits.parse().unwrap_or(0))
        }
    };
    let year = document.issued_at.year() % 100;
    let stem = format!(
        "{:0>10}000{year:02}{:08x}",
        document.seller.nit,
        consecutive % (1 << 32)
    );
    (format!("{kind}{stem}.xml"), format!("z{stem}.zip"))
}
