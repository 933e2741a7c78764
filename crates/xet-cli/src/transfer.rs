//! `xet upload`, `xet download` and `xet cache`.

use crate::dest;
use crate::exit::{CliResult, Code, Failure};
use crate::output::Out;
use crate::remote::{self, RemoteArgs};
use crate::run::{cancel_on_signal, read_list};
use anyhow::{Context, anyhow};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xet_hash::MerkleHash;

/// `START-END` (inclusive) or `START-`.
pub fn parse_range(s: &str) -> CliResult<xet_download::FileRange> {
    let bad = || {
        Failure::new(
            Code::Usage,
            anyhow!("--range {s:?}: expected START-END (inclusive) or START-"),
        )
    };
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let start: u64 = a.trim().parse().map_err(|_| bad())?;
    let end = if b.trim().is_empty() {
        None
    } else {
        Some(b.trim().parse::<u64>().map_err(|_| bad())?)
    };
    if end.is_some_and(|e| e < start) {
        return Err(Failure::new(
            Code::Usage,
            anyhow!("--range {s:?}: end is before start"),
        ));
    }
    Ok(xet_download::FileRange { start, end })
}

pub(crate) fn download_code(k: xet_download::ErrorKind) -> Code {
    use xet_download::ErrorKind::*;
    match k {
        NotFound => Code::Rejected,
        InvalidRequest => Code::Usage,
        Verification => Code::Corrupt,
        Network => Code::Network,
        Auth => Code::Auth,
        Output => Code::Input,
        Interrupted => Code::Interrupted,
        Other => Code::Failure,
    }
}

#[derive(clap::Args, Debug)]
pub struct DownloadArgs {
    /// File hashes (hash string form).
    hashes: Vec<String>,
    /// Read more hashes from FILE (or - for stdin): "HASH" or "HASH PATH" per line.
    #[arg(long, value_name = "FILE")]
    files_from: Option<PathBuf>,
    /// Output file, directory (one file per hash), or - for stdout.
    #[arg(short, long, value_name = "PATH|DIR|-")]
    output: Option<PathBuf>,
    /// Only bytes START-END (inclusive) or START- of the file.
    #[arg(long, value_name = "START-END")]
    range: Option<String>,
    /// The file's size, when known.
    #[arg(long)]
    size: Option<u64>,
    /// Chunk cache limit for downloads over HTTP: bytes, or with a K, M, G or T
    /// suffix (powers of 1024); 0 turns the cache off. Default 10G.
    #[arg(long, env = "XET_CHUNK_CACHE_SIZE", value_name = "SIZE", value_parser = parse_size)]
    chunk_cache_size: Option<u64>,
    /// Give the chunk cache its own copy of what is downloaded. By default a whole
    /// file downloaded to the cache's file system is hard-linked into the cache
    /// (no second write or copy on disk); a file later changed in place then no
    /// longer serves as a cache entry (chunks are re-hashed on every cache read).
    #[arg(long, env = "XET_CHUNK_CACHE_COPIES")]
    chunk_cache_copies: bool,
    #[command(flatten)]
    hub: crate::hub::HubDownloadArgs,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// `--chunk-cache-size`: "0", "4096", "512M", "10G" (suffixes are powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(format!(
                        "{s:?}: unknown size suffix {c:?} (use K, M, G or T)"
                    ));
                }
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 0, 4096, 512M, 10G)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// The positional hashes, then the `--files-from` lines (`HASH` or `HASH PATH`).
fn download_entries(a: &DownloadArgs) -> CliResult<Vec<dest::Entry>> {
    let mut entries: Vec<dest::Entry> = a
        .hashes
        .iter()
        .map(|h| dest::Entry {
            hash: h.clone(),
            path: None,
        })
        .collect();
    if let Some(src) = &a.files_from {
        let list = if src == Path::new("-") {
            "stdin".to_string()
        } else {
            src.display().to_string()
        };
        for (n, line) in read_list(src)? {
            let (hash, path) = match line.split_once(char::is_whitespace) {
                Some((h, p)) => (h, Some(PathBuf::from(p.trim()))),
                None => (line.as_str(), None),
            };
            entries.push(dest::Entry {
                hash: hash.to_string(),
                path: path.map(|p| (p, format!("--files-from {list} line {n}"))),
            });
        }
    }
    Ok(entries)
}

pub async fn download(out: &Out, a: DownloadArgs) -> CliResult {
    if a.hashes.iter().any(|h| xet_hub_client::HfAddress::is_hf(h)) {
        let given = [
            ("--files-from", a.files_from.is_some()),
            ("--range", a.range.is_some()),
            ("--size", a.size.is_some()),
        ];
        return crate::hub::download(
            out,
            crate::hub::DownloadInput {
                targets: &a.hashes,
                output: a.output.as_deref(),
                unsupported: given.iter().filter(|g| g.1).map(|g| g.0).collect(),
                hub: &a.hub,
                remote: &a.remote,
                chunk_cache_size: a.chunk_cache_size,
                chunk_cache_copies: a.chunk_cache_copies,
            },
        )
        .await;
    }
    let entries = download_entries(&a)?;
    if entries.is_empty() {
        return Err(Failure::new(
            Code::Usage,
            anyhow!("give at least one file hash (or --files-from)"),
        ));
    }
    if entries.len() > 1 {
        for (flag, given) in [("--size", a.size.is_some()), ("--range", a.range.is_some())] {
            if given {
                return Err(Failure::new(
                    Code::Usage,
                    anyhow!("{flag} applies to one file; {} hashes given", entries.len()),
                ));
            }
        }
    }
    let range = a.range.as_deref().map(parse_range).transpose()?;
    let output = dest::Output::resolve(a.output.as_deref(), &entries)?;
    let dests = output.destinations(&entries)?;
    let to_stdout = dests.is_none();
    let mut requests = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let hash = MerkleHash::from_hex(&e.hash)
            .with_context(|| format!("{:?} is not a xet file hash", e.hash))
            .map_err(|e| Failure::new(Code::Usage, e))?;
        let mut req = match &dests {
            Some(d) => xet_download::DownloadRequest::to_path(hash, d[i].clone()),
            None => xet_download::DownloadRequest::to_writer(hash, Box::new(std::io::stdout())),
        };
        if let Some(r) = range {
            req = req.with_range(r);
        }
        if let Some(s) = a.size {
            req = req.with_size(s);
        }
        requests.push(req);
    }
    if let dest::Output::Dir(Some(d)) = &output {
        std::fs::create_dir_all(d)
            .with_context(|| format!("cannot create {}", d.display()))
            .map_err(Failure::input)?;
    }

    let target = a.remote.target();
    let cas = remote::open(&target, &a.remote).await?;
    let cancel = tokio_util::sync::CancellationToken::new();
    cancel_on_signal(cancel.clone());
    let defaults = xet_download::DownloadOptions::default();
    let embedded = target.is_embedded();
    let options = xet_download::DownloadOptions {
        // The embedded store is already on this disk: caching its chunks would only write
        // every byte twice.
        cache: (!embedded && a.chunk_cache_size != Some(0)).then(|| {
            let c = xet_download::CacheConfig::new(remote::cache_dir(&a.remote.cache_dir))
                .with_link_files(!a.chunk_cache_copies);
            match a.chunk_cache_size {
                Some(max) => c.with_max_bytes(max),
                None => c,
            }
        }),
        stall_timeout: a.remote.stall_timeout().unwrap_or(defaults.stall_timeout),
        // Over HTTP the client's own idle timeout catches stalls; the pipeline's deadline
        // only guards against trickling transfers, and one retry of that is enough.
        max_retries: if embedded { defaults.max_retries } else { 1 },
        cancel: Some(cancel),
        // A range (`--range`) is checked chunk by chunk against its xorbs' hashes.
        chunk_hashes: Some(Arc::default()),
        ..defaults
    };
    let pb = crate::progress::bar(!out.json && !out.quiet && !to_stdout, 0, "download");
    let pbc = pb.clone();
    let progress: xet_download::ProgressFn =
        Arc::new(move |ev: &xet_download::ProgressEvent| match ev {
            xet_download::ProgressEvent::FileStarted { total, .. } => pbc.inc_length(*total),
            xet_download::ProgressEvent::Written { bytes, .. } => pbc.inc(*bytes),
            _ => {}
        });
    let res = xet_download::download(cas, requests, options, Some(progress)).await;
    pb.finish_and_clear();
    let report = res.map_err(|e| {
        let code = download_code(e.kind());
        Failure::new(
            code,
            anyhow::Error::new(e).context(format!("download from {} failed", target.describe())),
        )
    })?;
    if !to_stdout {
        for f in &report.files {
            if out.quiet {
                out.line(f.path.display().to_string());
            } else {
                out.line(format!("{}  {}  {:>12}", f.path.display(), f.hash, f.size));
            }
        }
        if !out.quiet {
            let t = &report.totals;
            out.line(format!(
                "{} files, {} bytes in {:.2}s ({:.1} MB/s); fetched {} bytes, {} from cache, {} resumed",
                t.files,
                t.bytes,
                t.elapsed,
                t.bytes as f64 / 1e6 / t.elapsed.max(1e-9),
                t.bytes_fetched,
                t.bytes_from_cache,
                t.bytes_resumed
            ));
        }
    }
    if !to_stdout {
        let mut doc = serde_json::to_value(&report).map_err(|e| Failure::new(Code::Failure, e))?;
        doc["ok"] = json!(true);
        out.doc(&doc);
    }
    Ok(())
}

pub fn cache(out: &Out, clear: bool, dir: &Option<PathBuf>) -> CliResult {
    let dir = remote::cache_dir(dir);
    let s = if clear {
        xet_download::cache_clear(&dir)
    } else {
        xet_download::cache_stats(&dir)
    }
    .with_context(|| format!("chunk cache at {}", dir.display()))
    .map_err(|e| Failure::new(Code::Failure, e))?;
    let verb = if clear { "cleared" } else { "holds" };
    out.line(format!(
        "chunk cache {} {verb} {} entries, {} chunks of {} xorbs, {} bytes ({} of them in {} downloaded files it shares by hard link)",
        s.dir.display(),
        s.entries,
        s.chunks,
        s.xorbs,
        s.bytes,
        s.linked_bytes,
        s.linked_files,
    ));
    out.doc(&json!({ "ok": true, "dir": s.dir.display().to_string(), "cleared": clear, "entries": s.entries,
                     "chunks": s.chunks, "xorbs": s.xorbs, "linked_files": s.linked_files, "linked_bytes": s.linked_bytes, "bytes": s.bytes }));
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct UploadArgs {
    /// Files and directories (recursively).
    paths: Vec<PathBuf>,
    /// Read more paths from FILE (or - for stdin), one per line. With an hf:// target a
    /// relative path keeps its folders in the repository; an absolute one goes under its name.
    #[arg(long, value_name = "FILE")]
    files_from: Option<PathBuf>,
    /// Upload nothing; report how many bytes would be new and how many are already stored.
    #[arg(long)]
    dry_run: bool,
    /// Read every file, even those unchanged on disk (size, times, inode) since an
    /// earlier upload to the same CAS, which are otherwise reported without reading;
    /// such a file is chunked and hashed again, and uploaded if its content changed.
    #[arg(long)]
    rehash: bool,
    #[command(flatten)]
    hub: crate::hub::HubUploadArgs,
    #[command(flatten)]
    remote: RemoteArgs,
}

pub(crate) struct UploadBar(pub(crate) indicatif::ProgressBar);

impl xet_upload::Progress for UploadBar {
    fn start(&self, _files: usize, total_bytes: u64) {
        self.0.set_length(total_bytes);
    }
    fn processed(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

pub(crate) fn upload_code(e: &xet_upload::UploadError) -> Code {
    match e {
        xet_upload::UploadError::Input { .. } => Code::Input,
        xet_upload::UploadError::Cas(c) => remote::cas_code(c),
        xet_upload::UploadError::Interrupted => Code::Interrupted,
        _ => Code::Failure,
    }
}

pub async fn upload(out: &Out, a: UploadArgs) -> CliResult {
    if a.paths
        .last()
        .and_then(|p| p.to_str())
        .is_some_and(xet_hub_client::HfAddress::is_hf)
    {
        let given = [("--dry-run", a.dry_run), ("--rehash", a.rehash)];
        return crate::hub::upload(
            out,
            crate::hub::UploadInput {
                paths: &a.paths,
                files_from: a.files_from.as_deref(),
                unsupported: given.iter().filter(|g| g.1).map(|g| g.0).collect(),
                hub: &a.hub,
                remote: &a.remote,
            },
        )
        .await;
    }
    // An hf:// address anywhere but last: the destination was put first, as `cp` users
    // might; say so rather than "No such file or directory".
    if let Some(hf) = a
        .paths
        .iter()
        .filter_map(|p| p.to_str())
        .find(|p| xet_hub_client::HfAddress::is_hf(p))
    {
        return Err(Failure::new(
            Code::Usage,
            anyhow!(
                "{hf} is the destination and goes last: xet upload PATH... {hf} \
                 (an hf:// address is never a source)"
            ),
        ));
    }
    let mut roots = a.paths.clone();
    if let Some(src) = &a.files_from {
        roots.extend(read_list(src)?.into_iter().map(|(_, l)| PathBuf::from(l)));
    }
    if roots.is_empty() {
        return Err(Failure::new(
            Code::Usage,
            anyhow!("give at least one file or directory (or --files-from)"),
        ));
    }
    let files = xet_upload::collect_files(&roots).map_err(|e| {
        let code = upload_code(&e);
        Failure::new(code, anyhow::Error::new(e))
    })?;
    let target = a.remote.target();
    remote::check_writable(&target)?;
    let cas = remote::open(&target, &a.remote).await?;
    let cancel = tokio_util::sync::CancellationToken::new();
    cancel_on_signal(cancel.clone());
    let options = xet_upload::UploadOptions {
        dry_run: a.dry_run,
        rehash: a.rehash,
        cache_dir: Some(xet_upload::cache_dir_for(
            &remote::cache_dir(&a.remote.cache_dir),
            &target.cache_identity(),
        )),
        cancel: Some(cancel),
        ..Default::default()
    };
    let pb = crate::progress::bar(
        !out.json && !out.quiet,
        0,
        if a.dry_run { "scan" } else { "upload" },
    );
    let res = xet_upload::upload(cas, &files, &options, Arc::new(UploadBar(pb.clone()))).await;
    pb.finish_and_clear();
    let report = res.map_err(|e| {
        let code = upload_code(&e);
        Failure::new(
            code,
            anyhow::Error::new(e).context(format!("upload to {} failed", target.describe())),
        )
    })?;
    for f in &report.files {
        if out.quiet {
            out.line(f.hash.to_string());
        } else {
            out.line(format!(
                "{}  {}  {:>12}  {}",
                f.path.display(),
                f.hash,
                f.size,
                f.sha256
            ));
        }
    }
    let t = &report.totals;
    let secs = t.elapsed.as_secs_f64();
    if !out.quiet {
        if report.dry_run {
            out.line(format!(
                "dry run: {} files, {} bytes: {} new, {} already present; nothing uploaded",
                t.files, t.bytes, t.new_bytes, t.deduped_bytes
            ));
        } else {
            // What this run skipped or found already done, when anything.
            let mut notes = String::new();
            if t.xorbs_resumed > 0 {
                notes += &format!(
                    ", {} xorbs already sent by an interrupted run",
                    t.xorbs_resumed
                );
            }
            if t.files_unchanged > 0 {
                notes += &format!(
                    ", {} files unchanged since their last upload (not read; --rehash reads them)",
                    t.files_unchanged
                );
            }
            if t.files_verified > 0 {
                notes += &format!(
                    ", {} files re-read and found unchanged since their last upload",
                    t.files_verified
                );
            }
            out.line(format!(
                "{} files, {} bytes: {} new, {} deduped; {} xorbs ({} bytes) and {} shards sent{notes} in {:.2}s ({:.1} MB/s) to {}",
                t.files,
                t.bytes,
                t.new_bytes,
                t.deduped_bytes,
                t.xorbs_sent,
                t.xorb_bytes_sent,
                t.shards_sent,
                secs,
                t.bytes as f64 / 1e6 / secs.max(1e-9),
                target.describe()
            ));
        }
    }
    let mut doc = serde_json::to_value(&report).map_err(|e| Failure::new(Code::Failure, e))?;
    doc["ok"] = json!(true);
    out.doc(&doc);
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Store directory (default: the embedded store), a bundle file (`xet bundle
    /// create`; served read-only: uploads get 405), or `s3://BUCKET[/PREFIX]` for
    /// S3-compatible object storage (credentials, region and endpoint from the
    /// standard AWS_* environment variables, e.g. AWS_ENDPOINT_URL).
    #[arg(long, env = "XET_STORE")]
    store: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
    listen: String,
    /// Accepted bearer token (repeatable); prefix with `read:` for read-only. With a
    /// prefix, a last `:ORG/*` or `:ORG/NAME` scopes it to those Hub repositories
    /// (`write:TOKEN:org/*`): it sees no other, not even whether it exists.
    #[arg(long = "token", value_name = "TOKEN")]
    tokens: Vec<String>,
    /// File of tokens, one per line (`read:`/`write:` prefixes, scopes as for --token,
    /// `#` comments).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Base URL clients reach this server at (for presigned URLs); default: the Host header.
    #[arg(long)]
    public_url: Option<String>,
    /// Answer xorb-grant routes with 404 (clients fall back to direct xorb upload).
    #[arg(long)]
    no_grants: bool,
    /// Answer /v2 routes with 404 (clients fall back to /v1).
    #[arg(long)]
    no_v2: bool,
    /// Lifetime of presigned URLs, in seconds.
    #[arg(long, default_value_t = 3600)]
    url_ttl: u64,
    /// Endpoint of the S3-compatible server for `--store s3://…` (overrides
    /// AWS_ENDPOINT_URL); plain http is accepted for loopback addresses only, unless
    /// AWS_ALLOW_HTTP=true.
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// Conditional writes (If-None-Match: *) for `--store s3://…`: auto (probe the
    /// server), on (require them), off (never; only one process may create a new store).
    #[arg(long, default_value = "auto", value_name = "auto|on|off")]
    s3_conditional_put: xet_store_s3::ConditionalPut,
    /// Seconds between indexing what other servers on the same store (directory or
    /// bucket) registered, for global dedup (0: only at start). Reads never wait for it:
    /// a file the index does not know makes it look again at once.
    #[arg(long, alias = "s3-refresh-secs", default_value_t = xet_store::REFRESH_INTERVAL.as_secs(), value_name = "SECS")]
    refresh_secs: u64,
    /// Close a connection that has not sent a whole request head within SECS of opening
    /// (408 if part of one came); 0: no limit.
    #[arg(long, default_value_t = xet_server::conn::DEFAULT_HEADER_TIMEOUT.as_secs(), value_name = "SECS")]
    header_timeout: u64,
    /// Close a kept-alive connection idle for SECS after its last answer; 0: no limit.
    #[arg(long, default_value_t = xet_server::conn::DEFAULT_KEEPALIVE_TIMEOUT.as_secs(), value_name = "SECS")]
    keepalive_timeout: u64,
    /// Abandon a request body that delivers nothing for SECS (408, connection closed);
    /// 0: no limit.
    #[arg(long, default_value_t = xet_server::conn::DEFAULT_BODY_TIMEOUT.as_secs(), value_name = "SECS")]
    body_timeout: u64,
    /// Drop an answer the client reads nothing of for SECS and close the connection;
    /// 0: no limit.
    #[arg(long, default_value_t = xet_server::conn::DEFAULT_SEND_TIMEOUT.as_secs(), value_name = "SECS")]
    send_timeout: u64,
    /// At most N open connections (the longest idle is closed to make room, else new ones
    /// get 503 + Retry-After); lowered to fit the open-file limit (ulimit -n).
    #[arg(long, default_value_t = xet_server::conn::DEFAULT_MAX_CONNECTIONS as u32, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Run the store's garbage collection (`xet store gc`) every DURATION (`6h`, `1d`);
    /// servers sharing a store may all do it (runs are safe together). Off by default.
    #[arg(long, value_name = "DURATION", value_parser = crate::store_cmd::parse_duration)]
    gc_interval: Option<std::time::Duration>,
    /// The grace period of those collections.
    #[arg(long, default_value = "1d", value_name = "DURATION", value_parser = crate::store_cmd::parse_duration)]
    gc_grace: std::time::Duration,
    /// The Hub API's user: the namespace of repositories created without one, the
    /// author of commits, what `hf auth whoami` shows.
    #[arg(long, default_value = "user", value_name = "NAME")]
    hub_user: String,
    /// End a bucket's event stream (`/api/buckets/{id}/events`) with `reconnect` after
    /// SECS; clients resume from its cursor.
    #[arg(long, default_value_t = xet_server::config::DEFAULT_EVENTS_SESSION.as_secs(), value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    bucket_events_session: u64,
}

/// What `xet serve` serves from: the CAS, the repositories of its Hub API (the same
/// store), and the key of the CAS tokens the Hub API mints (derived from the store's
/// secret, so every server on one store accepts the others' tokens).
struct ServeSources {
    cas: Arc<dyn xet_cas::Cas>,
    repos: Arc<dyn xet_hub::RepoStore>,
    token_key: [u8; 32],
    /// The web front page's figures: the store's statistics (`xet store stats`).
    figures: xet_server::web::FiguresSource,
}

impl ServeSources {
    fn new<B: xet_store::ObjectBackend>(
        store: xet_store::StoreCas<B>,
    ) -> (ServeSources, Arc<xet_store::StoreCas<B>>) {
        let store = Arc::new(store);
        let served = ServeSources {
            cas: store.clone(),
            repos: store.clone(),
            token_key: store.derive_key("xet serve: hub CAS token key v1"),
            figures: {
                let store = store.clone();
                Arc::new(move || {
                    let store = store.clone();
                    Box::pin(async move {
                        let s = store.store_stats().await.map_err(|e| e.to_string())?;
                        Ok(xet_server::web::StoreFigures {
                            file_bytes: s.live_file_bytes,
                            stored_bytes: s.live_xorb_bytes,
                        })
                    })
                })
            },
        };
        (served, store)
    }
}

/// The store of `xet serve --store s3://BUCKET[/PREFIX]`.
async fn open_s3_store(url: &str, a: &ServeArgs) -> CliResult<ServeSources> {
    let mut config = xet_store_s3::S3Config::from_url(url)
        .map_err(|e| Failure::new(Code::Usage, anyhow!("--store: {e}")))?;
    if let Some(e) = &a.s3_endpoint {
        config.endpoint = Some(e.clone());
    }
    config.conditional_put = a.s3_conditional_put;
    let store = xet_store_s3::open_store(config).await.map_err(|e| {
        // Refused credentials are the user's to fix, like a refused token.
        let code = match e {
            xet_cas::CasError::Unauthorized { .. } | xet_cas::CasError::Forbidden(_) => Code::Auth,
            _ => Code::Failure,
        };
        Failure::new(
            code,
            anyhow::Error::new(e).context(format!("cannot open the store at {url}")),
        )
    })?;
    let (served, store) = ServeSources::new(store);
    refresh_every(&store, a.refresh_secs);
    collect_every(&store, a);
    Ok(served)
}

/// The store of `xet serve --store DIR`.
/// Index what other processes on the store registered every `secs` (0: never).
fn refresh_every<B: xet_store::ObjectBackend>(store: &Arc<xet_store::StoreCas<B>>, secs: u64) {
    if secs > 0 {
        store.spawn_refresh(std::time::Duration::from_secs(secs));
    }
}

async fn open_dir_store(dir: &Path, a: &ServeArgs) -> CliResult<ServeSources> {
    let store = crate::remote::open_dir(dir).await?;
    let (served, store) = ServeSources::new(store);
    refresh_every(&store, a.refresh_secs);
    collect_every(&store, a);
    Ok(served)
}

/// `--gc-interval`: a collection every interval ([`xet_store::StoreCas::spawn_gc`]).
fn collect_every<B: xet_store::ObjectBackend>(store: &Arc<xet_store::StoreCas<B>>, a: &ServeArgs) {
    let Some(every) = a.gc_interval.filter(|d| !d.is_zero()) else {
        return;
    };
    if a.gc_grace.is_zero() {
        // The server itself writes to the store: nothing protects an upload in flight.
        eprintln!(
            "xet: warning: --gc-grace 0s: collections have no settle time and no grace, so \
             an upload in flight can lose its xorbs before its commit lands; use a grace \
             longer than your slowest upload (the default is 1d)"
        );
    }
    let opts = xet_store::GcOptions::with_grace(a.gc_grace);
    store.spawn_gc(every, opts);
}

pub async fn serve(out: &Out, a: ServeArgs) -> CliResult {
    let mut tokens = Vec::new();
    for t in &a.tokens {
        tokens.push(
            xet_server::Token::parse(t)
                .map_err(|e| Failure::new(Code::Usage, anyhow!("--token: {e}")))?,
        );
    }
    if let Some(f) = &a.token_file {
        tokens.extend(
            xet_server::load_token_file(f)
                .map_err(|e| Failure::input(anyhow!("--token-file {}: {e}", f.display())))?,
        );
    }
    let s3_url = a.store.as_deref().and_then(|p| p.to_str());
    let bundle = a.store.as_deref().filter(|p| xet_bundle::is_bundle(p));
    // Grant uploads not yet committed spill to disk past their memory budget: for a
    // directory store, into its visible `grants/` directory (cleaned at start-up).
    let (store, serving, spool_dir): (ServeSources, String, Option<PathBuf>) =
        match (bundle, s3_url.filter(|u| xet_store_s3::is_s3_url(u))) {
            (Some(file), _) => {
                // Immutable: nothing to refresh, nowhere to spool.
                let (served, _) = ServeSources::new(remote::open_bundle(file).await?);
                (
                    served,
                    format!("bundle {} (read-only)", file.display()),
                    None,
                )
            }
            (None, Some(url)) => (open_s3_store(url, &a).await?, url.to_string(), None),
            (None, None) => {
                let dir = a.store.clone().unwrap_or_else(remote::default_store_dir);
                let store = open_dir_store(&dir, &a).await?;
                let grants = dir.join("grants");
                std::fs::create_dir_all(&grants)
                    .with_context(|| format!("creating {}", grants.display()))
                    .map_err(Failure::input)?;
                (store, dir.display().to_string(), Some(grants))
            }
        };
    let config = xet_server::ServerConfig {
        listen: a.listen.clone(),
        tokens,
        allow_v2: !a.no_v2,
        // A bundle stores nothing: a grant would only hold data its commit then refuses,
        // so clients go straight to the upload routes, which answer 405.
        allow_grants: !a.no_grants && bundle.is_none(),
        url_ttl: std::time::Duration::from_secs(a.url_ttl.max(1)),
        public_url: a.public_url.clone(),
        header_timeout: std::time::Duration::from_secs(a.header_timeout),
        keepalive_timeout: std::time::Duration::from_secs(a.keepalive_timeout),
        body_timeout: std::time::Duration::from_secs(a.body_timeout),
        send_timeout: std::time::Duration::from_secs(a.send_timeout),
        max_connections: a.max_connections as usize,
        spool_dir,
        hub_user: a.hub_user.clone(),
        cas_token_key: Some(store.token_key),
        bucket_events: xet_server::BucketEventsConfig {
            max_session: std::time::Duration::from_secs(a.bucket_events_session),
            ..Default::default()
        },
        ..Default::default()
    };
    let repos = xet_hub::Repos::new(store.repos);
    let figures = store.figures;
    let server = xet_server::Server::bind_with_hub(config, store.cas, Some(repos))
        .await
        .map_err(|e| match e {
            // The library's message is neutral; which flags give a token is ours to say.
            xet_server::ServerError::NoTokenOnPublicAddress { .. } => {
                Failure::new(Code::Usage, anyhow!("{e}; pass --token or --token-file"))
            }
            xet_server::ServerError::PublicUrl { .. } => {
                Failure::new(Code::Usage, anyhow::Error::new(e))
            }
            _ => Failure::new(Code::Failure, anyhow::Error::new(e)),
        })?;
    server.set_store_figures(figures);
    {
        use std::io::Write;
        // The first line on stdout: scripts and tests wait for it to learn the port.
        let url = server.url();
        let line = if out.json {
            json!({ "listening": url }).to_string()
        } else {
            format!("listening on {url}")
        };
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    }
    eprintln!("xet: serving {serving} (Ctrl-C stops after requests in flight finish)");
    server
        .serve(xet_server::shutdown_signal())
        .await
        .map_err(|e| Failure::new(Code::Failure, anyhow::Error::new(e)))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_with_and_without_suffixes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("10g"), Ok(10 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("10X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("20000000T").is_err());
    }
}
