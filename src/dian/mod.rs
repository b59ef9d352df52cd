//! DIAN electronic invoicing's document core (CONTRACT §12): the UBL 2.1 XML of a sales
//! invoice or a credit note, its XAdES-EPES signature, the web service's client and a sandbox
//! DIAN that speaks the same SOAP. Nothing here reads the database or is wired into the charge
//! path: callers build a `document::Document` and use a `DianEmitter`.
//!
//! - `document`: the input (seller, buyer, lines, range, software, environment).
//! - `ubl`: the XML, unsigned. `xml`: reading it back, canonical forms.
//! - `certificate`: the PKCS#12 certificate and key (`pkcs12_bounds`: what a file may cost
//!   before it is decrypted). `signature`: signing; `verify`: checking
//!   a signature as a receiver does.
//! - `soap`: the web service's messages (WS-Security) and `client`; `emitter`: the trait.
//! - `sandbox`: the sandbox DIAN (axum).

pub mod attached;
pub mod certificate;
pub mod document;
pub mod emitter;
pub mod outcome;
pub mod pkcs12_bounds;
pub mod sandbox;
pub mod signature;
pub mod soap;
pub mod ubl;
pub mod verify;
pub mod xml;

#[cfg(test)]
mod tests;
