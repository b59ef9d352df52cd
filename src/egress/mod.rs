//! Calls to URLs that a tenant (or an operator) gave us: webhook deliveries, the sandbox
//! processor's events. Everything such a call reaches goes through a [`GuardedClient`]: the
//! address is checked when connecting, after resolution, so a hostname that resolves to a
//! public address when registered and to 127.0.0.1 when delivered (DNS rebinding) is refused;
//! redirects are never followed and no proxy is used (a proxy would resolve the name itself,
//! out of our sight). Which addresses are public is [`address::is_public`].
//!
//! Resolution goes through a [`HostResolver`]: the system's ([`SystemResolver`]) in
//! production, one the test controls in tests (`Config::resolver`).

pub mod address;
mod client;

pub use address::is_public;
pub use client::{GuardedClient, SendError};

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

/// Which addresses a client may connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressPolicy {
    /// Public unicast only ([`is_public`]).
    PublicOnly,
    /// Any address: the operator allowed private targets, or the URL is the operator's own
    /// (CONTRACT §7: the sandbox processor's `events_url`). Still no redirects, no proxy.
    AllowPrivate,
}

impl AddressPolicy {
    pub fn permits(self, ip: IpAddr) -> bool {
        self == Self::AllowPrivate || is_public(ip)
    }
}

/// The answer of one lookup.
pub type Lookup = Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>;

/// Resolves a host name to its addresses.
pub trait HostResolver: Send + Sync {
    fn lookup(&self, host: &str) -> Lookup;
}

/// The system's resolver (`getaddrinfo`, through tokio).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl HostResolver for SystemResolver {
    fn lookup(&self, host: &str) -> Lookup {
        let host = host.to_owned();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|addr| addr.ip())
                .collect())
        })
    }
}

/// The resolver used when the configuration names none.
pub fn system_resolver() -> Arc<dyn HostResolver> {
    Arc::new(SystemResolver)
}

/// An address the policy does not permit. Says nothing more, by design: what a tenant sees
/// of it (the delivery log, a registration's answer) must not map our network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("refused")]
pub struct Refused;

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("the host could not be resolved")]
    Unresolvable(#[source] std::io::Error),
}

/// `host`'s addresses, refused when any of them is not permitted: a name that answers one
/// public and one private address must not get a chance at the private one.
pub async fn resolve_checked(
    resolver: &dyn HostResolver,
    host: &str,
    policy: AddressPolicy,
) -> Result<Vec<IpAddr>, ResolveError> {
    let addrs = resolver
        .lookup(host)
        .await
        .map_err(ResolveError::Unresolvable)?;
    if addrs.is_empty() {
        return Err(ResolveError::Unresolvable(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no addresses",
        )));
    }
    if addrs.iter().any(|ip| !policy.permits(*ip)) {
        return Err(Refused.into());
    }
    Ok(addrs)
}

/// Checks a URL's host when it is an IP literal, which no resolver sees (hyper connects to
/// it directly). Host names pass here and are checked when resolved.
pub fn check_literal(url: &url::Url, policy: AddressPolicy) -> Result<(), Refused> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    if policy.permits(ip) {
        Ok(())
    } else {
        Err(Refused)
    }
}
