//! Which URLs may receive webhooks. Only `http` and `https` with a host. Whether loopback,
//! private, link-local and other non-public addresses are allowed is the operator's choice
//! (`--allow-private-webhook-urls`): a receiver on the integrator's laptop is the point of the
//! development setup, while on a shared server such a URL would let a tenant make us call
//! our own network. Hostnames are resolved at registration and every address must pass.

use reqwest::Url;
use std::net::IpAddr;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("url must be an absolute http or https URL")]
    NotHttp,
    #[error("url points to a private or loopback address, which this server does not allow")]
    Private,
    #[error("url's host could not be resolved")]
    Unresolvable,
}

/// Parses `raw` as a webhook URL, checking its addresses unless private ones are allowed.
pub async fn check(raw: &str, allow_private: bool) -> Result<Url, TargetError> {
    let url = Url::parse(raw).map_err(|_| TargetError::NotHttp)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(TargetError::NotHttp);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(TargetError::NotHttp);
    }
    if allow_private {
        return Ok(url);
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|_| TargetError::Unresolvable)?
            .map(|a| a.ip())
            .collect(),
    };
    if addrs.is_empty() || addrs.iter().any(|ip| !is_public(*ip)) {
        return Err(TargetError::Private);
    }
    Ok(url)
}

/// Whether `ip` is a public unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b)))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_http_urls_with_a_host_are_accepted() {
        assert!(check("https://example.com/hook", true).await.is_ok());
        assert!(check("http://127.0.0.1:9000/h", true).await.is_ok());
        for bad in [
            "ftp://example.com",
            "not a url",
            "https://",
            "http://u:p@example.com/",
        ] {
            assert_eq!(
                check(bad, true).await.err(),
                Some(TargetError::NotHttp),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn private_addresses_are_refused_when_not_allowed() {
        for private in [
            "http://127.0.0.1/h",
            "http://10.1.2.3/h",
            "http://192.168.0.1/h",
            "http://169.254.169.254/latest",
            "http://[::1]/h",
            "http://[fd00::1]/h",
            "http://localhost:8080/h",
        ] {
            assert_eq!(
                check(private, false).await.err(),
                Some(TargetError::Private),
                "{private}"
            );
        }
        assert!(check("http://8.8.8.8/h", false).await.is_ok());
    }
}
