//! What the bench reads about a process: its CPU time and state (`/proc/<pid>/stat`),
//! its memory figures (`/proc/<pid>/status`), this thread's time on a CPU, and the wall
//! clock the proxy's events and the runs are matched on.

use anyhow::{Context, Result};
use std::process::Command;

/// A `kB` field of `/proc/<pid>/status` (`VmHWM:`, `RssAnon:`, ...).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s times.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A process's state letter and CPU seconds so far from `/proc/<pid>/stat`: `utime +
/// stime` (every thread, the dead ones included) plus `cutime + cstime` (the children
/// it has waited for, such as the commands a `sh -c` ran). A zombie (`Z`) still has
/// them, so read just before it is reaped they are the whole run's.
pub fn stat(pid: u32) -> Option<(char, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (in parentheses, and it may hold spaces): state is field 3,
    // utime 14, stime 15, cutime 16, cstime 17.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let mut ticks = 0u64;
    for i in 11..15 {
        ticks += f.get(i)?.parse::<u64>().ok()?;
    }
    Some((state, ticks as f64 / clock_ticks()))
}

/// Minor page faults a process has taken so far (`/proc/<pid>/stat` field 10): pages
/// touched for the first time, each zeroed by the kernel.
pub fn minor_faults(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(7)?.parse().ok()
}

/// CPU seconds a running process has used so far (see [`stat`]).
pub fn cpu_secs(pid: u32) -> Result<f64> {
    stat(pid)
        .map(|(_, s)| s)
        .with_context(|| format!("reading /proc/{pid}/stat"))
}

/// This thread's time on a CPU so far (`/proc/thread-self/schedstat`, first field, ns):
/// unlike `stat`'s ticks, it is exact enough for an in-process row.
pub fn thread_cpu_secs() -> Result<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat")
        .context("reading /proc/thread-self/schedstat")?;
    let ns: u64 = s
        .split_whitespace()
        .next()
        .context("/proc/thread-self/schedstat is empty")?
        .parse()
        .context("parsing /proc/thread-self/schedstat")?;
    Ok(ns as f64 / 1e9)
}

/// Nanoseconds since the Unix epoch: a clock the proxy's process and this one share.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
