//! How a renewal burst's report reads (`RenewalsReport`'s `Display`).

use super::RenewalsReport;
use std::time::Duration;

impl std::fmt::Display for RenewalsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.subscriptions as f64;
        let rate = self.settled as f64 / self.settle.as_secs_f64();
        writeln!(
            f,
            "renewal burst: {} subscriptions due at one instant ({})",
            self.subscriptions, self.database
        )?;
        writeln!(
            f,
            "  seeded in                 {:.1} s",
            self.seed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  restart to ready          {:.2} s (N held, every due timer armed)",
            self.restart_to_ready.as_secs_f64()
        )?;
        writeln!(
            f,
            "  RSS held after restart    {:.1} MiB (baseline before seeding {:.1} MiB)",
            self.rss_held_mib, self.rss_baseline_mib
        )?;
        writeln!(
            f,
            "  RSS per subscription      {:.0} bytes (held − baseline)",
            (self.rss_held_mib - self.rss_baseline_mib).max(0.0) * 1_048_576.0 / n
        )?;
        writeln!(
            f,
            "  settled                   {} of {}",
            self.settled, self.subscriptions
        )?;
        writeln!(
            f,
            "  settle time               {:.2} s",
            self.settle.as_secs_f64()
        )?;
        writeln!(f, "  renewals/s                {rate:.0}")?;
        match self.invoiced {
            Some(invoiced) => writeln!(
                f,
                "  invoices                  {invoiced} of {} (one per approved renewal)",
                self.settled
            )?,
            None => writeln!(
                f,
                "  invoices                  none (a run without invoicing)"
            )?,
        }
        if let Some((written, received)) = self.noticed {
            writeln!(
                f,
                "  notices                   {written} written; {received} at the SMTP sink when the burst settled"
            )?;
        }
        let per_renewal = |cpu: Duration| cpu.as_secs_f64() * 1e6 / self.settled.max(1) as f64;
        let share = |cpu: Duration| 100.0 * cpu.as_secs_f64() / self.cpu_window.as_secs_f64();
        let whose = if self.sandbox.is_some() {
            "the service's process"
        } else {
            "process"
        };
        writeln!(
            f,
            "  CPU per renewal           {:.0} µs ({whose} CPU {:.1} s over the burst, {:.0} % of 1 core)",
            per_renewal(self.burst_cpu),
            self.burst_cpu.as_secs_f64(),
            share(self.burst_cpu)
        )?;
        writeln!(
            f,
            "  kernel share of its CPU   {:.1} % (system time {:.1} s)",
            100.0 * self.burst_kernel_cpu.as_secs_f64() / self.burst_cpu.as_secs_f64().max(1e-9),
            self.burst_kernel_cpu.as_secs_f64()
        )?;
        if let Some((cpu, _)) = self.sandbox {
            writeln!(
                f,
                "  sandbox CPU per renewal   {:.0} µs (its own process: {:.1} s, {:.0} % of 1 core)",
                per_renewal(cpu),
                cpu.as_secs_f64(),
                share(cpu)
            )?;
        }
        writeln!(
            f,
            "  peak RSS                  {:.1} MiB",
            self.peak_rss_mib
        )?;
        if let Some((_, peak)) = self.sandbox {
            writeln!(f, "  sandbox peak RSS          {peak:.1} MiB")?;
        }
        writeln!(
            f,
            "  rows added by the burst   {}",
            tables(&self.burst_rows)
        )?;
        let Some(primitive) = self.primitive else {
            return Ok(());
        };
        if let Some(rows) = &self.primitive_rows {
            let same = rows == &self.burst_rows;
            writeln!(
                f,
                "  rows added by the limit   {} ({})",
                tables(rows),
                if same {
                    "the same, table by table"
                } else {
                    "NOT THE SAME: the limit is not for the same work"
                }
            )?;
        }
        let limit = primitive.rate(self.subscriptions);
        writeln!(
            f,
            "  primitive limit           {limit:.0}/s: processor round trips {:.2} s ({:.0}/s), rows as multi-row statements {:.2} s ({:.0}/s)",
            primitive.round_trips.as_secs_f64(),
            n / primitive.round_trips.as_secs_f64(),
            primitive.rows.as_secs_f64(),
            n / primitive.rows.as_secs_f64()
        )?;
        write!(
            f,
            "  renewals / limit          {:.0} %",
            100.0 * rate / limit
        )
    }
}

/// Rows per table, in words: `charge_attempts 100000, events 200000, …`.
fn tables(rows: &std::collections::BTreeMap<String, i64>) -> String {
    rows.iter()
        .map(|(table, n)| format!("{table} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
