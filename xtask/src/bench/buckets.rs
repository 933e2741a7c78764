//! Group `buckets`: Storage Buckets through the Hub API of a release `xet serve` on
//! loopback (Hub mode, directory store), `xet` next to the `hf` CLI (huggingface_hub
//! 2.4.0) in the same run, their runs taken in turn:
//!
//! - `xet sync` / `hf sync` of a folder of 10,000 small files and a bucket holding the
//!   same files, nothing changed: up (folder → bucket) and down (bucket → folder), the
//!   same folder and bucket for both tools (each is first checked to find nothing to do);
//!   the one `xet sync` that filled the bucket is a row too, for information;
//! - `xet ls -r` / `hf buckets ls -R` of a bucket of 100,000 files, `xet`'s peak RSS
//!   held to a bound (the bench fails above it);
//! - the tree pages of that listing as a client sees them: each `GET
//!   /api/buckets/NS/NAME/tree?recursive=true&limit=N[&cursor=…]` timed from connect to
//!   the last byte of its answer, over loopback, the `Link` pages walked in turn.
//!
//! Requests per run are the lines of the server's request log (one per request, Hub API
//! and CAS alike), emptied before each run and counted after it. The 100,000-file bucket
//! is made in seconds: one file uploaded with `xet cp`, then addFile batches of 1,000
//! lines all naming its Xet hash.
//!
//! Prints its own table (wall time, CPU seconds, requests and peak RSS of each tool, the
//! ratio, the target and whether it is met) and writes it to `docs/BENCHMARKS.md` under
//! "Storage buckets".

use super::inputs::{fresh, path_str, small_files, warm};
use super::measure::{Contender, Rounds, Run, Sample, best, interleave, sides};
use super::serve::{HUB_TOKEN, RequestLog, Serve, ServeProcess, hf_quiet, hub_client, xet_client};
use anyhow::{Context, Result, bail};
use std::cell::RefCell;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Files of the sync rows' folder and bucket.
const SYNC_FILES: usize = 10_000;
/// Files of the listing's bucket.
const LS_FILES: usize = 100_000;
/// `xet ls -r`'s peak RSS bound on that bucket (MiB).
const LS_BOUND_MIB: u64 = 100;
/// The tree pages' p99 goal (ms).
const PAGE_P99_MS: f64 = 50.0;
/// Entries per tree page `xet` asks for (xet-hub-client's `limit`), and the server's
/// default, which `hf` gets (it sends no `limit`).
const XET_PAGE: usize = 10_000;
const DEFAULT_PAGE: usize = 1_000;
/// The lines of one addFile batch while the listing's bucket is made.
const BATCH_LINES: usize = 1_000;

/// One row of the table.
struct BucketRow {
    case: String,
    xet: String,
    hf: String,
    ratio: String,
    target: String,
    met: bool,
}

/// One tool's runs and the requests each made.
struct Side {
    runs: Vec<Run>,
    requests: Vec<usize>,
}

impl Side {
    fn best(&self) -> Sample {
        best(&self.runs)
    }

    /// The most requests a run made.
    fn requests(&self) -> usize {
        self.requests.iter().copied().max().unwrap_or(0)
    }

    /// `0.41 s, CPU 0.30 s, 2 requests, peak RSS 24 MiB` (the best wall and CPU time,
    /// the requests' range over the runs, the largest peak RSS).
    fn cell(&self, bound_mib: Option<u64>) -> String {
        let s = self.best();
        let lo = self.requests.iter().copied().min().unwrap_or(0);
        let reqs = match (lo, self.requests()) {
            (lo, hi) if lo == hi => format!("{hi}"),
            (lo, hi) => format!("{lo}-{hi}"),
        };
        let mib = s.peak_rss_kib / 1024;
        let rss = match bound_mib {
            Some(b) if mib > b => format!("**peak RSS {mib} MiB (bound {b} MiB: exceeded)**"),
            Some(b) => format!("peak RSS {mib} MiB (bound {b} MiB)"),
            None => format!("peak RSS {mib} MiB"),
        };
        format!(
            "{:.2} s, CPU {:.2} s, {reqs} requests, {rss}",
            s.secs, s.cpu_secs
        )
    }
}

/// What the cases share: the server, its log, the two clients.
struct Buckets {
    xet: PathBuf,
    hf: PathBuf,
    work: PathBuf,
    server: ServeProcess,
    log: RequestLog,
    rounds: Rounds<'static>,
}

impl Buckets {
    fn p(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    /// `host:port` of the server.
    fn addr(&self) -> &str {
        self.server
            .url
            .trim_start_matches("http://")
            .trim_end_matches('/')
    }

    /// `xet ARGS` against the server, its homes and caches under `home`.
    fn xet(&self, args: &[&str], home: &str) -> Command {
        let mut c = xet_client(Command::new(&self.xet), args, None);
        hub_client(&mut c, &self.server.url, &self.p(home));
        c
    }

    /// `hf ARGS` against the server, its homes and caches under `home`.
    fn hf(&self, args: &[&str], home: &str) -> Command {
        let mut c = Command::new(&self.hf);
        c.args(args);
        hub_client(&mut c, &self.server.url, &self.p(home));
        hf_quiet(&mut c);
        c
    }

    /// Every run of `xet` and `hf` (made by `make`), taken in turn, `warm_first` read
    /// into the page cache before each; each run's requests from the server's log.
    fn alternate(&self, make: [&dyn Fn() -> Command; 2], warm_first: &Path) -> Result<[Side; 2]> {
        let counts = [RefCell::new(Vec::new()), RefCell::new(Vec::new())];
        let contenders = make
            .iter()
            .zip(&counts)
            .map(|(make, count)| {
                Contender::new(
                    || Ok(make()),
                    || {
                        warm(warm_first)?;
                        self.log.clear()
                    },
                )
                .server(|| Some(self.server.pid()))
                .after(|_| {
                    count.borrow_mut().push(self.log.count()?);
                    Ok(())
                })
            })
            .collect();
        let [x, h] = sides(interleave(&self.rounds, contenders)?);
        let [cx, ch] = counts.map(RefCell::into_inner);
        Ok([
            Side {
                runs: x,
                requests: cx,
            },
            Side {
                runs: h,
                requests: ch,
            },
        ])
    }
}

/// Runs `c` to its end; its standard output, or an error with what it printed.
fn output(mut c: Command, what: &str) -> Result<String> {
    let out = c
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `xet serve` in Hub mode on `store`, its request log in `log` (the default format:
/// it is counted).
fn serve(xet: &Path, store: &Path, log: &Path) -> Result<ServeProcess> {
    Serve::loopback(xet, store)
        .hub()
        .env_remove("XET_LOG")
        .log(log.to_path_buf())
        .start()
}

pub fn run(xet: &Path, runs: usize, write: bool) -> Result<()> {
    let work = crate::workspace_root().join("target/bench-buckets");
    fresh(&work)?;
    let store = work.join("store");
    fresh(&store)?;
    let log = work.join("serve.log");
    let b = Buckets {
        xet: xet.to_path_buf(),
        hf: xet_testdata::hub::hf_cli().map_err(anyhow::Error::msg)?,
        server: serve(xet, &store, &log)?,
        log: RequestLog(log),
        work,
        rounds: Rounds::loopback(runs),
    };
    for home in ["xh", "hh", "prep"] {
        fresh(&b.p(home))?;
    }
    // Each row is printed as it is measured, too.
    let mut rows = Vec::new();
    let mut add = |new: Vec<BucketRow>| {
        for r in new {
            eprintln!("{}", r.line());
            rows.push(r);
        }
    };
    add(sync_rows(&b)?);
    let (ls, rss_mib) = ls_row(&b)?;
    add(vec![ls]);
    add(page_rows(&b)?);
    drop(b);
    let table = render(&rows);
    println!("{table}");
    if write {
        write_doc(&table, runs)?;
    }
    std::fs::remove_dir_all(crate::workspace_root().join("target/bench-buckets")).ok();
    if rss_mib > LS_BOUND_MIB {
        bail!("xet ls -r of {LS_FILES} files: peak RSS {rss_mib} MiB, bound {LS_BOUND_MIB} MiB");
    }
    Ok(())
}

/// The sync rows: the bucket filled (one run of `xet`, for information), then the two
/// no-change rows.
fn sync_rows(b: &Buckets) -> Result<Vec<BucketRow>> {
    let (tree, _, bytes) = small_files(&b.work, SYNC_FILES, 64..=4096, 0xB0C)?;
    let dir = path_str(&tree)?;
    let bucket = "hf://buckets/org/sync";
    // The bucket made like the folder (by xet sync, which creates it): one run, its
    // wall time and requests for information.
    let mib = bytes as f64 / (1 << 20) as f64;
    warm(&tree)?;
    b.log.clear()?;
    let t = Instant::now();
    output(b.xet(&["sync", dir, bucket], "prep"), "xet sync (filling)")?;
    let fill_secs = t.elapsed().as_secs_f64();
    let fill_requests = b.log.count()?;
    let mut rows = vec![BucketRow {
        case: format!(
            "sync up, {SYNC_FILES} files of 64-4096 bytes ({mib:.1} MiB) into a new bucket: the next rows' bucket made (`xet sync DIR hf://buckets/NS/NAME`, one run, for information)"
        ),
        xet: format!("{fill_secs:.2} s, {fill_requests} requests"),
        hf: "-".into(),
        ratio: "-".into(),
        target: "(for information)".into(),
        met: true,
    }];
    for (label, src, dst) in [("up", dir, bucket), ("down", bucket, dir)] {
        let args = ["sync", src, dst];
        // Each tool finds nothing to do, else the row would time a transfer.
        for (cmd, who) in [(b.xet(&args, "xh"), "xet"), (b.hf(&args, "hh"), "hf")] {
            let out = output(cmd, &format!("{who} sync {src} {dst}"))?;
            if !out.contains("Nothing to sync.") {
                bail!(
                    "{who} sync {src} {dst} found something to do: {}",
                    out.trim()
                );
            }
        }
        let [x, h] = b.alternate([&|| b.xet(&args, "xh"), &|| b.hf(&args, "hh")], &tree)?;
        let (bx, bh) = (x.best(), h.best());
        let ratio = bh.secs / bx.secs;
        let max_requests = SYNC_FILES / 1000;
        rows.push(BucketRow {
            case: format!(
                "sync {label}, {SYNC_FILES} files of 64-4096 bytes, nothing changed (`xet sync {}` / `hf sync`)",
                if label == "up" {
                    "DIR hf://buckets/NS/NAME"
                } else {
                    "hf://buckets/NS/NAME DIR"
                }
            ),
            xet: x.cell(None),
            hf: h.cell(None),
            ratio: format!("{ratio:.2}x"),
            target: format!("xet ≤ 2 s, ≤ {max_requests} requests, ≥ 5x"),
            met: bx.secs <= 2.0 && x.requests() <= max_requests && ratio >= 5.0,
        });
    }
    Ok(rows)
}

/// `METHOD PATH` with an optional body, over its own connection (`Connection: close`);
/// the answer's status, head and body, and the seconds from connect to its last byte.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
    pub secs: f64,
}

pub fn http(addr: &str, method: &str, path: &str, body: Option<(&str, &[u8])>) -> Result<Answer> {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {HUB_TOKEN}\r\nConnection: close\r\n"
    );
    if let Some((content_type, b)) = body {
        req.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    if let Some((_, b)) = body {
        s.write_all(b)?;
    }
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let secs = t.elapsed().as_secs_f64();
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .with_context(|| format!("{method} {path}: no end of head in the answer"))?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{method} {path}: no status line"))?;
    let body = buf[split + 4..].to_vec();
    // A chunked answer's sizes are left in the body: only counted and searched here.
    Ok(Answer {
        status,
        head,
        body,
        secs,
    })
}

/// `http`, failing unless the answer is a success.
fn http_ok(addr: &str, method: &str, path: &str, body: Option<(&str, &[u8])>) -> Result<Answer> {
    let a = http(addr, method, path, body)?;
    if !(200..300).contains(&a.status) {
        bail!(
            "{method} {path}: {} {}",
            a.status,
            String::from_utf8_lossy(&a.body[..a.body.len().min(300)])
        );
    }
    Ok(a)
}

/// `POST /api/buckets/{id}` (`id` is `NS/NAME`).
pub fn create_bucket(addr: &str, id: &str) -> Result<()> {
    http_ok(
        addr,
        "POST",
        &format!("/api/buckets/{id}"),
        Some(("application/json", b"{}")),
    )?;
    Ok(())
}

/// The bucket `org/big` with `LS_FILES` files in 100 folders, all one small file's
/// content: the bucket created, that file uploaded by `xet cp`, then addFile batches
/// naming its hash.
fn make_big_bucket(b: &Buckets) -> Result<()> {
    let t = Instant::now();
    let seed = b.p("seed.bin");
    let mut data = vec![0u8; 1500];
    xet_testdata::Rng::new(0xB16).fill(&mut data);
    std::fs::write(&seed, &data)?;
    let first = "hf://buckets/org/big/d000/f000000.bin";
    // `xet cp` does not create a bucket (`xet sync` does).
    create_bucket(b.addr(), "org/big")?;
    output(
        b.xet(&["cp", path_str(&seed)?, first], "prep"),
        "xet cp (the listing's first file)",
    )?;
    let tree = http_ok(
        b.addr(),
        "GET",
        "/api/buckets/org/big/tree?recursive=true",
        None,
    )?;
    let body = String::from_utf8_lossy(&tree.body);
    let hash = body
        .split("\"xetHash\":\"")
        .nth(1)
        .and_then(|r| r.get(..64))
        .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
        .with_context(|| format!("no xetHash in the tree of org/big: {body}"))?
        .to_string();
    let mtime_ms = 1_767_225_600_000u64;
    for start in (1..LS_FILES).step_by(BATCH_LINES) {
        let mut lines = String::new();
        for i in start..(start + BATCH_LINES).min(LS_FILES) {
            lines.push_str(&format!(
                "{{\"type\":\"addFile\",\"path\":\"d{:03}/f{i:06}.bin\",\"xetHash\":\"{hash}\",\"mtime\":{mtime_ms}}}\n",
                i / (LS_FILES / 100)
            ));
        }
        http_ok(
            b.addr(),
            "POST",
            "/api/buckets/org/big/batch",
            Some(("application/x-ndjson", lines.as_bytes())),
        )?;
    }
    eprintln!(
        "buckets: org/big made ({LS_FILES} files) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `xet ls -r` next to `hf buckets ls -R` of the 100,000-file bucket; the row and
/// xet's peak RSS (MiB).
fn ls_row(b: &Buckets) -> Result<(BucketRow, u64)> {
    make_big_bucket(b)?;
    let xet_args = ["ls", "-r", "hf://buckets/org/big"];
    let hf_args = ["buckets", "ls", "org/big", "-R"];
    // Both print every file (checked once, untimed): a line per file at least.
    for (cmd, who) in [
        (b.xet(&xet_args, "xh"), "xet"),
        (b.hf(&hf_args, "hh"), "hf"),
    ] {
        let out = output(cmd, &format!("{who} listing org/big"))?;
        let files = out.lines().filter(|l| l.contains("f0")).count();
        if files < LS_FILES {
            bail!("{who} listed {files} of the {LS_FILES} files of org/big");
        }
    }
    let store = b.p("store");
    let [x, h] = b.alternate(
        [&|| b.xet(&xet_args, "xh"), &|| b.hf(&hf_args, "hh")],
        &store,
    )?;
    let (bx, bh) = (x.best(), h.best());
    let rss_mib = bx.peak_rss_kib / 1024;
    let row = BucketRow {
        case: format!(
            "list a bucket of {LS_FILES} files, every file printed (`xet ls -r hf://buckets/NS/NAME` / `hf buckets ls NS/NAME -R`)"
        ),
        xet: x.cell(Some(LS_BOUND_MIB)),
        hf: h.cell(None),
        ratio: format!("{:.2}x", bh.secs / bx.secs),
        target: format!("xet peak RSS ≤ {LS_BOUND_MIB} MiB (bound)"),
        met: rss_mib <= LS_BOUND_MIB,
    };
    Ok((row, rss_mib))
}

/// Every page of the recursive listing of `org/big`, `limit` entries a page: each
/// page's seconds; the files they held are checked to be all of them.
fn walk(addr: &str, limit: usize) -> Result<Vec<f64>> {
    let mut path = format!("/api/buckets/org/big/tree?recursive=true&limit={limit}");
    let (mut secs, mut files) = (Vec::new(), 0);
    loop {
        let a = http_ok(addr, "GET", &path, None)?;
        secs.push(a.secs);
        files += String::from_utf8_lossy(&a.body)
            .matches("\"xetHash\"")
            .count();
        let next = a
            .head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("link:"))
            .and_then(|l| Some(&l[l.find('<')? + 1..l.find('>')?]))
            .and_then(|url| url.find("/api/").map(|i| url[i..].to_string()));
        match next {
            Some(p) => path = p,
            None => break,
        }
    }
    if files != LS_FILES {
        bail!("the tree pages of org/big (limit {limit}) held {files} files, not {LS_FILES}");
    }
    Ok(secs)
}

/// The nearest-rank `p` percentile (0-100) of `v`, sorted here.
fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The tree pages of the 100,000-file listing, timed as a client sees them: pages of
/// `xet`'s size (the goal) and of the server's default (`hf`'s), each listing walked
/// several times.
fn page_rows(b: &Buckets) -> Result<Vec<BucketRow>> {
    let mut rows = Vec::new();
    // Enough pages that p99 is not just the slowest one.
    for (limit, walks, whose) in [(XET_PAGE, 20, "xet's"), (DEFAULT_PAGE, 3, "hf's")] {
        let mut secs = Vec::new();
        for _ in 0..walks {
            secs.extend(walk(b.addr(), limit)?);
        }
        let n = secs.len();
        let (p50, p99) = (
            percentile(&mut secs, 50.0) * 1e3,
            percentile(&mut secs, 99.0) * 1e3,
        );
        let max = secs.last().copied().unwrap_or(0.0) * 1e3;
        let cell = format!("p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms ({n} pages)");
        let goal = limit == XET_PAGE;
        rows.push(BucketRow {
            case: format!(
                "tree page of that listing, {limit} entries a page ({whose} page size; `GET /api/buckets/NS/NAME/tree?recursive=true&limit={limit}[&cursor=…]`, {walks} walks of the `Link` pages, connect to last byte over loopback)"
            ),
            xet: cell,
            hf: "-".into(),
            ratio: "-".into(),
            target: if goal {
                format!("p99 < {PAGE_P99_MS:.0} ms")
            } else {
                "(for information)".into()
            },
            met: !goal || p99 < PAGE_P99_MS,
        });
    }
    Ok(rows)
}

impl BucketRow {
    /// The row as the table shows it.
    fn line(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} |",
            self.case,
            self.xet,
            self.hf,
            self.ratio,
            self.target,
            if self.met { "yes" } else { "**no**" }
        )
    }
}

fn render(rows: &[BucketRow]) -> String {
    let mut s = String::from(
        "| case | xet | hf | hf / xet (wall) | target | met |\n|---|---|---|---:|---|---|\n",
    );
    for r in rows {
        s.push_str(&r.line());
        s.push('\n');
    }
    s
}

/// The "Storage buckets" section of the benchmarks doc, with `table`.
fn write_doc(table: &str, runs: usize) -> Result<()> {
    let section = format!(
        "## Storage buckets\n\n`cargo xtask bench --only buckets` (see `xtask/src/bench/buckets.rs`; \
also part of a whole `cargo xtask bench`): `xet` next to the `hf` CLI (huggingface_hub {}, update check, \
telemetry and progress bars off) against a release `xet serve` in Hub mode on loopback (directory store, \
one write token), best of {} runs each, the two taken in turn. Wall and CPU time (user + system, the \
process and the children it waited for, Python's start-up included for `hf`) are the least over the runs, \
peak RSS (VmHWM) the largest; requests are the lines of the server's request log during a run (every \
request, Hub API and CAS). Sync rows: a folder of {SYNC_FILES} files of 64-4096 bytes in 20 folders \
(pseudo-random) and a bucket that `xet sync` made like it (that one run is the first row); both tools are first checked to find \
nothing to do either way; the folder is read into the page cache before each run. Listing: a bucket of \
{LS_FILES} files in 100 folders (one file uploaded with `xet cp`, then addFile batches naming its hash), \
standard output to `/dev/null`, every file checked to be printed once, untimed; `xet`'s peak RSS there \
is a bound: the bench fails above it. Tree pages: timed by the bench itself, one connection per request \
(`Connection: close`), the whole listing walked 20 times at 10,000 entries a page and 3 times at 1,000, \
nearest-rank percentiles over all those pages.\n\n{table}",
        xet_testdata::hub::HUGGINGFACE_HUB_VERSION,
        runs
    );
    super::report::write_section(&crate::workspace_root(), "## Storage buckets", &section)
}
