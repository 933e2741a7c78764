//! `xet mount`: a Hugging Face repository (read-only, pinned to the commit its revision
//! names at mount time) or a storage bucket (read-write) as a local folder over FUSE,
//! its bytes fetched lazily.
//!
//! - The listing is read once at mount time (recursively). With
//!   [`MountOptions::refresh`], other writers' changes follow (`refresh`): a bucket's
//!   events feed applies each change as the server reports it (`xet serve` does within
//!   about a second), resumed from its cursor when a stream ends; a bucket on a server
//!   without the feed, and a repository's branch, are polled every `refresh`
//!   (`updatedAt`, the head) and listed again when they changed.
//! - Reads ask `xet-download` for the byte range they need, through read-ahead windows
//!   that grow for sequential readers (`read`): random reads through the chunk cache
//!   `xet download` shares, a sequential reader's windows streamed; the windows' memory
//!   is bounded ([`MountOptions::max_memory`]); a read that cannot complete (a dead or
//!   stalled server) fails with `EIO` and a log line naming the file and the server,
//!   never hangs.
//! - Writes to a bucket are staged locally and uploaded at close or fsync, then added
//!   with one batch; unlink and rename are batches (`write`).
//!
//! The filesystem uses `fuser`'s safe API with its pure-Rust mount (the `mount(2)`
//! system call as root, else `fusermount3`): no libfuse.

mod ctx;
mod fs;
mod read;
mod refresh;
mod tree;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::Semaphore;
use xet_hub_client::{HubClient, RepoTarget, TokenKind};

pub use ctx::{MountOptions, Source};

use ctx::Ctx;
use tree::Tree;

/// Why a mount could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cannot list {source_name}")]
    Hub {
        source_name: String,
        #[source]
        source: Box<xet_hub_client::HubError>,
    },
    #[error(
        "cannot mount on {}: FUSE is unusable here (as root: /dev/fuse and the mount system call; \
         otherwise install fuse3 for fusermount3)",
        dir.display()
    )]
    Fuse {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot get a Xet read token for {source_name}")]
    Token {
        source_name: String,
        #[source]
        source: xet_cas::CasError,
    },
    #[error("{} is not an empty folder to mount on", dir.display())]
    BadDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the mount on {} did not answer within {timeout:?}", dir.display())]
    NotReady { dir: PathBuf, timeout: Duration },
}

/// A mounted folder; [`Mounted::unmount`] (or dropping it) unmounts it.
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    refresh: Option<tokio::task::JoinHandle<()>>,
    pub dir: PathBuf,
    pub source: Source,
    /// The commit a repository mount shows (at mount time).
    pub commit: Option<String>,
    /// Files listed at mount time.
    pub files: u64,
}

impl Mounted {
    /// Whether the mount is gone (someone ran `umount` on it).
    pub fn ended(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Unmount (if still mounted) and stop the refresh.
    pub async fn unmount(mut self) {
        self.stop().await;
    }

    async fn stop(&mut self) {
        if let Some(r) = self.refresh.take() {
            r.abort();
        }
        if let Some(s) = self.session.take() {
            // The unmount is a system call (or fusermount3): off the executor.
            let _ = tokio::task::spawn_blocking(move || drop(s)).await;
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(r) = self.refresh.take() {
            r.abort();
        }
    }
}

/// Mount `source` on `dir` (an existing empty folder). Returns once the folder answers.
pub async fn mount(
    client: HubClient,
    source: Source,
    dir: &Path,
    opts: MountOptions,
) -> Result<Mounted, MountError> {
    let meta = std::fs::metadata(dir).map_err(|e| MountError::BadDir {
        dir: dir.to_path_buf(),
        source: e,
    })?;
    let (uid, gid) = {
        use std::os::unix::fs::MetadataExt as _;
        (meta.uid(), meta.gid())
    };
    let hub = |source_err| MountError::Hub {
        source_name: source.to_string(),
        source: Box::new(source_err),
    };
    let (commit, token_url) = match &source {
        Source::Repo { repo, revision, .. } => {
            let (commit, _) = client.repo_info(repo, revision).await.map_err(hub)?;
            let c = commit.to_string();
            let url = client.xet_token_url(repo, TokenKind::Read, &c);
            (Some(c), url)
        }
        Source::Bucket { bucket, .. } => (None, client.bucket_token_url(bucket, TokenKind::Read)),
    };
    let cas = client
        .xet_cas(&RepoTarget::repo(source.repo()), &token_url, None)
        .map_err(hub)?;
    // The token now, not at the first read: a cold read is then two round trips (the
    // reconstruction, the xorb range), on the token request's connection when the CAS
    // is on the Hub's host (as with `xet serve`).
    cas.warm_up().await.map_err(|e| MountError::Token {
        source_name: source.to_string(),
        source: e,
    })?;
    let kib = u32::try_from(opts.max_memory / 1024).unwrap_or(u32::MAX);
    let ctx = Arc::new(Ctx {
        client,
        source: source.clone(),
        commit: std::sync::Mutex::new(commit.clone().unwrap_or_default()),
        cas: Arc::new(cas),
        memory: Arc::new(Semaphore::new(kib as usize)),
        chunk_hashes: Arc::default(),
        opts,
        uid,
        gid,
    });
    let (listed, marker) = refresh::list(&ctx).await.map_err(hub)?;
    let mut tree = Tree::new(SystemTime::now());
    let files = listed.len() as u64;
    tree.merge(listed, &[]);
    let state = Arc::new(fs::State::new(Arc::clone(&ctx), tree));
    let session = start_fuse(&ctx, Arc::clone(&state), dir)?;
    let mut mounted = Mounted {
        session: Some(session),
        refresh: None,
        dir: dir.to_path_buf(),
        source,
        commit,
        files,
    };
    if let Err(e) = ready(dir, ctx.opts.stall_timeout).await {
        mounted.stop().await;
        return Err(e);
    }
    mounted.refresh = ctx
        .opts
        .refresh
        .map(|every| tokio::spawn(refresh::run(state, every, marker)));
    Ok(mounted)
}

fn start_fuse(
    ctx: &Ctx,
    state: Arc<fs::State>,
    dir: &Path,
) -> Result<fuser::BackgroundSession, MountError> {
    use fuser::MountOption as M;
    let mut options = vec![
        M::FSName(format!("xet:{}", ctx.source)),
        M::Subtype("xet".to_string()),
        M::DefaultPermissions,
        M::NoDev,
        M::NoSuid,
        M::NoAtime,
    ];
    options.push(if ctx.writable() { M::RW } else { M::RO });
    let filesystem = fs::XetFs {
        state,
        rt: tokio::runtime::Handle::current(),
    };
    fuser::spawn_mount2(filesystem, dir, &options).map_err(|e| MountError::Fuse {
        dir: dir.to_path_buf(),
        source: e,
    })
}

/// Wait until the mounted folder answers a `stat` (the kernel's handshake is done).
async fn ready(dir: &Path, timeout: Duration) -> Result<(), MountError> {
    let d = dir.to_path_buf();
    let probe = tokio::task::spawn_blocking(move || std::fs::metadata(&d));
    match tokio::time::timeout(timeout, probe).await {
        Ok(Ok(Ok(_))) => Ok(()),
        Ok(Ok(Err(e))) => Err(MountError::Fuse {
            dir: dir.to_path_buf(),
            source: e,
        }),
        Ok(Err(_)) | Err(_) => Err(MountError::NotReady {
            dir: dir.to_path_buf(),
            timeout,
        }),
    }
}
