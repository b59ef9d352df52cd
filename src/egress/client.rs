//! The guarded HTTP client: reqwest with our resolver (every name's addresses checked against
//! the policy when connecting), IP-literal hosts checked before sending (hyper connects to
//! them without asking any resolver), no redirects, no proxy.
//!
//! Use: `let client = GuardedClient::new(policy, resolver, timeout, user_agent)?;` then
//! `client.send(client.post(url)?.json(&body)).await`, which answers `SendError::Refused`
//! for an address the policy does not permit, whether literal or resolved.

use super::{AddressPolicy, HostResolver, Refused, ResolveError, check_literal, resolve_checked};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The address is not permitted. Display is exactly "refused".
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("url must be an absolute http or https URL")]
    InvalidUrl,
    #[error(transparent)]
    Http(reqwest::Error),
}

impl From<reqwest::Error> for SendError {
    /// A refusal by our resolver comes back wrapped in reqwest's and hyper's connect errors.
    fn from(err: reqwest::Error) -> Self {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
        while let Some(current) = cause {
            if current.downcast_ref::<Refused>().is_some() {
                return Self::Refused(Refused);
            }
            cause = current.source();
        }
        Self::Http(err)
    }
}

/// An HTTP client that connects only where its policy permits. Cheap to clone.
#[derive(Clone)]
pub struct GuardedClient {
    http: reqwest::Client,
    policy: AddressPolicy,
}

impl GuardedClient {
    /// `timeout` bounds both the connection and the whole request.
    pub fn new(
        policy: AddressPolicy,
        resolver: Arc<dyn HostResolver>,
        timeout: Duration,
        user_agent: &str,
    ) -> reqwest::Result<Self> {
        let http = reqwest::Client::builder()
            .dns_resolver(CheckingResolver { resolver, policy })
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(user_agent)
            .build()?;
        Ok(Self { http, policy })
    }

    pub fn policy(&self) -> AddressPolicy {
        self.policy
    }

    /// A POST to `url`, refused at once when its host is an IP literal the policy does not
    /// permit. Send it with [`GuardedClient::send`].
    pub fn post(&self, url: &str) -> Result<reqwest::RequestBuilder, SendError> {
        let url = reqwest::Url::parse(url).map_err(|_| SendError::InvalidUrl)?;
        self.check(&url)?;
        Ok(self.http.post(url))
    }

    /// Sends `request` (from [`GuardedClient::post`]), checking its URL once more as built.
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, SendError> {
        let request = request.build()?;
        self.check(request.url())?;
        Ok(self.http.execute(request).await?)
    }

    fn check(&self, url: &reqwest::Url) -> Result<(), SendError> {
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(SendError::InvalidUrl);
        }
        Ok(check_literal(url, self.policy)?)
    }
}

/// reqwest's view of a [`HostResolver`] under a policy.
struct CheckingResolver {
    resolver: Arc<dyn HostResolver>,
    policy: AddressPolicy,
}

impl Resolve for CheckingResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let (resolver, policy) = (Arc::clone(&self.resolver), self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Our `Refused` itself goes into reqwest's error chain, where `SendError` finds it.
            let addrs = resolve_checked(resolver.as_ref(), &host, policy)
                .await
                .map_err(|err| -> BoxError {
                    match err {
                        ResolveError::Refused(refused) => Box::new(refused),
                        ResolveError::Unresolvable(io) => Box::new(io),
                    }
                })?;
            // Port 0: reqwest puts the URL's port (or the scheme's) in its place.
            let addrs: Addrs = Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::Lookup;
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Every name resolves to 127.0.0.1.
    struct Loopback;

    impl HostResolver for Loopback {
        fn lookup(&self, _host: &str) -> Lookup {
            Box::pin(async { Ok(vec![IpAddr::from([127, 0, 0, 1])]) })
        }
    }

    /// A local HTTP server answering `reply` to every request; counts connections.
    async fn server(reply: &'static str) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0_u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(reply.as_bytes()).await;
            }
        });
        (port, connections)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

    fn client(policy: AddressPolicy) -> GuardedClient {
        GuardedClient::new(policy, Arc::new(Loopback), Duration::from_secs(5), "test")
            .expect("client")
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_before_any_connection() {
        let (port, connections) = server(OK).await;
        let client = client(AddressPolicy::PublicOnly);
        let request = client
            .post(&format!("http://rebind.test:{port}/hook"))
            .expect("a host name passes until resolved");
        let err = client.send(request).await.expect_err("refused");
        assert!(matches!(err, SendError::Refused(_)), "{err:?}");
        assert_eq!(err.to_string(), "refused");
        assert_eq!(connections.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn ip_literals_are_checked_although_no_resolver_sees_them() {
        let (port, connections) = server(OK).await;
        let client = client(AddressPolicy::PublicOnly);
        for url in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://0x7f.1:{port}/"),
            format!("http://[::1]:{port}/"),
        ] {
            let err = client.post(&url).expect_err(&url);
            assert!(matches!(err, SendError::Refused(_)), "{url}: {err:?}");
        }
        // A request whose URL was changed after `post` is checked again by `send`.
        let mut request = client
            .post(&format!("http://rebind.test:{port}/"))
            .expect("post")
            .build()
            .expect("build");
        *request.url_mut() = format!("http://127.0.0.1:{port}/").parse().expect("url");
        let rebuilt = client.http.post(request.url().clone());
        assert!(matches!(
            client.send(rebuilt).await,
            Err(SendError::Refused(_))
        ));
        assert_eq!(connections.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn allow_private_connects_but_never_follows_a_redirect() {
        let (target, reached) = server(OK).await;
        let redirect: &'static str = Box::leak(
            format!(
                "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{target}/\r\n\
                 content-length: 0\r\nconnection: close\r\n\r\n"
            )
            .into_boxed_str(),
        );
        let (port, _) = server(redirect).await;
        let client = client(AddressPolicy::AllowPrivate);
        let response = client
            .send(
                client
                    .post(&format!("http://rebind.test:{port}/"))
                    .expect("post"),
            )
            .await
            .expect("sent");
        assert_eq!(response.status(), 302);
        assert_eq!(
            reached.load(Ordering::SeqCst),
            0,
            "the redirect is not followed"
        );
        let response = client
            .send(
                client
                    .post(&format!("http://127.0.0.1:{target}/"))
                    .expect("post"),
            )
            .await
            .expect("sent");
        assert_eq!(response.status(), 200);
    }

    #[tokio::test]
    async fn only_http_urls_are_posted() {
        let client = client(AddressPolicy::AllowPrivate);
        for url in ["ftp://example.com/", "not a url", "file:///etc/passwd"] {
            assert!(
                matches!(client.post(url), Err(SendError::InvalidUrl)),
                "{url}"
            );
        }
    }
}
