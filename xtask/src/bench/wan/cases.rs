//! The rows of `bench --wan` for one profile: the big-file upload and download (with the
//! first-xorb-byte row), many small files, and a Hub repository, each `xet` next to the
//! reference through the link.

use super::first_byte::first_byte;
use super::link::{Link, Profile, SERVE_ADDR};
use crate::bench::inputs::{fresh, path_str, warm};
use crate::bench::measure::{Contender, Rounds, Run, Sample, best, interleave, sides};
use crate::bench::report::WanRow;
use crate::bench::serve::{
    REF_DOWNLOAD, REF_UPLOAD, REF_UPLOAD_LIST, RequestLog, Serve, Slot, hf_quiet, hub_client,
    reference, xet_client,
};
use anyhow::{Result, bail};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const SMALL_FILES: usize = 2000;
pub const SMALL_MIN: usize = 1 << 10;
pub const SMALL_MAX: usize = 64 << 10;

/// The Hub row's repository: this many of the small files.
const HUB_FILES: usize = 1000;

/// What every case of one profile shares.
pub struct Ctx<'a> {
    pub link: &'a Link,
    /// The xtask binary the link's helpers run (`bench --wan-helper ...`).
    pub exe: &'a Path,
    pub xet: &'a Path,
    pub py: &'a Path,
    pub work: &'a Path,
    pub rounds: Rounds<'a>,
    pub server: Slot,
}

impl Ctx<'_> {
    fn p(&self, s: &str) -> PathBuf {
        self.work.join(s)
    }

    /// `xet serve` on `store` in the server namespace, its log appended to `<store>.log`.
    fn serve(&self, store: &Path) -> Serve {
        Serve::with(self.link.server(self.xet), SERVE_ADDR, store).log(store.with_extension("log"))
    }

    /// A fresh store and server, and fresh client directories.
    fn restart(&self, store: &str, dirs: &[&str]) -> Result<()> {
        for d in dirs {
            fresh(&self.p(d))?;
        }
        self.server.restart(&self.p(store), |s| self.serve(s))
    }

    fn xet(&self, args: &[&str], cache: &str) -> Command {
        xet_client(self.link.client(self.xet), args, Some(&self.p(cache)))
    }

    /// `POST /api/buckets/{id}` from inside the server namespace, past the link.
    fn create_bucket(&self, id: &str) -> Result<()> {
        let st = self
            .link
            .server(self.exe)
            .args(["bench", "--wan-helper", "create-bucket", SERVE_ADDR, id])
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("creating the bucket {id} failed");
        }
        Ok(())
    }

    /// A Hub client (`xet` or `hf`) in the client namespace, talking to the server
    /// through the link, every home and cache under `home`.
    fn hub_client(&self, program: &Path, args: &[&str], home: &str) -> Command {
        let mut c = self.link.client(program);
        hub_client(&mut c, &self.link.serve_url(), &self.p(home));
        c.args(args);
        c
    }

    fn reference(&self, script: &str, args: &[&str], cache: &str) -> Command {
        reference(self.link.client(self.py), script, args, &self.p(cache))
    }

    /// Every run of both sides, taken in turn, each charged with the server's CPU; the
    /// server is stopped afterwards.
    fn alternate(&self, pair: [Contender<'_>; 2]) -> Result<[Vec<Run>; 2]> {
        let pid = || self.server.pid();
        let contenders = pair.into_iter().map(|c| c.server(pid)).collect();
        let runs = interleave(&self.rounds, contenders)?;
        self.server.stop();
        Ok(sides(runs))
    }
}

/// Least CPU seconds per GiB over the runs (the least disturbed), the client's or the
/// server's.
fn cpu_per_gib(runs: &[Run], bytes: u64, server: bool) -> f64 {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    runs.iter()
        .map(|r| {
            if server {
                r.server_cpu.unwrap_or(0.0)
            } else {
                r.sample.cpu_secs
            }
        })
        .fold(f64::INFINITY, f64::min)
        / gib
}

/// The client and server CPU columns of a pair of sides.
fn cpu_cols(x: &[Run], r: &[Run], bytes: u64) -> (String, String) {
    let col = |server| {
        format!(
            "{:.2} / {:.2}",
            cpu_per_gib(x, bytes, server),
            cpu_per_gib(r, bytes, server)
        )
    };
    (col(false), col(true))
}

/// The big-file rows' cells: MB/s with the fraction of the link rate.
fn rate_cell(bytes: u64, s: &Sample, p: &Profile) -> String {
    let bps = bytes as f64 / s.secs;
    format!(
        "{:.1} MB/s ({:.0}%)",
        bps / 1e6,
        100.0 * bps / p.bytes_per_sec()
    )
}

/// A big-file row: each side's best rate next to the time `bytes` need on the link.
fn rate_row(ctx: &Ctx<'_>, case: String, x: &[Run], r: &[Run], bytes: u64) -> WanRow {
    let p = ctx.link.profile;
    let (cpu, server_cpu) = cpu_cols(x, r, bytes);
    let (bx, br) = (best(x), best(r));
    WanRow {
        link: p.label(),
        case,
        xet: rate_cell(bytes, &bx, &p),
        reference: rate_cell(bytes, &br, &p),
        ratio: format!("{:.2}x", br.secs / bx.secs),
        link_note: format!("{:.1} s", bytes as f64 / p.bytes_per_sec()),
        cpu,
        server_cpu,
    }
}

/// A row of many small files: each side's best time next to the time `bytes` alone
/// need at the link's rate.
fn link_time_row(ctx: &Ctx<'_>, case: String, x: &[Run], r: &[Run], bytes: u64) -> WanRow {
    let p = ctx.link.profile;
    let link_secs = bytes as f64 / p.bytes_per_sec();
    let (cpu, server_cpu) = cpu_cols(x, r, bytes);
    let cell = |s: &Sample| format!("{:.2} s ({:.1}x the link time)", s.secs, s.secs / link_secs);
    let (bx, br) = (best(x), best(r));
    WanRow {
        link: p.label(),
        case,
        xet: cell(&bx),
        reference: cell(&br),
        ratio: format!("{:.2}x", br.secs / bx.secs),
        link_note: format!("{link_secs:.2} s"),
        cpu,
        server_cpu,
    }
}

/// `xet upload -q --endpoint URL <xet_input>` and the reference's `script` with its
/// arguments, taken in turn, each run into a fresh store and its own fresh cache
/// (`caches`: xet's, the reference's) with `warm` read into the page cache first.
fn upload_runs(
    ctx: &Ctx<'_>,
    warm_first: &Path,
    xet_input: &str,
    (script, ref_args): (&str, &[&str]),
    [xet_cache, ref_cache]: [&str; 2],
) -> Result<[Vec<Run>; 2]> {
    let url = ctx.link.serve_url();
    let fresh_run = |cache: &str| -> Result<()> {
        warm(warm_first)?;
        ctx.restart("store", &[cache])
    };
    ctx.alternate([
        Contender::new(
            || Ok(ctx.xet(&["upload", "-q", "--endpoint", &url, xet_input], xet_cache)),
            || fresh_run(xet_cache),
        ),
        Contender::new(
            || Ok(ctx.reference(script, ref_args, ref_cache)),
            || fresh_run(ref_cache),
        ),
    ])
}

pub fn big_upload(ctx: &Ctx<'_>, input: &Path, size: u64) -> Result<WanRow> {
    let inp = path_str(input)?;
    let url = ctx.link.serve_url();
    let [x, r] = upload_runs(ctx, input, inp, (REF_UPLOAD, &[inp, &url]), ["xc", "rc"])?;
    Ok(rate_row(
        ctx,
        format!("upload {} MiB", size >> 20),
        &x,
        &r,
        size,
    ))
}

/// The store the download rows' server reads, filled once outside the link.
fn download_store(ctx: &Ctx<'_>, input: &Path) -> Result<PathBuf> {
    let store = ctx.p("dstore");
    if !store.join(".prepared").exists() {
        fresh(&store)?;
        fresh(&ctx.p("prep"))?;
        let args = [
            "upload",
            "-q",
            "--store",
            path_str(&store)?,
            path_str(input)?,
        ];
        let st = xet_client(Command::new(ctx.xet), &args, Some(&ctx.p("prep")))
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("preparing the download store {} failed", store.display());
        }
        std::fs::write(store.join(".prepared"), b"")?;
    }
    Ok(store)
}

/// The download rows: the big file, and the first xorb byte of those same runs.
pub fn big_download(ctx: &Ctx<'_>, input: &Path, size: u64, hash: &str) -> Result<[WanRow; 2]> {
    let url = ctx.link.serve_url();
    let out = ctx.p("out.bin");
    let outs = path_str(&out)?;
    let size_s = size.to_string();
    let store = download_store(ctx, input)?;
    ctx.server.set(ctx.serve(&store).start()?);
    let clean = |cache: &str| -> Result<()> {
        warm(&store)?;
        fresh(&ctx.p(cache))?;
        let _ = std::fs::remove_file(&out);
        Ok(())
    };
    let [x, r] = ctx.alternate([
        Contender::new(
            || {
                Ok(ctx.xet(
                    &["download", "-q", "--endpoint", &url, hash, "-o", outs],
                    "xdc",
                ))
            },
            || clean("xdc"),
        ),
        Contender::new(
            || Ok(ctx.reference(REF_DOWNLOAD, &[hash, &url, outs, &size_s], "rdc")),
            || clean("rdc"),
        ),
    ])?;
    let _ = std::fs::remove_file(&out);
    let p = ctx.link.profile;
    let events = ctx.link.events.lock().expect("events").clone();
    let (fx, fr) = (first_byte(&events, &x), first_byte(&events, &r));
    Ok([
        rate_row(ctx, format!("download {} MiB", size >> 20), &x, &r, size),
        WanRow {
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

pub fn small_upload(ctx: &Ctx<'_>, tree: &Path, list: &Path, bytes: u64) -> Result<WanRow> {
    let url = ctx.link.serve_url();
    let (tree_s, list_s) = (path_str(tree)?, path_str(list)?);
    let ref_side = (REF_UPLOAD_LIST, &[list_s, url.as_str()][..]);
    let [x, r] = upload_runs(ctx, tree, tree_s, ref_side, ["xsc", "rsc"])?;
    let case = format!(
        "upload {SMALL_FILES} files of 1-64 KiB ({:.1} MiB)",
        bytes as f64 / (1 << 20) as f64
    );
    Ok(link_time_row(ctx, case, &x, &r, bytes))
}

/// The Hub repository's files: the first `HUB_FILES` small files, in one directory;
/// the directory and their bytes.
fn hub_files(ctx: &Ctx<'_>, list: &Path) -> Result<(PathBuf, u64)> {
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
    Ok((files, bytes))
}

/// `xet download hf://` next to `hf download` of a repository of `HUB_FILES` small
/// files, from `xet serve` speaking the Hub API, into fresh HF homes.
pub fn hub_download(ctx: &Ctx<'_>, list: &Path) -> Result<WanRow> {
    let hf = xet_testdata::hub::hf_cli().map_err(anyhow::Error::msg)?;
    let (files, bytes) = hub_files(ctx, list)?;
    fresh(&ctx.p("hstore"))?;
    ctx.server.set(ctx.serve(&ctx.p("hstore")).hub().start()?);
    // Filled from inside the server namespace, past the link.
    fresh(&ctx.p("hprep"))?;
    let mut prep = ctx.link.server(ctx.xet);
    prep.arg("upload")
        .arg("-q")
        .arg(&files)
        .arg("hf://org/many");
    hub_client(&mut prep, &format!("http://{SERVE_ADDR}"), &ctx.p("hprep"));
    if !prep.stdout(Stdio::null()).status()?.success() {
        bail!("uploading {} to hf://org/many failed", files.display());
    }
    let url = ctx.link.serve_url();
    let client = |program: &Path, args: &[&str], home: &str| {
        let mut c = ctx.link.client(program);
        hub_client(&mut c, &url, &ctx.p(home));
        c.args(args);
        c
    };
    let [x, r] = ctx.alternate([
        Contender::new(
            || Ok(client(ctx.xet, &["download", "-q", "hf://org/many"], "xh")),
            || fresh(&ctx.p("xh")),
        ),
        Contender::new(
            || {
                let mut c = client(&hf, &["download", "org/many"], "hh");
                hf_quiet(&mut c);
                Ok(c)
            },
            || fresh(&ctx.p("hh")),
        ),
    ])?;
    let case = format!(
        "Hub download of a repository of {HUB_FILES} files of 1-64 KiB ({:.1} MiB; `xet download hf://` / `hf download`)",
        bytes as f64 / (1 << 20) as f64
    );
    Ok(link_time_row(ctx, case, &x, &r, bytes))
}

/// The files under `dir`, counted.
fn count_files(dir: &Path) -> Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        n += if e.file_type()?.is_dir() {
            count_files(&e.path())?
        } else {
            1
        };
    }
    Ok(n)
}

/// `xet sync` next to `hf sync` of the small files, each direction a row: up, each run
/// into an empty bucket (a fresh store and server, the bucket created past the link);
/// down, from a bucket filled once past the link into an empty folder, each run checked
/// to have written every file. Each tool's requests per run (the server's request log)
/// are in its cell.
pub fn bucket_sync(ctx: &Ctx<'_>, tree: &Path, files: usize, bytes: u64) -> Result<[WanRow; 2]> {
    let hf = xet_testdata::hub::hf_cli().map_err(anyhow::Error::msg)?;
    let dir = path_str(tree)?;
    let counts = [RefCell::new(Vec::new()), RefCell::new(Vec::new())];
    let count = |i: usize, log: &RequestLog| -> Result<()> {
        counts[i].borrow_mut().push(log.count()?);
        Ok(())
    };
    let requests = |i: usize| {
        let v = std::mem::take(&mut *counts[i].borrow_mut());
        let (lo, hi) = (v.iter().min().copied(), v.iter().max().copied());
        match (lo, hi) {
            (Some(lo), Some(hi)) if lo != hi => format!("{lo}-{hi} requests"),
            (_, Some(hi)) => format!("{hi} requests"),
            _ => "-".into(),
        }
    };
    let with_requests = |mut row: WanRow, x: String, r: String| {
        row.xet = format!("{}; {x}", row.xet);
        row.reference = format!("{}; {r}", row.reference);
        row
    };

    // Up: into an empty bucket each run.
    let up_bucket = "hf://buckets/org/up";
    let log = RequestLog(ctx.p("bstore.log"));
    let fresh_run = |home: &str| -> Result<()> {
        warm(tree)?;
        fresh(&ctx.p(home))?;
        ctx.server
            .restart(&ctx.p("bstore"), |s| ctx.serve(s).hub())?;
        ctx.create_bucket("org/up")?;
        log.clear()
    };
    let args = ["sync", dir, up_bucket];
    let [x, r] = ctx.alternate([
        Contender::new(
            || Ok(ctx.hub_client(ctx.xet, &args, "bxu")),
            || fresh_run("bxu"),
        )
        .after(|_| count(0, &log)),
        Contender::new(
            || {
                let mut c = ctx.hub_client(&hf, &args, "bhu");
                hf_quiet(&mut c);
                Ok(c)
            },
            || fresh_run("bhu"),
        )
        .after(|_| count(1, &log)),
    ])?;
    let mib = bytes as f64 / (1 << 20) as f64;
    let up = with_requests(
        link_time_row(
            ctx,
            format!(
                "bucket sync up, {files} files of 1-64 KiB ({mib:.1} MiB) into an empty bucket (`xet sync DIR hf://buckets/NS/NAME` / `hf sync`)"
            ),
            &x,
            &r,
            bytes,
        ),
        requests(0),
        requests(1),
    );

    // Down: from a bucket filled once, into an empty folder each run.
    let store = ctx.p("bdstore");
    fresh(&store)?;
    let log = RequestLog(store.with_extension("log"));
    ctx.server.set(ctx.serve(&store).hub().start()?);
    ctx.create_bucket("org/down")?;
    fresh(&ctx.p("bprep"))?;
    let down_bucket = "hf://buckets/org/down";
    let mut prep = ctx.link.server(ctx.xet);
    prep.args(["sync", dir, down_bucket]);
    hub_client(&mut prep, &format!("http://{SERVE_ADDR}"), &ctx.p("bprep"));
    if !prep.stdout(Stdio::null()).status()?.success() {
        bail!("filling {down_bucket} from {dir} failed");
    }
    let out = ctx.p("bout");
    let outs = path_str(&out)?;
    let clean = |home: &str| -> Result<()> {
        warm(&store)?;
        fresh(&ctx.p(home))?;
        fresh(&out)?;
        log.clear()
    };
    let check = |i: usize, who: &str| -> Result<()> {
        count(i, &log)?;
        let n = count_files(&out)?;
        if n != files {
            bail!("{who} sync down wrote {n} of the {files} files");
        }
        Ok(())
    };
    let args = ["sync", down_bucket, outs];
    let [x, r] = ctx.alternate([
        Contender::new(
            || Ok(ctx.hub_client(ctx.xet, &args, "bxd")),
            || clean("bxd"),
        )
        .after(|_| check(0, "xet")),
        Contender::new(
            || {
                let mut c = ctx.hub_client(&hf, &args, "bhd");
                hf_quiet(&mut c);
                Ok(c)
            },
            || clean("bhd"),
        )
        .after(|_| check(1, "hf")),
    ])?;
    let _ = std::fs::remove_dir_all(&out);
    let down = with_requests(
        link_time_row(
            ctx,
            format!(
                "bucket sync down, the same {files} files into an empty folder (`xet sync hf://buckets/NS/NAME DIR` / `hf sync`)"
            ),
            &x,
            &r,
            bytes,
        ),
        requests(0),
        requests(1),
    );
    Ok([up, down])
}
