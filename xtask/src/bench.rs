//! `cargo xtask bench [--size-mib N] [--runs N] [--only GROUP] [--no-write]`
//!
//! Throughput and peak RSS of `xet` next to the reference client, same input, same run.
//! Each case runs as a child process; peak RSS is the child's `VmHWM` from
//! `/proc/<pid>/status`, sampled until it exits. The table goes to stdout and to
//! `docs/BENCHMARKS.md` (unless `--no-write`).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const USAGE: &str =
    "usage: cargo xtask bench [--size-mib N] [--runs N] [--only GROUP] [--no-write]
  --size-mib N   input size for the upload/download cases (default 1024)
  --runs N       measured runs per contender, best taken (default 2)
  --only GROUP   only one group of cases: micro, hash, upload, small, download or hub
  --no-write     print the table without rewriting docs/BENCHMARKS.md";

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

/// One measured run of a child process.
#[derive(Clone, Copy)]
pub struct Sample {
    pub secs: f64,
    pub peak_rss_kib: u64,
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn measure(cmd: &mut Command) -> Result<Sample> {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning bench command")?;
    let pid = child.id();
    let mut peak = 0;
    let status = loop {
        if let Some(k) = vm_hwm_kib(pid) {
            peak = peak.max(k);
        }
        if let Some(st) = child.try_wait()? {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let secs = start.elapsed().as_secs_f64();
    if !status.success() {
        let mut err = String::new();
        use std::io::Read;
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        bail!("bench command {cmd:?} failed ({status}): {err}");
    }
    Ok(Sample {
        secs,
        peak_rss_kib: peak,
    })
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

struct Row {
    case: String,
    bytes: u64,
    ours: Sample,
    reference: Option<Sample>,
    target: &'static str,
    /// Server CPU seconds per GiB (`-` where no server is measured).
    server_cpu: String,
}

fn mbps(bytes: u64, s: &Sample) -> f64 {
    bytes as f64 / 1e6 / s.secs
}

fn ensure_file(path: &Path, size: u64) -> Result<()> {
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
    let mut rng = xet_testdata::Rng::new(0xBE7C);
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
    let o = parse(args)?;
    let root = crate::workspace_root();
    let py = crate::reference::python()?;
    let xet = build_release(&root)?;
    let data_dir = root.join("target/bench-data");
    let size = o.size_mib << 20;
    let input = data_dir.join(format!("random-{}m.bin", o.size_mib));
    ensure_file(&input, size)?;
    let want = |name: &str| o.only.as_deref().is_none_or(|w| name.contains(w));
    let mut rows = Vec::new();

    // Both sides read from memory: the input is warmed before every run that reads it.

    if want("micro") {
        for r in crate::micro::run(256 << 20)? {
            rows.push(Row {
                case: r.0,
                bytes: r.1,
                ours: Sample {
                    secs: r.2,
                    peak_rss_kib: 0,
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
        &mut |case, bytes, ours, reference, target| {
            rows.push(Row {
                case,
                bytes,
                ours,
                reference,
                target,
                server_cpu: "-".into(),
            });
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

    let mut table = String::new();
    table.push_str("| case | xet MB/s | xet peak RSS | reference MB/s | reference peak RSS | xet / reference | target | server CPU s/GiB |\n");
    table.push_str("|---|---:|---:|---:|---:|---:|---|---|\n");
    for r in &rows {
        let rss = |s: &Sample| {
            if s.peak_rss_kib == 0 {
                "-".to_string()
            } else {
                format!("{} MiB", s.peak_rss_kib / 1024)
            }
        };
        let (rm, rr, ratio) = match &r.reference {
            Some(rf) => (
                format!("{:.0}", mbps(r.bytes, rf)),
                rss(rf),
                format!("{:.2}x", rf.secs / r.ours.secs),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        table.push_str(&format!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} |\n",
            r.case,
            mbps(r.bytes, &r.ours),
            rss(&r.ours),
            rm,
            rr,
            ratio,
            r.target,
            r.server_cpu
        ));
    }
    println!("{table}");
    if o.write {
        let doc = format!(
            "# Benchmarks\n\nProduced by `cargo xtask bench --size-mib {}` on {} with the reference `hf_xet {}` in the same run. \
Input: pseudo-random data (incompressible, worst case for dedup), read into the page cache before every run (as are the stores a download reads). Best of {} runs, xet's and the reference's taken in turn (the order rotating each round, `sync` before each run); peak RSS is the \
process's VmHWM. Micro rows are in-process single measurements over 256 MiB. Hub rows: the reference is the `hf` CLI \
(huggingface_hub {}); server CPU is `xet serve`'s user + system time per GiB during each measured run, the range over the runs.\n\n{table}",
            o.size_mib,
            machine(),
            crate::reference::HF_XET_VERSION,
            o.runs,
            xet_testdata::hub::HUGGINGFACE_HUB_VERSION
        );
        // Hand-written sections (from the first `## ` heading on) are kept.
        let path = root.join("docs/BENCHMARKS.md");
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        let kept = old.find("\n## ").map_or("", |i| &old[i..]);
        std::fs::write(
            &path,
            format!("{}\n{}", doc.trim_end(), kept.trim_end()) + "\n",
        )?;
    }
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
            let s = measure(&mut (c.make)()?)?;
            if let Some(after) = &mut c.after {
                after()?;
            }
            *o = Some(match o.take() {
                None => s,
                Some(p) => Sample {
                    secs: p.secs.min(s.secs),
                    peak_rss_kib: p.peak_rss_kib.max(s.peak_rss_kib),
                },
            });
        }
    }
    Ok(out
        .into_iter()
        .map(|o| o.expect("at least one run"))
        .collect())
}
