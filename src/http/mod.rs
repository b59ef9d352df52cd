//! The HTTP machinery every surface shares (the API, the hosted checkout, the dashboard): the
//! handlers' state, the error shape, extractors, authentication and its failures, rate limits,
//! idempotency keys, request ids, the list envelope, payment-source fields, the hosted pages'
//! headers.

pub mod auth;
pub mod auth_failures;
pub mod error;
pub mod extract;
pub mod idempotency;
pub mod layers;
pub mod list;
pub mod pages;
pub mod payment_source;
pub mod rate_limit;
pub mod request_id;
pub mod state;
