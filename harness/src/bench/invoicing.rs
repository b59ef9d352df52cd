//! What invoicing costs a renewal burst (`billing bench renewals --invoices compare`): the same
//! burst without invoices (`Config::benchmark_without_invoices`), then with them, each in a
//! database of its own, in one run; the cost as a share of the rate and of CPU per renewal.
//! CONTRACT §11 asks that it stay within 15 % of the rate.

use super::service::Variant;
use super::{BenchDatabase, Processor, RenewalsReport, Standalone, renewals_on};
use anyhow::Context;

/// What invoicing costs a renewal burst, measured in one run: the burst of `n` without
/// invoices, then with them, each in a database of its own made from `database`.
pub async fn invoicing_overhead(
    n: usize,
    database: &BenchDatabase,
    processor: &Processor,
) -> anyhow::Result<InvoicingReport> {
    let standalone = Standalone::of(processor).await?;
    let mut runs = Vec::new();
    for invoices in [false, true] {
        let variant = Variant {
            invoices,
            ..Variant::SERVICE
        };
        let database = database.another(if invoices { "with" } else { "without" });
        let run = renewals_on(n, &database, standalone.as_ref(), variant, false).await;
        match run {
            Ok(run) => runs.push(run),
            Err(err) => {
                Standalone::stop(standalone).await;
                return Err(err);
            }
        }
    }
    Standalone::stop(standalone).await;
    let with = runs.pop().context("the run with invoices")?;
    let without = runs.pop().context("the run without invoices")?;
    Ok(InvoicingReport { without, with })
}

/// The two runs of `invoicing_overhead`.
#[derive(Debug)]
pub struct InvoicingReport {
    pub without: RenewalsReport,
    pub with: RenewalsReport,
}

impl std::fmt::Display for InvoicingReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = |r: &RenewalsReport| r.settled as f64 / r.settle.as_secs_f64();
        let cpu = |r: &RenewalsReport| r.burst_cpu.as_secs_f64() * 1e6 / r.settled.max(1) as f64;
        let (without, with) = (rate(&self.without), rate(&self.with));
        writeln!(
            f,
            "renewal burst: {} subscriptions due at one instant ({}), without and with invoices",
            self.with.subscriptions, self.with.database
        )?;
        for (name, run) in [
            ("without invoices", &self.without),
            ("with invoices", &self.with),
        ] {
            writeln!(
                f,
                "  {name:<18} {:.0} renewals/s ({} settled in {:.2} s; {:.0} µs CPU per renewal; invoices {})",
                rate(run),
                run.settled,
                run.settle.as_secs_f64(),
                cpu(run),
                run.invoiced.map_or("none".to_owned(), |n| n.to_string()),
            )?;
        }
        write!(
            f,
            "  cost of invoicing  {:.1} % of the rate ({:+.1} % CPU per renewal)",
            100.0 * (1.0 - with / without),
            100.0 * (cpu(&self.with) / cpu(&self.without) - 1.0)
        )
    }
}
