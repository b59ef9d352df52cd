//! One `Config`, read from flags or `BILLING_*` / `DATABASE_URL` environment (CONTRACT §1).

use crate::egress::{AddressPolicy, HostResolver};
use clap::Args;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The database used when neither `--database-url` nor `DATABASE_URL` names one.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://billing.db";

#[derive(Args, Clone)]
pub struct Config {
    /// Address to listen on.
    #[arg(
        long,
        env = "BILLING_BIND",
        default_value = "127.0.0.1:8080",
        global = true
    )]
    pub bind: String,
    /// `sqlite://path` (created if missing) or `postgres://user@host/db`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = DEFAULT_DATABASE_URL,
        global = true
    )]
    pub database_url: String,
    /// Base of checkout URLs and of the in-process sandbox processor (default http://<bind>).
    #[arg(long, env = "BILLING_PUBLIC_URL", global = true)]
    pub public_url: Option<String>,
    /// The operator's admin token; generated and printed once when absent.
    #[arg(
        long,
        env = "BILLING_ADMIN_TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// Whether webhook URLs may point to loopback or private addresses: `true` for every
    /// account, `false` for none; unset, sandbox accounts may while the server binds to a
    /// loopback address (the development setup) and live accounts never may.
    #[arg(long, env = "BILLING_ALLOW_PRIVATE_WEBHOOK_URLS", global = true)]
    pub allow_private_webhook_urls: Option<bool>,
    /// The reverse proxies whose `X-Forwarded-For` is believed, as a comma-separated list of
    /// CIDR blocks (or single addresses); empty, none. The client of a request whose peer is
    /// one of them is the rightmost entry of that header that is not itself one (CONTRACT §2);
    /// the client's address is what failed authentications are limited by.
    #[arg(
        long,
        env = "BILLING_TRUSTED_PROXIES",
        default_value = TrustedProxies::LOOPBACK,
        global = true
    )]
    pub trusted_proxies: TrustedProxies,
    /// Seconds a subscription actor stays live after its last message (the next message
    /// respawns it from the database).
    #[arg(
        long,
        env = "BILLING_ACTOR_IDLE_SECS",
        default_value_t = 5,
        global = true
    )]
    pub actor_idle_secs: u64,
    /// Seconds between two purges of Idempotency-Keys older than 24 hours.
    #[arg(
        long,
        env = "BILLING_IDEMPOTENCY_PURGE_SECS",
        default_value_t = 600,
        global = true
    )]
    pub idempotency_purge_secs: u64,
    /// Milliseconds one call to the processor may take before its outcome counts as unknown.
    #[arg(
        long,
        env = "BILLING_PROCESSOR_TIMEOUT_MS",
        default_value_t = 15_000,
        global = true,
        hide = true
    )]
    pub processor_timeout_ms: u64,
    /// Milliseconds between passes of the pending-charge reconciler.
    #[arg(
        long,
        env = "BILLING_RECONCILE_INTERVAL_MS",
        default_value_t = 5_000,
        global = true,
        hide = true
    )]
    pub reconcile_interval_ms: u64,
    /// The first wait, in milliseconds, before a charge whose outcome is unknown is asked
    /// about again; later waits grow from it (see `domain::recheck`).
    #[arg(
        long,
        env = "BILLING_PROCESSOR_RECHECK_BASE_MS",
        default_value_t = 5_000,
        global = true,
        hide = true
    )]
    pub processor_recheck_base_ms: u64,
    /// How long, in milliseconds, a post to the processor whose answer we never got may still
    /// reach it (held by a proxy or a queue on the way). A charge whose re-posts are refused
    /// for certain while the processor shows nothing is declined only once its last such post
    /// is this old; an operator may close a refund the processor never shows only then.
    #[arg(
        long,
        env = "BILLING_IN_FLIGHT_BOUND_MS",
        default_value_t = 3_600_000,
        global = true,
        hide = true
    )]
    pub in_flight_bound_ms: u64,
    /// How long, in milliseconds, one e-mail may take at an SMTP server (connect to the last
    /// reply) before its outcome counts as unknown and it is tried again.
    #[arg(
        long,
        env = "BILLING_SMTP_TIMEOUT_MS",
        default_value_t = 30_000,
        global = true,
        hide = true
    )]
    pub smtp_timeout_ms: u64,
    /// How often, in milliseconds, each node looks for notices whose time has come.
    #[arg(
        long,
        env = "BILLING_NOTICES_INTERVAL_MS",
        default_value_t = 2_000,
        global = true,
        hide = true
    )]
    pub notices_interval_ms: u64,
    /// The URL other nodes reach this node at, for requests about subscriptions whose shard
    /// this node holds (PostgreSQL; default http://<bind>). Unique per node: a node started
    /// on the URL of a node that died takes its shards over at once.
    #[arg(long, env = "BILLING_NODE_URL", global = true)]
    pub node_url: Option<String>,
    /// Milliseconds a shard lease lasts without renewal (PostgreSQL): a node that dies holds
    /// its shards this long before the others take them.
    #[arg(
        long,
        env = "BILLING_LEASE_TTL_MS",
        default_value_t = 10_000,
        global = true,
        hide = true
    )]
    pub lease_ttl_ms: u64,
    /// Milliseconds between two renewals of this node's leases (and balancing passes).
    #[arg(
        long,
        env = "BILLING_LEASE_RENEW_MS",
        default_value_t = 2_000,
        global = true,
        hide = true
    )]
    pub lease_renew_ms: u64,
    /// Seconds a stopping server (SIGTERM, Ctrl-C) waits for the requests still running,
    /// among them those whose clients hung up, before it gives its shards to the other nodes
    /// and closes its database pool. A request cut off there keeps its Idempotency-Key
    /// answering 409 until the key expires.
    #[arg(
        long,
        env = "BILLING_SHUTDOWN_GRACE_SECS",
        default_value_t = 20,
        global = true
    )]
    pub shutdown_grace_secs: u64,
    /// How log lines are written: `text` (coloured only on a terminal) or `json` (one object
    /// per line, with the request's `request_id`).
    #[arg(
        long,
        env = "BILLING_LOG_FORMAT",
        value_enum,
        default_value_t = crate::logging::LogFormat::Text,
        global = true
    )]
    pub log_format: crate::logging::LogFormat,
    /// How tenants' host names are resolved (webhook registration and delivery); `None`, the
    /// system's resolver. Tests set one they control (DNS rebinding).
    #[arg(skip)]
    pub resolver: Option<Arc<dyn HostResolver>>,
    /// The most connections of the database's main pool (reads, and on PostgreSQL the
    /// service's transactions): 8 on SQLite and 16 on PostgreSQL when unset.
    #[arg(long, env = "BILLING_DATABASE_POOL_SIZE", global = true, hide = true)]
    pub database_pool_size: Option<u32>,
    /// Whether a PostgreSQL server runs without the cluster machinery (no leases, no fenced
    /// writes): only the fencing benchmark's baseline sets it, never a flag, since a second
    /// node on the same database would then act on the same subscriptions.
    #[arg(skip)]
    pub single_node: bool,
    /// Whether approved charges go uninvoiced: only the renewal benchmark's baseline sets it
    /// (`billing bench renewals --invoices compare`, what invoicing costs a burst, measured in
    /// one run), never a flag, since CONTRACT §11 wants an invoice for every approved charge.
    #[arg(skip)]
    pub benchmark_without_invoices: bool,
    /// The in-process sandbox processor's timing (settling, event retries, Nequi approval):
    /// Wompi's by default; tests compress it, never a flag.
    #[arg(skip)]
    pub sandbox: crate::processor::sandbox::SandboxConfig,
    /// DIAN's web service for live accounts in the `test` environment (habilitación); unset,
    /// DIAN's own (`vpfe-hab.dian.gov.co`).
    #[arg(long, env = "BILLING_DIAN_TEST_URL", global = true)]
    pub dian_test_url: Option<String>,
    /// DIAN's web service for live accounts in `production`; unset, DIAN's own.
    #[arg(long, env = "BILLING_DIAN_PRODUCTION_URL", global = true)]
    pub dian_production_url: Option<String>,
    /// The sandbox DIAN that sandbox accounts file with; unset, the in-process one at this
    /// node's `/sandbox/dian`. A standalone `billing sandbox-dian` here must be told of the
    /// accounts' software and ranges through its `_sandbox` administration (the fault runs do).
    #[arg(long, env = "BILLING_DIAN_SANDBOX_URL", global = true, hide = true)]
    pub dian_sandbox_url: Option<String>,
    /// Milliseconds one call to DIAN may take before its answer counts as unknown.
    #[arg(
        long,
        env = "BILLING_DIAN_TIMEOUT_MS",
        default_value_t = 30_000,
        global = true,
        hide = true
    )]
    pub dian_timeout_ms: u64,
    /// Milliseconds between passes of the DIAN submission loop.
    #[arg(
        long,
        env = "BILLING_DIAN_INTERVAL_MS",
        default_value_t = 1_000,
        global = true,
        hide = true
    )]
    pub dian_interval_ms: u64,
    /// The first wait, in milliseconds, before a document whose answer was unknown is asked
    /// about again; later waits grow from it as the charges' do (`domain::recheck`).
    #[arg(
        long,
        env = "BILLING_DIAN_RETRY_BASE_MS",
        default_value_t = 5_000,
        global = true,
        hide = true
    )]
    pub dian_retry_base_ms: u64,
    /// The in-process sandbox DIAN's behaviour; tests compress it, never a flag.
    #[arg(skip)]
    pub dian_sandbox: crate::dian::sandbox::SandboxDianConfig,
    /// WhatsApp's Cloud API for live accounts, with its version (unset, Meta's
    /// `https://graph.facebook.com/v21.0`).
    #[arg(long, env = "BILLING_WHATSAPP_URL", global = true, hide = true)]
    pub whatsapp_url: Option<String>,
    /// The sandbox WhatsApp that sandbox accounts send through, with its version; unset, the
    /// in-process one at `<public url>/sandbox/whatsapp/v21.0`. A standalone `billing
    /// sandbox-whatsapp` here must be told of the accounts' numbers (`POST
    /// /_sandbox/phone-numbers`).
    #[arg(long, env = "BILLING_WHATSAPP_SANDBOX_URL", global = true, hide = true)]
    pub whatsapp_sandbox_url: Option<String>,
    /// Milliseconds one message may take at the Cloud API before its outcome counts as unknown
    /// and it is tried again.
    #[arg(
        long,
        env = "BILLING_WHATSAPP_TIMEOUT_MS",
        default_value_t = 15_000,
        global = true,
        hide = true
    )]
    pub whatsapp_timeout_ms: u64,
    /// The in-process sandbox WhatsApp's behaviour; tests compress it, never a flag.
    #[arg(skip)]
    pub whatsapp_sandbox: crate::whatsapp::sandbox::SandboxWhatsappConfig,
}

impl Config {
    /// A configuration for `database_url` with every other setting at its default.
    pub fn new(database_url: impl Into<String>) -> Self {
        Self {
            bind: "127.0.0.1:8080".to_owned(),
            database_url: database_url.into(),
            public_url: None,
            admin_token: None,
            allow_private_webhook_urls: None,
            trusted_proxies: TrustedProxies::loopback(),
            actor_idle_secs: 5,
            idempotency_purge_secs: 600,
            processor_timeout_ms: 15_000,
            reconcile_interval_ms: 5_000,
            processor_recheck_base_ms: 5_000,
            in_flight_bound_ms: 3_600_000,
            smtp_timeout_ms: 30_000,
            notices_interval_ms: 2_000,
            node_url: None,
            lease_ttl_ms: 10_000,
            lease_renew_ms: 2_000,
            shutdown_grace_secs: 20,
            log_format: crate::logging::LogFormat::Text,
            resolver: None,
            database_pool_size: None,
            single_node: false,
            benchmark_without_invoices: false,
            sandbox: crate::processor::sandbox::SandboxConfig::default(),
            dian_test_url: None,
            dian_production_url: None,
            dian_sandbox_url: None,
            dian_timeout_ms: 30_000,
            dian_interval_ms: 1_000,
            dian_retry_base_ms: 5_000,
            dian_sandbox: crate::dian::sandbox::SandboxDianConfig::default(),
            whatsapp_url: None,
            whatsapp_sandbox_url: None,
            whatsapp_timeout_ms: 15_000,
            whatsapp_sandbox: crate::whatsapp::sandbox::SandboxWhatsappConfig::default(),
        }
    }

    /// Which addresses the webhook URLs of a sandbox (or live) account may reach (CONTRACT
    /// §9), at registration and at every delivery.
    pub fn webhook_policy(&self, sandbox: bool) -> AddressPolicy {
        let allowed = self.allow_private_webhook_urls.unwrap_or_else(|| {
            sandbox
                && self
                    .bind
                    .parse::<std::net::SocketAddr>()
                    .is_ok_and(|addr| addr.ip().is_loopback())
        });
        if allowed {
            AddressPolicy::AllowPrivate
        } else {
            AddressPolicy::PublicOnly
        }
    }

    /// The resolver of tenants' host names.
    pub fn host_resolver(&self) -> Arc<dyn HostResolver> {
        self.resolver
            .clone()
            .unwrap_or_else(crate::egress::system_resolver)
    }

    /// Where other nodes reach this one, without a trailing slash: `--node-url`, else
    /// http://<bind> with an unspecified address (0.0.0.0, ::) read as loopback.
    pub fn node_url(&self) -> String {
        if let Some(url) = &self.node_url {
            return url.trim_end_matches('/').to_owned();
        }
        match self.bind.parse::<std::net::SocketAddr>() {
            Ok(addr) if addr.ip().is_unspecified() => {
                format!("http://127.0.0.1:{}", addr.port())
            }
            _ => format!("http://{}", self.bind),
        }
    }

    /// The Cloud API base (with its version) that an account sends WhatsApp through, and
    /// whether it is the operator's own (the sandbox, or a setting: private addresses allowed).
    pub fn whatsapp_base(&self, sandbox: bool) -> (String, bool) {
        let setting = if sandbox {
            &self.whatsapp_sandbox_url
        } else {
            &self.whatsapp_url
        };
        match setting {
            Some(url) => (url.trim_end_matches('/').to_owned(), true),
            None if sandbox => (
                format!(
                    "{}{}/{}",
                    self.public_url(),
                    crate::whatsapp::SANDBOX_MOUNT,
                    crate::whatsapp::API_VERSION
                ),
                true,
            ),
            None => (crate::whatsapp::META_BASE_URL.to_owned(), false),
        }
    }

    /// The public base URL, without a trailing slash.
    pub fn public_url(&self) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", self.bind),
        }
    }
}

/// The reverse proxies trusted to name the client in `X-Forwarded-For` (`--trusted-proxies`).
/// Built only by parsing, so an address that cannot be read stops the server at its start
/// rather than trusting less (or more) than the operator wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// The default: a proxy on this host.
    pub const LOOPBACK: &'static str = "127.0.0.0/8,::1/128";

    pub fn loopback() -> Self {
        Self(vec![
            IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::LOCALHOST, 8).trunc()),
            IpNet::V6(Ipv6Net::new_assert(Ipv6Addr::LOCALHOST, 128)),
        ])
    }

    /// Whether `ip` (an IPv4-mapped IPv6 address read as the IPv4 address it is) is one.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|block| block.contains(&ip))
    }
}

impl std::str::FromStr for TrustedProxies {
    type Err = String;

    fn from_str(list: &str) -> Result<Self, Self::Err> {
        let blocks = list
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map(|block| block.trunc())
                    .map_err(|_| {
                        format!(
                            "`{entry}` is not a CIDR block (like 10.0.0.0/8 or fd00::/8) nor an \
                             IP address"
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self(blocks))
    }
}

impl std::fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let blocks: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&blocks.join(","))
    }
}

/// The admin token never shows, nor a password in the database URL.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("bind", &self.bind)
            .field("database_url", &without_password(&self.database_url))
            .field("public_url", &self.public_url)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "allow_private_webhook_urls",
                &self.allow_private_webhook_urls,
            )
            .field("trusted_proxies", &self.trusted_proxies)
            .finish_non_exhaustive()
    }
}

/// `url` with its password, if any, replaced.
pub fn without_password(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("redacted"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => "<unparsed>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AddressPolicy::{AllowPrivate, PublicOnly};

    #[test]
    fn private_webhook_targets_follow_the_flag_then_the_account_and_the_bind() {
        // (flag, bind, sandbox account's policy, live account's policy)
        let table = [
            (Some(true), "0.0.0.0:8080", AllowPrivate, AllowPrivate),
            (Some(true), "127.0.0.1:8080", AllowPrivate, AllowPrivate),
            (Some(false), "127.0.0.1:8080", PublicOnly, PublicOnly),
            (Some(false), "0.0.0.0:8080", PublicOnly, PublicOnly),
            (None, "127.0.0.1:8080", AllowPrivate, PublicOnly),
            (None, "[::1]:8080", AllowPrivate, PublicOnly),
            (None, "0.0.0.0:8080", PublicOnly, PublicOnly),
            (None, "10.0.0.5:8080", PublicOnly, PublicOnly),
        ];
        for (flag, bind, sandbox, live) in table {
            let mut config = Config::new("sqlite::memory:");
            config.allow_private_webhook_urls = flag;
            config.bind = bind.to_owned();
            assert_eq!(
                config.webhook_policy(true),
                sandbox,
                "{flag:?} {bind} sandbox"
            );
            assert_eq!(config.webhook_policy(false), live, "{flag:?} {bind} live");
        }
    }

    /// `Config` as `billing serve` reads it.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        config: Config,
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn trusted_proxies_are_a_cidr_list_loopback_by_default() {
        use clap::Parser;
        let default = Flags::try_parse_from(["billing"])
            .expect("defaults")
            .config
            .trusted_proxies;
        assert_eq!(default, TrustedProxies::loopback());
        assert_eq!(default.to_string(), TrustedProxies::LOOPBACK);
        for trusted in ["127.0.0.1", "127.255.3.4", "::1", "::ffff:127.0.0.1"] {
            assert!(default.contains(ip(trusted)), "{trusted}");
        }
        for stranger in ["10.0.0.1", "128.0.0.1", "::2", "::ffff:10.0.0.1"] {
            assert!(!default.contains(ip(stranger)), "{stranger}");
        }
        let listed = Flags::try_parse_from([
            "billing",
            "--trusted-proxies",
            "10.1.2.3/8, 2001:db8::/32,192.0.2.7",
        ])
        .expect("a list")
        .config
        .trusted_proxies;
        assert_eq!(listed.to_string(), "10.0.0.0/8,2001:db8::/32,192.0.2.7/32");
        for trusted in [
            "10.200.0.1",
            "2001:db8:ffff::1",
            "192.0.2.7",
            "::ffff:10.0.0.9",
        ] {
            assert!(listed.contains(ip(trusted)), "{trusted}");
        }
        for stranger in ["127.0.0.1", "192.0.2.8", "2001:db9::1"] {
            assert!(!listed.contains(ip(stranger)), "{stranger}");
        }
        let none: TrustedProxies = "".parse().expect("an empty list");
        assert!(!none.contains(ip("127.0.0.1")));
    }

    #[test]
    fn an_unreadable_trusted_proxy_stops_the_start_with_a_clear_message() {
        use clap::Parser;
        for bad in [
            "10.0.0.0/8,10.0.0.300/8",
            "10.0.0.0/33",
            "proxy.internal",
            "::1/129",
        ] {
            let Err(err) = Flags::try_parse_from(["billing", "--trusted-proxies", bad]) else {
                panic!("{bad} was accepted");
            };
            let message = err.to_string();
            assert!(message.contains("--trusted-proxies"), "{message}");
            assert!(message.contains("is not a CIDR block"), "{message}");
        }
    }
}
