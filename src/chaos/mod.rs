//! The fault-injection harness (`billing chaos`): the real service as its own process, a
//! standalone sandbox processor, and fault proxies between them.
//!
//! `proxy` is the fault-injection HTTP proxy the integration tests script and the harness
//! drives at random.

pub mod proxy;
