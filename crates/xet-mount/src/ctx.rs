//! What every part of a mount shares: the source, the options, the Hub client and the
//! CAS, the memory budget of read-ahead. A leaf: it imports no other module.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use xet_cas::Cas;
use xet_hub::{RepoPath, RepoRef};
use xet_hub_client::HubClient;

/// What is mounted.
#[derive(Debug, Clone)]
pub enum Source {
    /// A model, dataset or space at a revision: read-only.
    Repo {
        repo: RepoRef,
        revision: String,
        path: Option<RepoPath>,
    },
    /// A storage bucket, or a folder of it: read-write.
    Bucket {
        bucket: RepoRef,
        prefix: Option<RepoPath>,
    },
}

impl Source {
    /// The source of an `hf://` address.
    pub fn from_address(a: xet_hub_client::HfAddress) -> Source {
        if a.repo.kind == xet_hub::RepoType::Bucket {
            Source::Bucket {
                bucket: a.repo,
                prefix: a.path,
            }
        } else {
            let revision = a.revision_or_default().to_string();
            Source::Repo {
                repo: a.repo,
                revision,
                path: a.path,
            }
        }
    }

    pub fn repo(&self) -> &RepoRef {
        match self {
            Source::Repo { repo, .. } => repo,
            Source::Bucket { bucket, .. } => bucket,
        }
    }

    fn prefix(&self) -> Option<&RepoPath> {
        match self {
            Source::Repo { path, .. } => path.as_ref(),
            Source::Bucket { prefix, .. } => prefix.as_ref(),
        }
    }

    /// The path on the server of `rel`, a path below the mount's root.
    pub fn remote(&self, rel: &str) -> String {
        match self.prefix() {
            Some(p) => format!("{p}/{rel}"),
            None => rel.to_string(),
        }
    }

    /// The path below the mount's root of a listed `path` (`None` if not below it).
    pub fn local<'a>(&self, path: &'a str) -> Option<&'a str> {
        match self.prefix() {
            None => Some(path),
            Some(p) => path.strip_prefix(p.as_str())?.strip_prefix('/'),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tail = self.prefix().map(|p| format!("/{p}")).unwrap_or_default();
        match self {
            Source::Repo { repo, revision, .. } => {
                let kind = match repo.kind {
                    xet_hub::RepoType::Model => "",
                    xet_hub::RepoType::Dataset => "datasets/",
                    xet_hub::RepoType::Space => "spaces/",
                    xet_hub::RepoType::Bucket => "buckets/",
                };
                write!(f, "hf://{kind}{}@{revision}{tail}", repo.id)
            }
            Source::Bucket { bucket, .. } => write!(f, "hf://buckets/{}{tail}", bucket.id),
        }
    }
}

/// How a mount behaves.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Follow changes made on the server: a bucket's events feed as they happen (a
    /// broken stream resumed within this long), else polling this often (a bucket's
    /// `updatedAt`, a branch's head); `None`: never (a repository stays at the commit
    /// it was mounted at).
    pub refresh: Option<Duration>,
    /// Bytes of read-ahead held in memory across all open files.
    pub max_memory: u64,
    /// A fetch that delivers nothing for this long is retried, and a read that cannot
    /// complete within a few of these fails with `EIO`.
    pub stall_timeout: Duration,
    /// The chunk cache shared with `xet download`; `None`: no disk cache.
    pub cache: Option<xet_download::CacheConfig>,
    /// Where files being written are staged before their upload (the system's
    /// temporary folder when `None`).
    pub staging_dir: Option<PathBuf>,
    /// Refuse writes to a bucket too.
    pub read_only: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            refresh: None,
            max_memory: 1 << 30,
            stall_timeout: Duration::from_secs(30),
            cache: None,
            staging_dir: None,
            read_only: false,
        }
    }
}

/// Shared by the filesystem, its readers and writers, and the refresh task.
pub(crate) struct Ctx {
    pub client: HubClient,
    pub source: Source,
    /// The commit a repository mount shows (changed by a refresh).
    pub commit: std::sync::Mutex<String>,
    pub cas: Arc<dyn Cas>,
    pub opts: MountOptions,
    /// KiB of read-ahead windows held, bounded by `max_memory`.
    pub memory: Arc<Semaphore>,
    /// The chunk hashes of the xorbs read so far: every chunk of a range is checked
    /// against them (a range has no file hash to check).
    pub chunk_hashes: Arc<xet_download::ChunkHashes>,
    pub uid: u32,
    pub gid: u32,
}

impl Ctx {
    pub fn writable(&self) -> bool {
        matches!(self.source, Source::Bucket { .. }) && !self.opts.read_only
    }

    pub fn commit(&self) -> String {
        self.commit.lock().expect("commit lock").clone()
    }

    /// Where the server of this mount is, for log lines.
    pub fn server(&self) -> &str {
        self.client.endpoint()
    }
}
