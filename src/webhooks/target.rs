//! Which URLs may receive webhooks. Only `http` and `https` with a host and no credentials.
//! Whether loopback, private, link-local and other non-public addresses are allowed is the
//! account's [`AddressPolicy`] (`Config::webhook_policy`: a receiver on the integrator's laptop
//! is the point of the development setup, while on a shared server such a URL would let a
//! tenant make us call our own network). Under `PublicOnly` a host name is resolved now and
//! every address must be public; this is only the early answer to the integrator: deliveries
//! check again when connecting (`egress::GuardedClient`), which is what stops DNS rebinding.

use crate::egress::{self, AddressPolicy, HostResolver, ResolveError};
use reqwest::Url;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("url must be an absolute http or https URL")]
    NotHttp,
    #[error("url points to a private or loopback address, which this server does not allow")]
    Private,
    #[error("url's host could not be resolved")]
    Unresolvable,
}

/// Parses `raw` as a webhook URL, checking its addresses against `policy`.
pub async fn check(
    raw: &str,
    policy: AddressPolicy,
    resolver: &dyn HostResolver,
) -> Result<Url, TargetError> {
    let url = Url::parse(raw).map_err(|_| TargetError::NotHttp)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(TargetError::NotHttp);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(TargetError::NotHttp);
    }
    if policy == AddressPolicy::AllowPrivate {
        return Ok(url);
    }
    egress::check_literal(&url, policy).map_err(|_| TargetError::Private)?;
    if let Some(url::Host::Domain(host)) = url.host() {
        egress::resolve_checked(resolver, host, policy)
            .await
            .map_err(|err| match err {
                ResolveError::Refused(_) => TargetError::Private,
                ResolveError::Unresolvable(_) => TargetError::Unresolvable,
            })?;
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::{Lookup, SystemResolver};
    use std::net::IpAddr;

    /// `public.test` resolves to a public address, `both.test` to a public and a private
    /// one, anything else to nothing.
    struct Fixed;

    impl HostResolver for Fixed {
        fn lookup(&self, host: &str) -> Lookup {
            let addrs: Vec<IpAddr> = match host {
                "public.test" => vec![[93, 184, 215, 14].into()],
                "both.test" => vec![[93, 184, 215, 14].into(), [10, 0, 0, 1].into()],
                _ => vec![],
            };
            Box::pin(async move { Ok(addrs) })
        }
    }

    #[tokio::test]
    async fn only_http_urls_with_a_host_are_accepted() {
        let allow = AddressPolicy::AllowPrivate;
        assert!(
            check("https://example.com/hook", allow, &Fixed)
                .await
                .is_ok()
        );
        assert!(
            check("http://127.0.0.1:9000/h", allow, &Fixed)
                .await
                .is_ok()
        );
        for bad in [
            "ftp://example.com",
            "not a url",
            "https://",
            "http://u:p@example.com/",
        ] {
            assert_eq!(
                check(bad, allow, &Fixed).await.err(),
                Some(TargetError::NotHttp),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn private_addresses_are_refused_when_not_allowed() {
        let public = AddressPolicy::PublicOnly;
        for private in [
            "http://127.0.0.1/h",
            "http://10.1.2.3/h",
            "http://192.168.0.1/h",
            "http://169.254.169.254/latest",
            "http://0x7f.1/h",
            "http://[::1]/h",
            "http://[fd00::1]/h",
            "http://[64:ff9b::7f00:1]/",
            "http://[::127.0.0.1]/",
            "http://[2002:7f00:1::1]/",
            "http://both.test/h",
        ] {
            assert_eq!(
                check(private, public, &Fixed).await.err(),
                Some(TargetError::Private),
                "{private}"
            );
        }
        assert_eq!(
            check("http://localhost:8080/h", public, &SystemResolver)
                .await
                .err(),
            Some(TargetError::Private)
        );
        assert_eq!(
            check("http://nowhere.test/h", public, &Fixed).await.err(),
            Some(TargetError::Unresolvable)
        );
        assert!(check("http://8.8.8.8/h", public, &Fixed).await.is_ok());
        assert!(check("https://public.test/h", public, &Fixed).await.is_ok());
    }
}
