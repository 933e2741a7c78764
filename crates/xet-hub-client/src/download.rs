//! `xet download hf://...`: a file, a folder or a whole repository at one commit, into
//! the HF cache or a plain folder (or one file, or a writer).
//!
//! 1. The revision is resolved to a commit once (`/revision/{rev}`); everything after
//!    asks for that commit, so a branch moving meanwhile cannot mix two trees.
//! 2. The files come from the tree listing (`paths-info` first for a single path, to
//!    tell a file from a folder), filtered by `--include` / `--exclude`.
//! 3. Xet files go through the download pipeline in one call (bounded concurrency,
//!    resume, chunk cache, Xet-hash verification, and the listing's sha256), which
//!    places each one; the others are fetched from `resolve` a few at a time and checked
//!    by git blob id (sha256 for LFS files not in Xet). Both run at once.
//! 4. Nothing reaches its final name before it is verified: files are written under a
//!    temporary name beside it and renamed (the pipeline's `<name>.part`, which a rerun
//!    resumes from; `.<name>.xet-incomplete` for the others). In the cache, a file
//!    already there (its snapshot link leads to a blob of the right size) or whose blob
//!    is there is not fetched again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use serde::Serialize;
use xet_hub::id::hex_decode;
use xet_hub::{CommitId, RepoPath, RepoRef};

use crate::address::HfAddress;
use crate::cache::RepoCache;
use crate::client::{HubClient, TokenKind};
use crate::error::{HubError, RepoTarget, Result};
use crate::tree::{Content, EntryError, RemoteFile};
use crate::verify::{self, Expect, Mismatch};
use xet_download::dest::Target;

/// Where files go.
#[derive(Debug, Clone)]
pub enum Output {
    /// The HF cache at this hub cache folder.
    Cache(PathBuf),
    /// `-o PATH`: a folder (files keep their repository paths below it), or, when the
    /// address names one file and PATH is not an existing folder nor written with a
    /// trailing `/`, that file.
    Path(PathBuf),
    /// `-o -`: one file to stdout.
    Stdout,
}

pub struct DownloadSpec {
    pub address: HfAddress,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub output: Output,
}

/// How to run the transfer.
#[derive(Debug, Clone)]
pub struct Options {
    /// For the Xet files (its `cancel` stops the other fetches too).
    pub pipeline: xet_download::DownloadOptions,
    /// The CAS client's idle timeout, if not its default.
    pub idle_timeout: Option<Duration>,
    /// Files fetched from `resolve` at once.
    pub concurrency: usize,
}

/// Progress of the whole transfer: its total, then bytes as they are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Total(u64),
    Bytes(u64),
}

pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// One file of the outcome.
#[derive(Debug, Clone, Serialize)]
pub struct DownloadedFile {
    /// In the repository.
    pub path: String,
    /// On this machine (`-` for stdout); in the cache, the snapshot link.
    pub local: PathBuf,
    pub size: u64,
    pub xet_hash: Option<String>,
    pub sha256: Option<String>,
    pub git_oid: String,
    /// `xet`, `resolve`, or `cache` (nothing fetched).
    pub source: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct DownloadOutcome {
    pub repo: String,
    pub revision: String,
    pub commit: String,
    pub files: Vec<DownloadedFile>,
    /// Bytes of all files.
    pub bytes: u64,
    /// Bytes received over the network (compressed, for Xet files).
    pub bytes_fetched: u64,
    pub bytes_from_cache: u64,
    /// Seconds.
    pub elapsed: f64,
}

/// Where one file's bytes go.
enum Dest {
    /// Written to `tmp`, checked, renamed to `path` (a Xet file: the pipeline's own
    /// part file beside `path` instead).
    Path { path: PathBuf, tmp: PathBuf },
    /// Written through (stdout, a device): checked as it passes, after the fact.
    Writer(Box<dyn std::io::Write + Send>),
}

struct Job {
    index: usize,
    file: RemoteFile,
    dest: Dest,
}

pub async fn download(
    client: &HubClient,
    spec: DownloadSpec,
    opts: Options,
    progress: ProgressFn,
) -> Result<DownloadOutcome> {
    let started = Instant::now();
    let repo = spec.address.repo.clone();
    let rev = spec.address.revision_or_default().to_string();
    let (commit, _) = client.repo_info(&repo, &rev).await?;
    let (listed, whole_repo) = list(client, &spec.address, &commit).await?;
    let files = select(&listed, &spec, &commit)?;
    let (jobs, mut report) = plan(
        &spec.output,
        &repo,
        &commit,
        &files,
        spec.address.path.as_ref(),
    )?;
    progress(Progress::Total(jobs.iter().map(|j| j.file.size).sum()));
    let (xet_jobs, resolve_jobs): (Vec<Job>, Vec<Job>) =
        jobs.into_iter().partition(|j| j.file.xet_hash().is_some());
    for j in xet_jobs.iter().chain(&resolve_jobs) {
        report[j.index].source = if j.file.xet_hash().is_some() {
            "xet"
        } else {
            "resolve"
        };
    }
    let subject = RepoTarget::repo(&repo).at(&commit.to_string());
    let fetched = Arc::new(AtomicU64::new(0));
    let (xet_stats, ()) = tokio::try_join!(
        fetch_xet(client, &subject, xet_jobs, &opts, progress.clone()),
        fetch_resolved(
            client,
            &repo,
            &commit,
            resolve_jobs,
            &opts,
            progress,
            fetched.clone()
        ),
    )?;
    if let Output::Cache(root) = &spec.output {
        finish_cache(
            &RepoCache::new(root, &repo),
            &rev,
            &commit,
            &files,
            whole_repo.then_some(&listed[..]),
        )?;
    }
    Ok(DownloadOutcome {
        repo: repo.to_string(),
        revision: rev,
        commit: commit.to_string(),
        bytes: report.iter().map(|f| f.size).sum(),
        files: report,
        bytes_fetched: xet_stats.0 + fetched.load(Ordering::Relaxed),
        bytes_from_cache: xet_stats.1,
        elapsed: started.elapsed().as_secs_f64(),
    })
}

/// The files at the address (one file, a folder, or all), and whether that is the
/// commit's whole tree.
async fn list(
    client: &HubClient,
    addr: &HfAddress,
    commit: &CommitId,
) -> Result<(Vec<RemoteFile>, bool)> {
    let rev = commit.to_string();
    let subject = RepoTarget::repo(&addr.repo).at(&rev);
    let entries = match &addr.path {
        None => client.list_tree(&addr.repo, &rev, None, true).await?,
        Some(p) => {
            let info = client
                .paths_info(&addr.repo, &rev, std::slice::from_ref(p))
                .await?;
            let is_file = info.iter().any(|e| {
                e.path() == p.as_str() && matches!(e, xet_hub::api::TreeEntry::File { .. })
            });
            if is_file {
                info
            } else {
                client.list_tree(&addr.repo, &rev, Some(p), true).await?
            }
        }
    };
    let mut files = Vec::new();
    for e in &entries {
        let f = RemoteFile::from_entry(e).map_err(|e| match e {
            EntryError::Unsafe(source) => HubError::UnsafePath {
                subject: subject.clone(),
                url: client.endpoint().to_string(),
                source,
            },
            EntryError::Invalid(why) => HubError::BadAnswer {
                action: "listing",
                subject: subject.clone(),
                url: client.endpoint().to_string(),
                why,
            },
        })?;
        // A listing of a folder holds only what is below it.
        if let Some(f) = f.filter(|f| addr.path.as_ref().is_none_or(|p| f.path.is_within(p))) {
            files.push(f);
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files.dedup_by(|a, b| a.path == b.path);
    Ok((files, addr.path.is_none()))
}

/// The listed files `--include` / `--exclude` keep; none is an error naming the path.
fn select(
    listed: &[RemoteFile],
    spec: &DownloadSpec,
    commit: &CommitId,
) -> Result<Vec<RemoteFile>> {
    let files: Vec<RemoteFile> = listed
        .iter()
        .filter(|f| crate::glob::selected(f.path.as_str(), &spec.include, &spec.exclude))
        .cloned()
        .collect();
    if files.is_empty() {
        let mut subject =
            RepoTarget::repo(&spec.address.repo).at(spec.address.revision_or_default());
        if let Some(p) = &spec.address.path {
            subject = subject.path(p.as_str());
        }
        if listed.is_empty() {
            return Err(HubError::EntryNotFound { subject });
        }
        return Err(HubError::Usage(format!(
            "{subject} (commit {commit}) has {} files, but none matches the include and exclude patterns",
            listed.len()
        )));
    }
    Ok(files)
}

/// The jobs for the files not already where they go, and the outcome of every file
/// (in `files` order).
fn plan(
    output: &Output,
    repo: &RepoRef,
    commit: &CommitId,
    files: &[RemoteFile],
    addressed: Option<&RepoPath>,
) -> Result<(Vec<Job>, Vec<DownloadedFile>)> {
    let single = matches!(files, [f] if Some(&f.path) == addressed);
    let mut jobs = Vec::new();
    let mut report = Vec::with_capacity(files.len());
    let mut blobs_planned: HashMap<&str, ()> = HashMap::new();
    let cache = match output {
        Output::Cache(root) => {
            let c = RepoCache::new(root, repo);
            c.prepare()
                .map_err(|e| HubError::local("cannot prepare the cache", c.dir(), e))?;
            Some(c)
        }
        _ => None,
    };
    for (index, f) in files.iter().enumerate() {
        let (local, dest) = match (output, &cache) {
            (Output::Cache(_), Some(c)) => {
                let local = c.pointer_path(commit, &f.path);
                let blob = c.blob_path(f.etag());
                let needed = !c.is_cached(commit, f) && !c.has_blob(f);
                let first = blobs_planned.insert(f.etag(), ()).is_none();
                let tmp = blob.with_file_name(format!("{}.xet-incomplete", f.etag()));
                (
                    local,
                    (needed && first).then_some(Dest::Path { path: blob, tmp }),
                )
            }
            (Output::Stdout, _) if single => {
                ("-".into(), Some(Dest::Writer(Box::new(std::io::stdout()))))
            }
            (Output::Stdout, _) => {
                return Err(HubError::Usage(format!(
                    "-o - writes one file to stdout; the address names {} files",
                    files.len()
                )));
            }
            (Output::Path(p), _) => {
                let path = plain_destination(p, f, single);
                stays_under(p, &path, f)?;
                // As for `xet download HASH -o PATH`: a link is followed (its target
                // gets the file), a device or FIFO is written into, never replaced.
                let dest = match xet_download::dest::resolve(&path) {
                    Ok(Target::Replace(real)) => Dest::Path {
                        tmp: stable_tmp(&real),
                        path: real,
                    },
                    Ok(Target::WriteInto(real)) => Dest::Writer(Box::new(open_existing(&real)?)),
                    Err(xet_download::DownloadError::Io { cause, .. }) => {
                        let cause = std::io::Error::new(cause.kind(), cause.to_string());
                        return Err(HubError::local("cannot write to", &path, cause));
                    }
                    Err(e) => return Err(HubError::Usage(format!("{}: {e}", f.path))),
                };
                (path, Some(dest))
            }
            (Output::Cache(_), None) => unreachable!("the cache is opened for Output::Cache"),
        };
        report.push(DownloadedFile {
            path: f.path.to_string(),
            local,
            size: f.size,
            xet_hash: f.xet_hash().map(|h| h.to_string()),
            sha256: f.sha256().map(str::to_string),
            git_oid: f.git_oid.clone(),
            source: "cache",
        });
        if let Some(dest) = dest {
            jobs.push(Job {
                index,
                file: f.clone(),
                dest,
            });
        }
    }
    Ok((jobs, report))
}

/// `-o P`: the file itself when the address names one file and P is not a folder
/// (existing, or written with a trailing `/`); else the repository path below P.
fn plain_destination(p: &Path, f: &RemoteFile, single: bool) -> PathBuf {
    let as_dir = p.is_dir() || p.to_string_lossy().ends_with(std::path::is_separator);
    if single && !as_dir {
        return p.to_path_buf();
    }
    let mut out = p.to_path_buf();
    out.extend(f.path.as_str().split('/'));
    out
}

/// Repository paths are checked (no `..`, nothing absolute), but a symbolic link already
/// inside `-o DIR` could still lead a file out of it: refused, as for `--files-from`.
fn stays_under(dir: &Path, path: &Path, f: &RemoteFile) -> Result<()> {
    if !path.starts_with(dir) || path == dir || !dir.exists() {
        return Ok(());
    }
    let canon =
        std::fs::canonicalize(dir).map_err(|e| HubError::local("cannot resolve", dir, e))?;
    let out = xet_download::dest::leads_out(&canon, path)
        .map_err(|e| HubError::local("cannot check where it leads", path, e))?;
    if out {
        return Err(HubError::Usage(format!(
            "{}: {} leads out of {} through a symbolic link; remove the link or choose another -o",
            f.path,
            path.display(),
            dir.display()
        )));
    }
    Ok(())
}

fn open_existing(p: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .map_err(|e| HubError::local("cannot open", p, e))
}

/// `.<name>.xet-incomplete` beside `path`, where a file from `resolve` is written and
/// checked before it is renamed to `path`.
fn stable_tmp(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.xet-incomplete"))
}

/// The Xet files, through the download pipeline, which checks each one's sha256 and
/// places it. Returns (bytes fetched, bytes from the chunk cache).
async fn fetch_xet(
    client: &HubClient,
    subject: &RepoTarget,
    jobs: Vec<Job>,
    opts: &Options,
    progress: ProgressFn,
) -> Result<(u64, u64)> {
    if jobs.is_empty() {
        return Ok((0, 0));
    }
    let rev = subject.revision().unwrap_or_default().to_string();
    let token_url = client.xet_token_url(subject.repo_ref(), TokenKind::Read, &rev);
    let cas = Arc::new(client.xet_cas(subject, &token_url, opts.idle_timeout)?);
    let mut requests = Vec::with_capacity(jobs.len());
    let mut files = Vec::with_capacity(jobs.len());
    for job in jobs {
        let hash = job.file.xet_hash().expect("partitioned on the Xet hash");
        let sha256 = job
            .file
            .sha256()
            .and_then(hex_decode)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .expect("the listing's sha256 of a Xet file is checked to be 64 hex digits");
        let req = match job.dest {
            // Straight to `path`: the pipeline checks the sha256 before its rename (see
            // `DownloadRequest::with_sha256`), so a second temporary name and rename
            // here bought nothing. Placing 1,000 small files that way took 1 s after
            // their download at 80 ms, one after another; reading each file back to
            // hash it cost 2.9-3.5 s of CPU per GiB, against 1.7-1.8.
            Dest::Path { path, .. } => {
                std::fs::create_dir_all(path.parent().expect("has a folder"))
                    .map_err(|e| HubError::local("cannot create the folder of", &path, e))?;
                xet_download::DownloadRequest::to_path(hash, &path)
            }
            Dest::Writer(w) => xet_download::DownloadRequest::to_writer(hash, w),
        };
        requests.push(req.with_size(job.file.size).with_sha256(sha256));
        files.push(job.file);
    }
    let on_event: xet_download::ProgressFn =
        Arc::new(move |ev: &xet_download::ProgressEvent| match ev {
            xet_download::ProgressEvent::FileStarted { resumed, .. } => {
                progress(Progress::Bytes(*resumed))
            }
            xet_download::ProgressEvent::Written { bytes, .. } => progress(Progress::Bytes(*bytes)),
            _ => {}
        });
    let report = xet_download::download(cas, requests, opts.pipeline.clone(), Some(on_event))
        .await
        .map_err(|source| match source.kind() {
            xet_download::ErrorKind::Interrupted => HubError::Interrupted,
            // Named by its path in the repository, where one file failed.
            _ => HubError::Download {
                subject: match source.file().and_then(|h| path_of(&files, h)) {
                    Some(p) => subject.clone().path(p),
                    None => subject.clone(),
                },
                source,
            },
        })?;
    Ok((report.totals.bytes_fetched, report.totals.bytes_from_cache))
}

/// The repository path of the (first) file with Xet hash `hash`.
fn path_of(files: &[RemoteFile], hash: xet_hash::MerkleHash) -> Option<&str> {
    files
        .iter()
        .find(|f| f.xet_hash() == Some(hash))
        .map(|f| f.path.as_str())
}

/// [`settle`] on a blocking thread: placing a file fsyncs it, and the resolve path places
/// many at once (1,000 small files over 80 ms took 10.2 s with the fsyncs on the
/// executor, their waits one after the other on its threads).
async fn settle_off_executor(
    subject: RepoTarget,
    file: RemoteFile,
    paths: Option<(PathBuf, PathBuf)>,
    checked: std::result::Result<(), Mismatch>,
) -> Result<()> {
    tokio::task::spawn_blocking(move || settle(&subject, &file, paths.as_ref(), checked))
        .await
        .map_err(|source| HubError::Internal {
            what: "placing a downloaded file",
            source,
        })?
}

/// After a file was written and checked: rename it into place, or remove it and say why.
fn settle(
    subject: &RepoTarget,
    file: &RemoteFile,
    paths: Option<&(PathBuf, PathBuf)>,
    checked: std::result::Result<(), Mismatch>,
) -> Result<()> {
    let subject = subject.clone().path(file.path.as_str());
    match (checked, paths) {
        // Synced before the rename: after a crash the cache holds the whole file or
        // none, never an empty or short one under its final name.
        (Ok(()), Some((tmp, path))) => {
            let placed = std::fs::File::open(tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| HubError::local("cannot sync", tmp, e))
                .and_then(|()| {
                    xet_mmap::durable::rename_durably(tmp, path)
                        .map_err(|e| HubError::local("cannot rename into place", path, e))
                });
            if placed.is_err() {
                let _ = std::fs::remove_file(tmp);
            }
            placed
        }
        (Ok(()), None) => Ok(()),
        (Err(e), paths) => {
            if let Some((tmp, _)) = paths {
                let _ = std::fs::remove_file(tmp);
            }
            Err(match e {
                Mismatch::Io(source) => HubError::Local {
                    what: "cannot write",
                    path: paths.map(|p| p.0.clone()).unwrap_or_else(|| "-".into()),
                    source,
                },
                Mismatch::Body(why) => HubError::Transfer { subject, why },
                e => HubError::Verify {
                    subject,
                    why: e.to_string(),
                },
            })
        }
    }
}

/// The files not in Xet, from `resolve` at the commit, a few at a time.
async fn fetch_resolved(
    client: &HubClient,
    repo: &RepoRef,
    commit: &CommitId,
    jobs: Vec<Job>,
    opts: &Options,
    progress: ProgressFn,
    fetched: Arc<AtomicU64>,
) -> Result<()> {
    let cancel = opts.pipeline.cancel.clone().unwrap_or_default();
    let rev = commit.to_string();
    let subject = RepoTarget::repo(repo).at(&rev);
    let all = futures_util::stream::iter(jobs.into_iter().map(Ok)).try_for_each_concurrent(
        opts.concurrency.max(1),
        |job| {
            let (progress, fetched, subject, rev) = (
                progress.clone(),
                fetched.clone(),
                subject.clone(),
                rev.clone(),
            );
            async move {
                let response = client.resolve_get(repo, &rev, &job.file.path).await?;
                let expect = match job.file.sha256() {
                    Some(sha) => Expect::Sha256(sha.to_string()),
                    None => Expect::GitBlob(job.file.git_oid.clone()),
                };
                let count = |n: u64| {
                    fetched.fetch_add(n, Ordering::Relaxed);
                    progress(Progress::Bytes(n));
                };
                let (sink, paths): (Box<dyn std::io::Write + Send>, _) = match job.dest {
                    Dest::Path { path, tmp } => (create(&tmp)?, Some((tmp, path))),
                    Dest::Writer(w) => (w, None),
                };
                let checked =
                    verify::copy_body(response, sink, job.file.size, &expect, &count).await;
                settle_off_executor(subject, job.file, paths, checked).await
            }
        },
    );
    tokio::select! {
        r = all => r,
        () = cancel.cancelled() => Err(HubError::Interrupted),
    }
}

fn create(tmp: &Path) -> Result<Box<dyn std::io::Write + Send>> {
    let parent = tmp.parent().expect("has a folder");
    std::fs::create_dir_all(parent).map_err(|e| HubError::local("cannot create", parent, e))?;
    let f = std::fs::File::create(tmp).map_err(|e| HubError::local("cannot create", tmp, e))?;
    Ok(Box::new(std::io::BufWriter::with_capacity(1 << 20, f)))
}

/// Snapshot links for every selected file, the ref, and the tree listing when the whole
/// tree was listed.
fn finish_cache(
    cache: &RepoCache,
    rev: &str,
    commit: &CommitId,
    files: &[RemoteFile],
    whole_tree: Option<&[RemoteFile]>,
) -> Result<()> {
    let local = |what, e| HubError::local(what, cache.dir(), e);
    for f in files {
        if !cache.is_cached(commit, f) {
            cache
                .link(commit, f)
                .map_err(|e| local("cannot link a snapshot file in", e))?;
        }
    }
    cache
        .write_ref(rev, commit)
        .map_err(|e| local("cannot write a ref in", e))?;
    if let Some(all) = whole_tree {
        cache
            .write_tree(commit, all)
            .map_err(|e| local("cannot write the tree listing in", e))?;
    }
    Ok(())
}

impl Content {
    /// `xet`, `lfs` or `regular`, for listings.
    pub fn kind(&self) -> &'static str {
        match self {
            Content::Xet { .. } => "xet",
            Content::Lfs { .. } => "lfs",
            Content::Git => "regular",
        }
    }
}
