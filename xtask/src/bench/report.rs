//! The tables and `docs/BENCHMARKS.md`: the loopback table (the file's head, above its
//! first `## `) and the `--wan` block (between its markers), both written by one splice.

use super::measure::{Run, Sample};
use super::opts::Opts;
use anyhow::{Result, bail};
use std::ops::Range;
use std::path::Path;

/// One row of the loopback table.
pub struct Row {
    pub case: String,
    pub bytes: u64,
    pub ours: Sample,
    pub reference: Option<Sample>,
    pub target: &'static str,
    /// Server CPU seconds per GiB (`-` where no server is measured).
    pub server_cpu: String,
    /// The peak RSS bound (MiB) `xet` is held to in this row: the bench fails above it.
    pub bound_mib: Option<u64>,
}

impl Row {
    /// A row of `xet` alone.
    pub fn xet(case: String, bytes: u64, ours: Sample) -> Row {
        Row {
            case,
            bytes,
            ours,
            reference: None,
            target: "",
            server_cpu: "-".into(),
            bound_mib: None,
        }
    }

    /// `xet` next to the reference, with the row's `target`.
    pub fn vs(
        case: String,
        bytes: u64,
        ours: Sample,
        reference: Sample,
        target: &'static str,
    ) -> Row {
        Row {
            reference: Some(reference),
            target,
            ..Row::xet(case, bytes, ours)
        }
    }

    pub fn server_cpu(self, server_cpu: String) -> Row {
        Row { server_cpu, ..self }
    }

    pub fn bound(self, mib: u64) -> Row {
        Row {
            bound_mib: Some(mib),
            ..self
        }
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// A server's CPU seconds per GiB over the runs, as the table shows it: the range, or
/// `-` where none was measured.
pub fn cpu_range(runs: &[Run], bytes: u64) -> String {
    let v: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.server_cpu)
        .map(|c| c / gib(bytes))
        .collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    match v.len() {
        0 => "-".into(),
        _ if format!("{lo:.2}") == format!("{hi:.2}") => format!("{lo:.2}"),
        _ => format!("{lo:.2}-{hi:.2}"),
    }
}

fn mbps(bytes: u64, s: &Sample) -> f64 {
    bytes as f64 / 1e6 / s.secs
}

/// The loopback table. CPU seconds are per GiB moved (every sample has its CPU time;
/// under one clock tick it is 0).
pub fn table(rows: &[Row]) -> String {
    let mut table = String::new();
    table.push_str("| case | xet MB/s | xet peak RSS | reference MB/s | reference peak RSS | xet / reference | target | xet CPU s/GiB | reference CPU s/GiB | CPU xet / reference | server CPU s/GiB |\n");
    table.push_str("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|\n");
    let rss = |s: &Sample| {
        if s.peak_rss_kib == 0 {
            "-".to_string()
        } else {
            format!("{} MiB", s.peak_rss_kib / 1024)
        }
    };
    let cpu = |bytes, s: &Sample| format!("{:.2}", s.cpu_secs / gib(bytes));
    for r in rows {
        let ours_rss = match r.bound_mib {
            Some(b) if r.ours.peak_rss_kib / 1024 > b => {
                format!("**{} (bound {b} MiB: exceeded)**", rss(&r.ours))
            }
            Some(b) => format!("{} (bound {b} MiB)", rss(&r.ours)),
            None => rss(&r.ours),
        };
        let (rm, rr, ratio, rcpu, cpu_ratio) = match &r.reference {
            Some(rf) => (
                format!("{:.0}", mbps(r.bytes, rf)),
                rss(rf),
                format!("{:.2}x", rf.secs / r.ours.secs),
                cpu(r.bytes, rf),
                format!("{:.2}x", r.ours.cpu_secs / rf.cpu_secs),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
        };
        table.push_str(&format!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.case,
            mbps(r.bytes, &r.ours),
            ours_rss,
            rm,
            rr,
            ratio,
            r.target,
            cpu(r.bytes, &r.ours),
            rcpu,
            cpu_ratio,
            r.server_cpu
        ));
    }
    table
}

/// An error naming every row whose peak RSS is above its bound.
pub fn check_bounds(rows: &[Row]) -> Result<()> {
    let exceeded: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let (b, mib) = (r.bound_mib?, r.ours.peak_rss_kib / 1024);
            (mib > b).then(|| format!("{}: peak RSS {mib} MiB, bound {b} MiB", r.case))
        })
        .collect();
    if !exceeded.is_empty() {
        bail!(
            "peak RSS above its bound in {} row(s):\n{}",
            exceeded.len(),
            exceeded.join("\n")
        );
    }
    Ok(())
}

/// The loopback table, with what produced it, in place of everything above
/// `docs/BENCHMARKS.md`'s first `## ` heading; the hand-written sections are kept.
pub fn write_loopback(root: &Path, o: &Opts, size_mib: u64, table: &str) -> Result<()> {
    let doc = format!(
        "# Benchmarks\n\nProduced by `cargo xtask bench --size-mib {}` on {} with the reference `hf_xet {}` in the same run. \
Input: pseudo-random data (incompressible, worst case for dedup), read into the page cache before every run (as are the stores a download reads). Best of {} runs, xet's and the reference's taken in turn (the order rotating each round, `sync` before each run); peak RSS is the \
process's VmHWM. CPU s/GiB is the client process's user + system time (all threads, and the children it waited for) per GiB moved, the least over the runs; \
\"CPU xet / reference\" is xet's over the reference's (the goal for upload and download: <= 0.5x). Server CPU is `xet serve`'s user + system time per GiB during each measured run, the range over the runs. \
Micro rows are in-process single measurements over 256 MiB, CPU the measuring threads' time on a CPU. Hub rows: the reference is the `hf` CLI \
(huggingface_hub {}). A row with a bound next to its peak RSS fails the bench when above it.\n\n{table}",
        size_mib,
        machine(),
        crate::reference::HF_XET_VERSION,
        o.runs,
        xet_testdata::hub::HUGGINGFACE_HUB_VERSION
    );
    splice(root, Place::Head, doc.trim_end().to_string() + "\n")
}

/// One line of the `--wan` table.
pub struct WanRow {
    pub link: String,
    pub case: String,
    pub xet: String,
    pub reference: String,
    pub ratio: String,
    pub link_note: String,
    pub cpu: String,
    pub server_cpu: String,
}

impl WanRow {
    /// The row as the table shows it (also printed as each row is measured).
    pub fn line(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            self.link,
            self.case,
            self.xet,
            self.reference,
            self.ratio,
            self.link_note,
            self.cpu,
            self.server_cpu
        )
    }
}

/// The `--wan` table: each profile's link check, then the rows.
pub fn wan_table(checks: &[String], rows: &[WanRow]) -> String {
    let mut t = String::from(
        "Link check (probe client to probe server through the same link and proxy):\n\n",
    );
    for c in checks {
        t.push_str(&format!("- {c}\n"));
    }
    t.push_str(
        "\n| link | case | xet | reference | xet / reference | bytes on the link alone | client CPU s/GiB (xet / ref) | server CPU s/GiB (xet / ref) |\n\
|---|---|---|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        t.push_str(&r.line());
        t.push('\n');
    }
    t
}

const BEGIN: &str = "<!-- bench --wan: begin (generated by `cargo xtask bench --wan`) -->";
const END: &str = "<!-- bench --wan: end -->";

/// The `--wan` table, with what produced it, between its markers in
/// `docs/BENCHMARKS.md`; where they are missing, the section is appended after `intro`
/// (its hand-kept part, written once). `window_flag`: a `--window-kib` other than the
/// default.
pub fn write_wan(
    root: &Path,
    o: &Opts,
    window_flag: bool,
    table: &str,
    intro: impl FnOnce() -> String,
) -> Result<()> {
    let block = format!(
        "{BEGIN}\nProduced by `cargo xtask bench --wan{}{} --runs {}`{} on {} with the reference `hf_xet {}` \
(the Hub row: `hf` of huggingface_hub {}); best of {} runs per client, the clients taken in turn.\n\n{}\n{END}",
        o.size_mib
            .map_or(String::new(), |m| format!(" --size-mib {m}")),
        if window_flag {
            format!(" --window-kib {}", o.window >> 10)
        } else {
            String::new()
        },
        o.runs,
        if o.xet.is_some() {
            " (with `--xet`: a given xet binary)"
        } else {
            ""
        },
        machine(),
        crate::reference::HF_XET_VERSION,
        xet_testdata::hub::HUGGINGFACE_HUB_VERSION,
        o.runs,
        table.trim_end()
    );
    splice(root, Place::Wan(Box::new(intro)), block)
}

/// Where a generated block goes in `docs/BENCHMARKS.md`.
enum Place<'a> {
    /// Everything above the first `## ` heading. `cargo xtask bench` keeps the rest, so
    /// the `--wan` section, further down, survives it.
    Head,
    /// Between the `--wan` markers, inclusive; appended after the section's intro where
    /// they are missing.
    Wan(Box<dyn FnOnce() -> String + 'a>),
}

/// Writes `block` in its place, the rest of the file kept as it is.
fn splice(root: &Path, place: Place<'_>, block: String) -> Result<()> {
    let path = root.join("docs/BENCHMARKS.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let (span, block): (Range<usize>, String) = match place {
        Place::Head => (0..old.find("\n## ").unwrap_or(old.len()), block),
        Place::Wan(intro) => match (old.find(BEGIN), old.find(END)) {
            (Some(b), Some(e)) if b < e => (b..e + END.len(), block),
            _ => (
                old.trim_end().len()..old.len(),
                format!("\n\n{}\n\n{block}", intro()),
            ),
        },
    };
    let new = format!("{}{block}{}", &old[..span.start], &old[span.end..]);
    std::fs::write(&path, new.trim_end().to_string() + "\n")?;
    Ok(())
}

/// Replaces the section of `docs/BENCHMARKS.md` that starts with the heading `head` (up
/// to the next `## `) with `section`, which starts with that heading; a missing section
/// is added at the end.
pub fn write_section(root: &Path, head: &str, section: &str) -> Result<()> {
    let path = root.join("docs/BENCHMARKS.md");
    let doc = std::fs::read_to_string(&path)?;
    let section = format!("{}\n", section.trim_end());
    let new = match doc.find(head) {
        Some(i) => {
            let rest = &doc[i + head.len()..];
            let end = rest
                .find("\n## ")
                .map_or(doc.len(), |j| i + head.len() + j + 1);
            let sep = if end < doc.len() { "\n" } else { "" };
            format!("{}{section}{sep}{}", &doc[..i], &doc[end..])
        }
        None => format!("{}\n\n{section}", doc.trim_end()),
    };
    std::fs::write(&path, new)?;
    Ok(())
}

/// The machine, as the doc's header names it.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores ({cpu})")
}
