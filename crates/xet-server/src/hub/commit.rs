//! `POST .../commit/{rev}`: an NDJSON commit, checked whole before anything is applied.
//!
//! 1. Parse every line (one `header`; `file`, `lfsFile`, `deletedFile`, `deletedFolder`),
//!    every path checked. Malformed input is a `400` naming the line.
//! 2. Resolve each `lfsFile` sha256 to a stored Xet file: a pair checked before is
//!    trusted; otherwise each file whose uploaded shard *claims* that sha256 is read
//!    once and hashed, and a match is remembered in the store. No match is a `422`
//!    naming the path, and nothing of the commit is applied.
//! 3. Store the inline (`file`) contents in the CAS like any upload (chunked, deduped),
//!    so every file of every tree is content-addressed.
//! 4. Apply the operations to the branch head by compare-and-swap
//!    ([`xet_hub::Repos::commit_to_branch`]); a stale `parentCommit` is `412`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use xet_hash::MerkleHash;
use xet_hub::api::{CommitResponse, url};
use xet_hub::commit_body::CommitRequest;
use xet_hub::discussion::NewDiscussion;
use xet_hub::id::hex;
use xet_hub::{
    BranchName, CommitId, CommitMeta, FileEntry, Operation, RepoPath, RepoRef, Revision, Sha256,
};

use super::body::{Inline, Received};
use super::ctx::{Ctx, Opened};
use super::reply::{HubReply, HubResult};
use crate::auth::Caller;
use crate::config::Access;
use crate::routes::json;
use crate::sign::unix_now as now;
use crate::state::access::can_read_file;

pub(super) async fn commit(
    ctx: &Ctx,
    repo: &RepoRef,
    rev: &str,
    body: Body,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let create_pr = ctx
        .query_param("create_pr")
        .is_some_and(|v| v == "1" || v == "true");
    let branch = match Revision::parse(rev)? {
        Revision::Branch(b) => b,
        Revision::Commit(c) => {
            return Err(HubReply::bad_request(format!(
                "cannot commit onto commit {c}: name a branch"
            )));
        }
    };
    // The permit before the body: commits take turns with the CAS uploads, and a
    // stalled sender is cut off by the body timeout. The body is parsed as it arrives, a
    // long inline file spooled to disk, so a commit holds a few MiB whatever its size.
    let _permit = ctx.state.upload_permit().await?;
    let max = ctx.state.config.max_commit_bytes;
    let spool = commit_spool_dir(ctx);
    let Received { req, inline } = super::body::receive(&ctx.headers, body, max, spool).await?;
    let lfs = resolve_all_lfs(ctx, repo, &caller, req.lfs).await?;
    let inline = store_inline(ctx, inline).await?;
    // In the body's order: a deletion before an addition of its path below it (a file
    // becoming a folder) must apply first.
    let ops = CommitRequest::in_order(&req.order, inline, lfs, req.deletions);
    let meta = CommitMeta {
        summary: req.summary,
        description: req.description,
        author: ctx.state.config.hub_user.clone(),
        created_at: now(),
    };
    let (branch, pr) = pull_request_target(ctx, repo, branch, create_pr, &meta).await?;
    let done = ctx
        .repos()
        .commit_to_branch(&repo.at, &branch, req.parent, &ops, &meta)
        .await
        .map_err(|e| repo.named(e))?;
    if let Some(num) = pr {
        ctx.repos()
            .note_pr_commit(&repo.at, num, &done, meta.created_at)
            .await?;
    }
    tracing::info!(repo = %repo.name, branch = %branch, commit = %done.id, files = ops.len(), "commit");
    Ok(answer(ctx, &repo.name, &done.id, pr))
}

/// Where a commit goes: with `create_pr`, a new pull request onto `branch` (titled by
/// the commit); onto `refs/pr/N`, that pull request, which must be open; else `branch`.
/// The pull request's number, if it goes to one.
async fn pull_request_target(
    ctx: &Ctx,
    repo: &Opened,
    branch: BranchName,
    create_pr: bool,
    meta: &CommitMeta,
) -> HubResult<(BranchName, Option<u64>)> {
    if create_pr {
        if !branch.is_plain() {
            return Err(HubReply::bad_request(format!(
                "a pull request merges into a branch, not into {branch}"
            )));
        }
        let new = NewDiscussion {
            base: &branch,
            title: &meta.summary,
            description: &meta.description,
            author: &meta.author,
            created_at: meta.created_at,
            pull_request: true,
        };
        let d = ctx.repos().create_discussion(&repo.at, &new).await?;
        tracing::info!(repo = %repo.name, num = d.num, "pull request created");
        return Ok((d.pr_ref(), Some(d.num)));
    }
    match branch.pull_request() {
        Some(num) => Ok((
            ctx.repos().pr_ref_for_commit(&repo.at, num).await?,
            Some(num),
        )),
        None => Ok((branch, None)),
    }
}

fn answer(ctx: &Ctx, repo: &RepoRef, id: &CommitId, pr: Option<u64>) -> Response {
    json(
        StatusCode::OK,
        &CommitResponse {
            commit_oid: id.to_string(),
            commit_url: url::commit_page(&ctx.base, repo, &id.to_string()),
            pull_request_url: pr.map(|n| format!("{}/{repo}/discussions/{n}", ctx.base)),
            hook_output: String::new(),
            success: true,
        },
    )
}

/// Where this process spools a commit's long inline files: `xet-commits-<pid>` in the
/// spool directory (removed at start-up once its process is gone, see `crate::spool`).
fn commit_spool_dir(ctx: &Ctx) -> std::path::PathBuf {
    let base = ctx
        .state
        .config
        .spool_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    base.join(format!("xet-commits-{}", std::process::id()))
}

/// Run CPU-heavy `f` (parsing, base64, hashing) on a blocking thread.
async fn off_executor<T: Send + 'static>(
    f: impl FnOnce() -> HubResult<T> + Send + 'static,
) -> HubResult<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        HubReply::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("a commit worker failed: {e}"),
        )
    })?
}

/// The stored file whose content has `sha256`, checked (step 2): a pair verified before,
/// else the first file whose shard claims it and whose bytes hash to it.
async fn known_sha256(ctx: &Ctx, sha256: &[u8; 32]) -> HubResult<Option<(MerkleHash, u64)>> {
    let store = ctx.repos().store();
    let cas = &ctx.state.cas;
    if let Some(file) = store.verified_sha256(sha256).await?
        && let Some(size) = cas.file_size(&file).await?
    {
        return Ok(Some((file, size)));
    }
    if *sha256 == EMPTY_SHA256 {
        return Ok(Some((MerkleHash::default(), 0)));
    }
    for file in store.files_claiming_sha256(sha256).await? {
        let (actual, size) = xet_download::file_sha256(cas.clone(), file).await?;
        if actual == *sha256 {
            store.record_verified_sha256(sha256, &file).await?;
            return Ok(Some((file, size)));
        }
        tracing::warn!(
            file = %file,
            claimed = %hex(sha256),
            actual = %hex(&actual),
            "an uploaded shard claims a sha256 its file does not have; ignoring the claim"
        );
    }
    Ok(None)
}

/// sha256 of no bytes: the empty file needs no upload.
const EMPTY_SHA256: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// `lfsFile` entries resolved to stored files at once (at most this many).
const LFS_RESOLVES_AT_ONCE: usize = 16;

/// Every `lfsFile` entry resolved (step 2), [`LFS_RESOLVES_AT_ONCE`] at a time, in order;
/// the first that fails fails the commit.
async fn resolve_all_lfs(
    ctx: &Ctx,
    repo: &Opened,
    caller: &Caller,
    lfs: Vec<(RepoPath, Sha256, Option<u64>)>,
) -> HubResult<Vec<Operation>> {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    // Owned items: a stream over borrowed ones makes the handler's `Send` proof too
    // general for the compiler.
    futures_util::stream::iter(lfs)
        .map(|(path, sha, size)| async move {
            Ok(Operation::Add {
                entry: resolve_lfs(ctx, repo, caller, &path, &sha, size).await?,
                path,
            })
        })
        .buffered(LFS_RESOLVES_AT_ONCE)
        .try_collect()
        .await
}

async fn resolve_lfs(
    ctx: &Ctx,
    repo: &Opened,
    caller: &Caller,
    path: &RepoPath,
    sha: &Sha256,
    size: Option<u64>,
) -> HubResult<FileEntry> {
    let unprocessable = |msg: String| HubReply::new(StatusCode::UNPROCESSABLE_ENTITY, msg);
    let missing = || {
        unprocessable(format!(
            "{path}: no file with sha256 {sha} was uploaded to {}; upload it through Xet \
             (hf_xet) with this repository's write token before committing it",
            repo.name
        ))
    };
    let Some((file, actual)) = known_sha256(ctx, sha.as_bytes()).await? else {
        return Err(missing());
    };
    // A claim needs the bytes: uploaded under this repository's token (or committed to
    // it before), or readable by the committer in a repository holding them. Anything
    // else is answered as if the file did not exist.
    let store = ctx.repos().store();
    if !store.references_file(&repo.at, &file).await?
        && !can_read_file(&ctx.state, caller, &file).await?
    {
        return Err(missing());
    }
    if let Some(size) = size.filter(|&s| s != actual) {
        return Err(unprocessable(format!(
            "{path}: the commit says {size} bytes, but the uploaded file with sha256 {sha} has {actual}"
        )));
    }
    Ok(FileEntry::lfs(file, *sha, actual))
}

/// Store inline contents in the CAS (step 3), through the upload pipeline, from memory
/// or from their spool files; their git blob ids and sha256 computed off the executor.
async fn store_inline(ctx: &Ctx, inline: Vec<(RepoPath, Inline)>) -> HubResult<Vec<Operation>> {
    if inline.is_empty() {
        return Ok(Vec::new());
    }
    let internal = |e: &dyn std::fmt::Display| {
        HubReply::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("storing inline files: {e}"),
        )
    };
    let inputs: Vec<xet_upload::Input> = inline
        .iter()
        .enumerate()
        .map(|(i, (_, content))| match content {
            Inline::Memory(data) => xet_upload::Input::Bytes {
                name: i.to_string().into(),
                data: data.clone(),
            },
            Inline::Spooled(f) => xet_upload::Input::File(f.path().to_path_buf()),
        })
        .collect();
    let report = xet_upload::upload_inputs(
        ctx.state.cas.clone(),
        &inputs,
        &xet_upload::UploadOptions::default(),
        Arc::new(xet_upload::NoProgress),
    )
    .await
    .map_err(|e| match e {
        xet_upload::UploadError::Cas(c) => HubReply::from(c),
        other => internal(&other),
    })?;
    // The report is in input order, one file per input.
    let hashes: Vec<MerkleHash> = report.files.iter().map(|f| f.hash).collect();
    if hashes.len() != inline.len() {
        return Err(internal(&format!(
            "{} files reported for {} inline files",
            hashes.len(),
            inline.len()
        )));
    }
    off_executor(move || {
        inline
            .into_iter()
            .zip(hashes)
            .map(|((path, content), hash)| {
                let entry = match content {
                    Inline::Memory(data) => FileEntry::regular(hash, &data),
                    Inline::Spooled(f) => spooled_entry(hash, f.path()).map_err(|e| {
                        HubReply::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            format!("reading back the inline file {path}: {e}"),
                        )
                    })?,
                };
                Ok(Operation::Add { path, entry })
            })
            .collect()
    })
    .await
}

/// The entry of a regular file stored under `hash` whose content is the file at `p`:
/// its sha256 and git blob id, read in pieces.
fn spooled_entry(hash: MerkleHash, p: &std::path::Path) -> std::io::Result<FileEntry> {
    use sha2::Digest as _;
    let mut f = std::fs::File::open(p)?;
    let size = f.metadata()?.len();
    let mut sha256 = sha2::Sha256::new();
    let mut blob = xet_hub::git::BlobHasher::new(size);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut f, &mut buf)?;
        if n == 0 {
            break;
        }
        sha256.update(&buf[..n]);
        blob.update(&buf[..n]);
    }
    Ok(FileEntry {
        xet_hash: hash,
        sha256: Sha256::from_bytes(sha256.finalize().into()),
        size,
        storage: xet_hub::Storage::Regular,
        git_oid: blob.finish(),
        meta: xet_hub::FileMeta::default(),
    })
}
