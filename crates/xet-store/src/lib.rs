//! The filesystem backend of xet's CAS store.
//!
//! Layout under the root directory (see `docs/STORE.md`):
//!
//! ```text
//! ROOT/xorbs/<hash>          stored xorbs (chunk region + footer)
//! ROOT/shards/<hash>.mdb     stored shards (footer + lookup tables)
//! ROOT/meta/<name>           store metadata (the dedup-key secret)
//! ROOT/tmp/                  objects being written
//! ```
//!
//! Every object is written to `tmp/`, fsynced, then linked into place with a
//! no-clobber `link(2)` (falling back to `rename(2)` where hard links are not supported)
//! and the directory fsynced, so a reader (in this or another process) sees either no
//! object or the complete one, and a crash leaves at most a stray file in `tmp/`. Objects
//! are never modified afterwards; several processes may share one root.

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use xet_cas::store::{
    META_PREFIX, ObjectBackend, ObjectKey, SHARD_PREFIX, XORB_PREFIX, check_range,
};
use xet_cas::{ByteRange, CasError, Result, StoreCas, StoreConfig};

/// Temporary files older than this are removed on open (they belong to writers that died).
pub const STALE_TMP_AGE: Duration = Duration::from_secs(3600);

const TMP_DIR: &str = "tmp";

/// Objects as files under a root directory.
#[derive(Debug, Clone)]
pub struct FsBackend {
    root: PathBuf,
}

fn io_err(what: impl std::fmt::Display, e: std::io::Error) -> CasError {
    CasError::Storage(format!("{what}: {e}"))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CasError::Storage(format!("filesystem task failed: {e}")))?
}

impl FsBackend {
    /// Open (creating if needed) a backend rooted at `root`, and remove temporary files
    /// left by writers that died more than [`STALE_TMP_AGE`] ago.
    pub async fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        let r = root.clone();
        blocking(move || {
            for d in [XORB_PREFIX, SHARD_PREFIX, META_PREFIX, TMP_DIR] {
                let p = r.join(d.trim_end_matches('/'));
                std::fs::create_dir_all(&p)
                    .map_err(|e| io_err(format!("creating {}", p.display()), e))?;
            }
            clean_tmp(&r.join(TMP_DIR), STALE_TMP_AGE);
            Ok(())
        })
        .await?;
        Ok(FsBackend { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file holding `key` (keys are validated shapes, safe as relative paths).
    pub fn path_of(&self, key: &ObjectKey) -> PathBuf {
        self.root.join(key.as_str())
    }
}

fn clean_tmp(dir: &Path, older_than: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .map(|t| now.duration_since(t).unwrap_or_default() > older_than)
            .unwrap_or(false);
        if old {
            match std::fs::remove_file(e.path()) {
                Ok(()) => {
                    tracing::info!(path = %e.path().display(), "removed stale temporary file")
                }
                Err(err) => {
                    tracing::warn!(path = %e.path().display(), error = %err, "cannot remove stale temporary file")
                }
            }
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    // Directories can be opened read-only and fsynced on Unix; elsewhere this is best effort.
    match std::fs::File::open(dir) {
        Ok(f) => match f.sync_all() {
            Ok(()) => Ok(()),
            Err(e) if cfg!(unix) => Err(io_err(format!("syncing {}", dir.display()), e)),
            Err(_) => Ok(()),
        },
        Err(e) if cfg!(unix) => Err(io_err(format!("opening {}", dir.display()), e)),
        Err(_) => Ok(()),
    }
}

/// Write `parts`, one after the other, to a fresh temporary file and make it durable.
fn write_tmp(tmp_dir: &Path, parts: &[Bytes]) -> Result<PathBuf> {
    let name = format!(
        "{:016x}{:016x}.tmp",
        rand::random::<u64>(),
        rand::random::<u64>()
    );
    let path = tmp_dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io_err(format!("creating {}", path.display()), e))?;
    let res = parts
        .iter()
        .try_for_each(|p| f.write_all(p))
        .and_then(|()| f.sync_all());
    if let Err(e) = res {
        drop(f);
        let _ = std::fs::remove_file(&path);
        return Err(io_err(format!("writing {}", path.display()), e));
    }
    Ok(path)
}

/// Move `tmp` to `dst` unless `dst` exists. Returns whether it was placed.
fn place(tmp: &Path, dst: &Path) -> Result<bool> {
    let placed = match std::fs::hard_link(tmp, dst) {
        Ok(()) => true,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
        Err(link_err) => {
            // No hard links here (some network or FUSE filesystems): rename, which replaces
            // atomically. Objects are content-addressed, so a racing writer of the same key
            // writes the same bytes; only the `true` answer may then be reported twice.
            if dst.exists() {
                false
            } else {
                std::fs::rename(tmp, dst).map_err(|e| {
                    io_err(
                        format!("placing {} (link failed: {link_err})", dst.display()),
                        e,
                    )
                })?;
                return Ok(true);
            }
        }
    };
    let _ = std::fs::remove_file(tmp);
    Ok(placed)
}

#[async_trait::async_trait]
impl ObjectBackend for FsBackend {
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        self.put_parts_if_absent(key, vec![data]).await
    }

    async fn put_parts_if_absent(&self, key: &ObjectKey, parts: Vec<Bytes>) -> Result<bool> {
        let dst = self.path_of(key);
        let tmp_dir = self.root.join(TMP_DIR);
        blocking(move || {
            if dst.exists() {
                return Ok(false);
            }
            let tmp = write_tmp(&tmp_dir, &parts)?;
            let placed = match place(&tmp, &dst) {
                Ok(p) => p,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            if placed {
                if let Some(parent) = dst.parent() {
                    sync_dir(parent)?;
                }
            }
            Ok(placed)
        })
        .await
    }

    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>> {
        let path = self.path_of(key);
        blocking(move || match std::fs::read(&path) {
            Ok(v) => Ok(Some(Bytes::from(v))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(format!("reading {}", path.display()), e)),
        })
        .await
    }

    async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> Result<Option<Bytes>> {
        let path = self.path_of(key);
        let key = key.clone();
        blocking(move || {
            let mut f = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io_err(format!("opening {}", path.display()), e)),
            };
            let size = f
                .metadata()
                .map_err(|e| io_err(format!("stat {}", path.display()), e))?
                .len();
            check_range(&key, range, size)?;
            if range.len() >= xet_mmap::MAP_THRESHOLD {
                // Large ranges (xorb data) are served from a map: no copy out of the page
                // cache and no fresh buffer to fault in. Safe to map because stored objects
                // are immutable (written once under a temporary name, never modified).
                let mapped = f
                    .try_clone()
                    .and_then(xet_mmap::MappedFile::map)
                    .map_err(|e| io_err(format!("mapping {}", path.display()), e))?;
                if let Some(m) = mapped {
                    if m.bytes().len() as u64 == size {
                        return Ok(Some(
                            Bytes::from_owner(m).slice(range.start as usize..range.end as usize),
                        ));
                    }
                }
            }
            let mut buf = vec![0u8; range.len() as usize];
            f.seek(SeekFrom::Start(range.start))
                .and_then(|_| f.read_exact(&mut buf))
                .map_err(|e| io_err(format!("reading {} at {}", path.display(), range.start), e))?;
            Ok(Some(Bytes::from(buf)))
        })
        .await
    }

    async fn size(&self, key: &ObjectKey) -> Result<Option<u64>> {
        let path = self.path_of(key);
        blocking(move || match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(format!("stat {}", path.display()), e)),
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>> {
        let root = self.root.clone();
        let prefix = prefix.to_string();
        blocking(move || {
            let mut out = Vec::new();
            for dir in [XORB_PREFIX, SHARD_PREFIX, META_PREFIX] {
                // Skip directories that cannot hold a key with this prefix.
                if !(dir.starts_with(&prefix) || prefix.starts_with(dir)) {
                    continue;
                }
                let path = root.join(dir.trim_end_matches('/'));
                let entries = match std::fs::read_dir(&path) {
                    Ok(e) => e,
                    Err(e) if e.kind() == ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_err(format!("listing {}", path.display()), e)),
                };
                for e in entries {
                    let e = e.map_err(|e| io_err(format!("listing {}", path.display()), e))?;
                    let Some(name) = e.file_name().to_str().map(|n| format!("{dir}{n}")) else {
                        continue;
                    };
                    if let Some(k) =
                        ObjectKey::parse(&name).filter(|k| k.as_str().starts_with(&prefix))
                    {
                        out.push(k);
                    }
                }
            }
            out.sort();
            Ok(out)
        })
        .await
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool> {
        let path = self.path_of(key);
        blocking(move || match std::fs::remove_file(&path) {
            Ok(()) => {
                if let Some(parent) = path.parent() {
                    sync_dir(parent)?;
                }
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(format!("removing {}", path.display()), e)),
        })
        .await
    }
}

/// A store on the filesystem at `dir` with the default configuration.
pub async fn open_store(dir: impl Into<PathBuf>) -> Result<StoreCas<FsBackend>> {
    StoreCas::open(FsBackend::open(dir).await?).await
}

/// A store on the filesystem at `dir`.
pub async fn open_store_with(
    dir: impl Into<PathBuf>,
    config: StoreConfig,
) -> Result<StoreCas<FsBackend>> {
    StoreCas::open_with(FsBackend::open(dir).await?, config).await
}
