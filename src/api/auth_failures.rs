//! Failed authentication, limited per client address: at most [`LIMIT`] failures in any 60
//! seconds from one address. Past that, every request from the address that needs a credential
//! (an API key on `/v1`, the admin token on `/admin`, the dashboard's login form) is answered
//! 429 `rate_limit` with `Retry-After` before its credential is looked at, so a guesser learns
//! nothing while limited: not even that a guess was right, since a valid key from a limited
//! address is answered 429 too. Successful authentications are not counted, nor requests that
//! present no credential at all (they cost nothing and guess nothing).
//!
//! Owns who the client is ([`ClientAddr`]: the TCP peer, or, with `--trust-forwarded-for` and
//! a loopback peer, the rightmost `X-Forwarded-For` entry), the sliding log of each address's
//! failures, and the rule that one address's credentials are examined one at a time (per
//! node): otherwise a burst of concurrent guesses would all be examined before the first
//! failure counted. What a valid credential is stays with the callers (`auth`, `dashboard`).
//!
//! On SQLite (one node) the log is in this process ([`LocalWindows`], whose sweep bounds its
//! memory): exactly [`LIMIT`] failures. On PostgreSQL it is in the database, so that failures
//! at every node count together, without a database read for requests from addresses that
//! have not failed: see [`shared`] for how, and for its bound (at most [`LIMIT`] plus one per
//! node in any 60 seconds; exactly [`LIMIT`] with one node).

mod shared;

use super::error::ApiError;
use super::rate_limit::LocalWindows;
use super::state::AppState;
use crate::store::Store;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::Response;
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
    /// The peer the connection came from (`ConnectInfo`, set by `run`), or with
    /// `trust_forwarded_for` and a loopback peer (a reverse proxy on this host) the rightmost
    /// `X-Forwarded-For` address: the one that proxy appended. Entries to its left were sent
    /// by the client and prove nothing. An unreadable header counts as the proxy itself, which
    /// limits more, never less.
    pub fn of(extensions: &Extensions, headers: &HeaderMap, trust_forwarded_for: bool) -> Self {
        let Some(ConnectInfo(peer)) = extensions.get::<ConnectInfo<SocketAddr>>() else {
            return Self::Unknown;
        };
        let peer = canonical(peer.ip());
        if trust_forwarded_for
            && peer.is_loopback()
            && let Some(forwarded) = rightmost_forwarded_for(headers)
        {
            return Self::Ip(canonical(forwarded));
        }
        Self::Ip(peer)
    }

    fn key(&self) -> String {
        match self {
            Self::Ip(ip) => ip.to_string(),
            Self::Unknown => "unknown".to_owned(),
        }
    }
}

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self::of(
            &parts.extensions,
            &parts.headers,
            state.config.trust_forwarded_for,
        ))
    }
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

/// The last entry of the last `X-Forwarded-For` header, as an address (a port, which some
/// proxies add, is dropped).
fn rightmost_forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    let last = headers.get_all("x-forwarded-for").iter().next_back()?;
    let entry = last.to_str().ok()?.rsplit(',').next()?.trim();
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|addr| addr.ip()))
        .ok()
}

/// The failures of every client address, and one examination at a time per address.
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

    /// 429 while `client` is at its limit of failures; checked before anything else of a
    /// request that needs a credential. Never reads the database.
    pub fn admit(&self, client: ClientAddr) -> Result<(), ApiError> {
        self.admit_at(client, Instant::now())
    }

    fn admit_at(&self, client: ClientAddr, now: Instant) -> Result<(), ApiError> {
        let key = client.key();
        let limited = match &self.record {
            Record::Local(failures) => failures.at_limit(&key, self.limit, now),
            Record::Shared(shared) => shared.admit(&key, now),
        };
        limited
            .map_err(|retry_after_secs| ApiError::TooManyFailedAuthentications { retry_after_secs })
    }

    /// Runs `examination` of a presented credential (`Ok(Some)`: valid, `Ok(None)`: not) in
    /// `client`'s turn, after checking again that it is not limited; a credential found not
    /// valid is counted and answered 401. An error of the examination itself (the database
    /// unreachable) is no failure of the client's and is not counted.
    pub async fn examine<T>(
        &self,
        client: ClientAddr,
        examination: impl Future<Output = Result<Option<T>, ApiError>>,
    ) -> Result<T, ApiError> {
        let _turn = self.turn(client).lock().await;
        self.admit(client)?;
        let reservation = self.reserve(client).await?;
        match examination.await {
            Ok(Some(valid)) => {
                self.release(client, reservation).await;
                Ok(valid)
            }
            Ok(None) => {
                self.failed(client, reservation).await?;
                Err(ApiError::Authentication)
            }
            Err(err) => {
                self.release(client, reservation).await;
                Err(err)
            }
        }
    }

    /// Runs a request whose credential another layer checks (the in-process sandbox's
    /// administration, which answers in the processor's own error shape), in `client`'s turn
    /// after checking that it is not limited; a 401 from it counts as a failure.
    pub async fn examine_response(
        &self,
        client: ClientAddr,
        request: impl Future<Output = Response>,
    ) -> Result<Response, ApiError> {
        let _turn = self.turn(client).lock().await;
        self.admit(client)?;
        let reservation = self.reserve(client).await?;
        let response = request.await;
        if response.status() == StatusCode::UNAUTHORIZED {
            self.failed(client, reservation).await?;
        } else {
            self.release(client, reservation).await;
        }
        Ok(response)
    }

    /// Before an examination: a slot of the shared window when this node has seen `client`
    /// fail lately (see `shared`); nothing otherwise, nor on one node.
    async fn reserve(&self, client: ClientAddr) -> Result<Option<i64>, ApiError> {
        match &self.record {
            Record::Local(_) => Ok(None),
            Record::Shared(shared) => shared.reserve(&client.key(), Instant::now()).await,
        }
    }

    /// After an examination that was no failure: the reserved slot back.
    async fn release(&self, client: ClientAddr, reservation: Option<i64>) {
        if let Record::Shared(shared) = &self.record {
            shared.release(&client.key(), reservation).await;
        }
    }

    /// Counts a failure of `client`.
    async fn failed(&self, client: ClientAddr, reservation: Option<i64>) -> Result<(), ApiError> {
        match &self.record {
            Record::Local(_) => {
                self.failed_at(client, Instant::now());
                Ok(())
            }
            Record::Shared(shared) => shared.failed(&client.key(), reservation).await,
        }
    }

    /// Counts a failure in this process's log (one node).
    fn failed_at(&self, client: ClientAddr, now: Instant) {
        if let Record::Local(failures) = &self.record {
            // Under the client's turn, after `admit`: there is room, so this always counts.
            let _ = failures.check(&client.key(), self.limit, now);
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
    use crate::api::rate_limit::WINDOW;
    use axum::http::HeaderValue;
    use std::time::Duration;

    fn ip(text: &str) -> ClientAddr {
        ClientAddr::Ip(canonical(text.parse().expect("ip")))
    }

    #[test]
    fn an_address_is_limited_after_its_failures_until_the_first_leaves_the_window() {
        let failures = AuthFailures::with_limit(3);
        let start = Instant::now();
        let client = ip("203.0.113.7");
        for second in 0..3 {
            assert!(failures.admit_at(client, start).is_ok());
            failures.failed_at(client, start + Duration::from_secs(second));
        }
        let limited = failures.admit_at(client, start + Duration::from_secs(30));
        assert!(matches!(
            limited,
            Err(ApiError::TooManyFailedAuthentications {
                retry_after_secs: 30
            })
        ));
        // Another address has its own budget.
        assert!(failures.admit_at(ip("203.0.113.8"), start).is_ok());
        // Once the first failure is a window old, one more attempt is examined.
        assert!(failures.admit_at(client, start + WINDOW).is_ok());
        failures.failed_at(client, start + WINDOW);
        assert!(
            failures
                .admit_at(client, start + WINDOW + Duration::from_millis(500))
                .is_err()
        );
        assert!(
            failures
                .admit_at(client, start + WINDOW + Duration::from_secs(1))
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_valid_credential_is_not_counted_and_an_invalid_one_is() {
        let failures = AuthFailures::with_limit(1);
        let client = ip("198.51.100.1");
        for _ in 0..5 {
            assert!(
                failures
                    .examine(client, async { Ok(Some(())) })
                    .await
                    .is_ok()
            );
        }
        let wrong = failures.examine(client, async { Ok(None::<()>) }).await;
        assert!(matches!(wrong, Err(ApiError::Authentication)));
        // Limited: not even a valid credential is examined.
        let mut examined = false;
        let right = failures
            .examine(client, async {
                examined = true;
                Ok(Some(()))
            })
            .await;
        assert!(matches!(
            right,
            Err(ApiError::TooManyFailedAuthentications { .. })
        ));
        assert!(!examined);
    }

    #[tokio::test]
    async fn concurrent_guesses_are_examined_no_more_than_the_limit() {
        let failures = std::sync::Arc::new(AuthFailures::with_limit(5));
        let examined = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let client = ip("192.0.2.9");
        let guesses: Vec<_> = (0..50)
            .map(|_| {
                let (failures, examined) = (failures.clone(), examined.clone());
                tokio::spawn(async move {
                    failures
                        .examine(client, async {
                            examined.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            Ok(None::<()>)
                        })
                        .await
                })
            })
            .collect();
        for guess in guesses {
            let _ = guess.await;
        }
        assert_eq!(examined.load(std::sync::atomic::Ordering::SeqCst), 5);
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
                HeaderValue::from_str(value).expect("header"),
            );
        }
        headers
    }

    #[test]
    fn forwarded_for_is_trusted_only_when_asked_and_only_from_loopback() {
        let proxy = with_peer("127.0.0.1:5000");
        let headers = forwarded(&["1.1.1.1, 203.0.113.5"]);
        assert_eq!(ClientAddr::of(&proxy, &headers, true), ip("203.0.113.5"));
        assert_eq!(ClientAddr::of(&proxy, &headers, false), ip("127.0.0.1"));
        let direct = with_peer("198.51.100.4:5000");
        assert_eq!(ClientAddr::of(&direct, &headers, true), ip("198.51.100.4"));
    }

    #[test]
    fn the_rightmost_forwarded_entry_counts_and_a_bad_one_means_the_proxy() {
        let proxy = with_peer("[::1]:5000");
        let two_headers = forwarded(&["6.6.6.6", "10.0.0.1, 203.0.113.5:4431"]);
        assert_eq!(
            ClientAddr::of(&proxy, &two_headers, true),
            ip("203.0.113.5")
        );
        let garbage = forwarded(&["203.0.113.5, not-an-address"]);
        assert_eq!(ClientAddr::of(&proxy, &garbage, true), ip("::1"));
        assert_eq!(ClientAddr::of(&proxy, &HeaderMap::new(), true), ip("::1"));
    }

    #[test]
    fn without_a_socket_every_request_shares_one_budget() {
        assert_eq!(
            ClientAddr::of(&Extensions::new(), &forwarded(&["203.0.113.5"]), true),
            ClientAddr::Unknown
        );
    }
}
