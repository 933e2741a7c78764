//! `xet mount`: a Hugging Face repository (read-only, pinned to the commit its revision
//! names at mount time) or a storage bucket (read-write) as a local folder over FUSE,
//! its bytes fetched lazily.
//!
//! - The listing is read once at mount time (recursively) and again when a refresh
//!   sees a change ([`MountOptions::refresh`]: a bucket's `updatedAt`, a branch's head).
//! - Reads ask `xet-download` for the byte range they need, through read-ahead windows
//!   that grow for sequential readers (`read`); the chunk cache is shared with
//!   `xet download`; the windows' memory is bounded ([`MountOptions::max_memory`]); a
//!   read that cannot complete (a dead or stalled server) fails with `EIO` and a log
//!   line naming the file and the server, never hangs.
//! - Writes to a bucket are staged locally and uploaded at close or fsync, then added
//!   with one batch; unlink and rename are batches (`write`).
//!
//! The filesystem uses `fuser`'s safe API with its pure-Rust mount (the `mount(2)`
//! system call as root, else `fusermount3`): no libfuse.

mod ctx;
mod fs;
mod read;
mod tree;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::Semaphore;
use xet_hub_client::{HubClient, RepoTarget, TokenKind};

pub use ctx::{MountOptions, Source};

use ctx::Ctx;
use tree::{Content, FileFacts, Listed, Tree};

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
    // The token now, not at the first read: a read is then two round trips (the
    // reconstruction, the xorb range), on a connection the token's request opened.
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
        opts,
        uid,
        gid,
    });
    let (listed, marker) = list(&ctx).await.map_err(hub)?;
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
        .map(|every| tokio::spawn(refresh(state, every, marker)));
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

/// The files below the mount's root, and what tells a later listing apart (the
/// commit, or the bucket's `updatedAt`).
async fn list(ctx: &Ctx) -> Result<(Vec<Listed>, String), xet_hub_client::HubError> {
    let mut out = Vec::new();
    match &ctx.source {
        Source::Repo { repo, path, .. } => {
            let commit = ctx.commit();
            let entries = ctx
                .client
                .list_tree(repo, &commit, path.as_ref(), true)
                .await?;
            let now = SystemTime::now();
            for e in &entries {
                let Ok(Some(f)) = xet_hub_client::RemoteFile::from_entry(e) else {
                    continue;
                };
                let Some(rel) = ctx.source.local(f.path.as_str()) else {
                    continue;
                };
                let content = match f.xet_hash() {
                    Some(h) => Content::Xet(h),
                    None => Content::Resolve,
                };
                out.push(Listed {
                    path: rel.to_string(),
                    facts: FileFacts {
                        size: f.size,
                        content,
                    },
                    mtime: now,
                });
            }
            Ok((out, commit))
        }
        Source::Bucket { bucket, prefix } => {
            let info = ctx.client.bucket_info(bucket).await?;
            let entries = ctx
                .client
                .list_bucket_tree(bucket, prefix.as_ref(), true)
                .await?;
            for e in entries {
                let xet_hub::api::buckets::BucketEntry::File {
                    path,
                    size,
                    xet_hash,
                    mtime,
                    uploaded_at,
                    ..
                } = e
                else {
                    continue;
                };
                let Some(rel) = ctx.source.local(&path) else {
                    continue;
                };
                let Ok(hash) = xet_hash::MerkleHash::from_hex(&xet_hash) else {
                    tracing::warn!(
                        "{path} in {bucket}: xetHash {xet_hash:?} is not a Xet hash; left out"
                    );
                    continue;
                };
                let ms = mtime
                    .or(uploaded_at)
                    .and_then(|t| xet_hub::time::parse_rfc3339_ms(&t));
                let mtime = ms.map_or(SystemTime::UNIX_EPOCH, |ms| {
                    let d = Duration::from_millis(ms.unsigned_abs());
                    if ms >= 0 {
                        SystemTime::UNIX_EPOCH + d
                    } else {
                        SystemTime::UNIX_EPOCH - d
                    }
                });
                out.push(Listed {
                    path: rel.to_string(),
                    facts: FileFacts {
                        size,
                        content: Content::Xet(hash),
                    },
                    mtime,
                });
            }
            Ok((out, info.updated_at))
        }
    }
}

/// Every `every`: has the source changed (a bucket's `updatedAt`, the revision's
/// commit)? Then list it again and merge the listing (files being written stay).
async fn refresh(state: Arc<fs::State>, every: Duration, marker: String) {
    let ctx = Arc::clone(&state.ctx);
    let mut seen = Some(marker);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let marker = match &ctx.source {
            Source::Repo { repo, revision, .. } => ctx
                .client
                .repo_info(repo, revision)
                .await
                .map(|(c, _)| c.to_string()),
            Source::Bucket { bucket, .. } => {
                ctx.client.bucket_info(bucket).await.map(|i| i.updated_at)
            }
        };
        let marker = match marker {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("refreshing {}: {}", ctx.source, read::error_chain(&e));
                continue;
            }
        };
        if seen.as_ref() == Some(&marker) {
            continue;
        }
        if matches!(ctx.source, Source::Repo { .. }) {
            *ctx.commit.lock().expect("commit lock") = marker.clone();
        }
        let generation = state.generation.load(std::sync::atomic::Ordering::SeqCst);
        match list(&ctx).await {
            Ok(_) if state.generation.load(std::sync::atomic::Ordering::SeqCst) != generation => {
                // Changed here meanwhile: list again at the next tick.
            }
            Ok((listed, _)) => {
                let keep: Vec<u64> = state
                    .staged
                    .lock()
                    .expect("staged lock")
                    .keys()
                    .copied()
                    .collect();
                state.tree.lock().expect("tree lock").merge(listed, &keep);
                seen = Some(marker);
            }
            Err(e) => tracing::warn!("refreshing {}: {}", ctx.source, read::error_chain(&e)),
        }
    }
}
