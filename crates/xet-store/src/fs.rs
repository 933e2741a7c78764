//! The filesystem backend ([`FsBackend`]).
//!
//! Layout under the root directory (see `docs/STORE.md`):
//!
//! ```text
//! ROOT/xorbs/<hash>          stored xorbs (chunk region + footer)
//! ROOT/shards/<hash>.mdb     stored shards (footer + lookup tables)
//! ROOT/meta/<name>           store metadata (the dedup-key secret)
//! ROOT/hub/…                 Hub repositories and sha256 records, in nested directories
//! ROOT/tmp/                  objects being written
//! ```
//!
//! Every object is written to `tmp/`, fsynced, then linked into place with a
//! no-clobber `link(2)` (falling back to a no-clobber `rename(2)` where hard links are not
//! supported) and the directory fsynced, so a reader (in this or another process) sees
//! either no object or the complete one, and a crash leaves at most a stray file in
//! `tmp/`. Objects are never modified afterwards; several processes may share one root.

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use xet_cas::{ByteRange, CasError, Result};

use crate::{
    HUB_PREFIX, META_PREFIX, ObjectBackend, ObjectKey, SHARD_PREFIX, StoreCas, StoreConfig,
    XORB_PREFIX, check_range,
};

/// Temporary files older than this are removed on open (they belong to writers that died).
pub const STALE_TMP_AGE: Duration = Duration::from_secs(3600);

const TMP_DIR: &str = "tmp";

/// Objects as files under a root directory.
#[derive(Debug, Clone)]
pub struct FsBackend {
    root: PathBuf,
    /// Whether large objects are still tried with `O_DIRECT` (see `direct`).
    direct_ok: Arc<AtomicBool>,
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
        Ok(FsBackend {
            root,
            direct_ok: Arc::new(AtomicBool::new(true)),
        })
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
/// Large objects go around the page cache where the filesystem allows it (see
/// [`direct`]); `direct_ok` is cleared the first time it does not, so later objects
/// skip the attempt.
fn write_tmp(tmp_dir: &Path, parts: &[Bytes], direct_ok: &AtomicBool) -> Result<PathBuf> {
    let name = format!(
        "{:016x}{:016x}.tmp",
        rand::random::<u64>(),
        rand::random::<u64>()
    );
    let path = tmp_dir.join(name);
    let total: usize = parts.iter().map(Bytes::len).sum();
    if total >= direct::MIN_LEN && direct_ok.load(Ordering::Relaxed) {
        match direct::write_new(&path, parts, total) {
            Ok(direct::Written::Done) => return Ok(path),
            Ok(direct::Written::Unsupported) => {
                let _ = std::fs::remove_file(&path);
                direct_ok.store(false, Ordering::Relaxed);
                tracing::debug!(dir = %tmp_dir.display(), "O_DIRECT not supported here; writing through the page cache");
            }
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(io_err(format!("writing {}", path.display()), e));
            }
        }
    }
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

/// Writing large objects with `O_DIRECT` (Linux).
///
/// Every object is fsynced before it is linked into place, so its bytes go to the disk
/// right away either way; through the page cache they are first copied into newly
/// allocated cache pages, which is most of a store's CPU time for large xorbs (and, on a
/// virtual machine, allocating pages that the host reclaimed can cost several seconds per
/// GiB). `O_DIRECT` writes from a recycled, aligned staging buffer instead: one copy into
/// warm memory, and the disk reads it from there. Objects are still read through the page
/// cache (they are simply not in it until first read). Filesystems that refuse `O_DIRECT`
/// (tmpfs, some network filesystems) answer `EINVAL` and get the buffered path.
mod direct {
    use std::path::Path;
    use std::sync::Mutex;

    use bytes::Bytes;

    /// Objects at least this large are written directly.
    pub(super) const MIN_LEN: usize = 1 << 20;
    /// Alignment of buffer addresses, file offsets and lengths: the largest logical block
    /// size in common use, so it suits any device.
    pub(super) const ALIGN: usize = 4096;
    /// Bytes staged (and written) per call.
    pub(super) const STAGE: usize = 8 << 20;
    /// Staging buffers kept for reuse.
    const IDLE_MAX: usize = 4;

    /// Staging buffers: aligned, and in huge pages, which the kernel pins for a direct
    /// write far faster than 4 KiB ones ([`xet_mmap::IoBuf`]).
    static IDLE: Mutex<Vec<xet_mmap::IoBuf>> = Mutex::new(Vec::new());

    pub(super) enum Written {
        Done,
        /// The filesystem does not take direct writes; nothing useful was written.
        Unsupported,
    }

    fn is_unsupported(e: &std::io::Error) -> bool {
        e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
    }

    /// Create `path` (which must not exist) holding `parts` back to back (`total` bytes),
    /// fsynced.
    #[cfg(target_os = "linux")]
    pub(super) fn write_new(
        path: &Path,
        parts: &[Bytes],
        total: usize,
    ) -> std::io::Result<Written> {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if is_unsupported(&e) => return Ok(Written::Unsupported),
            Err(e) => return Err(e),
        };
        let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut buf = match idle {
            Some(b) => b,
            None => xet_mmap::IoBuf::new(STAGE)?,
        };
        let res = (|| {
            let stage = &mut buf[..STAGE];
            let mut filled = 0;
            let mut pos = 0u64;
            let write = |stage: &[u8], pos: &mut u64| -> std::io::Result<bool> {
                match f.write_all_at(stage, *pos) {
                    Ok(()) => {
                        *pos += stage.len() as u64;
                        Ok(true)
                    }
                    // Only the first write can tell us the filesystem refuses; later ones
                    // have the same shape.
                    Err(e) if *pos == 0 && is_unsupported(&e) => Ok(false),
                    Err(e) => Err(e),
                }
            };
            for part in parts {
                let mut rest = &part[..];
                while !rest.is_empty() {
                    // Data already on an aligned address (`xet_cas::buffers::BodyBuf`)
                    // goes to disk without the staging copy, whole blocks at a time.
                    let direct = rest.len() / ALIGN * ALIGN;
                    if filled == 0 && direct > 0 && rest.as_ptr().align_offset(ALIGN) == 0 {
                        if !write(&rest[..direct], &mut pos)? {
                            return Ok(Written::Unsupported);
                        }
                        rest = &rest[direct..];
                        continue;
                    }
                    let n = rest.len().min(STAGE - filled);
                    stage[filled..filled + n].copy_from_slice(&rest[..n]);
                    filled += n;
                    rest = &rest[n..];
                    if filled == STAGE {
                        if !write(stage, &mut pos)? {
                            return Ok(Written::Unsupported);
                        }
                        filled = 0;
                    }
                }
            }
            if filled > 0 {
                // The last block is padded to the alignment, then the file cut to size.
                let padded = filled.div_ceil(ALIGN) * ALIGN;
                stage[filled..padded].fill(0);
                if !write(&stage[..padded], &mut pos)? {
                    return Ok(Written::Unsupported);
                }
            }
            f.set_len(total as u64)?;
            f.sync_all()?;
            Ok(Written::Done)
        })();
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE_MAX {
            idle.push(buf);
        }
        res
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn write_new(
        _path: &Path,
        _parts: &[Bytes],
        _total: usize,
    ) -> std::io::Result<Written> {
        Ok(Written::Unsupported)
    }
}

/// Create `dir` and the missing directories above it, up to `root` (hub keys nest), each
/// made durable by syncing the directory that holds it, so an object placed below is
/// never lost with a directory entry that was not written out.
fn make_dirs(root: &Path, dir: &Path) -> Result<()> {
    if dir == root || dir.is_dir() {
        return Ok(());
    }
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    make_dirs(root, parent)?;
    match std::fs::create_dir(dir) {
        Ok(()) => sync_dir(parent),
        // Another writer made it meanwhile.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err(format!("creating {}", dir.display()), e)),
    }
}

/// Move `tmp` to `dst` unless `dst` exists. Returns whether it was placed.
/// `content_addressed`: every writer of `dst` writes the same bytes
/// ([`ObjectKey::is_content_addressed`]).
fn place(tmp: &Path, dst: &Path, content_addressed: bool) -> Result<bool> {
    let placed = match std::fs::hard_link(tmp, dst) {
        Ok(()) => true,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
        // No hard links here (some network or FUSE filesystems).
        Err(link_err) => return rename_into_place(tmp, dst, content_addressed, &link_err),
    };
    let _ = std::fs::remove_file(tmp);
    Ok(placed)
}

/// [`place`] where hard links are not supported: a rename that refuses to replace
/// (`renameat2(RENAME_NOREPLACE)`, Linux) is as good as a link. Where that is not
/// supported either, a content-addressed object is renamed after an existence check
/// (a racing writer of the same key writes the same bytes, so only the `true` answer may
/// be reported twice); any other object would lose a racing writer's bytes, so it is an
/// error.
fn rename_into_place(
    tmp: &Path,
    dst: &Path,
    content_addressed: bool,
    link_err: &std::io::Error,
) -> Result<bool> {
    let placing = |e: std::io::Error| {
        io_err(
            format!("placing {} (link failed: {link_err})", dst.display()),
            e,
        )
    };
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        use rustix::io::Errno;
        match renameat_with(CWD, tmp, CWD, dst, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(true),
            Err(Errno::EXIST) => {
                let _ = std::fs::remove_file(tmp);
                return Ok(false);
            }
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {}
            Err(e) => return Err(placing(e.into())),
        }
    }
    if !content_addressed {
        return Err(CasError::Storage(format!(
            "cannot write {} without replacing a racing writer's: this filesystem supports              neither hard links ({link_err}) nor renames that refuse to replace",
            dst.display()
        )));
    }
    if dst.exists() {
        let _ = std::fs::remove_file(tmp);
        return Ok(false);
    }
    std::fs::rename(tmp, dst).map_err(placing)?;
    Ok(true)
}

/// Add the hub keys under `ROOT/<start>` (a directory path ending in `/`, at or below
/// `hub/`) that start with `prefix` to `out`, walking the nested directories.
fn list_hub(root: &Path, start: &str, prefix: &str, out: &mut Vec<ObjectKey>) -> Result<()> {
    // No key has more than 5 directories (`hub/repos/<rk>/branches/<bk>/`): deeper ones
    // are foreign and not walked.
    const MAX_DEPTH: usize = 5;
    let path = root.join(start.trim_end_matches('/'));
    let entries = match std::fs::read_dir(&path) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(format!("listing {}", path.display()), e)),
    };
    for e in entries {
        let e = e.map_err(|e| io_err(format!("listing {}", path.display()), e))?;
        let Some(name) = e.file_name().to_str().map(|n| format!("{start}{n}")) else {
            continue;
        };
        let ty = e
            .file_type()
            .map_err(|err| io_err(format!("stat {}", e.path().display()), err))?;
        if ty.is_dir() {
            let dir = format!("{name}/");
            if dir.matches('/').count() <= MAX_DEPTH
                && (dir.starts_with(prefix) || prefix.starts_with(&dir))
            {
                list_hub(root, &dir, prefix, out)?;
            }
        } else if let Some(k) = ObjectKey::parse(&name).filter(|k| k.as_str().starts_with(prefix)) {
            out.push(k);
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl ObjectBackend for FsBackend {
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        self.put_parts_if_absent(key, vec![data]).await
    }

    async fn put_parts_if_absent(&self, key: &ObjectKey, parts: Vec<Bytes>) -> Result<bool> {
        let dst = self.path_of(key);
        let root = self.root.clone();
        let tmp_dir = self.root.join(TMP_DIR);
        let direct_ok = Arc::clone(&self.direct_ok);
        let content_addressed = key.is_content_addressed();
        blocking(move || {
            if dst.exists() {
                return Ok(false);
            }
            if let Some(parent) = dst.parent() {
                make_dirs(&root, parent)?;
            }
            let tmp = write_tmp(&tmp_dir, &parts, &direct_ok)?;
            let placed = match place(&tmp, &dst, content_addressed) {
                Ok(p) => p,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            if placed && let Some(parent) = dst.parent() {
                sync_dir(parent)?;
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
                if let Some(m) = mapped
                    && m.bytes().len() as u64 == size
                {
                    return Ok(Some(
                        Bytes::from_owner(m).slice(range.start as usize..range.end as usize),
                    ));
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
            // Hub keys nest: walk from the deepest directory `prefix` names.
            if prefix.starts_with(HUB_PREFIX) {
                let start = prefix.rfind('/').map_or(HUB_PREFIX, |i| &prefix[..=i]);
                list_hub(&root, start, &prefix, &mut out)?;
            } else if HUB_PREFIX.starts_with(prefix.as_str()) {
                list_hub(&root, HUB_PREFIX, &prefix, &mut out)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Objects around the direct path's sizes (its threshold, the alignment, the staging
    /// buffer), given in parts split at odd places, read back byte-identical, whether
    /// written directly or through the page cache.
    #[test]
    fn large_objects_are_written_byte_exact_around_every_boundary() {
        use direct::{ALIGN, MIN_LEN, STAGE};
        let dir = tempfile::tempdir().unwrap();
        let sizes = [
            MIN_LEN - 1,
            MIN_LEN,
            ALIGN * 300 + 1,
            STAGE - 1,
            STAGE,
            STAGE + 1,
            2 * STAGE + ALIGN - 1,
            3 * STAGE + 7,
        ];
        let mut direct_taken = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let want = data(n, i as u64 + 1);
            let whole = Bytes::from(want.clone());
            let cuts = [0, n / 3, n / 3 + 1, n - n / 5, n];
            let parts: Vec<Bytes> = cuts.windows(2).map(|w| whole.slice(w[0]..w[1])).collect();

            let ok = AtomicBool::new(true);
            let p = write_tmp(dir.path(), &parts, &ok).unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), want, "size {n}");

            // Unaligned parts go through the staging buffer; parts on aligned
            // addresses (as received into `BodyBuf`) partly straight from memory.
            let aligned: Vec<Bytes> = parts
                .iter()
                .map(|p| {
                    let mut b = xet_cas::buffers::BodyBuf::with_capacity(p.len().max(MIN_LEN));
                    b.extend_from_slice(p);
                    b.freeze()
                })
                .collect();
            assert!(aligned.iter().all(|p| p.as_ptr().align_offset(ALIGN) == 0));
            for (k, parts) in [parts, aligned].iter().enumerate() {
                let q = dir.path().join(format!("direct-{i}-{k}"));
                match direct::write_new(&q, parts, n).unwrap() {
                    direct::Written::Done => {
                        direct_taken += 1;
                        assert_eq!(std::fs::read(&q).unwrap(), want, "size {n}, direct {k}");
                    }
                    direct::Written::Unsupported => {}
                }
            }
        }
        if direct_taken == 0 {
            eprintln!(
                "O_DIRECT is not supported under the temp dir; only the buffered path was checked"
            );
        }
    }
}
