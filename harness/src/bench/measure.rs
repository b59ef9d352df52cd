//! What a run measures of a process from `/proc`: its memory (resident now and at its peak)
//! and its CPU time, user and system.

use std::time::Duration;

/// Resident set size now and at its peak (VmRSS, VmHWM), in MiB.
pub fn rss_mib() -> (f64, f64) {
    rss_of("/proc/self/status")
}

/// `rss_mib` of the process whose `status` file is at `status`.
pub(super) fn rss_of(status: &str) -> (f64, f64) {
    let status = std::fs::read_to_string(status).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time (user + system) this process has used, from `/proc/self/stat` (in clock ticks of
/// 1/100 s, Linux's fixed `USER_HZ`); zero where that file is absent.
pub fn process_cpu() -> Duration {
    cpu_of("/proc/self/stat")
}

/// `process_cpu` of the process whose `stat` file is at `stat`.
pub(super) fn cpu_of(stat: &str) -> Duration {
    let (user, system) = cpu_split(stat);
    user + system
}

/// The user and the system (kernel) CPU time of the process whose `stat` file is at `stat`.
pub(super) fn cpu_split(stat: &str) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(stat).unwrap_or_default();
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis,
    // where utime and stime are the 12th and 13th.
    let mut ticks = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split_whitespace()
        .skip(11)
        .map(|t| t.parse::<u64>().unwrap_or(0));
    let mut next = || Duration::from_millis(ticks.next().unwrap_or(0) * 10);
    let user = next();
    (user, next())
}
