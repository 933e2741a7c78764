//! A server under load (group `load`): [`CLIENTS`] release `xet` processes at once
//! against one release `xet serve`, first all uploading, then all downloading (each its
//! own file, so nothing deduplicates between them), on a directory store and on an S3
//! store (SeaweedFS on loopback, `xet_testdata::S3Server`).
//!
//! Each phase reports the aggregate MB/s (all clients' bytes over the time from the first
//! start to the last exit), the clients' CPU seconds per GiB (summed), the server's CPU
//! seconds per GiB and its peak RSS (`VmHWM`) against [`SERVER_RSS_MIB`], and for the
//! downloads the p50/p99 time of the reconstruction queries, from the server's request
//! log (`ms=`: until the answer was sent in full). Every phase starts a fresh server on
//! the store, so each peak is that phase's.

use super::{Row, RssBound, Sample, fresh, measure_all, proc_cpu_secs, status_kib, warm};
use anyhow::{Context, Result, bail};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Clients at once.
pub const CLIENTS: usize = 32;

/// The server's peak RSS bound under [`CLIENTS`] clients (MiB). What the server holds for
/// a request is bounded: an upload's body in a pooled receive buffer (at most one xorb,
/// 64 MiB), a download's range mapped from the store (directory) or fetched into memory
/// (S3) one range at a time per request. With 32 clients of one request or few at a
/// time, 2 GiB leaves room for the mapped store pages the kernel keeps resident (page
/// cache, counted in RSS) while still catching memory that grows with the number of
/// readers or with what they read.
pub const SERVER_RSS_MIB: u64 = 2048;

/// A release `xet serve` whose request log goes to a file; killed when dropped.
struct LoggedServe {
    child: Child,
    url: String,
    log: PathBuf,
}

impl LoggedServe {
    fn start(xet: &Path, store: &str, env: &[(&str, String)], log: PathBuf) -> Result<Self> {
        let mut c = Command::new(xet);
        c.args(["serve", "--listen", "127.0.0.1:0", "--store", store])
            .env_remove("XET_LOG")
            .env_remove("XET_TOKEN")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?);
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().context("starting xet serve")?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("xet serve --store {store} did not start: {log}");
        };
        Ok(LoggedServe {
            url: url.to_string(),
            child,
            log,
        })
    }
}

impl Drop for LoggedServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the clients' store is: a directory, or a bucket of a SeaweedFS started here.
enum Store {
    Dir(PathBuf),
    S3 {
        server: xet_testdata::S3Server,
        url: String,
    },
}

impl Store {
    fn name(&self) -> &'static str {
        match self {
            Store::Dir(_) => "directory store",
            Store::S3 { .. } => "S3 store (SeaweedFS)",
        }
    }

    fn url(&self) -> String {
        match self {
            Store::Dir(d) => d.display().to_string(),
            Store::S3 { url, .. } => url.clone(),
        }
    }

    /// The server's environment: the object store's credentials, for S3.
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Store::Dir(_) => Vec::new(),
            Store::S3 { server, .. } => vec![
                ("AWS_ACCESS_KEY_ID", server.access_key_id().to_string()),
                (
                    "AWS_SECRET_ACCESS_KEY",
                    server.secret_access_key().to_string(),
                ),
                ("AWS_REGION", server.region().to_string()),
                ("AWS_ENDPOINT_URL", server.endpoint()),
            ],
        }
    }
}

/// The clients' inputs: one pseudo-random file each, and its file hash.
struct Inputs {
    files: Vec<PathBuf>,
    hashes: Vec<String>,
    each: u64,
}

fn inputs(xet: &Path, size: u64) -> Result<Inputs> {
    let each = (size / CLIENTS as u64).max(1 << 20);
    let dir = crate::workspace_root().join(format!("target/bench-data/load-{}k", each >> 10));
    let (mut files, mut hashes) = (Vec::new(), Vec::new());
    for i in 0..CLIENTS {
        let f = dir.join(format!("c{i:02}.bin"));
        super::ensure_file_seeded(&f, each, 0x10AD + i as u64)?;
        let out = Command::new(xet).args(["hash", "-q"]).arg(&f).output()?;
        if !out.status.success() {
            bail!("xet hash {} failed", f.display());
        }
        hashes.push(String::from_utf8(out.stdout)?.trim().to_string());
        files.push(f);
    }
    Ok(Inputs {
        files,
        hashes,
        each,
    })
}

/// What one phase measured.
struct Phase {
    wall: f64,
    clients: Vec<Sample>,
    server_cpu: f64,
    server_hwm_kib: u64,
    server_anon_kib: u64,
    server_file_kib: u64,
    /// `ms=` of every reconstruction query in the server's log.
    reconstruction_ms: Vec<u64>,
}

/// Start a server on `store`, run `cmds` (made with its URL) at once, and measure.
fn phase(
    xet: &Path,
    store: &Store,
    log: PathBuf,
    cmds: impl FnOnce(&str) -> Vec<Command>,
) -> Result<Phase> {
    let server = LoggedServe::start(xet, &store.url(), &store.env(), log)?;
    let pid = server.child.id();
    let cpu0 = proc_cpu_secs(pid)?;
    // The high-water mark needs no sampling; how it splits between the server's own
    // memory and mapped store pages does.
    let (mut anon, mut file) = (0, 0);
    let (wall, clients) = measure_all(cmds(&server.url), |_| {
        anon = anon.max(status_kib(pid, "RssAnon:").unwrap_or(0));
        file = file.max(status_kib(pid, "RssFile:").unwrap_or(0));
    })?;
    let server_cpu = proc_cpu_secs(pid)? - cpu0;
    let server_hwm_kib = status_kib(pid, "VmHWM:").context("reading xet serve's VmHWM")?;
    // The log line of a request is written once its answer is sent, before the client
    // that asked can exit: every line is in the file by now.
    let log = std::fs::read_to_string(&server.log)?;
    Ok(Phase {
        wall,
        clients,
        server_cpu,
        server_hwm_kib,
        server_anon_kib: anon,
        server_file_kib: file,
        reconstruction_ms: reconstruction_ms(&log),
    })
}

/// `ms=` of each reconstruction query (`/v1/reconstructions/…`, `/v2/reconstructions/…`)
/// in a request log.
fn reconstruction_ms(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| {
            l.contains("path=/v1/reconstructions/") || l.contains("path=/v2/reconstructions/")
        })
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("ms="))?
                .parse()
                .ok()
        })
        .collect()
}

/// The nearest-rank `p` percentile of `v` (sorted here).
fn percentile(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// A client `xet` with a cache of its own, talking to the server only.
fn client(xet: &Path, cache: PathBuf, args: &[&str]) -> Command {
    let mut c = Command::new(xet);
    c.args(args)
        .env("XET_CACHE", cache)
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE")
        .env_remove("XET_TOKEN");
    c
}

pub fn run(xet: &Path, size: u64) -> Result<(Vec<Row>, Vec<RssBound>)> {
    let work = crate::workspace_root().join("target/bench-load");
    fresh(&work)?;
    let inputs = inputs(xet, size)?;
    let mut rows = Vec::new();
    let mut bounds = Vec::new();

    std::fs::create_dir_all(work.join("store"))?;
    let dir_store = Store::Dir(work.join("store"));
    let s3 = xet_testdata::S3Server::start().map_err(anyhow::Error::msg)?;
    let bucket = s3.fresh_bucket().map_err(anyhow::Error::msg)?;
    let s3_store = Store::S3 {
        server: s3,
        url: format!("s3://{bucket}/xet"),
    };
    for store in [dir_store, s3_store] {
        for (row, bound) in store_rows(xet, &store, &inputs, &work)? {
            bounds.push(bound);
            rows.push(row);
        }
    }
    std::fs::remove_dir_all(&work).ok();
    Ok((rows, bounds))
}

/// The upload phase, then the download phase, on one store.
fn store_rows(
    xet: &Path,
    store: &Store,
    inputs: &Inputs,
    work: &Path,
) -> Result<Vec<(Row, RssBound)>> {
    let caches = work.join("caches");
    let out = work.join("out");
    let mut rows = Vec::new();

    fresh(&caches)?;
    for f in &inputs.files {
        warm(f)?;
    }
    let up = phase(xet, store, work.join("upload.log"), |url| {
        (0..CLIENTS)
            .map(|i| {
                let file = inputs.files[i].to_str().expect("UTF-8 path");
                client(
                    xet,
                    caches.join(format!("u{i}")),
                    &["upload", "-q", "--endpoint", url, file],
                )
            })
            .collect()
    })?;
    rows.push(row(store, "upload", inputs, up));

    fresh(&caches)?;
    fresh(&out)?;
    if let Store::Dir(d) = store {
        warm(d)?;
    }
    let down = phase(xet, store, work.join("download.log"), |url| {
        (0..CLIENTS)
            .map(|i| {
                let dest = out.join(format!("c{i}"));
                client(
                    xet,
                    caches.join(format!("d{i}")),
                    &[
                        "download",
                        "-q",
                        "--chunk-cache-size",
                        "0",
                        "--endpoint",
                        url,
                        &inputs.hashes[i],
                        "-o",
                        dest.to_str().expect("UTF-8 path"),
                    ],
                )
            })
            .collect()
    })?;
    for (i, f) in inputs.files.iter().enumerate() {
        let got = std::fs::metadata(out.join(format!("c{i}")))?.len();
        if got != inputs.each {
            bail!("client {i} downloaded {got} bytes of {}", f.display());
        }
    }
    rows.push(row(store, "download", inputs, down));
    Ok(rows)
}

fn row(store: &Store, what: &str, inputs: &Inputs, mut p: Phase) -> (Row, RssBound) {
    let bytes = inputs.each * CLIENTS as u64;
    let latency = if p.reconstruction_ms.is_empty() {
        String::new()
    } else {
        let n = p.reconstruction_ms.len();
        format!(
            "; reconstruction queries p50 {} ms, p99 {} ms (n={n})",
            percentile(&mut p.reconstruction_ms, 50.0),
            percentile(&mut p.reconstruction_ms, 99.0)
        )
    };
    let client_rss = p.clients.iter().map(|s| s.peak_rss_kib).max().unwrap_or(0);
    let case = format!(
        "{CLIENTS} clients {what} {} MiB each at once, xet serve on a {}; peak RSS: the server's (anonymous {} MiB, mapped files {} MiB at most), clients' at most {} MiB{latency}",
        inputs.each >> 20,
        store.name(),
        p.server_anon_kib / 1024,
        p.server_file_kib / 1024,
        client_rss / 1024,
    );
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let row = Row {
        case: case.clone(),
        bytes,
        ours: Sample {
            secs: p.wall,
            peak_rss_kib: p.server_hwm_kib,
            cpu_secs: p.clients.iter().map(|s| s.cpu_secs).sum(),
        },
        reference: None,
        target: "",
        server_cpu: format!("{:.2}", p.server_cpu / gib),
    };
    (
        row,
        RssBound {
            case,
            mib: SERVER_RSS_MIB,
        },
    )
}
