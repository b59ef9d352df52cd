//! The `billing` binary: parse the command line, start telemetry, hand over to the library.

use anyhow::Context;
use billing::accounts::{AccountSpec, create_account};
use billing::api::accounts::AccountOut;
use billing::config::Config;
use billing::store::Store;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "billing", version, about = "Recurring billing engine")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    config: Config,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Run the sandbox processor alone (Wompi's protocol at http://ADDR/v1).
    SandboxProcessor {
        #[arg(long, default_value = "127.0.0.1:8090")]
        bind: String,
        /// Milliseconds a transaction stays PENDING.
        #[arg(long, default_value_t = 100)]
        settle_delay_ms: u64,
        /// The token its administration (`/v1/_sandbox/…`) requires; generated and printed
        /// once when absent. It shares the id of the global `--admin-token`, so that clap
        /// lets this one stand in for it here, and takes `BILLING_ADMIN_TOKEN` only when
        /// neither the flag nor `BILLING_SANDBOX_ADMIN_TOKEN` is given.
        #[arg(long, env = "BILLING_SANDBOX_ADMIN_TOKEN", hide_env_values = true)]
        admin_token: Option<String>,
    },
    /// Run the sandbox DIAN alone (DIAN's web service at
    /// http://ADDR/WcfDianCustomerServices.svc, its administration under `/_sandbox/`).
    SandboxDian {
        #[arg(long, default_value = "127.0.0.1:8091")]
        bind: String,
        /// The token its administration (`/_sandbox/…`) requires; generated and printed once
        /// when absent (as `sandbox-processor`'s).
        #[arg(long, env = "BILLING_SANDBOX_ADMIN_TOKEN", hide_env_values = true)]
        admin_token: Option<String>,
    },
    /// Run the sandbox WhatsApp alone (the Cloud API at http://ADDR/v21.0/{phone_number_id}/
    /// messages, its administration under `/_sandbox/`).
    SandboxWhatsapp {
        #[arg(long, default_value = "127.0.0.1:8092")]
        bind: String,
        /// Milliseconds between a message and its `sent` status, and again its `delivered`.
        #[arg(long, default_value_t = 300)]
        status_delay_ms: u64,
        /// The token its administration (`/_sandbox/…`) requires; generated and printed once
        /// when absent (as `sandbox-processor`'s).
        #[arg(long, env = "BILLING_SANDBOX_ADMIN_TOKEN", hide_env_values = true)]
        admin_token: Option<String>,
    },
    /// Print the running server's supervision tree (GET /admin/actors).
    Actors {
        /// Base URL of the running server.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Only this kind of actor (subscription, …).
        #[arg(long)]
        kind: Option<String>,
        /// At most this many actors listed.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Fault-injection runs: a renewal burst with processor, event, client and crash faults,
    /// then the money invariants checked (ARCHITECTURE: How a chaos run works). Uses a fresh
    /// SQLite file per run, or a fresh schema when --database-url is a PostgreSQL database.
    #[command(args_conflicts_with_subcommands = true)]
    Chaos {
        /// `cluster`: several nodes on one PostgreSQL instead of one server.
        #[command(subcommand)]
        command: Option<ChaosCommand>,
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Subscriptions renewed in each run's burst.
        #[arg(long, default_value_t = 40)]
        subscriptions: usize,
        /// Run i uses seed + i (default: from the time); printed with each run.
        #[arg(long)]
        seed: Option<u64>,
        /// Share of processor requests and of events that get a fault while faults are on.
        #[arg(long, default_value_t = 0.3)]
        fault_rate: f64,
        /// Creates per run whose client hangs up and retries under its Idempotency-Key.
        #[arg(long, default_value_t = 2)]
        hang_ups: usize,
        /// Where SQLite databases and server logs go (kept only for runs that break).
        #[arg(long, default_value = "target/chaos-data")]
        dir: std::path::PathBuf,
        /// The server's shard leases (PostgreSQL, `BILLING_LEASE_TTL_MS`).
        #[arg(long, default_value_t = 5_000)]
        timer_lease_ms: u64,
        /// DIAN on: every invoice and credit note is filed with a standalone sandbox DIAN
        /// behind its own fault proxy, and judged accepted once each.
        #[arg(long)]
        dian: bool,
        /// Notices on: e-mailed to a real SMTP server behind a fault proxy (refused, busy,
        /// hung, dropped after the data, refused for good), and judged once per cause and
        /// within Ley 2300's hours.
        #[arg(long)]
        notices: bool,
    },
    /// Benchmarks (see README: Current figures).
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Manage accounts.
    Account {
        #[command(subcommand)]
        command: AccountCommand,
    },
}

#[derive(Subcommand)]
enum ChaosCommand {
    /// Several `billing serve` nodes on one PostgreSQL (--database-url), the standalone
    /// sandbox, a round-robin front: a renewal burst on the nodes' own timers and a stream of
    /// API actions, with a node killed, stopped past its lease, cut from the database,
    /// restarted in turn, or every node started together; then the money and webhook
    /// invariants checked (ARCHITECTURE: How a cluster run works). With several --nodes
    /// values (or --throughput): the renewals/s of one burst with each number of nodes.
    Cluster {
        /// Comma-separated: kill, pause, terminate-db, rolling, cold-start.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "kill,pause,terminate-db,rolling,cold-start"
        )]
        scenarios: Vec<harness::chaos::cluster::Scenario>,
        /// How many times each scenario runs.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Nodes per run; several values (1,2,3) measure throughput with each.
        #[arg(long, value_delimiter = ',', default_value = "3")]
        nodes: Vec<usize>,
        /// Measure renewals/s (also with a single --nodes value).
        #[arg(long)]
        throughput: bool,
        /// Subscriptions falling due at once in each run.
        #[arg(long, default_value_t = 200)]
        subscriptions: usize,
        /// Run i uses seed + i (default: from the time); printed with each run.
        #[arg(long)]
        seed: Option<u64>,
        /// The nodes' lease on their shards (BILLING_LEASE_TTL_MS); the production value by
        /// default, so that failover figures are the production ones.
        #[arg(long, default_value_t = 10_000)]
        node_lease_ttl_ms: u64,
        /// How often the nodes renew their leases (BILLING_LEASE_RENEW_MS).
        #[arg(long, default_value_t = 2_000)]
        node_lease_renew_ms: u64,
        /// Concurrent loops of API actions during each burst.
        #[arg(long, default_value_t = 2)]
        action_workers: usize,
        /// Where the nodes' logs go (kept only for runs that break).
        #[arg(long, default_value = "target/chaos-data")]
        dir: std::path::PathBuf,
        /// The executable the nodes run (default: this one), to compare builds.
        #[arg(long, hide = true)]
        binary: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// N subscriptions due at one instant, renewed through the actors, the sandbox processor
    /// and the ingress; then the primitive limit: the same processor round trips and rows
    /// without the service around them.
    Renewals {
        #[arg(long, default_value_t = 10_000)]
        subscriptions: usize,
        /// Where the benchmark's SQLite database is created (and removed) when --database-url
        /// is not given; with --database-url, a new SQLite file at that path or a new schema of
        /// that PostgreSQL database, removed afterwards.
        #[arg(long, default_value = "target/bench-data")]
        dir: std::path::PathBuf,
        /// Charge through `billing sandbox-processor` in a process of its own (started from
        /// this executable) instead of the service's in-process sandbox, and report the two
        /// processes' CPU and memory apart.
        #[arg(long)]
        standalone_sandbox: bool,
        /// `on`: every renewal invoiced, as in service; `compare`: the burst without invoices,
        /// then with them, each in a database of its own, and what invoicing costs the rate.
        #[arg(long, value_enum, default_value_t = Invoices::On)]
        invoices: Invoices,
        /// `compare`: the invoiced burst with the account's notices off, then with every kind
        /// on by e-mail to an SMTP server on loopback, and what notices cost the rate.
        #[arg(long, value_enum)]
        notices: Option<Notices>,
        /// With `compare`: how many pairs of runs (off and on, alternating which goes first);
        /// the cost reported is their median.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
    },
    /// What fencing costs one node on PostgreSQL: the renewal burst on fresh schemas of
    /// `--postgres`, without and then with the cluster machinery.
    Fence {
        #[arg(long, default_value_t = 10_000)]
        subscriptions: usize,
        /// A PostgreSQL database to make the benchmark's schemas in (and drop).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
        postgres: String,
    },
}

/// `billing bench renewals --notices`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Notices {
    Compare,
}

/// `billing bench renewals --invoices`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Invoices {
    On,
    Compare,
}

#[derive(Subcommand)]
enum AccountCommand {
    /// Create an account and print it as JSON, with its API key (shown once).
    Create {
        #[arg(long)]
        name: String,
        /// A sandbox account (test keys, in-process sandbox processor).
        #[arg(long)]
        sandbox: bool,
    },
}

/// jemalloc instead of glibc's malloc: on a renewal burst glibc's allocator took about a sixth
/// of the CPU; jemalloc made the burst about 25 % faster (benches/README.md; mimalloc was
/// as fast but held half again as much memory).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    billing::logging::init(cli.config.log_format);
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let listener = tokio::net::TcpListener::bind(&cli.config.bind).await?;
            billing::run(cli.config, listener, shutdown_signal()).await
        }
        Command::SandboxProcessor {
            bind,
            settle_delay_ms,
            admin_token,
        } => {
            let listener = tokio::net::TcpListener::bind(&bind).await?;
            // The address comes first: `billing chaos` reads it from the first line.
            println!("sandbox processor at http://{}/v1", listener.local_addr()?);
            let token = sandbox_admin_token(admin_token)?;
            let config = billing::processor::sandbox::SandboxConfig {
                settle_delay: std::time::Duration::from_millis(settle_delay_ms),
                ..Default::default()
            };
            let admin = billing::processor::sandbox::AdminAuth::from_token(&token);
            billing::processor::sandbox::serve_standalone(listener, config, admin).await
        }
        Command::SandboxDian { bind, admin_token } => {
            let listener = tokio::net::TcpListener::bind(&bind).await?;
            println!(
                "sandbox DIAN at http://{}{}",
                listener.local_addr()?,
                billing::dian::sandbox::SERVICE_PATH
            );
            let token = sandbox_admin_token(admin_token)?;
            let sandbox = billing::dian::sandbox::SandboxDian::new(
                billing::dian::sandbox::SandboxDianConfig::default(),
                billing::processor::sandbox::AdminAuth::from_token(&token),
            );
            sandbox.serve(listener, shutdown_signal()).await?;
            Ok(())
        }
        Command::SandboxWhatsapp {
            bind,
            status_delay_ms,
            admin_token,
        } => {
            let listener = tokio::net::TcpListener::bind(&bind).await?;
            println!(
                "sandbox WhatsApp at http://{}/{}",
                listener.local_addr()?,
                billing::whatsapp::API_VERSION
            );
            let token = sandbox_admin_token(admin_token)?;
            let config = billing::whatsapp::sandbox::SandboxWhatsappConfig {
                status_delay: std::time::Duration::from_millis(status_delay_ms),
                ..Default::default()
            };
            billing::whatsapp::sandbox::serve_standalone(
                listener,
                config,
                billing::processor::sandbox::AdminAuth::from_token(&token),
                shutdown_signal(),
            )
            .await
        }
        Command::Actors { url, kind, limit } => {
            // `--admin-token` / BILLING_ADMIN_TOKEN is the global configuration flag.
            let token = cli
                .config
                .admin_token
                .as_deref()
                .context("pass --admin-token or set BILLING_ADMIN_TOKEN")?;
            let tree =
                harness::operator::actors_tree(&url, token, kind.as_deref(), limit.max(1)).await?;
            print!("{tree}");
            Ok(())
        }
        Command::Bench {
            command:
                BenchCommand::Renewals {
                    subscriptions,
                    dir,
                    standalone_sandbox,
                    invoices,
                    notices,
                    rounds,
                },
        } => {
            let database = harness::bench::BenchDatabase::from_url(
                &cli.config.database_url,
                billing::config::DEFAULT_DATABASE_URL,
                &dir,
            )?;
            let processor = if standalone_sandbox {
                harness::bench::Processor::Standalone(std::env::current_exe()?)
            } else {
                harness::bench::Processor::InProcess
            };
            let n = subscriptions.max(1);
            match (invoices, notices) {
                (_, Some(Notices::Compare)) => {
                    let feature = harness::bench::Feature::Notices;
                    let report =
                        harness::bench::overhead(feature, n, &database, &processor, rounds).await?;
                    println!("{report}");
                }
                (Invoices::On, None) => {
                    println!(
                        "{}",
                        harness::bench::renewals(n, &database, &processor).await?
                    )
                }
                (Invoices::Compare, None) => {
                    let feature = harness::bench::Feature::Invoices;
                    let report =
                        harness::bench::overhead(feature, n, &database, &processor, rounds).await?;
                    println!("{report}");
                }
            }
            Ok(())
        }
        Command::Bench {
            command:
                BenchCommand::Fence {
                    subscriptions,
                    postgres,
                },
        } => {
            let report = harness::bench::fence_overhead(subscriptions.max(1), &postgres).await?;
            println!("{report}");
            Ok(())
        }
        Command::Chaos {
            command: Some(command),
            ..
        } => chaos_cluster(command, &cli.config.database_url).await,
        Command::Chaos {
            command: None,
            runs,
            subscriptions,
            seed,
            fault_rate,
            hang_ups,
            dir,
            timer_lease_ms,
            dian,
            notices,
        } => {
            let database_url = &cli.config.database_url;
            let options = harness::chaos::Options {
                binary: std::env::current_exe()?,
                dir,
                postgres: database_url
                    .starts_with("postgres")
                    .then(|| database_url.clone()),
                subscriptions: subscriptions.max(1),
                seed: seed.unwrap_or_else(|| chrono::Utc::now().timestamp_micros() as u64),
                fault_rate: fault_rate.clamp(0.0, 1.0),
                hang_ups,
                settle_bound: std::time::Duration::from_secs(120),
                timer_lease: std::time::Duration::from_millis(timer_lease_ms),
                dian,
                notices,
            };
            let summary = harness::chaos::run(&options, runs, |index, report| match report {
                Ok(report) => println!("run {}/{runs} {report}", index + 1),
                Err(err) => println!("run {}/{runs} could not run: {err:#}", index + 1),
            })
            .await;
            println!("{summary}");
            if !summary.is_clean() {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Migrate => {
            Store::connect(&cli.config.database_url)
                .await?
                .migrate()
                .await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Account {
            command: AccountCommand::Create { name, sandbox },
        } => {
            let store = Store::connect(&cli.config.database_url).await?;
            store.migrate().await?;
            let spec = AccountSpec {
                name,
                sandbox,
                processor: None,
                fee: None,
                rate_limit_per_minute: None,
                status_rate_limit_per_minute: None,
            };
            let created =
                create_account(&store, spec, chrono::Utc::now().timestamp_millis()).await?;
            let out = AccountOut::new(
                &created.account,
                Some(created.api_key),
                &cli.config.public_url(),
            );
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
    }
}

/// `billing chaos cluster`: scenario runs, or the throughput of one burst per node count.
async fn chaos_cluster(command: ChaosCommand, database_url: &str) -> anyhow::Result<()> {
    let ChaosCommand::Cluster {
        scenarios,
        runs,
        nodes,
        throughput,
        subscriptions,
        seed,
        node_lease_ttl_ms,
        node_lease_renew_ms,
        action_workers,
        dir,
        binary,
    } = command;
    anyhow::ensure!(
        database_url.starts_with("postgres"),
        "several nodes need PostgreSQL: pass --database-url postgres://…"
    );
    let mut options = harness::chaos::cluster::Options {
        binary: match binary {
            Some(binary) => binary,
            None => std::env::current_exe()?,
        },
        dir,
        postgres: database_url.to_owned(),
        nodes: nodes.first().copied().unwrap_or(3).max(1),
        subscriptions: subscriptions.max(1),
        seed: seed.unwrap_or_else(|| chrono::Utc::now().timestamp_micros() as u64),
        lease_ttl: std::time::Duration::from_millis(node_lease_ttl_ms),
        lease_renew: std::time::Duration::from_millis(node_lease_renew_ms),
        action_workers,
        settle_bound: std::time::Duration::from_secs(120),
    };
    if throughput || nodes.len() > 1 {
        let mut clean = true;
        for count in nodes {
            options.nodes = count.max(1);
            match harness::chaos::cluster::throughput(&options, options.nodes).await {
                Ok(report) => {
                    clean &= report.breaches.is_empty();
                    println!("throughput {report}");
                }
                Err(err) => {
                    clean = false;
                    println!("throughput {count} nodes could not run: {err:#}");
                }
            }
        }
        if !clean {
            std::process::exit(1);
        }
        return Ok(());
    }
    let summary =
        harness::chaos::cluster::run(
            &options,
            &scenarios,
            runs,
            |_, index, report| match report {
                Ok(report) => println!("run {} {report}", index + 1),
                Err(err) => println!("run {} could not run: {err:#}", index + 1),
            },
        )
        .await;
    println!("{summary}");
    if !summary.is_clean() {
        std::process::exit(1);
    }
    Ok(())
}

/// A standalone sandbox's admin token: the operator's, refused when weak, or one generated and
/// printed once.
fn sandbox_admin_token(given: Option<String>) -> anyhow::Result<String> {
    if let Some(token) = given {
        billing::secrets::check_admin_token(&token)
            .map_err(|why| anyhow::anyhow!("--admin-token: {why}"))?;
        return Ok(token);
    }
    let token = billing::secrets::random_token("sandbox_admin_", 32);
    println!("  Admin token (shown once): {token}");
    Ok(token)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
