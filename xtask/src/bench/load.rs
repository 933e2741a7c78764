//! Group `load`: [`CLIENTS`] release `xet` processes at once against one release `xet
//! serve`, first all uploading, then all downloading (each its own file, so nothing
//! deduplicates between them), on a directory store and on an S3 store (SeaweedFS on
//! loopback, `xet_testdata::S3Server`).
//!
//! Each phase reports the aggregate MB/s (all clients' bytes over the time from the first
//! start to the last exit), the clients' CPU seconds per GiB (summed), the server's CPU
//! seconds per GiB and its peak RSS (`VmHWM`) against [`SERVER_RSS_MIB`], and for the
//! downloads the p50/p99 time of the reconstruction queries, from the server's request
//! log (`ms=`: until the answer was sent in full). Every phase starts a fresh server on
//! the store, so each peak is that phase's.

use super::inputs::{Setup, ensure_file, file_hash, fresh, path_str, warm};
use super::measure::{Sample, measure_at_once};
use super::proc::{cpu_secs, status_kib};
use super::report::Row;
use super::serve::{Serve, ServeProcess, xet_client};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Clients at once.
const CLIENTS: usize = 32;

/// The server's peak RSS bound under [`CLIENTS`] clients (MiB). What the server holds for
/// a request is bounded: an upload's body in a pooled receive buffer (at most one xorb,
/// 64 MiB), a download's range mapped from the store (directory) or fetched into memory
/// (S3) one range at a time per request. With 32 clients of one request or few at a
/// time, 2 GiB leaves room for the mapped store pages the kernel keeps resident (page
/// cache, counted in RSS) while still catching memory that grows with the number of
/// readers or with what they read.
const SERVER_RSS_MIB: u64 = 2048;

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

    /// A fresh server on the store; its request log in `log` (emptied first: the log is
    /// the phase's own). The log is parsed, so it is in the default format (no `XET_LOG`).
    fn serve(&self, xet: &Path, log: PathBuf) -> Result<ServeProcess> {
        let _ = std::fs::remove_file(&log);
        let serve = match self {
            Store::Dir(d) => Serve::loopback(xet, d),
            Store::S3 { server, url } => Serve::loopback(xet, url)
                .env("AWS_ACCESS_KEY_ID", server.access_key_id())
                .env("AWS_SECRET_ACCESS_KEY", server.secret_access_key())
                .env("AWS_REGION", server.region())
                .env("AWS_ENDPOINT_URL", server.endpoint()),
        };
        serve.env_remove("XET_LOG").log(log).start()
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
        ensure_file(&f, each, 0x10AD + i as u64)?;
        hashes.push(file_hash(xet, &f)?);
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
    let server = store.serve(xet, log.clone())?;
    let pid = server.pid();
    let cpu0 = cpu_secs(pid)?;
    // The high-water mark needs no sampling; how it splits between the server's own
    // memory and mapped store pages does.
    let (mut anon, mut file) = (0, 0);
    let clients = measure_at_once(cmds(&server.url), || {
        anon = anon.max(status_kib(pid, "RssAnon:").unwrap_or(0));
        file = file.max(status_kib(pid, "RssFile:").unwrap_or(0));
    })?;
    let server_cpu = cpu_secs(pid)? - cpu0;
    let server_hwm_kib = status_kib(pid, "VmHWM:").context("reading xet serve's VmHWM")?;
    // The log line of a request is written once its answer is sent, before the client
    // that asked can exit: every line is in the file by now.
    let log = std::fs::read_to_string(&log)?;
    Ok(Phase {
        wall: clients.iter().map(|r| r.sample.secs).fold(0.0, f64::max),
        clients: clients.iter().map(|r| r.sample).collect(),
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

pub fn rows(s: &Setup) -> Result<Vec<Row>> {
    let work = crate::workspace_root().join("target/bench-load");
    fresh(&work)?;
    let inputs = inputs(&s.xet, s.size)?;
    let mut rows = Vec::new();

    std::fs::create_dir_all(work.join("store"))?;
    let dir_store = Store::Dir(work.join("store"));
    let s3 = xet_testdata::S3Server::start().map_err(anyhow::Error::msg)?;
    let bucket = s3.fresh_bucket().map_err(anyhow::Error::msg)?;
    let s3_store = Store::S3 {
        server: s3,
        url: format!("s3://{bucket}/xet"),
    };
    for store in [dir_store, s3_store] {
        rows.extend(store_rows(&s.xet, &store, &inputs, &work)?);
    }
    std::fs::remove_dir_all(&work).ok();
    Ok(rows)
}

/// The upload phase, then the download phase, on one store.
fn store_rows(xet: &Path, store: &Store, inputs: &Inputs, work: &Path) -> Result<Vec<Row>> {
    let caches = work.join("caches");
    let out = work.join("out");
    let client = |cache: String, args: &[&str]| {
        xet_client(Command::new(xet), args, Some(&caches.join(cache)))
    };

    fresh(&caches)?;
    for f in &inputs.files {
        warm(f)?;
    }
    let up = phase(xet, store, work.join("upload.log"), |url| {
        (0..CLIENTS)
            .map(|i| {
                let file = path_str(&inputs.files[i]).expect("UTF-8 path");
                client(format!("u{i}"), &["upload", "-q", "--endpoint", url, file])
            })
            .collect()
    })?;
    let mut rows = vec![row(store, "upload", inputs, up)];

    fresh(&caches)?;
    fresh(&out)?;
    if let Store::Dir(d) = store {
        warm(d)?;
    }
    let down = phase(xet, store, work.join("download.log"), |url| {
        (0..CLIENTS)
            .map(|i| {
                let dest = out.join(format!("c{i}"));
                let dest = path_str(&dest).expect("UTF-8 path");
                let hash = &inputs.hashes[i];
                let args = [
                    "download",
                    "-q",
                    "--chunk-cache-size",
                    "0",
                    "--endpoint",
                    url,
                    hash,
                    "-o",
                    dest,
                ];
                client(format!("d{i}"), &args)
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

fn row(store: &Store, what: &str, inputs: &Inputs, mut p: Phase) -> Row {
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
    let ours = Sample {
        secs: p.wall,
        peak_rss_kib: p.server_hwm_kib,
        cpu_secs: p.clients.iter().map(|s| s.cpu_secs).sum(),
    };
    Row::xet(case, bytes, ours)
        .server_cpu(format!("{:.2}", p.server_cpu / gib))
        .bound(SERVER_RSS_MIB)
}
