//! WhatsApp Business Cloud API, as this service speaks it (CONTRACT §15): the wire shapes of a
//! template message, of Meta's answers and errors and of its status webhooks (`wire`); the
//! `X-Hub-Signature-256` that signs those webhooks (`signature`); the client that sends one
//! message and reads what became of it (`client`); and the sandbox WhatsApp, a peer server
//! speaking the same shape for sandbox accounts and tests (`sandbox`).
//!
//! What a notice says in WhatsApp, and when it is sent, is the notices' (`notices::whatsapp`);
//! the ingress that takes status webhooks in is the API's (`api::whatsapp`).

pub mod client;
pub mod sandbox;
pub mod signature;
pub mod wire;

/// The Graph API version in every URL we build.
pub const API_VERSION: &str = "v21.0";

/// Meta's Cloud API, for live accounts when the operator names no other.
pub const META_BASE_URL: &str = "https://graph.facebook.com/v21.0";

/// Where the in-process sandbox WhatsApp is mounted, below the public URL.
pub const SANDBOX_MOUNT: &str = "/sandbox/whatsapp";
