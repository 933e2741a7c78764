//! `xet upload PATH... hf://...`: local files into a repository as one commit (or a few,
//! for very large trees), as `hf upload` does it:
//!
//! 1. a folder's contents go to the repository's root (or below the address's path),
//!    a file under its own name; `.git/` and `.cache/huggingface/` are left out;
//! 2. the repository is created if missing (409: it exists), the branch if the revision
//!    does not exist;
//! 3. `preupload` says which files go to Xet (`lfs`) and which inline (`regular`), and
//!    the remote id of each existing file;
//! 4. the `lfs` files go through the upload pipeline (dedup, xorbs, shards carrying each
//!    file's sha256, which is how the Hub resolves a commit's `lfsFile` to a Xet file),
//!    with a CAS token from the write-token route; regular files are hashed here;
//! 5. files whose id equals the remote one are left out; what remains is committed with
//!    `parentCommit`, so a branch that moved meanwhile fails the commit instead of being
//!    overwritten. Nothing changed: no commit.
//!
//! An interrupted run is resumed by running it again: the pipeline skips what the CAS
//! already has, and the commit is made then.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Serialize;
use xet_hub::api::{self, CommitLine, UploadMode};
use xet_hub::{CommitId, RepoPath};

use crate::address::{DEFAULT_REVISION, HfAddress};
use crate::client::{HubClient, TokenKind};
use crate::download::{Progress, ProgressFn};
use crate::error::{ErrorKind, HubError, RepoTarget, Result};

/// Most files in one commit.
pub const MAX_FILES_PER_COMMIT: usize = 1000;
/// Most inline (regular) bytes in one commit, before base64.
pub const MAX_INLINE_BYTES_PER_COMMIT: u64 = 100 << 20;
/// Bytes of each file `preupload` sees.
const SAMPLE_BYTES: usize = 512;

pub struct UploadSpec {
    pub address: HfAddress,
    /// Files and folders.
    pub sources: Vec<Source>,
    pub private: bool,
    pub message: Option<String>,
    pub description: String,
    /// Open a pull request onto the revision with the changes instead of committing to
    /// it (its first commit creates it; later ones, for very large trees, go to it).
    pub create_pr: bool,
}

/// A file or folder to upload, and where it goes below the address's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub local: PathBuf,
    /// `None`: a file goes under its name, a folder's files under their paths inside it
    /// (as `hf upload` places its argument). `Some(p)`: the file goes to `p`, a folder's
    /// files below `p`.
    pub at: Option<RepoPath>,
}

impl Source {
    /// A command-line argument: placed by its name.
    pub fn argument(local: PathBuf) -> Source {
        Source { local, at: None }
    }

    /// An entry of a list of paths (`--files-from`): a relative path keeps its folders in
    /// the repository, as `rsync --files-from` and `tar -T` keep them, so a dataset's
    /// layout is pushed as it is on disk; an absolute path is placed by its name, as an
    /// argument. A relative path that leaves the current folder (`..`) has no place in
    /// the repository and is refused.
    pub fn listed(entry: &str) -> Result<Source> {
        let local = PathBuf::from(entry);
        if local.is_absolute() {
            return Ok(Source::argument(local));
        }
        let kept: Vec<String> = local
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if kept.is_empty() {
            // "." itself: the current folder's files under their own paths.
            return Ok(Source::argument(local));
        }
        let at = RepoPath::parse(&kept.join("/")).map_err(|e| {
            HubError::Usage(format!(
                "{entry}: a listed relative path is kept in the repository, and this one \
                 cannot be ({e}); list it by its absolute path to upload it under its name"
            ))
        })?;
        Ok(Source {
            local,
            at: Some(at),
        })
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub pipeline: xet_upload::UploadOptions,
    pub idle_timeout: Option<Duration>,
}

/// One file of the outcome.
#[derive(Debug, Clone, Serialize)]
pub struct UploadedFile {
    /// In the repository.
    pub path: String,
    pub local: PathBuf,
    pub size: u64,
    pub xet_hash: String,
    pub sha256: String,
    /// `lfs` (through Xet) or `regular` (inline).
    pub mode: &'static str,
    /// Committed now; false when the repository already had this content there (or the
    /// Hub said to ignore the file).
    pub new: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct MadeCommit {
    pub commit: String,
    pub url: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct UploadOutcome {
    pub repo: String,
    pub revision: String,
    pub created_repo: bool,
    /// The revision's head afterwards (`None` only for an empty repository left as is).
    pub commit: Option<String>,
    /// The commits made, in order (none when nothing changed).
    pub commits: Vec<MadeCommit>,
    pub files: Vec<UploadedFile>,
    /// The pull request opened (`create_pr`), if anything changed.
    pub pull_request: Option<PullRequest>,
    /// Seconds.
    pub elapsed: f64,
}

/// A pull request an upload opened.
#[derive(Debug, Clone, Serialize)]
pub struct PullRequest {
    pub num: u64,
    /// `refs/pr/N`: the revision to download it at.
    pub revision: String,
    pub url: String,
}

/// A local file and where it goes.
#[derive(Debug, Clone)]
struct LocalFile {
    local: PathBuf,
    path: RepoPath,
    size: u64,
}

/// What is known of a file once hashed.
#[derive(Debug, Clone)]
struct Hashed {
    xet_hash: String,
    sha256: String,
    /// The git blob id (regular files).
    git_oid: Option<String>,
}

pub async fn upload(
    client: &HubClient,
    spec: UploadSpec,
    opts: Options,
    progress: ProgressFn,
) -> Result<UploadOutcome> {
    let started = Instant::now();
    let repo = spec.address.repo.clone();
    let rev = spec.address.revision_or_default().to_string();
    let subject = RepoTarget::repo(&repo).at(&rev);
    let files = collect(&spec.sources, spec.address.path.as_ref())?;
    progress(Progress::Total(files.iter().map(|f| f.size).sum()));
    let (created_repo, parent) = ensure_target(client, &subject, spec.private).await?;
    let answers = preupload(client, &subject, &files).await?;
    let (lfs, regular): (Vec<usize>, Vec<usize>) = (0..files.len())
        .partition(|&i| files[i].size > 0 && answers[i].upload_mode == UploadMode::Lfs);
    let mut hashed: Vec<Option<Hashed>> = vec![None; files.len()];
    upload_lfs(
        client,
        &subject,
        &files,
        &lfs,
        &opts,
        &progress,
        &mut hashed,
    )
    .await?;
    hash_regular(&files, &regular, &progress, &mut hashed).await?;
    let mut report = Vec::with_capacity(files.len());
    let mut changed = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let h = hashed[i].take().expect("every file was hashed");
        let is_lfs = lfs.binary_search(&i).is_ok();
        let local_id = if is_lfs {
            &h.sha256
        } else {
            h.git_oid.as_deref().unwrap_or_default()
        };
        let unchanged = answers[i]
            .oid
            .as_deref()
            .is_some_and(|o| o.eq_ignore_ascii_case(local_id));
        let new = !unchanged && !answers[i].should_ignore;
        if new {
            changed.push((i, is_lfs, h.sha256.clone()));
        }
        report.push(UploadedFile {
            path: f.path.to_string(),
            local: f.local.clone(),
            size: f.size,
            xet_hash: h.xet_hash,
            sha256: h.sha256,
            mode: if is_lfs { "lfs" } else { "regular" },
            new,
        });
    }
    let (commits, pull_request) =
        commit_all(client, &subject, &spec, &files, &changed, parent).await?;
    let head = commits
        .last()
        .map(|c| c.commit.clone())
        .or(parent.map(|p| p.to_string()));
    Ok(UploadOutcome {
        repo: repo.to_string(),
        revision: rev,
        created_repo,
        commit: head,
        pull_request,
        commits,
        files: report,
        elapsed: started.elapsed().as_secs_f64(),
    })
}

/// The files of `sources` and their repository paths below `prefix`. Paths that would
/// be the same in the repository are refused.
fn collect(sources: &[Source], prefix: Option<&RepoPath>) -> Result<Vec<LocalFile>> {
    if sources.is_empty() {
        return Err(HubError::Usage(
            "give at least one file or folder to upload".into(),
        ));
    }
    let mut out: Vec<LocalFile> = Vec::new();
    for Source { local: root, at } in sources {
        let meta = std::fs::metadata(root).map_err(|e| HubError::local("cannot read", root, e))?;
        let found = xet_upload::collect_files(std::slice::from_ref(root)).map_err(|e| match e {
            xet_upload::UploadError::Input { path, cause } => {
                HubError::local("cannot read", path, cause)
            }
            e => HubError::Usage(e.to_string()),
        })?;
        for local in found {
            let inside = if meta.is_dir() {
                let rel = local.strip_prefix(root).expect("found below its root");
                rel.iter()
                    .map(|c| c.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/")
            } else {
                String::new()
            };
            if meta.is_dir() && is_left_out(&inside) {
                continue;
            }
            let rel = match (at, meta.is_dir()) {
                (Some(at), true) => format!("{at}/{inside}"),
                (Some(at), false) => at.to_string(),
                (None, true) => inside,
                (None, false) => root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            };
            let full = match prefix {
                Some(p) => format!("{p}/{rel}"),
                None => rel,
            };
            let path = RepoPath::parse(&full).map_err(|e| {
                HubError::Usage(format!("{} cannot be uploaded: {e}", local.display()))
            })?;
            let size = std::fs::metadata(&local)
                .map_err(|e| HubError::local("cannot read", &local, e))?
                .len();
            out.push(LocalFile { local, path, size });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(w) = out.windows(2).find(|w| w[0].path == w[1].path) {
        return Err(HubError::Usage(format!(
            "{} and {} would both be {} in the repository",
            w[0].local.display(),
            w[1].local.display(),
            w[0].path
        )));
    }
    Ok(out)
}

/// What `hf upload` leaves out of a folder: git's own files (`.git` in every spelling a
/// Hub refuses) and huggingface_hub's local metadata.
fn is_left_out(rel: &str) -> bool {
    rel.split('/').any(xet_hub::git_reserved) || rel.starts_with(".cache/huggingface/")
}

/// Create the repository (409: it exists) and the branch if needed; the head commit of
/// the revision (`None` for an empty repository).
async fn ensure_target(
    client: &HubClient,
    subject: &RepoTarget,
    private: bool,
) -> Result<(bool, Option<CommitId>)> {
    let repo = subject.repo_ref();
    let rev = subject.revision().unwrap_or(DEFAULT_REVISION);
    let created = match client.create_repo(repo, private).await {
        Ok(created) => created,
        // A token that may write to the repository but not create one: go on if the
        // repository is there (as huggingface_hub does).
        Err(e) if e.kind() == ErrorKind::Auth => match client.repo_info(repo, rev).await {
            Ok(_) => false,
            Err(_) => return Err(e),
        },
        Err(e) => return Err(e),
    };
    match client.repo_info(repo, rev).await {
        Ok((head, _)) => Ok((created, Some(head))),
        Err(HubError::RevisionNotFound { .. }) if rev == DEFAULT_REVISION => Ok((created, None)),
        Err(HubError::RevisionNotFound { .. }) => {
            client.create_branch(repo, rev).await?;
            let (head, _) = client.repo_info(repo, rev).await?;
            Ok((created, Some(head)))
        }
        Err(e) => Err(e),
    }
}

/// The first bytes of each file, base64, and the answers.
async fn preupload(
    client: &HubClient,
    subject: &RepoTarget,
    files: &[LocalFile],
) -> Result<Vec<api::PreuploadAnswer>> {
    let locals: Vec<(PathBuf, String, u64)> = files
        .iter()
        .map(|f| (f.local.clone(), f.path.to_string(), f.size))
        .collect();
    let requests = tokio::task::spawn_blocking(move || -> Result<Vec<api::PreuploadFile>> {
        locals
            .into_iter()
            .map(|(local, path, size)| {
                let sample =
                    read_sample(&local).map_err(|e| HubError::local("cannot read", &local, e))?;
                Ok(api::PreuploadFile {
                    path,
                    sample: base64::engine::general_purpose::STANDARD.encode(sample),
                    size,
                })
            })
            .collect()
    })
    .await
    .map_err(|source| HubError::Internal {
        what: "reading samples",
        source,
    })??;
    let rev = subject.revision().unwrap_or(DEFAULT_REVISION);
    client.preupload(subject.repo_ref(), rev, &requests).await
}

fn read_sample(p: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(SAMPLE_BYTES);
    std::fs::File::open(p)?
        .take(SAMPLE_BYTES as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

struct PipelineProgress(ProgressFn);

impl xet_upload::Progress for PipelineProgress {
    fn start(&self, _files: usize, _total_bytes: u64) {}
    fn processed(&self, bytes: u64) {
        (self.0)(Progress::Bytes(bytes));
    }
}

/// The `lfs` files through the upload pipeline, on a CAS reached with the write token.
async fn upload_lfs(
    client: &HubClient,
    subject: &RepoTarget,
    files: &[LocalFile],
    lfs: &[usize],
    opts: &Options,
    progress: &ProgressFn,
    hashed: &mut [Option<Hashed>],
) -> Result<()> {
    if lfs.is_empty() {
        return Ok(());
    }
    let rev = subject.revision().unwrap_or(DEFAULT_REVISION);
    let token_url = client.xet_token_url(subject.repo_ref(), TokenKind::Write, rev);
    let paths: Vec<PathBuf> = lfs.iter().map(|&i| files[i].local.clone()).collect();
    let report = run_pipeline(
        client,
        subject,
        &token_url,
        &paths,
        &opts.pipeline,
        opts.idle_timeout,
        Arc::new(PipelineProgress(progress.clone())),
    )
    .await?;
    if report.files.len() != lfs.len() {
        return Err(HubError::Usage(format!(
            "the upload pipeline reported {} files for {} given",
            report.files.len(),
            lfs.len()
        )));
    }
    for (&i, r) in lfs.iter().zip(&report.files) {
        if r.size != files[i].size {
            return Err(changed_meanwhile(&files[i].local));
        }
        hashed[i] = Some(Hashed {
            xet_hash: r.hash.to_string(),
            sha256: r.sha256.clone(),
            git_oid: None,
        });
    }
    Ok(())
}

/// `paths` through the upload pipeline into the CAS whose write token `token_url` hands
/// out (a repository's or a bucket's).
pub(crate) async fn run_pipeline(
    client: &HubClient,
    subject: &RepoTarget,
    token_url: &str,
    paths: &[PathBuf],
    options: &xet_upload::UploadOptions,
    idle_timeout: Option<std::time::Duration>,
    progress: Arc<dyn xet_upload::Progress>,
) -> Result<xet_upload::UploadReport> {
    let cas = Arc::new(client.xet_cas(subject, token_url, idle_timeout)?);
    xet_upload::upload(cas, paths, options, progress)
        .await
        .map_err(|source| match source {
            xet_upload::UploadError::Interrupted => HubError::Interrupted,
            source => HubError::Upload {
                subject: subject.clone(),
                source,
            },
        })
}

fn changed_meanwhile(p: &Path) -> HubError {
    HubError::local(
        "changed while it was being uploaded:",
        p,
        std::io::Error::other("run the upload again once it is written"),
    )
}

/// Xet hash, sha256 and git blob id of the regular files (read here; they go inline).
async fn hash_regular(
    files: &[LocalFile],
    regular: &[usize],
    progress: &ProgressFn,
    hashed: &mut [Option<Hashed>],
) -> Result<()> {
    for &i in regular {
        let f = files[i].clone();
        let h = tokio::task::spawn_blocking(move || -> Result<Hashed> {
            let bytes =
                std::fs::read(&f.local).map_err(|e| HubError::local("cannot read", &f.local, e))?;
            if bytes.len() as u64 != f.size {
                return Err(changed_meanwhile(&f.local));
            }
            let sha256 = sha256_hex(&bytes);
            let git_oid = Some(xet_hub::commit::git_blob_oid(&bytes));
            let scanned =
                xet_upload::scan::scan_reader(std::io::Cursor::new(bytes), 1 << 20, false)
                    .map_err(|e| HubError::local("cannot hash", &f.local, e))?;
            Ok(Hashed {
                xet_hash: scanned.file_hash().to_string(),
                sha256,
                git_oid,
            })
        })
        .await
        .map_err(|source| HubError::Internal {
            what: "hashing",
            source,
        })??;
        progress(Progress::Bytes(files[i].size));
        hashed[i] = Some(h);
    }
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    xet_hub::id::hex(&sha2::Sha256::digest(bytes))
}

/// Commit the changed files in as few commits as the limits allow; with `create_pr`,
/// the first opens the pull request and the others go to it.
async fn commit_all(
    client: &HubClient,
    subject: &RepoTarget,
    spec: &UploadSpec,
    files: &[LocalFile],
    changed: &[(usize, bool, String)],
    mut parent: Option<CommitId>,
) -> Result<(Vec<MadeCommit>, Option<PullRequest>)> {
    let batches = batch(changed, files);
    let summary = spec
        .message
        .clone()
        .unwrap_or_else(|| format!("Upload {} files with xet", changed.len()));
    let mut rev = subject.revision().unwrap_or(DEFAULT_REVISION).to_string();
    let mut made = Vec::new();
    let mut pr: Option<PullRequest> = None;
    for (n, batch) in batches.iter().enumerate() {
        let header = api::CommitHeader {
            summary: if n == 0 {
                summary.clone()
            } else {
                format!("{summary} (part {})", n + 1)
            },
            description: spec.description.clone(),
            parent_commit: parent.map(|p| p.to_string()),
        };
        let mut lines = vec![CommitLine::Header(header)];
        for (i, is_lfs, sha256) in batch.iter().copied() {
            lines.push(commit_line(&files[*i], *is_lfs, sha256)?);
        }
        let open_pr = spec.create_pr && pr.is_none();
        let (id, answer) = client
            .commit(subject.repo_ref(), &rev, &lines, open_pr)
            .await?;
        if open_pr {
            let opened = pull_request_of(subject, &answer)?;
            rev = opened.revision.clone();
            pr = Some(opened);
        }
        parent = Some(id);
        made.push(MadeCommit {
            commit: id.to_string(),
            url: answer.commit_url,
        });
    }
    Ok((made, pr))
}

/// The pull request a `create_pr` commit opened, from its `pullRequestUrl`
/// (`.../discussions/N`).
fn pull_request_of(subject: &RepoTarget, answer: &api::CommitResponse) -> Result<PullRequest> {
    let url = answer.pull_request_url.clone().unwrap_or_default();
    let num = url
        .rsplit_once("/discussions/")
        .and_then(|(_, n)| n.parse::<u64>().ok())
        .ok_or_else(|| HubError::BadAnswer {
            action: "opening a pull request on",
            subject: subject.clone(),
            url: answer.commit_url.clone(),
            why: format!("pullRequestUrl {url:?} names no pull request"),
        })?;
    Ok(PullRequest {
        num,
        revision: format!("refs/pr/{num}"),
        url,
    })
}

/// Split into commits of at most [`MAX_FILES_PER_COMMIT`] files and
/// [`MAX_INLINE_BYTES_PER_COMMIT`] inline bytes (a larger single file gets its own).
fn batch<'a>(
    changed: &'a [(usize, bool, String)],
    files: &[LocalFile],
) -> Vec<Vec<&'a (usize, bool, String)>> {
    let mut out: Vec<Vec<&(usize, bool, String)>> = Vec::new();
    let mut inline = 0u64;
    for c in changed {
        let bytes = if c.1 { 0 } else { files[c.0].size };
        let full = out.last().is_none_or(|b| {
            b.len() >= MAX_FILES_PER_COMMIT
                || (inline + bytes > MAX_INLINE_BYTES_PER_COMMIT && !b.is_empty())
        });
        if full {
            out.push(Vec::new());
            inline = 0;
        }
        inline += bytes;
        out.last_mut().expect("just pushed").push(c);
    }
    out
}

/// `lfsFile` with sha256 and size, or `file` with the content inline.
fn commit_line(f: &LocalFile, is_lfs: bool, sha256: &str) -> Result<CommitLine> {
    if is_lfs {
        return Ok(CommitLine::LfsFile(api::CommitLfsFile {
            path: f.path.to_string(),
            algo: "sha256".into(),
            oid: sha256.to_string(),
            size: Some(f.size),
        }));
    }
    let bytes = std::fs::read(&f.local).map_err(|e| HubError::local("cannot read", &f.local, e))?;
    if sha256_hex(&bytes) != sha256 {
        return Err(changed_meanwhile(&f.local));
    }
    Ok(CommitLine::File(api::CommitFile {
        path: f.path.to_string(),
        content: base64::engine::general_purpose::STANDARD.encode(&bytes),
        encoding: "base64".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_go_to_the_root_or_below_the_prefix_and_files_under_their_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("data");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::create_dir_all(d.join(".git")).unwrap();
        std::fs::create_dir_all(d.join(".cache/huggingface")).unwrap();
        std::fs::write(d.join("a.txt"), b"a").unwrap();
        std::fs::write(d.join("sub/b.bin"), b"bb").unwrap();
        std::fs::write(d.join(".git/config"), b"x").unwrap();
        // A nested repository's git folder, in any spelling a Hub refuses, stays home.
        std::fs::create_dir_all(d.join("sub/.GIT")).unwrap();
        std::fs::write(d.join("sub/.GIT/config"), b"x").unwrap();
        std::fs::create_dir_all(d.join("sub/git~1")).unwrap();
        std::fs::write(d.join("sub/git~1/config"), b"x").unwrap();
        std::fs::write(d.join(".cache/huggingface/x"), b"x").unwrap();
        let single = dir.path().join("one.json");
        std::fs::write(&single, b"{}").unwrap();
        let arg = |p: &Path| Source::argument(p.to_path_buf());
        let got = collect(&[arg(&d), arg(&single)], None).unwrap();
        let paths: Vec<_> = got.iter().map(|f| f.path.to_string()).collect();
        assert_eq!(paths, ["a.txt", "one.json", "sub/b.bin"]);
        assert_eq!(got[2].size, 2);
        let prefix = RepoPath::parse("x/y").unwrap();
        let got = collect(&[arg(&d)], Some(&prefix)).unwrap();
        assert_eq!(got[0].path.as_str(), "x/y/a.txt");
        // Listed relative paths keep their folders; absolute ones are placed by name.
        let listed = |e: &str| Source::listed(e).unwrap();
        assert_eq!(listed("./a/./b.bin").at.unwrap().as_str(), "a/b.bin");
        assert_eq!(listed(".").at, None);
        assert_eq!(listed(d.to_str().unwrap()), arg(&d));
        for bad in ["../x", "a/../../x", ".git/config"] {
            assert!(Source::listed(bad).is_err(), "{bad}");
        }
        let in_dir = |e: &str| Source {
            local: dir.path().join(e),
            ..listed(e)
        };
        let got = collect(&[in_dir("data/sub"), in_dir("one.json")], Some(&prefix)).unwrap();
        let paths: Vec<_> = got.iter().map(|f| f.path.to_string()).collect();
        assert_eq!(paths, ["x/y/data/sub/b.bin", "x/y/one.json"]);
        // The same repository path twice is refused.
        std::fs::write(dir.path().join("a.txt"), b"other").unwrap();
        let e = collect(&[arg(&d), arg(&dir.path().join("a.txt"))], None).unwrap_err();
        assert!(e.to_string().contains("would both be a.txt"), "{e}");
        assert!(collect(&[], None).is_err());
    }

    #[test]
    fn commits_are_cut_by_file_count_and_inline_bytes() {
        let mk = |size| LocalFile {
            local: "x".into(),
            path: RepoPath::parse("x").unwrap(),
            size,
        };
        let files = vec![mk(60 << 20), mk(60 << 20), mk(1), mk(200 << 20)];
        let changed: Vec<_> = vec![
            (0, false, String::new()),
            (1, false, String::new()),
            (2, true, String::new()),
            (3, false, String::new()),
        ];
        let b = batch(&changed, &files);
        let sizes: Vec<usize> = b.iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [1, 2, 1]);
        let many: Vec<_> = (0..2500).map(|_| (2usize, true, String::new())).collect();
        let b = batch(&many, &files);
        assert_eq!(
            b.iter().map(|b| b.len()).collect::<Vec<_>>(),
            [1000, 1000, 500]
        );
        assert!(batch(&[], &files).is_empty());
    }
}
