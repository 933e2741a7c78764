//! `cargo xtask bench --wan`: `xet` and the reference client side by side over an
//! emulated wide-area link (see `wan.rs` for the emulation, a 4 MiB TCP window per
//! connection included), for RTT 20 ms / 1 Gbit, 80 ms / 200 Mbit, 200 ms / 100 Mbit and
//! 200 ms / 1 Gbit.
//!
//! Rows per profile, the two clients' runs taken in turn (the order rotating each
//! round), best time of `--runs`: a big-file upload and download (MB/s and fraction of
//! the link rate; 1 GiB on 200 ms / 1 Gbit), an upload of 2,000 files of 1-64 KiB next
//! to the time their bytes need on the link (not on 200 ms / 1 Gbit unless asked for),
//! and the time to the first xorb byte of the download. Every client
//! talks to a release `xet serve` (directory store) in the server namespace through the
//! link and the delay proxy. CPU seconds per GiB are the client's user + system time
//! (its `/proc/<pid>/stat` read when it has exited, before it is reaped) and the
//! server's over the same run.

use super::fresh;
use super::wan::{Check, Event, Link, Profile, SERVE_ADDR, helper_exe, proc_cpu};
use anyhow::{Context, Result, bail};
use std::cell::RefCell;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const USAGE: &str =
    "usage: cargo xtask bench --wan [--size-mib N] [--runs N] [--only PATTERN] [--no-write]
  --size-mib N     big-file size (default 256, and 1024 on 200ms/1g)
  --runs N         runs per contender, best taken (default 2)
  --only PATTERN   rows whose key contains PATTERN: keys are RTT/RATE/CASE or RTT/CASE,
                   RTT/RATE one of 20ms/1g, 80ms/200m, 200ms/100m, 200ms/1g and CASE one
                   of upload, download, small, hub (e.g. --only 80ms/small, --only
                   200ms/1g; 200ms names both 200 ms profiles; the download rows give
                   the first-byte row; hub runs on 80ms only and small not on 200ms/1g
                   unless PATTERN names them)
  --window-kib N   bytes in flight per connection and direction (default 4096: the
                   emulated TCP window, see wan.rs)
  --no-write       do not update docs/BENCHMARKS.md (also not with --only)
  --keep           keep the work directory (target/bench-wan/PID): each run's client
                   stderr (stderr-ROUND-SIDE.txt) and the server's request log
                   (store.log); set XET_LOG for more
  --xet PATH       measure this xet binary instead of building target/release/xet
                   (e.g. a copy of a baseline build, for a before/after)
  --check          only build each profile's link and print its check (no clients)";

/// Routes `bench --wan ...` and the link's helper processes; `None` for any other bench.
pub fn dispatch(args: &[String]) -> Option<Result<()>> {
    if args.first().map(String::as_str) == Some("--wan-helper") {
        return Some(super::wan::helper(&args[1..]));
    }
    let i = args.iter().position(|a| a == "--wan")?;
    let mut rest = args.to_vec();
    rest.remove(i);
    Some(run(&rest))
}

struct Opts {
    /// `None`: the default, 256 MiB, or the profile's own size.
    size_mib: Option<u64>,
    window: usize,
    runs: usize,
    only: Option<String>,
    write: bool,
    keep: bool,
    check_only: bool,
    xet: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        size_mib: None,
        window: super::wan::WINDOW,
        runs: 2,
        only: None,
        write: true,
        keep: false,
        check_only: false,
        xet: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--size-mib" => o.size_mib = Some(val()?.parse()?),
            "--window-kib" => o.window = val()?.parse::<usize>()? << 10,
            "--runs" => o.runs = val()?.parse()?,
            "--only" => o.only = Some(val()?),
            "--no-write" => o.write = false,
            "--keep" => o.keep = true,
            "--check" => o.check_only = true,
            "--xet" => o.xet = Some(PathBuf::from(val()?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => bail!("unknown flag {a}\n{USAGE}"),
        }
    }
    Ok(o)
}

const SMALL_FILES: usize = 2000;
const SMALL_MIN: usize = 1 << 10;
const SMALL_MAX: usize = 64 << 10;

const REF_UPLOAD: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.upload_files([sys.argv[1]], sys.argv[2], None, None, None, 'model')";
const REF_UPLOAD_LIST: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.upload_files([l.rstrip('\\n') for l in open(sys.argv[1])], sys.argv[2], None, None, None, 'model')";
const REF_DOWNLOAD: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.download_files([hf_xet.PyXetDownloadInfo(sys.argv[3], sys.argv[1], int(sys.argv[4]))], sys.argv[2], None, None, None)";

/// `xet serve` with a directory store, in the server namespace; killed when dropped.
struct Serve {
    child: Child,
}

impl Serve {
    fn start(link: &Link, xet: &Path, store: &Path) -> Result<Serve> {
        Serve::start_with(link, xet, store, &[])
    }

    /// Its log (one line per request) is appended to `<store>.log`, for reading a run
    /// afterwards.
    fn start_with(link: &Link, xet: &Path, store: &Path, extra: &[&str]) -> Result<Serve> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(store.with_extension("log"))?;
        let mut child = link
            .server(xet)
            .args(["serve", "--listen", SERVE_ADDR, "--store"])
            .arg(store)
            .args(extra)
            .env_remove("XET_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("starting xet serve in the server namespace")?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
        if !line.starts_with("listening on ") {
            bail!("xet serve did not start (it printed {line:?})");
        }
        Ok(Serve { child })
    }

    fn cpu(&self, tick: f64) -> Result<f64> {
        Ok(proc_cpu(self.child.id(), tick)?.0)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One measured run.
#[derive(Clone, Copy, Debug)]
struct Run {
    secs: f64,
    /// The client's CPU seconds.
    cpu: f64,
    /// The server's CPU seconds during the run.
    server_cpu: f64,
    start_ns: u64,
    end_ns: u64,
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs `cmd` to its end: wall time, and its CPU time read from `/proc` once it is a
/// zombie (exited, not yet reaped), where the kernel still holds its final times.
fn timed(mut cmd: Command, stderr: &Path, tick: f64) -> Result<Run> {
    let start_ns = unix_ns();
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr)?)
        .spawn()
        .with_context(|| format!("spawning {cmd:?}"))?;
    let cpu = loop {
        match proc_cpu(child.id(), tick) {
            Ok((cpu, true)) => break cpu,
            Ok((_, false)) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(e.context("reading the client's /proc/<pid>/stat")),
        }
    };
    let secs = start.elapsed().as_secs_f64();
    let end_ns = unix_ns();
    let status = child.wait()?;
    if !status.success() {
        let err = std::fs::read_to_string(stderr).unwrap_or_default();
        bail!("{cmd:?} failed ({status}): {}", err.trim());
    }
    Ok(Run {
        secs,
        cpu,
        server_cpu: 0.0,
        start_ns,
        end_ns,
    })
}

/// One side of an alternating measurement.
struct Side<'a> {
    make: Box<dyn Fn() -> Result<Command> + 'a>,
    before: Box<dyn Fn() -> Result<()> + 'a>,
}

impl<'a> Side<'a> {
    fn new(make: impl Fn() -> Result<Command> + 'a, before: impl Fn() -> Result<()> + 'a) -> Self {
        Side {
            make: Box::new(make),
            before: Box::new(before),
        }
    }
}

/// Every run of each side, the sides taken in turn, the order rotating each round.
/// `server` is read for its CPU time around each run.
fn alternate(ctx: &Ctx<'_>, sides: &[Side<'_>]) -> Result<Vec<Vec<Run>>> {
    let n = sides.len();
    let mut out = vec![Vec::new(); n];
    for round in 0..ctx.runs.max(1) {
        for k in 0..n {
            let i = (round + k) % n;
            (sides[i].before)()?;
            let _ = Command::new("sync").status();
            let srv_before = ctx.server_cpu()?;
            // Kept per run and side, for reading a run afterwards (`XET_LOG`).
            let stderr = ctx.work.join(format!("stderr-{round}-{i}.txt"));
            let mut r = timed((sides[i].make)()?, &stderr, ctx.tick)?;
            r.server_cpu = ctx.server_cpu()? - srv_before;
            eprintln!(
                "  run {round} side {i}: {:.2} s, client CPU {:.2} s, server CPU {:.2} s",
                r.secs, r.cpu, r.server_cpu
            );
            out[i].push(r);
        }
    }
    Ok(out)
}

/// What every case of one profile shares.
struct Ctx<'a> {
    link: &'a Link,
    xet: &'a Path,
    py: &'a Path,
    work: &'a Path,
    runs: usize,
    tick: f64,
    server: RefCell<Option<Serve>>,
}

impl Ctx<'_> {
    fn p(&self, s: &str) -> PathBuf {
        self.work.join(s)
    }

    fn server_cpu(&self) -> Result<f64> {
        match self.server.borrow().as_ref() {
            Some(s) => s.cpu(self.tick),
            None => Ok(0.0),
        }
    }

    /// A fresh store and server, and fresh client directories.
    fn restart(&self, store: &str, dirs: &[&str]) -> Result<()> {
        *self.server.borrow_mut() = None;
        fresh(&self.p(store))?;
        for d in dirs {
            fresh(&self.p(d))?;
        }
        *self.server.borrow_mut() = Some(Serve::start(self.link, self.xet, &self.p(store))?);
        Ok(())
    }

    fn xet(&self, args: &[&str], cache: &str) -> Command {
        let mut c = self.link.client(self.xet);
        c.args(args)
            .env("XET_CACHE", self.p(cache))
            .env_remove("XET_ENDPOINT")
            .env_remove("XET_STORE")
            .env_remove("XET_TOKEN");
        c
    }

    fn reference(&self, script: &str, args: &[&str], cache: &str) -> Command {
        let mut c = self.link.client(self.py);
        c.args(["-c", script])
            .args(args)
            .env("HF_XET_CACHE", self.p(cache))
            .env("HF_XET_TELEMETRY_ENABLED", "false");
        c
    }
}

/// One line of the table.
struct Row {
    link: String,
    case: String,
    xet: String,
    reference: String,
    ratio: String,
    link_note: String,
    cpu: String,
    server_cpu: String,
}

fn best(runs: &[Run]) -> Run {
    *runs
        .iter()
        .min_by(|a, b| a.secs.total_cmp(&b.secs))
        .expect("at least one run")
}

/// Least CPU seconds per GiB over the runs (the least disturbed).
fn cpu_per_gib(runs: &[Run], bytes: u64, server: bool) -> f64 {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    runs.iter()
        .map(|r| if server { r.server_cpu } else { r.cpu })
        .fold(f64::INFINITY, f64::min)
        / gib
}

/// The client and server CPU columns of a pair of sides.
fn cpu_cols(x: &[Run], r: &[Run], bytes: u64) -> (String, String) {
    (
        format!(
            "{:.2} / {:.2}",
            cpu_per_gib(x, bytes, false),
            cpu_per_gib(r, bytes, false)
        ),
        format!(
            "{:.2} / {:.2}",
            cpu_per_gib(x, bytes, true),
            cpu_per_gib(r, bytes, true)
        ),
    )
}

fn pair(v: Vec<Vec<Run>>) -> [Vec<Run>; 2] {
    v.try_into().unwrap_or_else(|_| unreachable!("two sides"))
}

/// The big-file rows' cells: MB/s with the fraction of the link rate.
fn rate_cell(bytes: u64, r: &Run, p: &Profile) -> String {
    let bps = bytes as f64 / r.secs;
    format!(
        "{:.1} MB/s ({:.0}%)",
        bps / 1e6,
        100.0 * bps / p.bytes_per_sec()
    )
}

/// `xet upload -q --endpoint URL <xet_input>` and the reference's `script` with its
/// arguments, taken in turn, each run into a fresh store and its own fresh cache
/// (`caches`: xet's, the reference's) with `warm` read into the page cache first.
fn upload_runs(
    ctx: &Ctx<'_>,
    warm: &Path,
    xet_input: &str,
    (script, ref_args): (&str, &[&str]),
    [xet_cache, ref_cache]: [&str; 2],
) -> Result<[Vec<Run>; 2]> {
    let url = ctx.link.serve_url();
    let fresh = |cache: &str| -> Result<()> {
        super::warm(warm)?;
        ctx.restart("store", &[cache])
    };
    let runs = alternate(
        ctx,
        &[
            Side::new(
                || {
                    let args = ["upload", "-q", "--endpoint", &url, xet_input];
                    Ok(ctx.xet(&args, xet_cache))
                },
                || fresh(xet_cache),
            ),
            Side::new(
                || Ok(ctx.reference(script, ref_args, ref_cache)),
                || fresh(ref_cache),
            ),
        ],
    )?;
    *ctx.server.borrow_mut() = None;
    Ok(pair(runs))
}

fn big_upload(ctx: &Ctx<'_>, input: &Path, size: u64) -> Result<Row> {
    let inp = input.to_str().context("input path")?;
    let url = ctx.link.serve_url();
    let [x, r] = upload_runs(ctx, input, inp, (REF_UPLOAD, &[inp, &url]), ["xc", "rc"])?;
    let p = ctx.link.profile;
    let (cpu, server_cpu) = cpu_cols(&x, &r, size);
    Ok(Row {
        link: p.label(),
        case: format!("upload {} MiB", size >> 20),
        xet: rate_cell(size, &best(&x), &p),
        reference: rate_cell(size, &best(&r), &p),
        ratio: format!("{:.2}x", best(&r).secs / best(&x).secs),
        link_note: format!("{:.1} s", size as f64 / p.bytes_per_sec()),
        cpu,
        server_cpu,
    })
}

/// The download rows: the big file, and the first xorb byte of those same runs.
fn big_download(ctx: &Ctx<'_>, input: &Path, size: u64, hash: &str) -> Result<[Row; 2]> {
    let url = ctx.link.serve_url();
    let out = ctx.p("out.bin");
    let outs = out.to_str().context("output path")?;
    let size_s = size.to_string();
    // The store the server reads, filled once outside the link.
    let store = ctx.p("dstore");
    if !store.join(".prepared").exists() {
        fresh(&store)?;
        fresh(&ctx.p("prep"))?;
        let st = Command::new(ctx.xet)
            .args(["upload", "-q", "--store"])
            .arg(&store)
            .arg(input)
            .env("XET_CACHE", ctx.p("prep"))
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("preparing the download store {} failed", store.display());
        }
        std::fs::write(store.join(".prepared"), b"")?;
    }
    *ctx.server.borrow_mut() = Some(Serve::start(ctx.link, ctx.xet, &store)?);
    let clean = |cache: &str| -> Result<()> {
        super::warm(&store)?;
        fresh(&ctx.p(cache))?;
        let _ = std::fs::remove_file(&out);
        Ok(())
    };
    let runs = alternate(
        ctx,
        &[
            Side::new(
                || {
                    Ok(ctx.xet(
                        &["download", "-q", "--endpoint", &url, hash, "-o", outs],
                        "xdc",
                    ))
                },
                || clean("xdc"),
            ),
            Side::new(
                || Ok(ctx.reference(REF_DOWNLOAD, &[hash, &url, outs, &size_s], "rdc")),
                || clean("rdc"),
            ),
        ],
    )?;
    *ctx.server.borrow_mut() = None;
    let _ = std::fs::remove_file(&out);
    let [x, r] = pair(runs);
    let p = ctx.link.profile;
    let (cpu, server_cpu) = cpu_cols(&x, &r, size);
    let events = ctx.link.events.lock().expect("events").clone();
    let (fx, fr) = (first_byte(&events, &x), first_byte(&events, &r));
    Ok([
        Row {
            link: p.label(),
            case: format!("download {} MiB", size >> 20),
            xet: rate_cell(size, &best(&x), &p),
            reference: rate_cell(size, &best(&r), &p),
            ratio: format!("{:.2}x", best(&r).secs / best(&x).secs),
            link_note: format!("{:.1} s", size as f64 / p.bytes_per_sec()),
            cpu,
            server_cpu,
        },
        Row {
            link: p.label(),
            case: "first xorb byte of that download".into(),
            xet: fx.cell(),
            reference: fr.cell(),
            ratio: match (fx.from_start_ms, fr.from_start_ms) {
                (Some(a), Some(b)) => format!("{:.2}x", b / a),
                _ => "-".into(),
            },
            link_note: format!("RTT {} ms", p.rtt_ms),
            cpu: "-".into(),
            server_cpu: "-".into(),
        },
    ])
}

/// Time to the first byte of the first xorb GET's answer (`GET /_xorb...`), as the
/// proxy delivered it to the client; the least over the runs.
#[derive(Default)]
struct FirstByte {
    /// From the client's start (process spawn).
    from_start_ms: Option<f64>,
    /// From the client's first connection reaching the proxy.
    from_connect_ms: Option<f64>,
    /// Requests the client sent before that GET, in the best run by `from_start_ms`.
    requests_before: usize,
    /// Connections it had opened by then.
    conns: usize,
    /// Those requests, method and route (the path up to its third `/`).
    routes: Vec<String>,
}

impl FirstByte {
    fn cell(&self) -> String {
        match (self.from_start_ms, self.from_connect_ms) {
            (Some(s), Some(c)) => format!(
                "{s:.0} ms ({c:.0} ms from connect; {} connections, {} requests before: {})",
                self.conns,
                self.requests_before,
                self.routes.join(", ")
            ),
            _ => "not seen".into(),
        }
    }
}

fn first_byte(events: &[Event], runs: &[Run]) -> FirstByte {
    let mut best = FirstByte::default();
    for r in runs {
        let ev: Vec<&Event> = events
            .iter()
            .filter(|e| (r.start_ns..=r.end_ns).contains(&e.at_ns()))
            .collect();
        let Some((i, conn)) = ev.iter().enumerate().find_map(|(i, e)| match e {
            Event::Request { conn, line, .. } if line.starts_with("GET /_xorb") => Some((i, *conn)),
            _ => None,
        }) else {
            continue;
        };
        let Some(at) = ev[i..].iter().find_map(|e| match e {
            Event::FirstByte { conn: c, at_ns } if *c == conn => Some(*at_ns),
            _ => None,
        }) else {
            continue;
        };
        let first_conn = ev.iter().find_map(|e| match e {
            Event::Conn { at_ns, .. } => Some(*at_ns),
            _ => None,
        });
        let ms = |from: u64| at.saturating_sub(from) as f64 / 1e6;
        let from_start = ms(r.start_ns);
        if best.from_start_ms.is_none_or(|b| from_start < b) {
            best = FirstByte {
                from_start_ms: Some(from_start),
                from_connect_ms: first_conn.map(ms),
                requests_before: ev[..i]
                    .iter()
                    .filter(|e| matches!(e, Event::Request { .. }))
                    .count(),
                conns: ev[..i]
                    .iter()
                    .filter(|e| matches!(e, Event::Conn { .. }))
                    .count(),
                routes: ev[..i]
                    .iter()
                    .filter_map(|e| match e {
                        Event::Request { line, .. } => Some(route(line)),
                        _ => None,
                    })
                    .collect(),
            };
        }
    }
    best
}

/// `GET /v1/reconstructions/<hash> HTTP/1.1` → `GET /v1/reconstructions`.
fn route(request_line: &str) -> String {
    let mut f = request_line.split(' ');
    let method = f.next().unwrap_or("");
    let path = f.next().unwrap_or("");
    let end = path
        .match_indices('/')
        .nth(2)
        .map_or(path.len(), |(i, _)| i);
    let end = path.find('?').map_or(end, |q| q.min(end));
    format!("{method} {}", &path[..end])
}

/// The Hub row's repository: this many of the small files.
const HUB_FILES: usize = 1000;
/// The write token of the Hub row's server; both clients send it.
const HUB_TOKEN: &str = "hf_bench_write";

/// `xet download hf://` next to `hf download` of a repository of `HUB_FILES` small
/// files, from `xet serve` speaking the Hub API, into fresh HF homes.
fn hub_download(ctx: &Ctx<'_>, list: &Path) -> Result<Row> {
    let hf = xet_testdata::hub::hf_cli().map_err(anyhow::Error::msg)?;
    // The repository's files: the first HUB_FILES small files, in one directory.
    let files = ctx.p("hub-files");
    fresh(&files)?;
    let mut bytes = 0;
    for (i, l) in std::fs::read_to_string(list)?
        .lines()
        .take(HUB_FILES)
        .enumerate()
    {
        let dst = files.join(format!("f{i:04}.bin"));
        std::fs::copy(l, &dst)?;
        bytes += std::fs::metadata(&dst)?.len();
    }
    fresh(&ctx.p("hstore"))?;
    let token = format!("write:{HUB_TOKEN}");
    *ctx.server.borrow_mut() = Some(Serve::start_with(
        ctx.link,
        ctx.xet,
        &ctx.p("hstore"),
        &["--token", &token],
    )?);
    // Filled from inside the server namespace, past the link.
    fresh(&ctx.p("hprep"))?;
    let mut prep = ctx.link.server(ctx.xet);
    hub_env(&mut prep, &format!("http://{SERVE_ADDR}"), &ctx.p("hprep"));
    let st = prep
        .arg("upload")
        .arg("-q")
        .arg(&files)
        .arg("hf://org/many")
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        bail!("uploading {} to hf://org/many failed", files.display());
    }
    let url = ctx.link.serve_url();
    let runs = alternate(
        ctx,
        &[
            Side::new(
                || {
                    let mut c = ctx.link.client(ctx.xet);
                    hub_env(&mut c, &url, &ctx.p("xh"));
                    c.args(["download", "-q", "hf://org/many"]);
                    Ok(c)
                },
                || fresh(&ctx.p("xh")),
            ),
            Side::new(
                || {
                    let mut c = ctx.link.client(&hf);
                    hub_env(&mut c, &url, &ctx.p("hh"));
                    c.args(["download", "org/many"])
                        .env("HF_HUB_DISABLE_UPDATE_CHECK", "1")
                        .env("HF_HUB_DISABLE_TELEMETRY", "1")
                        .env("HF_XET_TELEMETRY_ENABLED", "0")
                        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1");
                    Ok(c)
                },
                || fresh(&ctx.p("hh")),
            ),
        ],
    )?;
    *ctx.server.borrow_mut() = None;
    let [x, r] = pair(runs);
    let case = format!(
        "Hub download of a repository of {HUB_FILES} files of 1-64 KiB ({:.1} MiB; `xet download hf://` / `hf download`)",
        bytes as f64 / (1 << 20) as f64
    );
    Ok(link_time_row(ctx, case, &x, &r, bytes))
}

/// The Hub client environment both `xet` and `hf` read, everything under `home`.
fn hub_env(c: &mut Command, url: &str, home: &Path) {
    c.env("HF_ENDPOINT", url)
        .env("HF_TOKEN", HUB_TOKEN)
        .env("HF_HOME", home.join("hf-home"))
        .env("HF_HUB_CACHE", home.join("hub-cache"))
        .env("HF_XET_CACHE", home.join("hf-xet-cache"))
        .env("XET_CACHE", home.join("xet-cache"))
        .env_remove("HF_TOKEN_PATH")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("XET_TOKEN")
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE")
        .env_remove("XET_TOKEN_URL");
}

fn small_upload(ctx: &Ctx<'_>, tree: &Path, list: &Path, bytes: u64) -> Result<Row> {
    let url = ctx.link.serve_url();
    let (tree_s, list_s) = (
        tree.to_str().context("tree path")?,
        list.to_str().context("list path")?,
    );
    let [x, r] = upload_runs(
        ctx,
        tree,
        tree_s,
        (REF_UPLOAD_LIST, &[list_s, &url]),
        ["xsc", "rsc"],
    )?;
    let case = format!(
        "upload {SMALL_FILES} files of 1-64 KiB ({:.1} MiB)",
        bytes as f64 / (1 << 20) as f64
    );
    Ok(link_time_row(ctx, case, &x, &r, bytes))
}

/// A row of many small files: each side's best time next to the time `bytes` alone
/// need at the link's rate.
fn link_time_row(ctx: &Ctx<'_>, case: String, x: &[Run], r: &[Run], bytes: u64) -> Row {
    let p = ctx.link.profile;
    let link_secs = bytes as f64 / p.bytes_per_sec();
    let (cpu, server_cpu) = cpu_cols(x, r, bytes);
    let cell = |r: &Run| format!("{:.2} s ({:.1}x the link time)", r.secs, r.secs / link_secs);
    Row {
        link: p.label(),
        case,
        xet: cell(&best(x)),
        reference: cell(&best(r)),
        ratio: format!("{:.2}x", best(r).secs / best(x).secs),
        link_note: format!("{link_secs:.2} s"),
        cpu,
        server_cpu,
    }
}

/// The check line printed above each profile's rows.
fn check_line(link: &Link, c: &Check) -> String {
    let p = &link.profile;
    format!(
        "{}: echo RTT min {:.1} ms, median {:.1} ms; new connection + first echo {:.1} ms; \
TCP bulk over {} connections down {:.0} Mbit/s ({:.0}%), up {:.0} Mbit/s ({:.0}%); \
one connection down {:.0} Mbit/s (window {} KiB / RTT = {:.0} Mbit/s)",
        p.label(),
        c.rtt_min_ms,
        c.rtt_median_ms,
        c.new_conn_ms,
        link.check_connections(),
        c.down_mbit,
        100.0 * c.down_mbit / p.rate_mbit as f64,
        c.up_mbit,
        100.0 * c.up_mbit / p.rate_mbit as f64,
        c.one_conn_mbit,
        link.window >> 10,
        p.window_mbit(link.window)
    )
}

pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let root = crate::workspace_root();
    if o.check_only {
        return check_only(&root, &o);
    }
    let py = crate::reference::python()?;
    let built = match &o.xet {
        Some(x) => std::path::absolute(x)?,
        None => super::build_release(&root)?,
    };
    // Per process, so two runs at once (each with its own namespaces) do not collide.
    let work = root.join(format!("target/bench-wan/{}", std::process::id()));
    fresh(&work)?;
    let exe = helper_exe(&work)?;
    // A copy: others' builds replace target/release/xet, and the runs must all measure
    // the same binary.
    let xet = work.join("xet");
    std::fs::copy(&built, &xet).with_context(|| format!("copying {}", built.display()))?;
    let tick = super::clock_ticks();
    let (tree, list, small_bytes) =
        crate::bench_transfer::small_files(&work, SMALL_FILES, SMALL_MIN..=SMALL_MAX, 26)?;

    let mut rows = Vec::new();
    let mut checks = Vec::new();
    for p in Profile::ALL {
        let cases = ["upload", "download", "small", "hub"].map(|c| wanted(&o, &p, c));
        if !cases.iter().any(|&c| c) {
            continue;
        }
        let size_mib = o.size_mib.or(p.big_mib).unwrap_or(256);
        let size = size_mib << 20;
        let (input, hash) = if cases[0] || cases[1] {
            big_input(&root, &xet, size_mib)?
        } else {
            Default::default()
        };
        eprintln!("== {}: building the link", p.label());
        let link = Link::up(p, o.window, &exe)?;
        let check = check_line(&link, &Check::parse(&link.check(&exe)?)?);
        eprintln!("{check}");
        checks.push(check);
        let ctx = Ctx {
            link: &link,
            xet: &xet,
            py: &py,
            work: &work,
            runs: o.runs,
            tick,
            server: RefCell::new(None),
        };
        if cases[0] {
            rows.push(big_upload(&ctx, &input, size)?);
            eprintln!("{}", fmt_row(rows.last().expect("row")));
        }
        if cases[1] {
            rows.extend(big_download(&ctx, &input, size, &hash)?);
            eprintln!("{}", fmt_row(&rows[rows.len() - 2]));
            eprintln!("{}", fmt_row(rows.last().expect("row")));
        }
        if cases[2] {
            rows.push(small_upload(&ctx, &tree, &list, small_bytes)?);
            eprintln!("{}", fmt_row(rows.last().expect("row")));
        }
        if cases[3] {
            rows.push(hub_download(&ctx, &list)?);
            eprintln!("{}", fmt_row(rows.last().expect("row")));
        }
        let _ = std::fs::remove_dir_all(work.join("dstore"));
    }
    let table = table(&checks, &rows);
    println!("{table}");
    if o.write && o.only.is_none() {
        write_doc(&root, &o, &table)?;
    }
    if o.keep {
        eprintln!("kept {}", work.display());
    } else {
        std::fs::remove_dir_all(&work).ok();
    }
    Ok(())
}

/// Whether case `case` of profile `p` runs: those `--only` selects (all without it),
/// except that the Hub row runs on the 80 ms profile only (the issue's) and the small
/// files not on 200 ms / 1 Gbit (the big file is that profile's point), unless the
/// pattern names them.
fn wanted(o: &Opts, p: &Profile, case: &str) -> bool {
    let named = o.only.as_deref().is_some_and(|w| w.contains(case));
    let by_default = match case {
        "hub" => p.rtt_ms == 80,
        "small" => p.big_mib.is_none(),
        _ => true,
    };
    o.only.as_deref().is_none_or(|w| p.selects(w, case)) && (by_default || named)
}

/// The big-file rows' input of `size_mib` MiB (made once, kept in target/bench-data)
/// and its file hash.
fn big_input(root: &Path, xet: &Path, size_mib: u64) -> Result<(PathBuf, String)> {
    let input = root.join(format!("target/bench-data/random-{size_mib}m.bin"));
    super::ensure_file(&input, size_mib << 20)?;
    let out = Command::new(xet)
        .arg("hash")
        .arg("-q")
        .arg(&input)
        .output()?;
    if !out.status.success() {
        bail!("xet hash {} failed", input.display());
    }
    Ok((input, String::from_utf8(out.stdout)?.trim().to_string()))
}

/// `--check`: each profile's link check, nothing else.
fn check_only(root: &Path, o: &Opts) -> Result<()> {
    let work = root.join(format!("target/bench-wan/{}", std::process::id()));
    fresh(&work)?;
    let exe = helper_exe(&work)?;
    for p in Profile::ALL {
        if o.only
            .as_deref()
            .is_some_and(|w| !p.key().contains(w) && !format!("{}ms", p.rtt_ms).contains(w))
        {
            continue;
        }
        let link = Link::up(p, o.window, &exe)?;
        println!("{}", check_line(&link, &Check::parse(&link.check(&exe)?)?));
    }
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

fn fmt_row(r: &Row) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} |",
        r.link, r.case, r.xet, r.reference, r.ratio, r.link_note, r.cpu, r.server_cpu
    )
}

fn table(checks: &[String], rows: &[Row]) -> String {
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
        t.push_str(&fmt_row(r));
        t.push('\n');
    }
    t
}

const BEGIN: &str = "<!-- bench --wan: begin (generated by `cargo xtask bench --wan`) -->";
const END: &str = "<!-- bench --wan: end -->";

/// Replaces this section's generated block in docs/BENCHMARKS.md (between its markers),
/// or appends the section. `cargo xtask bench` keeps everything from the first `## `
/// heading on, so the section survives it.
fn write_doc(root: &Path, o: &Opts, table: &str) -> Result<()> {
    let path = root.join("docs/BENCHMARKS.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let block = format!(
        "{BEGIN}\nProduced by `cargo xtask bench --wan{}{} --runs {}`{} on {} with the reference `hf_xet {}` \
(the Hub row: `hf` of huggingface_hub {}); best of {} runs per client, the clients taken in turn.\n\n{}\n{END}",
        o.size_mib
            .map_or(String::new(), |m| format!(" --size-mib {m}")),
        if o.window == super::wan::WINDOW {
            String::new()
        } else {
            format!(" --window-kib {}", o.window >> 10)
        },
        o.runs,
        if o.xet.is_some() {
            " (with `--xet`: a given xet binary)"
        } else {
            ""
        },
        super::machine(),
        crate::reference::HF_XET_VERSION,
        xet_testdata::hub::HUGGINGFACE_HUB_VERSION,
        o.runs,
        table.trim_end()
    );
    let new = match (doc.find(BEGIN), doc.find(END)) {
        (Some(b), Some(e)) if b < e => format!("{}{block}{}", &doc[..b], &doc[e + END.len()..]),
        _ => format!("{}\n\n{}\n\n{block}\n", doc.trim_end(), method()),
    };
    std::fs::write(&path, new)?;
    Ok(())
}

/// The section's hand-kept part, written once with the first table.
fn method() -> String {
    let mut tbf = String::new();
    for p in Profile::ALL {
        tbf.push_str(&format!(
            "| {} | {} ms | {}mbit | {} bytes | {} ms | {} bytes | {} KiB ({:.0} Mbit/s per connection) |\n",
            p.label(),
            p.rtt_ms / 2,
            p.rate_mbit,
            p.tbf_burst(),
            Profile::TBF_LATENCY_MS,
            p.line_bytes(),
            super::wan::WINDOW >> 10,
            p.window_mbit(super::wan::WINDOW)
        ));
    }
    format!(
        "## Wide-area link (emulated)\n\n\
`cargo xtask bench --wan` builds the link itself (as root) and measures `xet` and the reference client `hf_xet` over it in the same run.\n\n\
- **Namespaces.** Two network namespaces joined by a veth pair: the clients run in one (10.77.0.1), `xet serve` \
(release build, directory store, on 127.0.0.1:8080) and the delay proxy in the other (10.77.0.2). Nothing on the host's \
network changes, and deleting the namespaces removes the link.\n\
- **Bandwidth.** `tc qdisc add dev vethN root tbf` on each end's egress, so upload and download are each limited to the \
profile's rate. The bucket is 64 KiB or one millisecond of the rate, whichever is more (a veth GSO packet is up to 64 KiB); \
the queue holds {} ms. tbf counts whole Ethernet frames, so TCP payload tops out near 95% of the rate.\n\
- **Delay.** `sch_netem` is not available, so a delay proxy written for this (`xtask/src/wan.rs`, tokio) relays each \
connection to the server and holds every piece it reads for half the RTT before writing it on, both directions, so a \
request and its answer take one RTT (tokio's timer fires on the next whole millisecond, so 0.9 ms is taken off each \
direction's hold; the link check shows what is left). It is a delay line: it keeps reading while earlier pieces wait, within twice the one-way \
bandwidth-delay product plus 256 KiB per connection and direction; half-closes are passed on after the same delay. \
The client's connect completes against the proxy at once, so the proxy holds a new connection's first bytes until one \
RTT after the accept, the cost of the handshake.\n\
- **Window.** The clients' TCP sees the veth's round trip, so without more one connection would carry the whole link at \
any RTT. The proxy caps each connection's bytes in flight per direction as a TCP window does: a byte it reads counts until \
its acknowledgement would be back (one RTT after it was read, or half an RTT after it was written on if that was later) and \
the proxy stops reading from that side while 4 MiB are in flight, so one connection carries at most 4 MiB per RTT \
(168 Mbit/s at 200 ms) and a client fills a long fat link only with parallel requests. 4 MiB is the machine's Linux \
default send buffer maximum (`net.ipv4.tcp_wmem` = 4096 16384 4194304), which holds a sender's unacknowledged bytes; \
the receive side allows more (`tcp_rmem` max 32 MiB, half advertised), so the sender's buffer is the bound, for the \
client's uploads and the server's answers alike (`--window-kib` changes it). Not emulated: slow start and loss recovery \
run at LAN speed (the window is reached at once).\n\
- **Link check.** Before each profile's rows, a probe client times a one-byte echo through a second proxy with the same \
delay and window (min and median of 20, and a new connection's first echo, which should be two RTTs), a bulk TCP transfer \
each way over twice as many connections as it takes for their windows to cover the bandwidth-delay product (two seconds \
of the rate, timed from the first byte to the last), and one connection's download of eight windows, timed once its \
first window is in (its ceiling is the window per RTT).\n\
- **Rows.** Big-file upload and download (`--size-mib`, default 256, and 1 GiB on 200 ms / 1 Gbit, the issue's target; \
MB/s and the fraction of the link rate), fresh store, server and caches for every upload run; except on 200 ms / 1 Gbit, \
an upload of 2,000 files of 1-64 KiB (pseudo-random sizes and bytes, fixed seed; \
`xet upload DIR`, the reference's `upload_files` with the list), next to the time their bytes alone need at the link rate; \
on the 80 ms profile, `xet download hf://` next to `hf download` of a repository of 1,000 of those files (the server in \
Hub mode with a token, the repository uploaded from inside the server namespace), fresh HF homes each run; \
the first xorb byte of the download: from the client's start, and from its first connection, to the first byte of the answer \
to its first `GET /_xorb...` as the proxy delivered it, with the requests and connections before it. CPU seconds per GiB: \
the client's user + system time (`/proc/<pid>/stat` once it has exited, before it is reaped; for the reference that \
includes starting Python) and `xet serve`'s over the same run. The reference's download is not followed by `sync`. Proxy \
and server share the machine's two cores with the client.\n\n\
| profile | delay per direction | tbf rate | tbf burst | tbf latency | proxy buffer per connection and direction | window per connection and direction |\n\
|---|---:|---:|---:|---:|---:|---:|\n{tbf}",
        Profile::TBF_LATENCY_MS
    )
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn routes_keep_method_and_two_path_segments() {
        assert_eq!(
            route("GET /v1/reconstructions/0123abcd HTTP/1.1"),
            "GET /v1/reconstructions"
        );
        assert_eq!(route("HEAD /v1/files/ff HTTP/1.1"), "HEAD /v1/files");
        assert_eq!(route("GET /health HTTP/1.1"), "GET /health");
        assert_eq!(route("GET /api/models?x=1 HTTP/1.1"), "GET /api/models");
    }
}
