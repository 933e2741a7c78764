//! `xet bundle create | import | ls | verify`: a store's objects in one SWH read shard
//! (`xet-bundle`), for air-gapped transfer and read-only serving.

use crate::exit::{CliResult, Code, Failure};
use crate::output::Out;
use crate::remote::{self, RemoteArgs, Target};
use anyhow::anyhow;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use xet_bundle::{Bundle, BundleError, OpenLimits, Selection, Wanted};
use xet_hash::MerkleHash;

#[derive(clap::Subcommand, Debug)]
pub enum BundleAction {
    /// Write the xorbs and shards that files need (or every object, --all) into one
    /// bundle file, from the embedded store, --store DIR|BUNDLE or --endpoint URL.
    Create(CreateArgs),
    /// Store every object of a bundle in a store or server, each validated as an upload
    /// is; a bad object is named and the rest imported.
    Import(ImportArgs),
    /// List a bundle's manifest and objects (hash strings and raw SWH keys).
    Ls {
        /// Bundle file.
        bundle: PathBuf,
    },
    /// Check a bundle: its SWH index and hash function, every xorb and shard, and that
    /// every file of its manifest can be rebuilt.
    Verify {
        /// Bundle file.
        bundle: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// The bundle file to write (replaced if it exists, once the new one is complete).
    out: PathBuf,
    /// Files to bundle (hash strings).
    hashes: Vec<String>,
    /// Read more files from FILE (or - for stdin): "HASH" or "HASH NAME" per line; the
    /// name is kept in the manifest.
    #[arg(long, value_name = "FILE")]
    files_from: Option<PathBuf>,
    /// Every xorb and shard of the store (not with --endpoint: the HTTP API lists nothing).
    #[arg(long, conflicts_with_all = ["hashes", "files_from"])]
    all: bool,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// Bundle file.
    bundle: PathBuf,
    #[command(flatten)]
    remote: RemoteArgs,
}

pub async fn run(out: &Out, action: BundleAction) -> CliResult {
    match action {
        BundleAction::Create(a) => create(out, a).await,
        BundleAction::Import(a) => import(out, a).await,
        BundleAction::Ls { bundle } => ls(out, &bundle).await,
        BundleAction::Verify { bundle } => verify(out, &bundle).await,
    }
}

/// The exit code for a bundle error.
fn code(e: &BundleError) -> Code {
    match e {
        BundleError::FileNotFound { .. } => Code::Rejected,
        BundleError::Source { source, .. } | BundleError::Target { source, .. } => {
            remote::cas_code(source)
        }
        BundleError::Write { .. } | BundleError::Encode { .. } | BundleError::Stage { .. } => {
            Code::Input
        }
        BundleError::Download(e) => crate::transfer::download_code(e.kind()),
        BundleError::Upload(e) => crate::transfer::upload_code(e),
        BundleError::HashMismatch { .. } => Code::Corrupt,
        e if e.is_invalid_bundle() => Code::Input,
        _ => Code::Failure,
    }
}

fn failure(e: BundleError) -> Failure {
    Failure::new(code(&e), e)
}

/// A problem of an import or verification and its causes, on one line: "xorb H (key K):
/// rejected: the xorb's chunk 3 …".
fn with_causes(p: &xet_bundle::Problem) -> String {
    let mut text = p.to_string();
    let mut cause = std::error::Error::source(p);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Progress of a bundle operation on a bar (hidden unless stderr is a terminal).
struct Bar(indicatif::ProgressBar);

impl xet_bundle::Progress for Bar {
    fn start(&self, total_bytes: u64) {
        self.0.set_length(total_bytes);
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

fn bar(out: &Out, what: &str) -> (indicatif::ProgressBar, Arc<Bar>) {
    let pb = crate::progress::bar(!out.json && !out.quiet, 0, what);
    (pb.clone(), Arc::new(Bar(pb)))
}

async fn open_bundle(path: &Path) -> CliResult<Arc<Bundle>> {
    let p = path.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || Bundle::open(&p, &OpenLimits::default()))
        .await
        .map_err(|e| Failure::new(Code::Failure, anyhow!("opening the bundle: {e}")))?;
    opened.map(Arc::new).map_err(failure)
}

fn parse_hash(s: &str, what: &str) -> CliResult<MerkleHash> {
    MerkleHash::from_hex(s).map_err(|e| {
        Failure::new(
            Code::Usage,
            anyhow!("{what}: {s:?} is not a xet file hash: {e}"),
        )
    })
}

/// The files asked for: the positional hashes, then `--files-from` lines (`HASH [NAME]`).
fn selection(a: &CreateArgs) -> CliResult<Selection> {
    if a.all {
        return Ok(Selection::All);
    }
    let mut wanted = Vec::new();
    for h in &a.hashes {
        wanted.push(Wanted {
            hash: parse_hash(h, "argument")?,
            name: None,
        });
    }
    if let Some(src) = &a.files_from {
        for (n, line) in crate::run::read_list(src)? {
            let (hash, name) = match line.split_once(char::is_whitespace) {
                Some((h, rest)) => (h, Some(rest.trim().to_string())),
                None => (line.as_str(), None),
            };
            let what = format!("--files-from {} line {n}", src.display());
            wanted.push(Wanted {
                hash: parse_hash(hash, &what)?,
                name,
            });
        }
    }
    if wanted.is_empty() {
        return Err(Failure::new(
            Code::Usage,
            anyhow!("give file hashes, --files-from FILE, or --all"),
        ));
    }
    Ok(Selection::Files(wanted))
}

async fn create(out: &Out, a: CreateArgs) -> CliResult {
    let selection = selection(&a)?;
    let target = a.remote.target();
    let started = Instant::now();
    let (pb, progress) = bar(out, "bundle");
    let res = match &target {
        Target::Embedded(path) => create_from_store(path, &selection, &a.out, progress).await,
        Target::Http { .. } => {
            create_from_endpoint(&target, &a.remote, &selection, &a.out, progress).await
        }
    };
    pb.finish_and_clear();
    let r = res?;
    let secs = started.elapsed().as_secs_f64();
    if out.quiet {
        out.line(r.path.display().to_string());
    } else {
        out.line(format!(
            "bundle {}: {} files, {} objects ({} xorbs, {} shards, the manifest), {} bytes in {:.2}s ({:.1} MB/s) from {}",
            r.path.display(),
            r.files,
            r.objects,
            r.xorbs,
            r.shards,
            r.bytes,
            secs,
            r.bytes as f64 / 1e6 / secs.max(1e-9),
            target.describe()
        ));
    }
    out.doc(
        &json!({ "ok": true, "path": r.path.display().to_string(), "files": r.files,
                     "objects": r.objects, "xorbs": r.xorbs, "shards": r.shards,
                     "object_bytes": r.object_bytes, "bytes": r.bytes, "elapsed": secs }),
    );
    Ok(())
}

/// From a store directory (or a bundle: a subset of one is a bundle too).
async fn create_from_store(
    path: &Path,
    selection: &Selection,
    dest: &Path,
    progress: Arc<Bar>,
) -> CliResult<xet_bundle::CreateReport> {
    if xet_bundle::is_bundle(path) {
        let backend = xet_bundle::BundleBackend::new(open_bundle(path).await?);
        return xet_bundle::create(&backend, selection, dest, progress)
            .await
            .map_err(failure);
    }
    if !path.is_dir() {
        return Err(Failure::input(anyhow!(
            "there is no store at {} (a store directory or a bundle)",
            path.display()
        )));
    }
    let backend = xet_store::FsBackend::open(path).await.map_err(|e| {
        Failure::new(
            remote::cas_code(&e),
            anyhow::Error::new(e).context(format!("cannot open the store at {}", path.display())),
        )
    })?;
    xet_bundle::create(&backend, selection, dest, progress)
        .await
        .map_err(failure)
}

/// From a server: its API hands out file contents, not stored xorbs or shards, so
/// `xet_bundle::create_from_cas` downloads the files (verified), uploads them into a
/// temporary store beside the output — the same file hashes, xorbs packed anew — and
/// bundles that store.
async fn create_from_endpoint(
    target: &Target,
    r: &RemoteArgs,
    selection: &Selection,
    dest: &Path,
    progress: Arc<Bar>,
) -> CliResult<xet_bundle::CreateReport> {
    let Selection::Files(wanted) = selection else {
        return Err(Failure::new(
            Code::Usage,
            anyhow!(
                "--all needs a store (--store DIR): a server's HTTP API does not list its objects"
            ),
        ));
    };
    let cas = remote::open(target, r).await?;
    xet_bundle::create_from_cas(cas, wanted, dest, progress)
        .await
        .map_err(|e| {
            Failure::new(
                code(&e),
                anyhow::Error::new(e)
                    .context(format!("bundling files from {} failed", target.describe())),
            )
        })
}

async fn import(out: &Out, a: ImportArgs) -> CliResult {
    let bundle = open_bundle(&a.bundle).await?;
    let target = a.remote.target();
    remote::check_writable(&target)?;
    let cas = remote::open(&target, &a.remote).await?;
    let started = Instant::now();
    let (pb, progress) = bar(out, "import");
    // Over HTTP more objects in flight hide round trips; a local store validates on
    // its own blocking threads and gains nothing from more than a few.
    let concurrency = if target.is_embedded() { 4 } else { 8 };
    let options = xet_bundle::ImportOptions { concurrency };
    let res = xet_bundle::import(bundle.clone(), cas, options, progress).await;
    pb.finish_and_clear();
    let r = res.map_err(|e| {
        let c = code(&e);
        Failure::new(
            c,
            anyhow::Error::new(e).context(format!(
                "import of bundle {} into {} failed",
                a.bundle.display(),
                target.describe()
            )),
        )
    })?;
    let secs = started.elapsed().as_secs_f64();
    let line = format!(
        "bundle {} into {}: xorbs {} stored, {} present, {} rejected; shards {} stored, {} present, {} rejected; {} bytes stored in {:.2}s ({:.1} MB/s of the bundle's {} bytes)",
        a.bundle.display(),
        target.describe(),
        r.xorbs.stored,
        r.xorbs.present,
        r.xorbs.rejected,
        r.shards.stored,
        r.shards.present,
        r.shards.rejected,
        r.bytes_stored,
        secs,
        bundle.object_bytes() as f64 / 1e6 / secs.max(1e-9),
        bundle.object_bytes(),
    );
    if !out.quiet {
        out.line(line);
    }
    if !r.rejected.is_empty() {
        let listed: Vec<String> = r.rejected.iter().map(with_causes).collect();
        return Err(Failure::input(anyhow!(
            "{} objects of bundle {} rejected, the others imported: {}",
            listed.len(),
            a.bundle.display(),
            listed.join("; ")
        )));
    }
    let counts = |c: xet_bundle::KindCounts| json!({ "stored": c.stored, "present": c.present, "rejected": c.rejected });
    out.doc(
        &json!({ "ok": true, "bundle": a.bundle.display().to_string(), "target": target.describe(),
                     "xorbs": counts(r.xorbs), "shards": counts(r.shards),
                     "bytes_stored": r.bytes_stored, "elapsed": secs }),
    );
    Ok(())
}

async fn ls(out: &Out, path: &Path) -> CliResult {
    let b = open_bundle(path).await?;
    let m = b.manifest();
    let sha = |d: &Option<[u8; 32]>| d.map(|d| xet_hash::hex::encode(&d));
    out.line(format!(
        "bundle {}: {} version {}, {} files, {} xorbs, {} shards, {} bytes; manifest key {}",
        path.display(),
        m.format,
        m.version,
        m.files.len(),
        m.xorbs.len(),
        m.shards.len(),
        b.bytes().len(),
        xet_hash::hex::encode(&xet_bundle::MANIFEST_KEY)
    ));
    let mut files = Vec::with_capacity(m.files.len());
    for f in &m.files {
        let s = sha(&f.sha256);
        out.line(format!(
            "file   {}  {:>12}  {}  {}",
            f.hash,
            f.size,
            s.as_deref().unwrap_or("-"),
            f.name.as_deref().unwrap_or("")
        ));
        files.push(
            json!({ "hash": f.hash.to_string(), "size": f.size, "sha256": s, "name": f.name }),
        );
    }
    let mut objects = Vec::new();
    for (kind, h) in m.objects() {
        let size = b.object_len(kind, &h).unwrap_or(0);
        out.line(format!(
            "{:<6} {h}  key {}  {size:>12}",
            kind.name(),
            h.raw_hex()
        ));
        objects.push(
            json!({ "kind": kind.name(), "hash": h.to_string(), "key": h.raw_hex(), "size": size }),
        );
    }
    out.doc(&json!({ "ok": true, "path": path.display().to_string(), "format": m.format, "version": m.version,
                     "manifest_key": xet_hash::hex::encode(&xet_bundle::MANIFEST_KEY),
                     "bytes": b.bytes().len(), "files": files, "objects": objects }));
    Ok(())
}

async fn verify(out: &Out, path: &Path) -> CliResult {
    let bundle = open_bundle(path).await?;
    let started = Instant::now();
    let (pb, progress) = bar(out, "verify");
    let res = xet_bundle::verify(bundle, progress).await;
    pb.finish_and_clear();
    let r = res.map_err(failure)?;
    let secs = started.elapsed().as_secs_f64();
    if !r.is_ok() {
        let listed: Vec<String> = r.problems.iter().map(with_causes).collect();
        return Err(Failure::input(anyhow!(
            "bundle {} is not valid: {}",
            path.display(),
            listed.join("; ")
        )));
    }
    let live = r.swh.map_or(0, |s| s.live);
    if !out.quiet {
        out.line(format!(
            "bundle {} is valid: {} xorbs and {} shards ({} bytes) checked, {} files reconstructible, SWH index of {live} entries in {:.2}s",
            path.display(),
            r.xorbs,
            r.shards,
            r.object_bytes,
            r.files,
            secs
        ));
    }
    out.doc(&json!({ "ok": true, "path": path.display().to_string(), "xorbs": r.xorbs, "shards": r.shards,
                     "files": r.files, "object_bytes": r.object_bytes, "swh_live_entries": live, "elapsed": secs }));
    Ok(())
}
