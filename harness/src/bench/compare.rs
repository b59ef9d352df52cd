//! What one feature costs a renewal burst, measured in one run: the same burst with the
//! feature off, then on, each in a database of its own, and the primitive limit measured once,
//! after the first burst. Both rates are given as shares of that limit, and the cost as a
//! share of the rate and of CPU per renewal. With `--rounds K` the pair runs K times, its
//! order alternating, and the cost is the median of the K pairs' (this machine's rate moves
//! by more than most features cost between runs minutes apart).
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

/// `rounds` pairs of the burst of `n`, `feature` off and on, each in a database of its own made
/// from `database`. The pairs alternate their order (off then on, on then off, …) so that a
/// machine that slows down or speeds up during the runs weighs on both sides alike.
pub async fn overhead(
    feature: Feature,
    n: usize,
    database: &BenchDatabase,
    processor: &Processor,
    rounds: usize,
) -> anyhow::Result<OverheadReport> {
    let standalone = Standalone::of(processor).await?;
    let mut pairs = Vec::new();
    for round in 0..rounds.max(1) {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut without = None;
        let mut with = None;
        for on in order {
            let tag = format!("{}-{round}", if on { "with" } else { "without" });
            let database = database.another(&tag);
            // The primitive limit once, after the first burst without the feature.
            let primitive = round == 0 && !on;
            let run = renewals_on(
                n,
                &database,
                standalone.as_ref(),
                feature.variant(on),
                primitive,
            );
            match run.await {
                Ok(run) if on => with = Some(run),
                Ok(run) => without = Some(run),
                Err(err) => {
                    Standalone::stop(standalone).await;
                    return Err(err);
                }
            }
        }
        pairs.push(Pair {
            without: without.context("the run without the feature")?,
            with: with.context("the run with the feature")?,
        });
    }
    Standalone::stop(standalone).await;
    Ok(OverheadReport { feature, pairs })
}

/// One round of `overhead`: the burst without the feature and with it.
#[derive(Debug)]
pub struct Pair {
    pub without: RenewalsReport,
    pub with: RenewalsReport,
}

impl Pair {
    /// The rate's loss with the feature on, as a share of the rate without it.
    pub fn cost(&self) -> f64 {
        1.0 - rate(&self.with) / rate(&self.without)
    }

    /// The growth of CPU per renewal with the feature on.
    fn cpu_growth(&self) -> f64 {
        cpu(&self.with) / cpu(&self.without) - 1.0
    }
}

/// The rounds of `overhead`, in the order they ran.
#[derive(Debug)]
pub struct OverheadReport {
    pub feature: Feature,
    pub pairs: Vec<Pair>,
}

/// The renewals per second of a run.
fn rate(run: &RenewalsReport) -> f64 {
    run.settled as f64 / run.settle.as_secs_f64()
}

/// The CPU time per renewal of a run, in µs.
fn cpu(run: &RenewalsReport) -> f64 {
    run.burst_cpu.as_secs_f64() * 1e6 / run.settled.max(1) as f64
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        len if len % 2 == 1 => values[len / 2],
        len => (values[len / 2 - 1] + values[len / 2]) / 2.0,
    }
}

impl OverheadReport {
    /// The median over the rounds of the rate's loss with the feature on.
    pub fn cost(&self) -> f64 {
        median(self.pairs.iter().map(Pair::cost).collect())
    }

    /// The rate's loss with all the rounds' renewals and times pooled: total renewals over
    /// total settle time, with the feature and without.
    pub fn pooled_cost(&self) -> f64 {
        let pooled = |side: fn(&Pair) -> &RenewalsReport| {
            let settled: usize = self.pairs.iter().map(|p| side(p).settled).sum();
            let secs: f64 = self
                .pairs
                .iter()
                .map(|p| side(p).settle.as_secs_f64())
                .sum();
            settled as f64 / secs
        };
        1.0 - pooled(|p| &p.with) / pooled(|p| &p.without)
    }
}

impl std::fmt::Display for OverheadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.feature.name();
        let Some(first) = self.pairs.first() else {
            return write!(f, "no rounds ran");
        };
        let limit = first
            .without
            .primitive
            .map(|p| p.rate(first.without.subscriptions));
        writeln!(
            f,
            "renewal burst: {} subscriptions due at one instant ({}), {name} off and on, {} round(s)",
            first.with.subscriptions,
            first.with.database,
            self.pairs.len()
        )?;
        for (round, pair) in self.pairs.iter().enumerate() {
            for (state, run) in [("off", &pair.without), ("on", &pair.with)] {
                let share = limit.map_or(String::new(), |l| {
                    format!(", {:.1} % of the primitive limit", 100.0 * rate(run) / l)
                });
                writeln!(
                    f,
                    "  round {round} {:<14} {:.0} renewals/s{share} ({} settled in {:.2} s; {:.0} µs CPU per renewal; {name} {})",
                    format!("{name} {state}"),
                    rate(run),
                    run.settled,
                    run.settle.as_secs_f64(),
                    cpu(run),
                    self.feature.written(run),
                )?;
            }
            writeln!(
                f,
                "  round {round} cost {:.1} % of the rate ({:+.1} % CPU per renewal)",
                100.0 * pair.cost(),
                100.0 * pair.cpu_growth()
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
            "  cost of {name}  {:.1} % of the rate, the median of {} round(s) ({:.1} % pooled; {:+.1} % CPU per renewal, median)",
            100.0 * self.cost(),
            self.pairs.len(),
            100.0 * self.pooled_cost(),
            100.0 * median(self.pairs.iter().map(Pair::cpu_growth).collect())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![0.3, -0.1, 0.2]), 0.2);
        assert!((median(vec![0.4, 0.1, 0.2, 0.3]) - 0.25).abs() < 1e-12);
        assert_eq!(median(vec![0.05]), 0.05);
        assert!(median(Vec::new()).is_nan());
    }
}
