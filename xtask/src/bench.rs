//! `cargo xtask bench [--size-mib N] [--runs N] [--only GROUP] [--no-write]`
//!
//! Throughput, peak RSS and CPU time of `xet` next to the reference client, same input,
//! same run. Each case runs as a child process; peak RSS is the child's `VmHWM` from
//! `/proc/<pid>/status`, sampled until it exits, and its CPU time is read from
//! `/proc/<pid>/stat` once it has exited, before it is reaped. The table goes to stdout
//! and to `docs/BENCHMARKS.md` (unless `--no-write`). Rows with a peak RSS bound make
//! the bench fail when `xet` goes above it. The server under load (`--only load`) is in
//! `bench_load.rs`.

use anyhow::{Context, Result, bail};

#[path = "bench_bundle.rs"]
mod bench_bundle;
#[path = "bench_load.rs"]
mod bench_load;
#[path = "bench_wan.rs"]
mod bench_wan;
#[path = "wan.rs"]
mod wan;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const USAGE: &str =
    "usage: cargo xtask bench [--size-mib N] [--runs N] [--only GROUP] [--no-write]
  --size-mib N   input size for the upload/download cases (default 1024)
  --runs N       measured runs per contender, best taken (default 2)
  --only GROUP   only one group of cases: micro, hash, upload, small, download, hub, bundle or load
  --no-write     print the table without rewriting docs/BENCHMARKS.md
  --wan          the emulated wide-area link instead (see `cargo xtask bench --wan --help`)";

struct Opts {
    size_mib: u64,
    runs: usize,
    only: Option<String>,
    write: bool,
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        size_mib: 1024,
        runs: 2,
        only: None,
        write: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--size-mib" => o.size_mib = val()?.parse()?,
            "--runs" => o.runs = val()?.parse()?,
            "--only" => o.only = Some(val()?),
            "--no-write" => o.write = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => bail!("unknown bench flag {a}\n{USAGE}"),
        }
    }
    Ok(o)
}

/// One measured run of a child process (or, best of several, the least of each figure
/// and the largest peak RSS).
#[derive(Clone, Copy)]
pub struct Sample {
    pub secs: f64,
    pub peak_rss_kib: u64,
    /// CPU seconds (user + system) of the process, all its threads and the children it
    /// waited for.
    pub cpu_secs: f64,
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

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
pub fn clock_ticks() -> f64 {
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
pub fn proc_cpu(pid: u32) -> Option<(char, f64)> {
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

/// CPU seconds a running process has used so far (see [`proc_cpu`]).
pub fn proc_cpu_secs(pid: u32) -> Result<f64> {
    proc_cpu(pid)
        .map(|(_, s)| s)
        .with_context(|| format!("reading /proc/{pid}/stat"))
}

/// A server's CPU seconds per GiB in each measured run of one contender.
#[derive(Default)]
pub struct CpuRuns(std::cell::RefCell<Vec<f64>>);

impl CpuRuns {
    /// The range over the runs, as the table shows it.
    pub fn range(&self) -> String {
        let v = self.0.borrow();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        match v.len() {
            0 => "-".into(),
            _ if format!("{lo:.2}") == format!("{hi:.2}") => format!("{lo:.2}"),
            _ => format!("{lo:.2}-{hi:.2}"),
        }
    }
}

/// Reads a server's CPU time when a run starts (`start`, from the contender's `make`,
/// right before the child is spawned) and once it has ended (`end`, the contender's
/// `after`), and keeps the difference per GiB moved.
pub struct CpuMeter {
    gib: f64,
    at_start: std::cell::Cell<f64>,
}

impl CpuMeter {
    pub fn new(bytes: u64) -> CpuMeter {
        CpuMeter {
            gib: bytes as f64 / (1u64 << 30) as f64,
            at_start: Default::default(),
        }
    }

    pub fn start(&self, server: Option<u32>) -> Result<()> {
        self.at_start
            .set(proc_cpu_secs(server.context("no server running")?)?);
        Ok(())
    }

    pub fn end(&self, server: Option<u32>, runs: &CpuRuns) -> Result<()> {
        let used = proc_cpu_secs(server.context("no server running")?)? - self.at_start.get();
        runs.0.borrow_mut().push(used / self.gib);
        Ok(())
    }
}

fn measure(cmd: Command) -> Result<Sample> {
    Ok(measure_all(vec![cmd], |_| {})?.1.remove(0))
}

/// Run `cmds` at once and sample each until it exits: wall seconds until the last one
/// ended, and each one's figures. `tick` is called at every sampling round with the
/// seconds since the start (for sampling another process meanwhile). A child's CPU time
/// is read from its zombie, before it is reaped: afterwards it is gone. Every command's
/// stderr goes to a file (a pipe nobody reads could fill and stall it), shown if it fails.
pub fn measure_all(cmds: Vec<Command>, mut tick: impl FnMut(f64)) -> Result<(f64, Vec<Sample>)> {
    let errs = crate::tempdir("bench-stderr")?;
    let start = Instant::now();
    let mut running = Vec::with_capacity(cmds.len());
    for (i, mut cmd) in cmds.into_iter().enumerate() {
        let err_path = errs.join(i.to_string());
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path)?)
            .spawn()
            .with_context(|| format!("spawning bench command {cmd:?}"))?;
        running.push((
            cmd,
            child,
            err_path,
            Sample {
                secs: 0.0,
                peak_rss_kib: 0,
                cpu_secs: 0.0,
            },
            false,
        ));
    }
    let mut left = running.len();
    let mut failed = None;
    while left > 0 {
        tick(start.elapsed().as_secs_f64());
        for (cmd, child, err_path, sample, done) in running.iter_mut().filter(|r| !r.4) {
            let pid = child.id();
            if let Some(k) = vm_hwm_kib(pid) {
                sample.peak_rss_kib = sample.peak_rss_kib.max(k);
            }
            // Not reaped before it is a zombie (or its stat cannot be read at all).
            let cpu = match proc_cpu(pid) {
                Some(('Z' | 'X', cpu)) => Some(cpu),
                Some(_) => continue,
                None => None,
            };
            let status = child.wait()?;
            sample.secs = start.elapsed().as_secs_f64();
            *done = true;
            left -= 1;
            if !status.success() || cpu.is_none() {
                let err = std::fs::read_to_string(&*err_path).unwrap_or_default();
                failed = Some(format!("bench command {cmd:?} failed ({status}): {err}"));
                break;
            }
            sample.cpu_secs = cpu.unwrap_or_default();
        }
        if let Some(failed) = failed {
            // The others are not left running behind the error.
            for (_, child, ..) in running.iter_mut().filter(|r| !r.4) {
                let _ = child.kill();
                let _ = child.wait();
            }
            bail!("{failed}");
        }
        if left > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let wall = start.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&errs).ok();
    Ok((wall, running.into_iter().map(|r| r.3).collect()))
}

/// Read `path` (a file, or every file under a directory) so a run that follows finds it
/// in the page cache. Done before every timed run that reads it, not once: this VM's
/// DAMON pages out memory left unaccessed for a minute (`pageout` scheme, age 12 × 5 s),
/// so an input read once at the start is partly back on disk by the later rows, and the
/// run that meets the evicted pages waits on disk reads (seen in `sched_switch` traces:
/// the uploader's page faults in `filemap_fault`, uninterruptible).
pub fn warm(path: &Path) -> Result<()> {
    if path.is_dir() {
        for e in std::fs::read_dir(path)? {
            warm(&e?.path())?;
        }
        return Ok(());
    }
    let mut f = std::fs::File::open(path).with_context(|| format!("warming {}", path.display()))?;
    let mut buf = vec![0u8; 8 << 20];
    while std::io::Read::read(&mut f, &mut buf)? > 0 {}
    Ok(())
}

/// Best time of `runs` (the least disturbed), and the largest peak RSS seen.
fn best(
    runs: usize,
    make: impl FnMut() -> Result<Command>,
    before: impl FnMut() -> Result<()>,
) -> Result<Sample> {
    Ok(bench_interleaved(runs, vec![Contender::new(make, before)])?.remove(0))
}

/// One row of the table.
pub struct Row {
    pub case: String,
    pub bytes: u64,
    pub ours: Sample,
    pub reference: Option<Sample>,
    pub target: &'static str,
    /// Server CPU seconds per GiB (`-` where no server is measured).
    pub server_cpu: String,
}

/// A peak RSS bound a row is checked against: the bench fails when `xet`'s peak RSS in
/// the row `case` is above `mib`.
pub struct RssBound {
    pub case: String,
    pub mib: u64,
}

fn mbps(bytes: u64, s: &Sample) -> f64 {
    bytes as f64 / 1e6 / s.secs
}

fn ensure_file(path: &Path, size: u64) -> Result<()> {
    ensure_file_seeded(path, size, 0xBE7C)
}

/// `path` holding `size` pseudo-random bytes from `seed` (written unless it has that
/// size already).
pub fn ensure_file_seeded(path: &Path, size: u64, seed: u64) -> Result<()> {
    if std::fs::metadata(path)
        .map(|m| m.len() == size)
        .unwrap_or(false)
    {
        return Ok(());
    }
    eprintln!(
        "writing {} ({} MiB of pseudo-random data)",
        path.display(),
        size >> 20
    );
    std::fs::create_dir_all(path.parent().expect("parent"))?;
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    let mut rng = xet_testdata::Rng::new(seed);
    let mut buf = vec![0u8; 8 << 20];
    let mut left = size;
    use std::io::Write;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

fn build_release(root: &Path) -> Result<PathBuf> {
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "--release", "-p", "xet"])
        .current_dir(root);
    // `cargo run` gave this process its package's CARGO_PKG_* / CARGO_MANIFEST_* variables;
    // build scripts that watch them (ring's) would rebuild the whole TLS stack every time.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|p| k.starts_with(p))
        {
            c.env_remove(k.as_ref());
        }
    }
    let st = c.status()?;
    if !st.success() {
        bail!("cargo build --release -p xet failed");
    }
    Ok(root.join("target/release/xet"))
}

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

pub fn run(args: &[String]) -> Result<()> {
    // `--wan` (the emulated wide-area link) and its helper processes.
    if let Some(r) = bench_wan::dispatch(args) {
        return r;
    }
    let o = parse(args)?;
    let root = crate::workspace_root();
    let py = crate::reference::python()?;
    let xet = build_release(&root)?;
    let data_dir = root.join("target/bench-data");
    let size = o.size_mib << 20;
    let input = data_dir.join(format!("random-{}m.bin", o.size_mib));
    ensure_file(&input, size)?;
    // A group runs when there is no `--only` or it names that group exactly.
    let want = |name: &str| o.only.as_deref().is_none_or(|w| name == w);
    let mut rows = Vec::new();
    let mut bounds = Vec::new();

    // Both sides read from memory: the input is warmed before every run that reads it.

    if want("micro") {
        for r in crate::micro::run(256 << 20)? {
            rows.push(Row {
                case: r.name,
                bytes: r.bytes,
                ours: Sample {
                    secs: r.secs,
                    peak_rss_kib: 0,
                    cpu_secs: r.cpu_secs,
                },
                reference: None,
                target: "",
                server_cpu: "-".into(),
            });
        }
    }
    if want("hash") {
        let ours = best(
            o.runs,
            || {
                Ok({
                    let mut c = Command::new(&xet);
                    c.arg("hash").arg(&input);
                    c
                })
            },
            || warm(&input),
        )?;
        let reference = best(
            o.runs,
            || {
                Ok({
                    let mut c = Command::new(&py);
                    c.args([
                        "-c",
                        "import sys, hf_xet; print(hf_xet.hash_files([sys.argv[1]])[0].hash)",
                    ])
                    .arg(&input);
                    c
                })
            },
            || warm(&input),
        )?;
        rows.push(Row {
            case: format!("hash {} MiB", o.size_mib),
            bytes: size,
            ours,
            reference: Some(reference),
            target: ">= 2x",
            server_cpu: "-".into(),
        });
    }
    crate::bench_transfer::run(
        &o_transfer(&o),
        &xet,
        &py,
        &input,
        size,
        &mut |row, bound| {
            if let Some(mib) = bound {
                bounds.push(RssBound {
                    case: row.case.clone(),
                    mib,
                });
            }
            rows.push(row);
        },
        &want,
    )?;
    for r in crate::bench_hub::run(&o_transfer(&o), &xet, &input, size, &want)? {
        rows.push(Row {
            case: r.case,
            bytes: r.bytes,
            ours: r.ours,
            reference: r.reference,
            target: "",
            server_cpu: r.server_cpu,
        });
    }
    rows.extend(bench_bundle::run(
        &o_transfer(&o),
        &xet,
        &input,
        size,
        &want,
    )?);
    if want("load") {
        let (load_rows, load_bounds) = bench_load::run(&xet, size)?;
        rows.extend(load_rows);
        bounds.extend(load_bounds);
    }

    let table = table(&rows, &bounds);
    println!("{table}");
    if o.write {
        write_doc(&root, &o, &table)?;
    }
    let exceeded: Vec<String> = bounds
        .iter()
        .filter_map(|b| {
            let row = rows.iter().find(|r| r.case == b.case)?;
            let mib = row.ours.peak_rss_kib / 1024;
            (mib > b.mib).then(|| format!("{}: peak RSS {mib} MiB, bound {} MiB", b.case, b.mib))
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

/// CPU seconds per GiB moved, as the table shows them (every sample has its CPU time;
/// under one clock tick it is 0).
fn cpu_per_gib(bytes: u64, s: &Sample) -> f64 {
    s.cpu_secs / (bytes as f64 / (1u64 << 30) as f64)
}

fn table(rows: &[Row], bounds: &[RssBound]) -> String {
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
    let cpu = |bytes, s: &Sample| format!("{:.2}", cpu_per_gib(bytes, s));
    for r in rows {
        let ours_rss = match bounds.iter().find(|b| b.case == r.case) {
            Some(b) if r.ours.peak_rss_kib / 1024 > b.mib => {
                format!("**{} (bound {} MiB: exceeded)**", rss(&r.ours), b.mib)
            }
            Some(b) => format!("{} (bound {} MiB)", rss(&r.ours), b.mib),
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

/// The table, with what produced it, in place of everything above `docs/BENCHMARKS.md`'s
/// first `## ` heading; the hand-written sections from there on are kept.
fn write_doc(root: &Path, o: &Opts, table: &str) -> Result<()> {
    let doc = format!(
        "# Benchmarks\n\nProduced by `cargo xtask bench --size-mib {}` on {} with the reference `hf_xet {}` in the same run. \
Input: pseudo-random data (incompressible, worst case for dedup), read into the page cache before every run (as are the stores a download reads). Best of {} runs, xet's and the reference's taken in turn (the order rotating each round, `sync` before each run); peak RSS is the \
process's VmHWM. CPU s/GiB is the client process's user + system time (all threads, and the children it waited for) per GiB moved, the least over the runs; \
\"CPU xet / reference\" is xet's over the reference's (the goal for upload and download: <= 0.5x). Server CPU is `xet serve`'s user + system time per GiB during each measured run, the range over the runs. \
Micro rows are in-process single measurements over 256 MiB, CPU the measuring threads' time on a CPU. Hub rows: the reference is the `hf` CLI \
(huggingface_hub {}). A row with a bound next to its peak RSS fails the bench when above it.\n\n{table}",
        o.size_mib,
        machine(),
        crate::reference::HF_XET_VERSION,
        o.runs,
        xet_testdata::hub::HUGGINGFACE_HUB_VERSION
    );
    let path = root.join("docs/BENCHMARKS.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let kept = old.find("\n## ").map_or("", |i| &old[i..]);
    std::fs::write(
        &path,
        format!("{}\n{}", doc.trim_end(), kept.trim_end()) + "\n",
    )?;
    Ok(())
}

pub struct TransferOpts {
    /// Runs per case.
    pub runs: usize,
}

fn o_transfer(o: &Opts) -> TransferOpts {
    TransferOpts { runs: o.runs }
}
pub use Sample as BenchSample;
/// One side of an interleaved measurement: the command of a run, and what to do before
/// each run.
pub struct Contender<'a> {
    make: Box<dyn FnMut() -> Result<Command> + 'a>,
    before: Box<dyn FnMut() -> Result<()> + 'a>,
    after: Option<Box<dyn FnMut() -> Result<()> + 'a>>,
}

impl<'a> Contender<'a> {
    pub fn new(
        make: impl FnMut() -> Result<Command> + 'a,
        before: impl FnMut() -> Result<()> + 'a,
    ) -> Self {
        Contender {
            make: Box::new(make),
            before: Box::new(before),
            after: None,
        }
    }

    /// What to do right after each measured run (before any other contender's).
    pub fn after(mut self, after: impl FnMut() -> Result<()> + 'a) -> Self {
        self.after = Some(Box::new(after));
        self
    }
}

/// Best of `runs` for each contender, their runs taken in turn: this VM's speed drifts
/// by the minute, and taking turns lets the drift touch every contender alike instead
/// of whichever happened to run during a slow spell. The order rotates each round (a b c,
/// b c a, c a b, ...), since a run is also affected by the one just before it.
pub fn bench_interleaved(runs: usize, mut contenders: Vec<Contender<'_>>) -> Result<Vec<Sample>> {
    let n = contenders.len();
    let mut out: Vec<Option<Sample>> = vec![None; n];
    for round in 0..runs.max(1) {
        for k in 0..n {
            let i = (round + k) % n;
            let (c, o) = (&mut contenders[i], &mut out[i]);
            (c.before)()?;
            // Settle what earlier runs left (dirty pages, deleted files' blocks: this
            // disk is mounted with `discard`) so no run pays for another's writes.
            let _ = Command::new("sync").status();
            let s = measure((c.make)()?)?;
            if let Some(after) = &mut c.after {
                after()?;
            }
            *o = Some(match o.take() {
                None => s,
                Some(p) => Sample {
                    secs: p.secs.min(s.secs),
                    peak_rss_kib: p.peak_rss_kib.max(s.peak_rss_kib),
                    cpu_secs: p.cpu_secs.min(s.cpu_secs),
                },
            });
        }
    }
    Ok(out
        .into_iter()
        .map(|o| o.expect("at least one run"))
        .collect())
}

/// A running `xet serve` (every bench group starts one the same way); killed when dropped.
pub(crate) struct Served {
    pub child: Child,
    /// What it printed after "listening on ".
    pub url: String,
}

impl Served {
    /// Run `cmd`, an `xet serve` command line with its arguments, environment and stderr
    /// set by the caller, and wait for the first line it prints, which names its URL.
    pub(crate) fn spawn(mut cmd: Command, what: &str) -> Result<Served> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not start (it printed {line:?})");
        };
        Ok(Served {
            url: url.to_string(),
            child,
        })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An empty directory at `dir`.
pub(crate) fn fresh(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}
