//! Writes to a bucket mount, as `buckets-api.md` §5.4 describes hf-mount's: a file
//! written here is staged in a local temporary file and, when it is closed (flushed) or
//! fsynced, uploaded through the upload pipeline (dedup against what the CAS holds) and
//! added with one batch line; an unlink is a `deleteFile`; a rename is one batch of
//! `addFile` for every new path (same hash) and then `deleteFile` for every old one.
//! A batch applies or fails alone, so a mount killed at any point leaves the bucket
//! with each file either wholly added or not at all.

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use xet_hash::MerkleHash;
use xet_hub::RepoPath;
use xet_hub::api::buckets::BatchLine;
use xet_hub_client::bucket_transfer::{BucketOptions, ToBucket, apply_batches, upload_to_bucket};

use crate::ctx::{Ctx, Source};
use crate::read::error_chain;

/// A file being written: its bytes so far, in a temporary file.
pub(crate) struct Staged {
    pub file: File,
    pub tmp: tempfile::TempPath,
    /// Written since the last upload.
    pub dirty: bool,
    /// Open handles that may write.
    pub writers: usize,
}

impl Staged {
    pub fn new(ctx: &Ctx) -> std::io::Result<Staged> {
        let named = match &ctx.opts.staging_dir {
            Some(d) => tempfile::NamedTempFile::new_in(d)?,
            None => tempfile::NamedTempFile::new()?,
        };
        let (file, tmp) = named.into_parts();
        Ok(Staged {
            file,
            tmp,
            dirty: true,
            writers: 0,
        })
    }

    pub fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0; len];
        let mut got = 0;
        while got < len {
            let n = self.file.read_at(&mut buf[got..], offset + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        Ok(buf)
    }
}

/// Why a bucket change failed; logged, and `EIO` (or what [`WriteFailed::errno`]
/// says) for the caller.
#[derive(Debug)]
pub(crate) struct WriteFailed {
    pub kind: Option<xet_hub_client::ErrorKind>,
}

impl WriteFailed {
    pub fn errno(&self) -> i32 {
        use xet_hub_client::ErrorKind::*;
        match self.kind {
            Some(Auth) => libc_errno::EACCES,
            _ => libc_errno::EIO,
        }
    }
}

/// The errno values used here (fuser re-exports none; `libc` would be a dependency
/// for a handful of numbers, identical on every Linux architecture).
pub(crate) mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EBADF: i32 = 9;
    pub const EACCES: i32 = 13;
    pub const EEXIST: i32 = 17;
    pub const ENOTDIR: i32 = 20;
    pub const EISDIR: i32 = 21;
    pub const EINVAL: i32 = 22;
    pub const EROFS: i32 = 30;
    pub const ENOTEMPTY: i32 = 39;
}

fn bucket(ctx: &Ctx) -> &xet_hub::RepoRef {
    match &ctx.source {
        Source::Bucket { bucket, .. } | Source::Repo { repo: bucket, .. } => bucket,
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn failed(ctx: &Ctx, what: &str, e: &xet_hub_client::HubError) -> WriteFailed {
    tracing::error!("{what} on {} failed: {}", ctx.server(), error_chain(e));
    WriteFailed {
        kind: Some(e.kind()),
    }
}

/// Upload the staged file at `local` and add it as `rel`: its Xet hash and size.
pub(crate) async fn upload(
    ctx: &Arc<Ctx>,
    local: std::path::PathBuf,
    rel: &str,
) -> Result<(MerkleHash, u64), WriteFailed> {
    let remote = ctx.source.remote(rel);
    let what = format!("uploading {rel} to {remote} in {}", bucket(ctx));
    let path = RepoPath::parse(&remote).map_err(|e| {
        tracing::error!("{what}: {e}");
        WriteFailed { kind: None }
    })?;
    let opts = BucketOptions {
        upload: xet_upload::UploadOptions::default(),
        download: xet_download::DownloadOptions::default(),
        idle_timeout: None,
    };
    let sent = upload_to_bucket(
        &ctx.client,
        bucket(ctx),
        &[ToBucket { local, path }],
        &[],
        &opts,
        Arc::new(xet_upload::NoProgress),
    )
    .await
    .map_err(|e| failed(ctx, &what, &e))?;
    let one = sent.first().ok_or_else(|| {
        tracing::error!("{what}: the upload reported no file");
        WriteFailed { kind: None }
    })?;
    let hash = MerkleHash::from_hex(&one.xet_hash).map_err(|_| {
        tracing::error!("{what}: the upload reported hash {:?}", one.xet_hash);
        WriteFailed { kind: None }
    })?;
    Ok((hash, one.size))
}

/// Delete the files at `rels` (paths below the mount's root) in one batch.
pub(crate) async fn delete(ctx: &Arc<Ctx>, rels: &[String]) -> Result<(), WriteFailed> {
    let lines: Vec<BatchLine> = rels
        .iter()
        .map(|r| BatchLine::DeleteFile {
            path: ctx.source.remote(r),
        })
        .collect();
    let what = format!("deleting {} in {}", rels.join(", "), bucket(ctx));
    apply_batches(&ctx.client, bucket(ctx), &lines)
        .await
        .map_err(|e| failed(ctx, &what, &e))
}

/// A file moved: from, to (paths below the mount's root), its hash and size.
pub(crate) struct Moved {
    pub from: String,
    pub to: String,
    pub hash: MerkleHash,
    pub size: u64,
}

/// Every `addFile` of the new paths, then every `deleteFile` of the old ones.
pub(crate) async fn rename(ctx: &Arc<Ctx>, moved: &[Moved]) -> Result<(), WriteFailed> {
    if moved.is_empty() {
        return Ok(());
    }
    let mtime = now_ms();
    let mut lines: Vec<BatchLine> = moved
        .iter()
        .map(|m| BatchLine::AddFile {
            path: ctx.source.remote(&m.to),
            xet_hash: m.hash.to_string(),
            mtime: Some(mtime),
            content_type: None,
            size: Some(m.size),
        })
        .collect();
    lines.extend(moved.iter().map(|m| BatchLine::DeleteFile {
        path: ctx.source.remote(&m.from),
    }));
    let what = format!(
        "renaming {} to {} in {}",
        moved[0].from,
        moved[0].to,
        bucket(ctx)
    );
    apply_batches(&ctx.client, bucket(ctx), &lines)
        .await
        .map_err(|e| failed(ctx, &what, &e))
}
