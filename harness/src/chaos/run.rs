//! One chaos run, start to finish (see `crate::chaos` for the story). Everything random in it
//! (which subscriptions decline, the faults' generators, when the server is killed, when each
//! client hangs up) comes from the run's seed; what stays nondeterministic is timing: which
//! request arrives first at the proxy, so which one draws which fault.

use super::checks::{Expected, check};
use super::dian::{self, DianPeer, DianTally};
use super::processes::{FreshDatabase, Sandbox, Server, ServerSpec, free_port};
use super::proxy::{Fault, Proxy};
use super::shop::{APPROVING_CARD, DECLINING_CARD, Holder, Retried, Shop};
use super::{Options, RunReport};
use crate::audit::queries::{Breach, DUE_RENEWAL_NOT_DONE};
use anyhow::Context;
use billing::store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ADMIN_TOKEN: &str = "chaos-admin-token-0123456789";
/// Short, so that a fault that holds an answer makes the outcome unknown quickly.
const PROCESSOR_TIMEOUT: Duration = Duration::from_millis(500);
const RECONCILE_INTERVAL: Duration = Duration::from_millis(200);
const RECHECK_BASE: Duration = Duration::from_millis(300);
/// How long the sandbox keeps a transaction PENDING.
const SETTLE_DELAY: Duration = Duration::from_millis(20);
/// One subscription in this many gets a card that declines before the burst.
const DECLINE_ONE_IN: u32 = 5;
/// Subscriptions created at once during setup.
const SETUP_CONCURRENCY: usize = 8;
/// Bounds of the waits of a run; reaching one is reported, never slept through.
const SETUP_BOUND: Duration = Duration::from_secs(60);
const BURST_BOUND: Duration = Duration::from_secs(120);
const RETRY_BOUND: Duration = Duration::from_secs(60);
const MONTH_SECONDS: i64 = 31 * 86_400;

/// The processor-side faults, `rate` of the requests in all, in equal shares.
fn processor_faults(rate: f64) -> Vec<(Fault, f64)> {
    let past_timeout = PROCESSOR_TIMEOUT + Duration::from_millis(300);
    let faults = [
        Fault::ForwardThenDrop,
        Fault::ForwardThenDelay(past_timeout),
        Fault::ForwardThenAnswer(500),
        Fault::DelayThenForward(past_timeout),
        Fault::Answer(
            429,
            json!({"error": {"type": "RATE_LIMIT_ERROR", "reason": "Demasiadas solicitudes"}}),
        ),
        Fault::Answer(500, json!({"error": {"type": "INTERNAL_ERROR"}})),
        Fault::Reset,
    ];
    let share = rate / faults.len() as f64;
    faults.into_iter().map(|f| (f, share)).collect()
}

/// The faults of the processor's events on their way to our ingress: duplicated, reordered,
/// answered after we acted on them but lost, refused before we saw them.
fn event_faults(rate: f64) -> Vec<(Fault, f64)> {
    let faults = [
        Fault::ForwardTwice,
        Fault::DelayThenForward(Duration::from_millis(300)),
        Fault::ForwardThenDrop,
        Fault::Answer(500, json!({})),
    ];
    let share = rate / faults.len() as f64;
    faults.into_iter().map(|f| (f, share)).collect()
}

pub(super) async fn run_once(options: &Options, index: usize) -> anyhow::Result<RunReport> {
    let seed = options.seed.wrapping_add(index as u64);
    let started = Instant::now();
    let database = options.databases().fresh(seed).await?;
    // The server's log goes here whatever the database is (a PostgreSQL run has no files).
    std::fs::create_dir_all(&options.dir)?;
    let log = options.dir.join(format!("chaos-{seed:016x}.log"));
    // The shop registers its merchant with the server's admin token (`Shop::open`).
    let sandbox = Sandbox::start(&options.binary, SETTLE_DELAY, ADMIN_TOKEN).await?;
    let dian = match options.dian {
        true => Some(DianPeer::start(&options.binary, ADMIN_TOKEN).await?),
        false => None,
    };
    let outcome = with_processes(options, seed, &database, &sandbox, dian.as_ref(), &log).await;
    sandbox.stop().await;
    if let Some(dian) = dian {
        dian.stop().await;
    }
    let mut report = outcome.with_context(|| {
        format!(
            "seed {seed:#018x}; kept {}; server log {}",
            database.location,
            log.display()
        )
    })?;
    report.elapsed = started.elapsed();
    if report.breaches.is_empty() {
        database.remove().await?;
        let _ = std::fs::remove_file(&log);
    } else {
        report.kept = Some(format!(
            "{}; server log {}",
            database.location,
            log.display()
        ));
    }
    Ok(report)
}

/// The run proper, once its database and sandbox exist: the server, the proxies, setup, the
/// burst and its kill, the hang-ups, the settling and the checks.
async fn with_processes(
    options: &Options,
    seed: u64,
    database: &FreshDatabase,
    sandbox: &Sandbox,
    dian: Option<&DianPeer>,
    log: &std::path::Path,
) -> anyhow::Result<RunReport> {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let processor_proxy = Proxy::start(&sandbox.base).await?;
    let dian_proxy = match dian {
        Some(peer) => Some(Proxy::start(&peer.root).await?),
        None => None,
    };
    let spec = ServerSpec {
        binary: options.binary.clone(),
        database_url: database.url.clone(),
        port: free_port()?,
        admin_token: ADMIN_TOKEN.to_owned(),
        log: log.to_owned(),
        processor_timeout: PROCESSOR_TIMEOUT,
        reconcile_interval: RECONCILE_INTERVAL,
        recheck_base: RECHECK_BASE,
        timer_lease: options.timer_lease,
        dian: dian_proxy
            .as_ref()
            .map(|proxy| format!("{}{}", proxy.base, billing::dian::sandbox::SERVICE_PATH)),
    };
    let events_proxy = Proxy::start(&format!("http://127.0.0.1:{}", spec.port)).await?;
    let server = Server::start(&spec, &http).await?;
    let shop = Arc::new(
        Shop::open(
            &http,
            &server.base,
            ADMIN_TOKEN,
            &processor_proxy.base,
            &sandbox.base,
            &events_proxy.base,
        )
        .await?,
    );
    let store = Store::connect(&database.url).await?;
    let mail = match options.notices {
        true => {
            let mail = super::notices::Mail::start().await?;
            super::notices::turn_on(&shop, &mail).await?;
            Some(mail)
        }
        false => None,
    };
    let filing = match dian {
        Some(peer) => Some(dian::turn_on(&shop, peer, &http, &options.dir).await?),
        None => None,
    };

    let (mut expected, hang_up_holders) = setup(&shop, options, &mut rng).await?;
    wait_settled(&store, &shop, options.dian, SETUP_BOUND).await?;
    // DIAN already holds the burst's third invoice number for another document.
    let taken = match dian {
        Some(peer) => Some(dian::take_number(&store, &shop.account, peer, &http, 3).await?),
        None => None,
    };

    // The burst: a month passes with faults on. The server is killed at a seeded point of the
    // burst's progress, where each renewal counts once when its charge is recorded and once
    // when its outcome is applied (the scheduler records dozens at once, so counting records
    // alone would nearly always kill after the last), and started again on the same database.
    let baseline = crate::Raw(&store).count_charges(&shop.account).await?;
    processor_proxy.randomly(rng.random(), processor_faults(options.fault_rate));
    events_proxy.randomly(rng.random(), event_faults(options.fault_rate));
    if let Some(proxy) = &dian_proxy {
        proxy.randomly(
            rng.random(),
            dian::faults(options.fault_rate, PROCESSOR_TIMEOUT),
        );
    }
    if let Some(mail) = &mail {
        let faults = super::smtp::faults(options.fault_rate, PROCESSOR_TIMEOUT);
        mail.proxy.randomly(rng.random(), faults);
    }
    let kill_at = rng.random_range(1..=2 * options.subscriptions.max(1)) as u64;
    let advance = {
        let shop = Arc::clone(&shop);
        tokio::spawn(async move { shop.advance_clock(MONTH_SECONDS).await })
    };
    let deadline = tokio::time::Instant::now() + BURST_BOUND;
    let (mut renewals, mut pending_at_kill);
    loop {
        renewals = crate::Raw(&store).count_charges(&shop.account).await? - baseline;
        pending_at_kill = store.count_pending_charges(&shop.account).await?;
        let progress = 2 * renewals - pending_at_kill.min(renewals);
        if progress >= kill_at || advance.is_finished() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut dian_tally = DianTally::default();
    if options.dian {
        dian_tally.in_flight_at_kill = crate::Raw(&store).dian_in_flight(&shop.account).await?;
    }
    server.kill().await?;
    advance.abort();
    let server = Server::start(&spec, &http).await?;
    // Faults stay on until every subscription's renewal is recorded: the restarted server's
    // catch-up (timers that fell due while down, charges left pending) meets them too.
    let renewing = tokio::time::Instant::now() + BURST_BOUND;
    while crate::Raw(&store).count_charges(&shop.account).await? - baseline
        < options.subscriptions as u64
        && tokio::time::Instant::now() < renewing
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The software's PIN changes with documents numbered, and some signed, under the old one
    // still to file; DIAN's faults go on after it.
    if let (Some(peer), Some(proxy), Some(filing)) = (dian, &dian_proxy, &filing) {
        let held = PROCESSOR_TIMEOUT + Duration::from_millis(300);
        dian::change_pin(&shop, peer, proxy, &http, filing, held).await?;
        proxy.randomly(
            rng.random(),
            dian::faults(options.fault_rate, PROCESSOR_TIMEOUT),
        );
    }

    // Clients that hang up and retry under the same key, faults still on.
    let (hung_up, locked) =
        hang_ups(&shop, &hang_up_holders, seed, &mut rng, &mut expected).await?;

    // Faults off; everything must settle on its own within the bound.
    processor_proxy.clear();
    events_proxy.clear();
    if let Some(proxy) = &dian_proxy {
        proxy.clear();
    }
    if let Some(mail) = &mail {
        mail.proxy.clear();
    }
    let settled = wait_settled(&store, &shop, options.dian, options.settle_bound).await;
    let (mut breaches, tally) = check(&store, &shop, &processor_proxy, &expected).await?;
    breaches.extend(locked);
    if let (Some(peer), Some(proxy)) = (dian, &dian_proxy) {
        let taken = taken.as_deref().unwrap_or_default();
        breaches
            .extend(dian::judge(&store, &shop.account, peer, &http, taken, &mut dian_tally).await?);
        dian_tally.faults = proxy
            .all_seen()
            .iter()
            .filter(|s| s.fault.is_some())
            .count();
    }
    if let Err(err) = settled {
        breaches.push(Breach {
            invariant: "work left undone after the faults stopped",
            detail: format!("{err:#}"),
        });
    }
    let mut notice_tally = None;
    if let Some(mail) = &mail {
        if let Err(err) = super::notices::settle(&store, &shop, options.settle_bound).await {
            breaches.push(Breach {
                invariant: "notices left undone after the faults stopped",
                detail: format!("{err:#}"),
            });
        }
        let (found, tally) = super::notices::judge(&store, &shop, mail, options.dian).await?;
        breaches.extend(found);
        notice_tally = Some(tally);
    }
    server.kill().await?;
    let mut faults = std::collections::BTreeMap::new();
    for seen in processor_proxy.all_seen() {
        if let Some(fault) = seen.fault {
            *faults.entry(fault.name()).or_insert(0) += 1;
        }
    }
    let event_faults = events_proxy
        .all_seen()
        .iter()
        .filter(|s| s.fault.is_some())
        .count();
    Ok(RunReport {
        seed,
        subscriptions: options.subscriptions,
        tally,
        faults,
        event_faults,
        killed_after: renewals,
        pending_at_kill,
        hang_ups: hung_up,
        dian: options.dian.then_some(dian_tally),
        notices: notice_tally,
        breaches,
        elapsed: Duration::ZERO,
        kept: None,
    })
}

/// Setup, without faults: M subscriptions charged for their first period, one in
/// `DECLINE_ONE_IN` then moved to a card that declines, and customers (with approving cards)
/// for the hang-ups; what the checks expect of them.
async fn setup(
    shop: &Arc<Shop>,
    options: &Options,
    rng: &mut StdRng,
) -> anyhow::Result<(Expected, Vec<Holder>)> {
    let mut expected = Expected::default();
    let customer = shop.customer(0).await?;
    let approving = shop.card(&customer, APPROVING_CARD).await?;
    let declining = shop.card(&customer, DECLINING_CARD).await?;
    expected.approving.insert(approving.method.clone());
    expected.declining.insert(declining.method.clone());
    let declines: Vec<bool> = (0..options.subscriptions)
        .map(|_| rng.random_ratio(1, DECLINE_ONE_IN))
        .collect();
    for chunk in declines.chunks(SETUP_CONCURRENCY) {
        let mut tasks = tokio::task::JoinSet::new();
        for &decline in chunk {
            let (shop, approving, declining) = (
                Arc::clone(shop),
                approving.clone(),
                declining.method.clone(),
            );
            tasks.spawn(async move {
                let id = shop.subscribe(&approving).await?;
                if decline {
                    shop.switch_card(&id, &declining).await?;
                }
                anyhow::Ok(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
    }
    let mut hang_up_holders: Vec<Holder> = Vec::new();
    for n in 0..options.hang_ups {
        let customer = shop.customer(n + 1).await?;
        let holder = shop.card(&customer, APPROVING_CARD).await?;
        expected.approving.insert(holder.method.clone());
        hang_up_holders.push(holder);
    }
    Ok((expected, hang_up_holders))
}

/// Creates under an Idempotency-Key whose first client hangs up, then retries: how many really
/// left before their answer, and a breach for each key that stayed locked. A create takes tens
/// of milliseconds (its first charge's outcome), longer when that charge meets a fault, so most
/// of them do leave.
async fn hang_ups(
    shop: &Shop,
    holders: &[Holder],
    seed: u64,
    rng: &mut StdRng,
    expected: &mut Expected,
) -> anyhow::Result<(usize, Vec<Breach>)> {
    let (mut hung_up, mut breaches) = (0, Vec::new());
    for (n, holder) in holders.iter().enumerate() {
        let key = format!("chaos-{seed:016x}-{n}");
        let hang_up = Duration::from_millis(rng.random_range(0..60));
        match shop
            .create_hanging_up(holder, &key, hang_up, RETRY_BOUND)
            .await?
        {
            Retried::Answered { id, hung_up: left } => {
                hung_up += usize::from(left);
                expected.idempotent.push((holder.customer.clone(), id));
            }
            Retried::Locked { hung_up: left } => {
                hung_up += usize::from(left);
                breaches.push(Breach {
                    invariant: "an Idempotency-Key stayed locked after its client hung up",
                    detail: format!(
                        "retries under {key} (customer {}) answered 409 for {RETRY_BOUND:?}",
                        holder.customer
                    ),
                });
            }
        }
    }
    Ok((hung_up, breaches))
}

/// Waits until no charge of the shop is pending, no due renewal is left undone and, with
/// `dian`, no electronic document is unfinished.
async fn wait_settled(
    store: &Store,
    shop: &Shop,
    dian: bool,
    bound: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let pending = store.count_pending_charges(&shop.account).await?;
        let filing = match dian {
            true => crate::Raw(store).dian_unfinished(&shop.account).await?,
            false => 0,
        };
        let undone = crate::Raw(store)
            .audit(chrono::Utc::now().timestamp_millis())
            .await?
            .into_iter()
            .filter(|b| b.invariant == DUE_RENEWAL_NOT_DONE)
            .count();
        if pending == 0 && undone == 0 && filing == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{pending} charges still pending, {undone} due renewals undone and {filing} \
             electronic documents unfinished after {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
