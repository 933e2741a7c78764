//! Making a sync plan and carrying it out.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use xet_hub::time::python_isoformat_ms;
use xet_hub::{RepoPath, RepoRef};

use super::listing::{bucket_path, hash_local, list_remote, stat_local, walk_local};
use super::{Action, Direction, Filter, Listing, Plan, Rules, compare};
use crate::bucket_transfer::{
    BucketOptions, FromBucket, ToBucket, download_from_bucket, upload_to_bucket,
};
use crate::client::HubClient;
use crate::error::{HubError, RepoTarget, Result};

/// The two ends of a sync.
#[derive(Debug, Clone)]
pub struct Ends {
    pub direction: Direction,
    pub local: PathBuf,
    pub bucket: RepoRef,
    pub prefix: Option<RepoPath>,
    /// The arguments as given, written into the plan.
    pub source_text: String,
    pub dest_text: String,
}

impl Ends {
    fn remote_path(&self, rel: &str) -> Result<RepoPath> {
        bucket_path(self.prefix.as_ref(), rel, &self.local.join(rel))
    }

    fn subject(&self) -> RepoTarget {
        RepoTarget::repo(&self.bucket)
    }
}

/// A plan and what was learned making it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: Plan,
    /// The bucket's files below the prefix (relative paths), as listed.
    pub remote: Listing,
    /// The bucket does not exist yet (an upload creates it).
    pub bucket_missing: bool,
}

/// Lists both sides and compares them.
pub async fn plan(
    client: &HubClient,
    ends: &Ends,
    rules: &Rules,
    filter: &Filter,
) -> Result<Planned> {
    let remote = list_remote(client, &ends.bucket, ends.prefix.as_ref(), filter).await?;
    let bucket_missing = remote.is_none();
    let remote = match (remote, ends.direction) {
        (Some(r), _) => r,
        (None, Direction::Upload) => Listing::new(),
        (None, Direction::Download) => {
            return Err(HubError::RepoNotFound {
                subject: ends.subject(),
                endpoint: client.endpoint().to_string(),
                authenticated: client.token().is_some(),
            });
        }
    };
    let mut local = local_side(ends, rules, filter, &remote)?;
    if rules.checksum {
        hash_local(&ends.local, &mut local, &remote).await?;
    }
    let ops = match ends.direction {
        Direction::Upload => compare(Direction::Upload, &local, &remote, rules),
        Direction::Download => compare(Direction::Download, &remote, &local, rules),
    };
    let plan = Plan {
        source: ends.source_text.clone(),
        dest: ends.dest_text.clone(),
        timestamp: python_isoformat_ms(now_ms()),
        ops,
    };
    Ok(Planned {
        plan,
        remote,
        bucket_missing,
    })
}

fn local_side(ends: &Ends, rules: &Rules, filter: &Filter, remote: &Listing) -> Result<Listing> {
    match ends.direction {
        Direction::Upload => {
            let meta = std::fs::metadata(&ends.local)
                .map_err(|e| HubError::local("cannot read", &ends.local, e))?;
            if !meta.is_dir() {
                return Err(HubError::Usage(format!(
                    "{} is not a folder: xet sync sends a folder (xet cp sends one file)",
                    ends.local.display()
                )));
            }
            walk_local(&ends.local, filter)
        }
        Direction::Download => match std::fs::metadata(&ends.local) {
            Err(_) => Ok(Listing::new()),
            Ok(m) if !m.is_dir() => Err(HubError::Usage(format!(
                "{} exists and is not a folder: xet sync writes into a folder",
                ends.local.display()
            ))),
            Ok(_) if rules.delete => walk_local(&ends.local, filter),
            // The remote paths passed the filter already.
            Ok(_) => Ok(stat_local(&ends.local, remote.keys())),
        },
    }
}

static FILTER_ALL: std::sync::LazyLock<Filter> = std::sync::LazyLock::new(Filter::default);

/// What a sync did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Done {
    pub uploaded: u64,
    pub downloaded: u64,
    pub deleted: u64,
    /// Bytes sent or received.
    pub bytes: u64,
    /// The bucket was created by this sync.
    pub created_bucket: bool,
}

/// How a sync reports the bytes it moves.
#[derive(Clone)]
pub struct SyncProgress {
    pub upload: Arc<dyn xet_upload::Progress>,
    pub download: Option<xet_download::ProgressFn>,
}

impl Default for SyncProgress {
    fn default() -> Self {
        SyncProgress {
            upload: Arc::new(xet_upload::NoProgress),
            download: None,
        }
    }
}

/// Carries out `plan` between `ends`. `planned` is what making the plan learned of the
/// bucket; without it (a plan read from a file) the bucket is listed again.
pub async fn execute(
    client: &HubClient,
    ends: &Ends,
    plan: &Plan,
    planned: Option<&Planned>,
    opts: &BucketOptions,
    progress: SyncProgress,
) -> Result<Done> {
    // A plan may come from a file: every path is checked before anything is done.
    for op in &plan.ops {
        RepoPath::parse(&op.path).map_err(|source| HubError::LocalName {
            path: ends.local.join(&op.path),
            source,
        })?;
    }
    let listed;
    let (remote, bucket_missing) = match planned {
        Some(p) => (&p.remote, p.bucket_missing),
        None => {
            listed = list_remote(client, &ends.bucket, ends.prefix.as_ref(), &FILTER_ALL).await?;
            (listed.as_ref().unwrap_or(&EMPTY), listed.is_none())
        }
    };
    match ends.direction {
        Direction::Upload => {
            execute_upload(client, ends, plan, bucket_missing, opts, progress.upload).await
        }
        Direction::Download => {
            execute_download(client, ends, plan, remote, opts, progress.download).await
        }
    }
}

static EMPTY: std::sync::LazyLock<Listing> = std::sync::LazyLock::new(Listing::new);

async fn execute_upload(
    client: &HubClient,
    ends: &Ends,
    plan: &Plan,
    bucket_missing: bool,
    opts: &BucketOptions,
    progress: Arc<dyn xet_upload::Progress>,
) -> Result<Done> {
    let mut done = Done::default();
    let mut files = Vec::new();
    let mut deletes = Vec::new();
    for op in &plan.ops {
        match op.action {
            Action::Upload => files.push(ToBucket {
                local: ends.local.join(&op.path),
                path: ends.remote_path(&op.path)?,
            }),
            Action::Delete => deletes.push(ends.remote_path(&op.path)?),
            Action::Download | Action::Skip => {}
        }
    }
    if files.is_empty() && deletes.is_empty() {
        return Ok(done);
    }
    // A bucket sync creates is private: making data public is a decision of its own.
    if bucket_missing && client.create_bucket(&ends.bucket, true).await? {
        done.created_bucket = true;
    }
    let sent = upload_to_bucket(client, &ends.bucket, &files, &deletes, opts, progress).await?;
    done.uploaded = sent.len() as u64;
    done.bytes = sent.iter().map(|f| f.size).sum();
    done.deleted = deletes.len() as u64;
    Ok(done)
}

async fn execute_download(
    client: &HubClient,
    ends: &Ends,
    plan: &Plan,
    remote: &Listing,
    opts: &BucketOptions,
    progress: Option<xet_download::ProgressFn>,
) -> Result<Done> {
    let mut done = Done::default();
    let mut files = Vec::new();
    let mut deletes = Vec::new();
    for op in &plan.ops {
        match op.action {
            Action::Download => {
                let Some(f) = remote.get(&op.path) else {
                    return Err(HubError::EntryNotFound {
                        subject: ends.subject().path(ends.remote_path(&op.path)?.as_str()),
                    });
                };
                let xet_hash = f.xet_hash.ok_or_else(|| {
                    HubError::Usage(format!("the listing gave no Xet hash for {}", op.path))
                })?;
                files.push(FromBucket {
                    path: ends.remote_path(&op.path)?.to_string(),
                    local: ends.local.join(&op.path),
                    xet_hash,
                    size: f.size,
                    mtime_ms: (f.mtime_ms != 0).then_some(f.mtime_ms),
                });
            }
            Action::Delete => deletes.push(op.path.clone()),
            Action::Upload | Action::Skip => {}
        }
    }
    if !files.is_empty() {
        std::fs::create_dir_all(&ends.local)
            .map_err(|e| HubError::local("cannot create", &ends.local, e))?;
        download_from_bucket(client, &ends.bucket, &files, opts, progress).await?;
        done.downloaded = files.len() as u64;
        done.bytes = files.iter().map(|f| f.size).sum();
    }
    for rel in &deletes {
        if delete_local(&ends.local, rel)? {
            done.deleted += 1;
        }
    }
    Ok(done)
}

/// Removes the file at `rel` below `root`, then the folders it leaves empty (up to, not
/// including, `root`). Refuses a path that passes through a symbolic link, which could
/// lead out of `root`. `false` if there was no file.
fn delete_local(root: &Path, rel: &str) -> Result<bool> {
    let mut at = root.to_path_buf();
    let segments: Vec<&str> = rel.split('/').collect();
    for seg in &segments[..segments.len() - 1] {
        at.push(seg);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(HubError::local(
                    "will not delete through the symbolic link",
                    &at,
                    std::io::Error::other(format!("{rel} is not inside the synced folder")),
                ));
            }
            Ok(_) => {}
            Err(_) => return Ok(false),
        }
    }
    let file = root.join(rel);
    match std::fs::symlink_metadata(&file) {
        Ok(m) if m.is_dir() => return Ok(false),
        Ok(_) => {}
        Err(_) => return Ok(false),
    }
    std::fs::remove_file(&file).map_err(|e| HubError::local("cannot delete", &file, e))?;
    let mut parent = file.parent();
    while let Some(dir) = parent {
        if dir == root || std::fs::remove_dir(dir).is_err() {
            break;
        }
        parent = dir.parent();
    }
    Ok(true)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
