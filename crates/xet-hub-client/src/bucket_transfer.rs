//! Files into and out of a storage bucket: uploads go through `xet-upload` (dedup,
//! resume) over the bucket's write token and land with one batch per
//! [`LINES_PER_BATCH`] paths; downloads go through `xet-download` (every chunk and file
//! verified) over its read token, and each file gets the bucket's `mtime`, so a later
//! sync of the same folder back up sends nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use xet_hash::MerkleHash;
use xet_hub::api::buckets::{BatchLine, BatchReport};
use xet_hub::{RepoPath, RepoRef};

use crate::buckets::{LINES_PER_BATCH, batch_failure};
use crate::client::{HubClient, TokenKind};
use crate::error::{HubError, RepoTarget, Result};

/// A local file and the bucket path it goes to.
#[derive(Debug, Clone)]
pub struct ToBucket {
    pub local: PathBuf,
    pub path: RepoPath,
}

/// A bucket file and where it goes on this machine.
#[derive(Debug, Clone)]
pub struct FromBucket {
    pub path: String,
    pub local: PathBuf,
    pub xet_hash: MerkleHash,
    pub size: u64,
    /// Milliseconds since the Unix epoch, set on the local file when given.
    pub mtime_ms: Option<i64>,
}

/// One uploaded file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SentFile {
    pub path: String,
    pub local: PathBuf,
    pub size: u64,
    pub xet_hash: String,
}

/// How to run a bucket transfer.
#[derive(Debug, Clone, Default)]
pub struct BucketOptions {
    pub upload: xet_upload::UploadOptions,
    pub download: xet_download::DownloadOptions,
    /// The CAS client's idle timeout, if not its default.
    pub idle_timeout: Option<Duration>,
}

/// Upload `files` to `bucket` and add them, then delete `deletes`: additions in batches
/// first, deletions after, each failed line sent once more before it is reported.
pub async fn upload_to_bucket(
    client: &HubClient,
    bucket: &RepoRef,
    files: &[ToBucket],
    deletes: &[RepoPath],
    opts: &BucketOptions,
    progress: Arc<dyn xet_upload::Progress>,
) -> Result<Vec<SentFile>> {
    let subject = RepoTarget::repo(bucket);
    // Times and sizes before the upload: a file written meanwhile is caught by size.
    let mut stats = Vec::with_capacity(files.len());
    for f in files {
        let meta =
            std::fs::metadata(&f.local).map_err(|e| HubError::local("cannot read", &f.local, e))?;
        stats.push((meta.len(), mtime_ms(&meta)));
    }
    let mut sent = Vec::with_capacity(files.len());
    let mut lines = Vec::with_capacity(files.len() + deletes.len());
    if !files.is_empty() {
        let token_url = client.bucket_token_url(bucket, TokenKind::Write);
        let paths: Vec<PathBuf> = files.iter().map(|f| f.local.clone()).collect();
        let report = crate::upload::run_pipeline(
            client,
            &subject,
            &token_url,
            &paths,
            &opts.upload,
            opts.idle_timeout,
            progress,
        )
        .await?;
        if report.files.len() != files.len() {
            return Err(HubError::Usage(format!(
                "the upload pipeline reported {} files for {} given",
                report.files.len(),
                files.len()
            )));
        }
        for ((f, r), (size, mtime)) in files.iter().zip(&report.files).zip(&stats) {
            if r.size != *size {
                return Err(HubError::local(
                    "changed while it was being uploaded:",
                    &f.local,
                    std::io::Error::other("run the command again once it is written"),
                ));
            }
            lines.push(BatchLine::AddFile {
                path: f.path.to_string(),
                xet_hash: r.hash.to_string(),
                mtime: *mtime,
                content_type: None,
                size: Some(r.size),
            });
            sent.push(SentFile {
                path: f.path.to_string(),
                local: f.local.clone(),
                size: r.size,
                xet_hash: r.hash.to_string(),
            });
        }
    }
    lines.extend(deletes.iter().map(|p| BatchLine::DeleteFile {
        path: p.to_string(),
    }));
    apply_batches(client, bucket, &lines).await?;
    Ok(sent)
}

/// Send `lines` in batches of [`LINES_PER_BATCH`], in order; lines the server did not
/// apply are sent once more (failures can be transient), then reported.
pub async fn apply_batches(
    client: &HubClient,
    bucket: &RepoRef,
    lines: &[BatchLine],
) -> Result<()> {
    for chunk in lines.chunks(LINES_PER_BATCH) {
        let report = client.bucket_batch(bucket, chunk).await?;
        if report.failed.is_empty() {
            continue;
        }
        let again: Vec<BatchLine> = chunk
            .iter()
            .filter(|l| report.failed.iter().any(|f| f.path == l.path()))
            .cloned()
            .collect();
        let retried: BatchReport = client.bucket_batch(bucket, &again).await?;
        if let Some(e) = batch_failure(bucket, &retried) {
            return Err(e);
        }
    }
    Ok(())
}

/// Download `files` from `bucket`, each verified, each given its bucket `mtime`;
/// `progress` hears of every byte written.
pub async fn download_from_bucket(
    client: &HubClient,
    bucket: &RepoRef,
    files: &[FromBucket],
    opts: &BucketOptions,
    progress: Option<xet_download::ProgressFn>,
) -> Result<()> {
    let subject = RepoTarget::repo(bucket);
    let mut requests = Vec::new();
    for f in files {
        if let Some(parent) = f.local.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| HubError::local("cannot create the folder of", &f.local, e))?;
        }
        if f.size == 0 {
            // Nothing to fetch: the empty file needs no request.
            std::fs::write(&f.local, b"")
                .map_err(|e| HubError::local("cannot write", &f.local, e))?;
            continue;
        }
        requests.push(
            xet_download::DownloadRequest::to_path(f.xet_hash, f.local.clone()).with_size(f.size),
        );
    }
    if !requests.is_empty() {
        let token_url = client.bucket_token_url(bucket, TokenKind::Read);
        let cas = Arc::new(client.xet_cas(&subject, &token_url, opts.idle_timeout)?);
        xet_download::download(cas, requests, opts.download.clone(), progress)
            .await
            .map_err(|source| match source.kind() {
                xet_download::ErrorKind::Interrupted => HubError::Interrupted,
                _ => HubError::Download {
                    subject: match source
                        .file()
                        .and_then(|h| files.iter().find(|f| f.xet_hash == h))
                    {
                        Some(f) => subject.clone().path(&f.path),
                        None => subject.clone(),
                    },
                    source,
                },
            })?;
    }
    for f in files {
        if let Some(ms) = f.mtime_ms {
            set_mtime(&f.local, ms)?;
        }
    }
    Ok(())
}

/// A file's modification time in milliseconds since the Unix epoch.
pub fn mtime_ms(meta: &std::fs::Metadata) -> Option<i64> {
    let t = meta.modified().ok()?;
    Some(match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).ok()?,
        Err(e) => -i64::try_from(e.duration().as_millis()).ok()?,
    })
}

fn set_mtime(path: &std::path::Path, ms: i64) -> Result<()> {
    let t = if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    };
    let f = std::fs::File::options()
        .write(true)
        .open(path)
        .map_err(|e| HubError::local("cannot set the time of", path, e))?;
    f.set_modified(t)
        .map_err(|e| HubError::local("cannot set the time of", path, e))?;
    Ok(())
}
