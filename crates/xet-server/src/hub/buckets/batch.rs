//! `POST /api/buckets/{id}/batch`: NDJSON lines of `addFile`, `copyFile` and
//! `deleteFile`, each applied or failed on its own, all that apply in one commit.
//!
//! - A line that is not valid JSON of a known type refuses the whole request (`400`):
//!   nothing applies from a body the server cannot read whole.
//! - A file is added only if its Xet hash names a stored file the caller may read: one
//!   uploaded with this bucket's CAS token, or readable by the caller; its size comes
//!   from the CAS (a `size` sent must match). Anything else fails that line, answered as
//!   "not uploaded" whether or not the file exists elsewhere.
//! - A copy needs read access to its source and the hash to be a file of it.
//! - Additions and copies apply before deletions (the order every client sends), each
//!   kind in line order; deleting a path that is not there succeeds, so a replayed batch
//!   changes nothing more.
//! - The answer is `{success, processed, succeeded, failed: [{path, error}]}`: `200` if
//!   any line applied (or there were none), `422` if none did.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::{StreamExt as _, TryStreamExt as _};
use xet_hash::MerkleHash;
use xet_hub::api::buckets::{BatchFailure, BatchLine, BatchReport};
use xet_hub::{FileEntry, FileMeta, Operation, RepoId, RepoPath, RepoRef, RepoType};

use super::super::ctx::Ctx;
use super::super::reply::{HubReply, HubResult};
use super::access::{now_ms, open};
use crate::auth::Caller;
use crate::config::Access;
use crate::routes::json;
use crate::state::access::can_read_file;
use crate::state::body::read_body;

/// Most lines of one batch (clients send up to 1000; a folder renamed through a mount
/// sends one per file).
const MAX_LINES: usize = 100_000;
/// Most bytes of one batch body.
const MAX_BODY: u64 = 64 * 1024 * 1024;
/// Lines checked against the store at once.
const CHECKS_AT_ONCE: usize = 16;
/// Longest content type kept.
const MAX_CONTENT_TYPE: usize = 255;
/// `mtime` values below this are seconds, not milliseconds (the Rust client sends
/// seconds; 1e11 ms is 1973).
const SECONDS_BELOW: i64 = 100_000_000_000;

pub(super) async fn batch(ctx: &Ctx, bucket: &RepoRef, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    // Files are referenced where the bucket keeps them (its storage), not by its name.
    let storage = open(ctx, bucket, &caller).await?.storage;
    let lines = parse(&read_body(&ctx.headers, body, MAX_BODY, "batch").await?)?;
    let now = now_ms();
    // Each line to an operation or the reason it fails, checked concurrently, in order.
    // Owned items: a stream over borrowed ones makes the handler's `Send` proof too
    // general for the compiler.
    let caller = &caller;
    let checked: Vec<Result<Operation, String>> = futures_util::stream::iter(lines.clone())
        .map(|line| {
            let storage = &storage;
            async move { check(ctx, storage, caller, &line, now).await }
        })
        .buffered(CHECKS_AT_ONCE)
        .try_collect()
        .await?;
    // Additions and copies first, then deletions, each in line order.
    let mut order: Vec<usize> = (0..lines.len()).collect();
    order.sort_by_key(|&i| matches!(lines[i], BatchLine::DeleteFile { .. }));
    let mut failed: Vec<Option<String>> =
        checked.iter().map(|c| c.as_ref().err().cloned()).collect();
    let (indices, ops): (Vec<usize>, Vec<Operation>) = order
        .into_iter()
        .filter_map(|i| checked[i].as_ref().ok().map(|op| (i, op.clone())))
        .unzip();
    if !ops.is_empty() {
        let author = ctx.state.config.hub_user.clone();
        let outcome = ctx.repos().bucket_batch(bucket, ops, &author, now).await?;
        for (i, r) in indices.into_iter().zip(outcome.results) {
            if let Err(e) = r {
                failed[i] = Some(e.to_string());
            }
        }
        if let Some(c) = outcome.commit {
            tracing::info!(bucket = %bucket.id, commit = %c, lines = lines.len(), "bucket batch");
        }
    }
    let failures: Vec<BatchFailure> = lines
        .iter()
        .zip(failed)
        .filter_map(|(l, f)| {
            f.map(|error| BatchFailure {
                path: l.path().to_string(),
                error,
            })
        })
        .collect();
    let report = BatchReport {
        success: failures.is_empty(),
        processed: lines.len() as u64,
        succeeded: (lines.len() - failures.len()) as u64,
        failed: failures,
    };
    let status = if report.succeeded == 0 && report.processed > 0 {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    Ok(json(status, &report))
}

/// The lines of a body; any that is not a known operation refuses the whole body.
fn parse(body: &[u8]) -> HubResult<Vec<BatchLine>> {
    let mut lines = Vec::new();
    for (n, raw) in body.split(|&b| b == b'\n').enumerate() {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if lines.len() == MAX_LINES {
            return Err(HubReply::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("a batch holds at most {MAX_LINES} operations; split it"),
            ));
        }
        let line: BatchLine = serde_json::from_slice(raw).map_err(|e| {
            HubReply::bad_request(format!(
                "line {} of the batch is not an addFile, copyFile or deleteFile operation: {e}; \
                 nothing was applied",
                n + 1
            ))
        })?;
        lines.push(line);
    }
    Ok(lines)
}

/// What `line` does, or why it cannot (an error only when the store fails). `storage`
/// is where the bucket keeps its files.
async fn check(
    ctx: &Ctx,
    storage: &RepoRef,
    caller: &Caller,
    line: &BatchLine,
    now: u64,
) -> HubResult<Result<Operation, String>> {
    let path = match RepoPath::parse(line.path()) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let (hash, mtime, content_type, size) = match line {
        BatchLine::DeleteFile { .. } => return Ok(Ok(Operation::DeleteFile { path })),
        BatchLine::AddFile {
            xet_hash,
            mtime,
            content_type,
            size,
            ..
        } => (xet_hash, mtime, content_type, *size),
        BatchLine::CopyFile {
            xet_hash,
            mtime,
            content_type,
            source_repo_type,
            source_repo_id,
            ..
        } => {
            if let Err(why) =
                copy_source(ctx, caller, source_repo_type, source_repo_id, xet_hash).await?
            {
                return Ok(Err(why));
            }
            (xet_hash, mtime, content_type, None)
        }
    };
    let Ok(hash) = MerkleHash::from_hex(hash) else {
        return Ok(Err(format!(
            "xetHash {hash:?} is not a Xet hash (64 hex digits)"
        )));
    };
    let content_type = match content_type.as_deref() {
        Some(ct) if !valid_content_type(ct) => {
            return Ok(Err(format!("contentType {ct:?} is not a media type")));
        }
        ct => ct.map(str::to_string),
    };
    let Some(stored) = stored_size(ctx, storage, caller, &hash).await? else {
        return Ok(Err(format!(
            "no file with Xet hash {hash} was uploaded; upload its xorbs and shard with this \
             bucket's write token before the batch"
        )));
    };
    if let Some(size) = size.filter(|&s| s != stored) {
        return Ok(Err(format!(
            "the batch says {size} bytes, but the file with Xet hash {hash} has {stored}"
        )));
    }
    let meta = FileMeta {
        mtime_ms: mtime.map(|m| if m.abs() < SECONDS_BELOW { m * 1000 } else { m }),
        uploaded_ms: now,
        content_type,
    };
    Ok(Ok(Operation::Add {
        path,
        entry: FileEntry::bucket(hash, stored, meta),
    }))
}

/// The size of stored file `hash`, if the caller may add it to the bucket kept in
/// `storage`: uploaded with the bucket's token, or readable by the caller.
async fn stored_size(
    ctx: &Ctx,
    storage: &RepoRef,
    caller: &Caller,
    hash: &MerkleHash,
) -> HubResult<Option<u64>> {
    if hash.is_zero() {
        return Ok(Some(0));
    }
    let store = ctx.repos().store();
    if !store.references_file(storage, hash).await?
        && !can_read_file(&ctx.state, caller, hash).await?
    {
        return Ok(None);
    }
    Ok(ctx.state.cas.file_size(hash).await?)
}

/// Whether `caller` may copy `hash` out of the source a `copyFile` names.
async fn copy_source(
    ctx: &Ctx,
    caller: &Caller,
    kind: &str,
    id: &str,
    hash: &str,
) -> HubResult<Result<(), String>> {
    let (Some(kind), Ok(id)) = (RepoType::from_name(kind), RepoId::parse(id)) else {
        return Ok(Err(format!(
            "the copy's source {kind}/{id} is not a repository or bucket"
        )));
    };
    let source = RepoRef::new(kind, id);
    // Where the source keeps its files: a bucket's storage, a repository's own name.
    let kept = if kind == RepoType::Bucket {
        open(ctx, &source, caller).await.map(|s| s.storage)
    } else {
        ctx.open_repo(&source, caller).await.map(|r| r.storage())
    };
    let missing = || format!("no file with Xet hash {hash} in {}", source.id);
    let kept = match kept {
        Ok(kept) => kept,
        Err(e) if e.status.is_client_error() => return Ok(Err(missing())),
        Err(e) => return Err(e),
    };
    let Ok(file) = MerkleHash::from_hex(hash) else {
        return Ok(Err(format!(
            "xetHash {hash:?} is not a Xet hash (64 hex digits)"
        )));
    };
    if !file.is_zero() && !ctx.repos().store().references_file(&kept, &file).await? {
        return Ok(Err(missing()));
    }
    Ok(Ok(()))
}

/// `type/subtype` with parameters, printable ASCII, not too long.
fn valid_content_type(ct: &str) -> bool {
    ct.len() <= MAX_CONTENT_TYPE
        && ct.contains('/')
        && ct.bytes().all(|b| (0x20..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_parse_whole_or_not_at_all() {
        let body = concat!(
            r#"{"type":"addFile","path":"a","xetHash":"00","mtime":1}"#,
            "\n\n",
            r#"{"type":"deleteFile","path":"b"}"#,
        );
        let lines = parse(body.as_bytes()).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1], BatchLine::DeleteFile { path: "b".into() });
        for bad in [
            "{\"type\":\"moveFile\",\"path\":\"a\"}",
            "{\"type\":\"addFile\",\"path\":\"a\"}",
            "not json",
            "{\"type\":\"deleteFile\"}",
        ] {
            let body = format!("{{\"type\":\"deleteFile\",\"path\":\"x\"}}\n{bad}\n");
            let e = parse(body.as_bytes()).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
            assert!(e.message.contains("line 2"), "{}", e.message);
        }
        let many = "{\"type\":\"deleteFile\",\"path\":\"x\"}\n".repeat(MAX_LINES + 1);
        assert_eq!(
            parse(many.as_bytes()).unwrap_err().status,
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }

    #[test]
    fn content_types() {
        assert!(valid_content_type("text/plain; charset=utf-8"));
        for bad in ["text", "a/b\nc", &format!("a/{}", "b".repeat(300))] {
            assert!(!valid_content_type(bad), "{bad:?}");
        }
    }
}
