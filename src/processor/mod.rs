//! The payment processor: Wompi's protocol from both sides.
//!
//! - [`signature`]: the integrity signature of a transaction and the checksum of an event.
//! - [`client`]: our client of the processor's REST API, with each account's credentials.
//! - [`transactions`]: posting a transaction and asking about it.
//! - [`refunds`]: refunding an approved transaction, and asking about a refund.
//! - [`outcome`]: `ProcessorOutcome`, what an exchange with the processor told us (approved,
//!   declined, pending, refused, unseen or unknown).
//! - [`sandbox`]: a processor of our own that speaks the same protocol, in-process under
//!   `/sandbox/processor/v1` and standalone (`billing sandbox-processor`).
//!
//! The sandbox's router names axum: it is a peer server, not part of our API, and lives here
//! so that the protocol's two sides are read together.

pub mod client;
pub mod outcome;
pub mod refunds;
pub mod sandbox;
pub mod signature;
pub mod transactions;
