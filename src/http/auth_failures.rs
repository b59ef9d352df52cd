//! Failed authentication, limited per client address: at most [`LIMIT`] failures in any 60
//! seconds from one address; past that, a further unknown credential from the address is
//! answered 429 `rate_limit` with `Retry-After` (CONTRACT §2). A valid credential always
//! passes, whatever the address's failures: behind a load balancer every tenant shares its
//! address, and one guesser must not lock every merchant out. A request that presents no
//! credential is answered 401 and never counted (it costs nothing and guesses nothing).
//!
//! What the limit still protects, then. The credentials are random (API keys 190 bits, the
//! generated admin token as much), so the guessing it slows was never the danger; the cost of
//! a guess is. An admin token or a cached key is checked in memory. A well-formed key that is
//! not cached costs a database read, which no limit can spare a valid key; what this module
//! bounds is how many run at once: one address's keys are looked up one at a time per node
//! ([`AuthFailures::examine`]), so a burst of guesses from one address never holds more than
//! one database connection per node. Past the limit, a guess costs no database write either
//! (its refusal is known from memory; see [`shared`]).
//!
//! Owns who the client is ([`ClientAddr`]: the TCP peer, or, when the peer is a trusted proxy
//! (`--trusted-proxies`), the rightmost `X-Forwarded-For` entry that is not itself one), the
//! sliding log of each address's failures, and the rule that one address's credentials are
//! looked up one at a time. What a valid credential is stays with the callers (`auth`,
//! `dashboard`).
//!
//! On SQLite (one node) the log is in this process (`LocalWindows`, whose sweep bounds its
//! memory). On PostgreSQL it is in the database, so that failures at every node count
//! together: see [`shared`]. Either way a failure is counted by one atomic step that refuses
//! it when the window is full, after the credential was examined, so exactly [`LIMIT`]
//! failures are answered 401 in any 60 seconds, on any number of nodes.

mod shared;

use super::error::ApiError;
use super::rate_limit::LocalWindows;
use crate::config::TrustedProxies;
use crate::store::Store;
use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap};
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Instant;
use tokio::sync::Mutex;

/// Failed authentications allowed per client address in any 60 seconds.
pub const LIMIT: u64 = 20;

/// Examinations of different addresses run side by side over this many locks.
const TURNS: usize = 64;

/// Who sent a request, as far as failed authentication is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientAddr {
    /// An IPv4 address, or an IPv6 address reduced to its /64 (one host usually holds a whole
    /// /64, so counting single IPv6 addresses would give it 2^64 budgets).
    Ip(IpAddr),
    /// No peer address is known (a router called without a socket, as in unit tests): such
    /// requests share one budget.
    Unknown,
}

impl ClientAddr {
    /// The peer the connection came from (`ConnectInfo`, set by `run`), or, when that peer is
    /// a trusted proxy, the client it names: `X-Forwarded-For` read from the right (the last
    /// header's last entry is what the nearest proxy appended), skipping entries that are
    /// themselves trusted proxies; the first other entry is the client. Entries to its left
    /// were written by the client and prove nothing. An entry that cannot be read makes the
    /// last trusted hop the client, which limits more, never less.
    pub fn of(extensions: &Extensions, headers: &HeaderMap, trusted: &TrustedProxies) -> Self {
        let Some(ConnectInfo(peer)) = extensions.get::<ConnectInfo<SocketAddr>>() else {
            return Self::Unknown;
        };
        Self::Ip(canonical(client_ip(
            peer.ip().to_canonical(),
            headers,
            trusted,
        )))
    }

    /// The address as a key of counts and limits.
    pub fn key(&self) -> String {
        match self {
            Self::Ip(ip) => ip.to_string(),
            Self::Unknown => "unknown".to_owned(),
        }
    }
}

/// The walk of [`ClientAddr::of`], from the peer leftwards through `X-Forwarded-For`.
fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    let mut hop = peer;
    if !trusted.contains(hop) {
        return hop;
    }
    for value in headers.get_all("x-forwarded-for").iter().rev() {
        let Ok(list) = value.to_str() else {
            return hop;
        };
        for entry in list.rsplit(',') {
            let Some(ip) = forwarded_entry(entry.trim()) else {
                return hop;
            };
            if !trusted.contains(ip) {
                return ip;
            }
            hop = ip;
        }
    }
    hop
}

/// One `X-Forwarded-For` entry as an address (a port, which some proxies add, is dropped;
/// IPv4-mapped IPv6 is read as IPv4).
fn forwarded_entry(entry: &str) -> Option<IpAddr> {
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|addr| addr.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

/// IPv4-mapped IPv6 as the IPv4 address it is; other IPv6 addresses as their /64.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None if v6.is_loopback() => ip,
            None => {
                let [a, b, c, d, ..] = v6.segments();
                IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            }
        },
    }
}

/// The failures of every client address, and one lookup at a time per address.
pub struct AuthFailures {
    record: Record,
    limit: u64,
    turns: Box<[Mutex<()>]>,
}

/// Where failures are counted.
enum Record {
    /// One node (SQLite): this process sees every failure.
    Local(LocalWindows),
    /// Several nodes (PostgreSQL): the database counts, this process remembers what it learned.
    /// Boxed: it holds a `Store`, and there is one per process.
    Shared(Box<shared::SharedFailures>),
}

impl AuthFailures {
    /// Counted in the database when several nodes can share it (PostgreSQL), else here.
    pub fn new(store: &Store) -> Self {
        let record = if store.shares_state() {
            Record::Shared(Box::new(shared::SharedFailures::new(store.clone(), LIMIT)))
        } else {
            Record::Local(LocalWindows::default())
        };
        Self::with_record(record, LIMIT)
    }

    /// Counted in this process, at most `limit` failures a window.
    pub fn with_limit(limit: u64) -> Self {
        Self::with_record(Record::Local(LocalWindows::default()), limit)
    }

    fn with_record(record: Record, limit: u64) -> Self {
        Self {
            record,
            limit,
            turns: (0..TURNS).map(|_| Mutex::new(())).collect(),
        }
    }

    /// Runs `examination` of a presented credential that costs a database read (`Ok(Some)`:
    /// valid, `Ok(None)`: not), in `client`'s turn: one address's examinations run one at a
    /// time on this node, however many it sends at once. A valid credential passes whatever
    /// the address's failures; one found not valid is [`refused`](Self::refused). An error
    /// of the examination itself (the database unreachable) is no failure of the client's and
    /// is not counted.
    pub async fn examine<T>(
        &self,
        client: ClientAddr,
        examination: impl Future<Output = Result<Option<T>, ApiError>>,
    ) -> Result<T, ApiError> {
        let _turn = self.turn(client).lock().await;
        match examination.await? {
            Some(valid) => Ok(valid),
            None => Err(self.refused(client).await),
        }
    }

    /// The answer to a presented credential found not valid: 401 `authentication_error`,
    /// counted, while `client` has room in its window; past it 429 `rate_limit`, not counted.
    pub async fn refused(&self, client: ClientAddr) -> ApiError {
        match self.count(client).await {
            Ok(()) => ApiError::Authentication,
            Err(limited) => limited,
        }
    }

    /// Counts one failure of `client` if its window has room (`Ok`: answer 401), else 429
    /// with the whole seconds until a slot frees. One atomic step, here or in the database:
    /// concurrent failures never count beyond the limit.
    pub async fn count(&self, client: ClientAddr) -> Result<(), ApiError> {
        self.count_at(client, Instant::now()).await
    }

    async fn count_at(&self, client: ClientAddr, now: Instant) -> Result<(), ApiError> {
        let key = client.key();
        match &self.record {
            Record::Local(failures) => {
                failures
                    .check(&key, self.limit, now)
                    .map_err(|retry_after_secs| ApiError::TooManyFailedAuthentications {
                        retry_after_secs,
                    })
            }
            Record::Shared(shared) => shared.failed(&key, now).await,
        }
    }

    fn turn(&self, client: ClientAddr) -> &Mutex<()> {
        let mut hasher = DefaultHasher::new();
        client.hash(&mut hasher);
        let index = usize::try_from(hasher.finish() % TURNS as u64).unwrap_or(0);
        &self.turns[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::rate_limit::WINDOW;
    use axum::http::HeaderValue;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn ip(text: &str) -> ClientAddr {
        ClientAddr::Ip(canonical(text.parse().expect("ip")))
    }

    fn limited_for(result: Result<(), ApiError>) -> Option<u64> {
        match result {
            Err(ApiError::TooManyFailedAuthentications { retry_after_secs }) => {
                Some(retry_after_secs)
            }
            _ => None,
        }
    }

    #[tokio::test]
    async fn an_address_is_limited_after_its_failures_until_the_first_leaves_the_window() {
        let failures = AuthFailures::with_limit(3);
        let start = Instant::now();
        let client = ip("203.0.113.7");
        for second in 0..3 {
            let at = start + Duration::from_secs(second);
            assert!(failures.count_at(client, at).await.is_ok());
        }
        let at = start + Duration::from_secs(30);
        assert_eq!(limited_for(failures.count_at(client, at).await), Some(30));
        // Another address has its own budget.
        assert!(failures.count_at(ip("203.0.113.8"), at).await.is_ok());
        // Once the first failure is a window old, one more is counted.
        assert!(failures.count_at(client, start + WINDOW).await.is_ok());
        let at = start + WINDOW + Duration::from_millis(500);
        assert!(limited_for(failures.count_at(client, at).await).is_some());
        let at = start + WINDOW + Duration::from_secs(1);
        assert!(failures.count_at(client, at).await.is_ok());
    }

    #[tokio::test]
    async fn a_valid_credential_passes_even_from_a_limited_address_and_is_never_counted() {
        let failures = AuthFailures::with_limit(1);
        let client = ip("198.51.100.1");
        for _ in 0..5 {
            let valid = failures.examine(client, async { Ok(Some(())) }).await;
            assert!(valid.is_ok());
        }
        let wrong = failures.examine(client, async { Ok(None::<()>) }).await;
        assert!(matches!(wrong, Err(ApiError::Authentication)));
        // Limited: a further unknown credential is answered 429...
        let wrong = failures.examine(client, async { Ok(None::<()>) }).await;
        assert!(matches!(
            wrong,
            Err(ApiError::TooManyFailedAuthentications { .. })
        ));
        assert!(matches!(
            failures.refused(client).await,
            ApiError::TooManyFailedAuthentications { .. }
        ));
        // ...and a valid one still passes: the address may be a load balancer's.
        let right = failures.examine(client, async { Ok(Some(7)) }).await;
        assert!(matches!(right, Ok(7)));
        // An examination that could not tell is no failure of the client's.
        let failures = AuthFailures::with_limit(1);
        let unknown = failures
            .examine(client, async {
                Err::<Option<()>, _>(ApiError::Internal("down".into()))
            })
            .await;
        assert!(matches!(unknown, Err(ApiError::Internal(_))));
        assert!(matches!(
            failures.refused(client).await,
            ApiError::Authentication
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_guesses_are_looked_up_one_at_a_time_and_counted_exactly() {
        let failures = Arc::new(AuthFailures::with_limit(5));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let client = ip("192.0.2.9");
        let guesses: Vec<_> = (0..50)
            .map(|_| {
                let (failures, running, most) = (failures.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    failures
                        .examine(client, async {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            running.fetch_sub(1, Ordering::SeqCst);
                            Ok(None::<()>)
                        })
                        .await
                })
            })
            .collect();
        let (mut refused, mut limited) = (0, 0);
        for guess in guesses {
            match guess.await.expect("guess") {
                Err(ApiError::Authentication) => refused += 1,
                Err(ApiError::TooManyFailedAuthentications { .. }) => limited += 1,
                _ => panic!("a guess passed"),
            }
        }
        assert_eq!((refused, limited), (5, 45));
        assert_eq!(most.load(Ordering::SeqCst), 1, "one lookup at a time");
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(ip("2001:db8:1:2:aaaa::1"), ip("2001:db8:1:2:bbbb::9"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:203.0.113.7"), ip("203.0.113.7"));
    }

    fn with_peer(peer: &str) -> Extensions {
        let mut extensions = Extensions::new();
        extensions.insert(ConnectInfo(peer.parse::<SocketAddr>().expect("peer")));
        extensions
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                "x-forwarded-for",
                HeaderValue::from_bytes(value.as_bytes()).expect("header"),
            );
        }
        headers
    }

    fn trusted(list: &str) -> TrustedProxies {
        list.parse().expect("trusted proxies")
    }

    #[test]
    fn forwarded_for_is_read_only_from_a_trusted_peer() {
        let loopback = TrustedProxies::loopback();
        let headers = forwarded(&["1.1.1.1, 203.0.113.5"]);
        let proxy = with_peer("127.0.0.1:5000");
        assert_eq!(
            ClientAddr::of(&proxy, &headers, &loopback),
            ip("203.0.113.5")
        );
        assert_eq!(
            ClientAddr::of(&proxy, &headers, &trusted("")),
            ip("127.0.0.1")
        );
        let direct = with_peer("198.51.100.4:5000");
        assert_eq!(
            ClientAddr::of(&direct, &headers, &loopback),
            ip("198.51.100.4")
        );
        let balancer = trusted("10.0.0.0/8");
        let behind = with_peer("10.1.2.3:5000");
        assert_eq!(
            ClientAddr::of(&behind, &headers, &balancer),
            ip("203.0.113.5")
        );
        // A dual-stack socket's IPv4-mapped peer is the IPv4 proxy it is.
        let mapped = with_peer("[::ffff:10.1.2.3]:5000");
        assert_eq!(
            ClientAddr::of(&mapped, &headers, &balancer),
            ip("203.0.113.5")
        );
        assert_eq!(ClientAddr::of(&proxy, &headers, &balancer), ip("127.0.0.1"));
    }

    #[test]
    fn the_client_is_the_rightmost_entry_that_is_not_a_trusted_proxy() {
        let proxies = trusted("127.0.0.0/8,::1/128,10.0.0.0/8,fd00::/8");
        let peer = with_peer("[::1]:5000");
        let of = |values: &[&str]| ClientAddr::of(&peer, &forwarded(values), &proxies);
        // Trusted hops are skipped, whichever header holds them; what is left of the client is
        // the client's own writing.
        assert_eq!(of(&["6.6.6.6, 203.0.113.5, 10.0.0.7"]), ip("203.0.113.5"));
        assert_eq!(
            of(&["6.6.6.6", "203.0.113.5:4431", "10.0.0.1, [fd00::1]:443"]),
            ip("203.0.113.5")
        );
        assert_eq!(of(&["2001:db8::7, 10.0.0.1"]), ip("2001:db8::"));
        assert_eq!(of(&["::ffff:198.51.100.2"]), ip("198.51.100.2"));
        // Every entry a trusted proxy: the leftmost of them.
        assert_eq!(of(&["10.0.0.3, 10.0.0.2"]), ip("10.0.0.3"));
        // No header: the peer.
        assert_eq!(of(&[]), ip("::1"));
    }

    #[test]
    fn an_unreadable_entry_makes_the_last_trusted_hop_the_client() {
        let proxies = trusted("127.0.0.0/8,10.0.0.0/8");
        let peer = with_peer("127.0.0.1:5000");
        let of = |values: &[&str]| ClientAddr::of(&peer, &forwarded(values), &proxies);
        assert_eq!(of(&["203.0.113.5, not-an-address"]), ip("127.0.0.1"));
        assert_eq!(of(&["203.0.113.5, unknown, 10.0.0.4"]), ip("10.0.0.4"));
        assert_eq!(of(&["203.0.113.5, , 10.0.0.4"]), ip("10.0.0.4"));
        assert_eq!(of(&["203.0.113.5,"]), ip("127.0.0.1"));
        assert_eq!(of(&["203.0.113.5", "10.0.0.4, \u{e9}"]), ip("127.0.0.1"));
    }

    #[test]
    fn without_a_socket_every_request_shares_one_budget() {
        assert_eq!(
            ClientAddr::of(
                &Extensions::new(),
                &forwarded(&["203.0.113.5"]),
                &TrustedProxies::loopback()
            ),
            ClientAddr::Unknown
        );
    }
}
