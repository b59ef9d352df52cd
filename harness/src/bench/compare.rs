//! What one feature costs a renewal burst, measured in one run: the same burst with the
//! feature off, then on, each in a database of its own, and the primitive limit measured once,
//! after the first burst. Both rates are given as shares of that limit, and the cost as a
//! share of the rate and of CPU per renewal.
//! - `billing bench renewals --invoices compare`: without invoices
//!   (`Config::benchmark_without_invoices`), then with them; CONTRACT §11 asks that the cost
//!   stay within 15 % of the rate.
//! - `billing bench renewals --notices compare`: the invoiced burst with the account's notices
//!   off, then with every kind on by e-mail to a real SMTP server on loopback (each renewal's
//!   receipt written in its transaction, then sent by the notices' worker while the burst goes
//!   on); issue 47 asks for a share within 5 % of the burst without notices.

use super::service::Variant;
use super::{BenchDatabase, Processor, RenewalsReport, Standalone, renewals_on};
use anyhow::Context;

/// The feature a comparison turns on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    Invoices,
    Notices,
}

impl Feature {
    fn name(self) -> &'static str {
        match self {
            Feature::Invoices => "invoices",
            Feature::Notices => "notices",
        }
    }

    fn variant(self, on: bool) -> Variant {
        match self {
            Feature::Invoices => Variant {
                invoices: on,
                ..Variant::SERVICE
            },
            Feature::Notices => Variant {
                notices: on,
                ..Variant::SERVICE
            },
        }
    }

    /// What the run wrote of the feature's own rows, in words.
    fn written(self, run: &RenewalsReport) -> String {
        match self {
            Feature::Invoices => run.invoiced.map_or("none".to_owned(), |n| n.to_string()),
            Feature::Notices => run
                .noticed
                .map_or("none".to_owned(), |(written, received)| {
                    format!("{written} written, {received} received by then")
                }),
        }
    }
}

/// The burst of `n` with `feature` off, then on, each in a database of its own made from
/// `database`.
pub async fn overhead(
    feature: Feature,
    n: usize,
    database: &BenchDatabase,
    processor: &Processor,
) -> anyhow::Result<OverheadReport> {
    let standalone = Standalone::of(processor).await?;
    let mut runs = Vec::new();
    for on in [false, true] {
        let database = database.another(if on { "with" } else { "without" });
        let run = renewals_on(n, &database, standalone.as_ref(), feature.variant(on), !on).await;
        match run {
            Ok(run) => runs.push(run),
            Err(err) => {
                Standalone::stop(standalone).await;
                return Err(err);
            }
        }
    }
    Standalone::stop(standalone).await;
    let with = runs.pop().context("the run with the feature")?;
    let without = runs.pop().context("the run without the feature")?;
    Ok(OverheadReport {
        feature,
        without,
        with,
    })
}

/// The two runs of `overhead`.
#[derive(Debug)]
pub struct OverheadReport {
    pub feature: Feature,
    pub without: RenewalsReport,
    pub with: RenewalsReport,
}

impl OverheadReport {
    /// The renewals per second of a run.
    fn rate(run: &RenewalsReport) -> f64 {
        run.settled as f64 / run.settle.as_secs_f64()
    }

    /// The rate's loss with the feature on, as a share of the rate without it.
    pub fn cost(&self) -> f64 {
        1.0 - Self::rate(&self.with) / Self::rate(&self.without)
    }
}

impl std::fmt::Display for OverheadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = Self::rate;
        let cpu = |r: &RenewalsReport| r.burst_cpu.as_secs_f64() * 1e6 / r.settled.max(1) as f64;
        let name = self.feature.name();
        let limit = self
            .without
            .primitive
            .map(|p| p.rate(self.without.subscriptions));
        writeln!(
            f,
            "renewal burst: {} subscriptions due at one instant ({}), {name} off and on",
            self.with.subscriptions, self.with.database
        )?;
        for (state, run) in [("off", &self.without), ("on", &self.with)] {
            let share = limit.map_or(String::new(), |l| {
                format!(", {:.1} % of the primitive limit", 100.0 * rate(run) / l)
            });
            writeln!(
                f,
                "  {:<14} {:.0} renewals/s{share} ({} settled in {:.2} s; {:.0} µs CPU per renewal; {name} {})",
                format!("{name} {state}"),
                rate(run),
                run.settled,
                run.settle.as_secs_f64(),
                cpu(run),
                self.feature.written(run),
            )?;
        }
        if let Some(limit) = limit {
            writeln!(
                f,
                "  primitive limit {limit:.0}/s (measured after the first burst)"
            )?;
        }
        write!(
            f,
            "  cost of {name}  {:.1} % of the rate ({:+.1} % CPU per renewal)",
            100.0 * self.cost(),
            100.0 * (cpu(&self.with) / cpu(&self.without) - 1.0)
        )
    }
}
