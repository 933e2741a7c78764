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
//!
//! Stray files are removed at open and by [`ObjectBackend::remove_abandoned`] (which
//! `StoreCas::spawn_refresh` calls periodically), and only those no live process is
//! writing: each writer holds an exclusive `flock(2)` on its temporary file from the
//! moment it creates it until its name is gone (see [`TmpFile`]), and the kernel drops
//! the lock when the writer dies, however it dies. So the cleaner removes a temporary
//! file exactly when it can take that lock, whichever process (or PID namespace, or
//! host, for NFS locks) wrote it and however young it is. A name does not need to be
//! guessed at (a pid in the name can be reused, or belong to another PID namespace) and
//! no age has to be waited for. Files without the lock convention (written by older
//! versions, or where the filesystem has no locks) are removed by age, after
//! [`STALE_TMP_AGE`].

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use xet_cas::{ByteRange, CasError, Result};

use crate::{
    AgedObject, HUB_PREFIX, META_PREFIX, ObjectBackend, ObjectKey, SHARD_PREFIX, StoreCas,
    StoreConfig, XORB_PREFIX, check_range,
};

/// Temporary files that carry no lock (see the module docs) are removed once they are
/// this old; a writer that lives that long between creating and placing one is not
/// expected.
pub const STALE_TMP_AGE: Duration = Duration::from_secs(3600);

const TMP_DIR: &str = "tmp";

/// Objects as files under a root directory.
#[derive(Debug, Clone)]
pub struct FsBackend {
    root: PathBuf,
    /// Whether large objects are still tried with `O_DIRECT` (see [`write_direct`]).
    direct_ok: Arc<AtomicBool>,
}

/// A failed filesystem operation: `what` names it and the path, the `io::Error` (and its
/// kind) is kept as the cause.
fn io_err(what: impl std::fmt::Display, e: std::io::Error) -> CasError {
    CasError::storage_with(what.to_string(), e)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CasError::storage_with("a filesystem task failed", e))?
}

impl FsBackend {
    /// Open (creating if needed) a backend rooted at `root`, and remove the temporary
    /// files of writers that died (see the module docs).
    pub async fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        let r = root.clone();
        blocking(move || {
            for d in [XORB_PREFIX, SHARD_PREFIX, META_PREFIX, TMP_DIR] {
                let p = r.join(d.trim_end_matches('/'));
                std::fs::create_dir_all(&p)
                    .map_err(|e| io_err(format!("creating {}", p.display()), e))?;
            }
            remove_abandoned_tmp(&r.join(TMP_DIR));
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

/// A temporary file being written, `tmp/<pid>-<random>.tmp`, exclusively locked
/// (`flock`) through `file` for as long as it has that name: the lock tells
/// [`remove_abandoned_tmp`] in any process that its writer is alive. Where the filesystem
/// cannot lock, the name has no pid (`tmp/<random>.tmp`) and only age removes it.
struct TmpFile {
    path: PathBuf,
    file: std::fs::File,
}

impl TmpFile {
    /// Create a new temporary file in `dir`, opened with `options` (which must create
    /// it), and lock it.
    fn create(dir: &Path, options: &std::fs::OpenOptions) -> std::io::Result<TmpFile> {
        loop {
            let random = format!(
                "{:016x}{:016x}",
                rand::random::<u64>(),
                rand::random::<u64>()
            );
            let path = dir.join(format!("{}-{random}.tmp", std::process::id()));
            let file = options.open(&path)?;
            match file.try_lock() {
                // A cleaner may have locked and removed the name between the create and
                // our lock: only a name that still leads to our file is ours.
                Ok(()) if same_file(&file, &path) => return Ok(TmpFile { path, file }),
                Ok(()) | Err(std::fs::TryLockError::WouldBlock) => continue,
                Err(std::fs::TryLockError::Error(e)) => {
                    // No locks here: a name the cleaners judge by age.
                    tracing::debug!(dir = %dir.display(), error = %e, "temporary files cannot be locked here");
                    let unlocked = dir.join(format!("{random}.tmp"));
                    std::fs::rename(&path, &unlocked)?;
                    return Ok(TmpFile {
                        path: unlocked,
                        file,
                    });
                }
            }
        }
    }

    /// Remove the name (if it is still there), then give up the lock.
    fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether `path` names the file open as `file` (not another, not nothing).
#[cfg(unix)]
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Whether `path` names the file open as `file` (without inode numbers: that it exists).
#[cfg(not(unix))]
fn same_file(_file: &std::fs::File, path: &Path) -> bool {
    path.exists()
}

/// Remove the temporary files in `dir` that no live writer holds: those whose lock we
/// can take (the writer died; see [`TmpFile`]), and those without the lock convention
/// once older than [`STALE_TMP_AGE`]. Returns how many were removed.
fn remove_abandoned_tmp(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let path = e.path();
        match remove_if_abandoned(&path) {
            Ok(true) => {
                removed += 1;
                tracing::info!(path = %path.display(), "removed the temporary file of a writer that died");
            }
            Ok(false) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "cannot remove an abandoned temporary file")
            }
        }
    }
    removed
}

/// Remove the temporary file at `path` if no live writer holds it; whether it was.
fn remove_if_abandoned(path: &Path) -> std::io::Result<bool> {
    // Open for writing too: where `flock` is emulated with POSIX locks (NFS), an
    // exclusive lock needs a descriptor open for writing.
    let file = std::fs::File::options().read(true).write(true).open(path)?;
    let locking_writer = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains('-'));
    let abandoned = if locking_writer {
        match file.try_lock() {
            // The name must still lead to the file we locked (its writer may have placed
            // it and removed the name meanwhile).
            Ok(()) => same_file(&file, path),
            // Taken: its writer is alive.
            Err(std::fs::TryLockError::WouldBlock) => false,
            // Locks fail here, though they worked for the writer: judged by age.
            Err(std::fs::TryLockError::Error(_)) => older_than_stale(&file)?,
        }
    } else {
        older_than_stale(&file)?
    };
    if !abandoned {
        return Ok(false);
    }
    // Removed while the lock is held: a writer that created the file just now and locks
    // it after us finds its name gone and starts again under another.
    std::fs::remove_file(path)?;
    drop(file);
    Ok(true)
}

/// Whether `file` was last modified more than [`STALE_TMP_AGE`] ago.
fn older_than_stale(file: &std::fs::File) -> std::io::Result<bool> {
    let age = file.metadata()?.modified()?.elapsed().unwrap_or_default();
    Ok(age > STALE_TMP_AGE)
}

/// Make the entries of `dir` durable ([`xet_mmap::durable::sync_dir`]).
fn sync_dir(dir: &Path) -> Result<()> {
    xet_mmap::durable::sync_dir(dir).map_err(|e| io_err(format!("syncing {}", dir.display()), e))
}

/// Objects at least this large are written around the page cache ([`write_direct`]).
const DIRECT_MIN_LEN: usize = 1 << 20;
/// Staging buffers of a direct object write: copying the next 8 MiB overlaps writing
/// the last. Many objects are written at once, so few per write.
const DIRECT_STAGES: usize = 2;

/// Write `parts`, one after the other, to a fresh temporary file and make it durable.
/// The file stays locked (see [`TmpFile`]) until the caller has placed it and removed its
/// name. Large objects go around the page cache where the filesystem allows it (see
/// [`write_direct`]); `direct_ok` is cleared the first time it does not, so later objects
/// skip the attempt.
fn write_tmp(tmp_dir: &Path, parts: &[Bytes], direct_ok: &AtomicBool) -> Result<TmpFile> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    let tmp = TmpFile::create(tmp_dir, &options).map_err(|e| {
        io_err(
            format!("creating a temporary file in {}", tmp_dir.display()),
            e,
        )
    })?;
    let total: usize = parts.iter().map(Bytes::len).sum();
    let res = if total >= DIRECT_MIN_LEN && direct_ok.load(Ordering::Relaxed) {
        write_direct(&tmp, parts, direct_ok)
    } else {
        write_buffered(&tmp.file, parts)
    };
    if let Err(e) = res.and_then(|()| tmp.file.sync_all()) {
        let what = format!("writing {}", tmp.path.display());
        tmp.remove();
        return Err(io_err(what, e));
    }
    Ok(tmp)
}

fn write_buffered(mut file: &std::fs::File, parts: &[Bytes]) -> std::io::Result<()> {
    parts.iter().try_for_each(|p| file.write_all(p))
}

/// Write a large object with `O_DIRECT` ([`xet_mmap::direct::DirectWriter`], Linux).
///
/// Every object is fsynced before it is linked into place, so its bytes go to the disk
/// right away either way; through the page cache they are first copied into newly
/// allocated cache pages, which is most of a store's CPU time for large xorbs (and, on a
/// virtual machine, allocating pages that the host reclaimed can cost several seconds per
/// GiB). Parts received into aligned buffers (`xet_cas::buffers::BodyBuf`) go to the disk
/// from where they are. Filesystems that refuse `O_DIRECT` (tmpfs, some network
/// filesystems) get the buffered path, and `direct_ok` is cleared.
fn write_direct(tmp: &TmpFile, parts: &[Bytes], direct_ok: &AtomicBool) -> std::io::Result<()> {
    let file = Arc::new(tmp.file.try_clone()?);
    let writer =
        xet_mmap::direct::DirectWriter::open_with_stages(&tmp.path, file.clone(), DIRECT_STAGES);
    let Some(mut w) = writer else {
        direct_ok.store(false, Ordering::Relaxed);
        tracing::debug!(path = %tmp.path.display(), "O_DIRECT not supported here; writing through the page cache");
        return write_buffered(&tmp.file, parts);
    };
    let bufs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    w.write(&file, &bufs, 0)?;
    w.finish()?;
    if w.refused() {
        direct_ok.store(false, Ordering::Relaxed);
        tracing::debug!(path = %tmp.path.display(), "O_DIRECT refused here; writing through the page cache");
    }
    Ok(())
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
        Err(link_err) => return rename_into_place(tmp, dst, content_addressed, link_err),
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
    link_err: std::io::Error,
) -> Result<bool> {
    let link_kind = link_err.kind();
    let placing = |e: std::io::Error| {
        let what = format!(
            "placing {} after its hard link failed ({link_kind})",
            dst.display()
        );
        io_err(what, e)
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
        let what = format!(
            "cannot write {} without replacing a racing writer's: this filesystem supports \
             neither hard links (the link's error follows) nor renames that refuse to replace",
            dst.display()
        );
        return Err(CasError::storage_with(what, link_err));
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
            // Placed (and its temporary name removed) while its lock is held.
            let placed = match place(&tmp.path, &dst, content_addressed) {
                Ok(p) => p,
                Err(e) => {
                    tmp.remove();
                    return Err(e);
                }
            };
            drop(tmp);
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

    async fn remove_abandoned(&self) -> Result<usize> {
        let dir = self.root.join(TMP_DIR);
        blocking(move || Ok(remove_abandoned_tmp(&dir))).await
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

    async fn list_aged(&self, prefix: &str) -> Result<Vec<AgedObject>> {
        let keys = self.list(prefix).await?;
        let root = self.root.clone();
        blocking(move || {
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                let path = root.join(key.as_str());
                // Gone since the listing (another collector): not an object any more.
                let meta = match std::fs::metadata(&path) {
                    Ok(m) => m,
                    Err(e) if e.kind() == ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_err(format!("reading {}", path.display()), e)),
                };
                // Objects are written once and never touched: the modification time is
                // when the write finished.
                let written = meta
                    .modified()
                    .map_err(|e| io_err(format!("reading the time of {}", path.display()), e))?;
                out.push(AgedObject {
                    key,
                    size: meta.len(),
                    written,
                });
            }
            Ok(out)
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
    /// buffer), given in parts split at odd places, from ordinary or aligned memory, read
    /// back byte-identical, whether written directly or through the page cache.
    #[test]
    fn large_objects_are_written_byte_exact_around_every_boundary() {
        use xet_mmap::direct::{ALIGN, STAGE};
        let align = ALIGN as usize;
        let dir = tempfile::tempdir().unwrap();
        let sizes = [
            DIRECT_MIN_LEN - 1,
            DIRECT_MIN_LEN,
            align * 300 + 1,
            STAGE - 1,
            STAGE,
            STAGE + 1,
            2 * STAGE + align - 1,
            3 * STAGE + 7,
        ];
        let ok = AtomicBool::new(true);
        for (i, &n) in sizes.iter().enumerate() {
            let want = data(n, i as u64 + 1);
            let whole = Bytes::from(want.clone());
            let cuts = [0, n / 3, n / 3 + 1, n - n / 5, n];
            let parts: Vec<Bytes> = cuts.windows(2).map(|w| whole.slice(w[0]..w[1])).collect();
            // Unaligned parts go through the staging buffers; parts on aligned
            // addresses (as received into `BodyBuf`) partly straight from memory.
            let aligned: Vec<Bytes> = parts
                .iter()
                .map(|p| {
                    let mut b = xet_cas::buffers::BodyBuf::with_capacity(p.len().max(1 << 20));
                    b.extend_from_slice(p);
                    b.freeze()
                })
                .collect();
            assert!(aligned.iter().all(|p| p.as_ptr().align_offset(align) == 0));
            for (k, parts) in [parts, aligned].iter().enumerate() {
                let tmp = write_tmp(dir.path(), parts, &ok).unwrap();
                assert_eq!(
                    std::fs::read(&tmp.path).unwrap(),
                    want,
                    "size {n}, aligned {k}"
                );
                tmp.remove();
            }
        }
        if !ok.load(Ordering::Relaxed) {
            eprintln!(
                "O_DIRECT is not supported under the temp dir; only the buffered path was checked"
            );
        }
    }

    /// Set for the writer process of the tests below: the temporary directory it
    /// writes into.
    const WRITER_ENV: &str = "XET_STORE_TEST_WRITER_TMP";

    /// Not a test of its own: the writer process the tests below start (through
    /// [`WRITER_ENV`]) and kill. It creates a temporary file as every write does, puts
    /// part of an object in it, says where, and waits.
    #[test]
    #[ignore = "run by the tests below in a process of its own"]
    fn writer_that_waits_to_be_killed() {
        let Some(dir) = std::env::var_os(WRITER_ENV) else {
            return;
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        let tmp = TmpFile::create(Path::new(&dir), &options).unwrap();
        (&tmp.file).write_all(&data(1 << 20, 5)).unwrap();
        // On a line of its own: the test harness has written the test's name before.
        println!("\nwriting {}", tmp.path.display());
        std::io::stdout().flush().unwrap();
        std::thread::sleep(Duration::from_secs(120));
    }

    /// A writer in a process of its own, half way through writing `path`.
    struct Writer {
        child: std::process::Child,
        path: PathBuf,
        // Kept open: the writer never gets a broken pipe.
        _stdout: std::io::BufReader<std::process::ChildStdout>,
    }

    impl Writer {
        fn start(tmp_dir: &Path) -> Writer {
            use std::io::BufRead;
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "fs::tests::writer_that_waits_to_be_killed"])
                .args(["--ignored", "--nocapture", "--test-threads=1"])
                .env(WRITER_ENV, tmp_dir)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            while stdout.read_line(&mut line).unwrap() > 0 {
                if let Some(p) = line.trim_end().strip_prefix("writing ") {
                    let path = PathBuf::from(p);
                    return Writer {
                        child,
                        path,
                        _stdout: stdout,
                    };
                }
                line.clear();
            }
            let _ = child.kill();
            let status = child.wait();
            panic!("the writer process ended before it wrote anything: {status:?}");
        }

        /// `kill -9`.
        fn kill(mut self) -> PathBuf {
            self.child.kill().unwrap();
            self.child.wait().unwrap();
            self.path
        }
    }

    /// Two processes on one directory: the temporary file of a live writer in another
    /// process is kept (a store opening meanwhile, the periodic sweep, a listing: none
    /// touches or shows it), and once the writer is killed the next open removes it at
    /// once, whatever its age; so do the periodic sweeps of a running store.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_temp_file_of_a_dead_writer_is_removed_and_a_live_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let backend = FsBackend::open(root.path()).await.unwrap();
        let tmp_dir = root.path().join(TMP_DIR);

        let writer = Writer::start(&tmp_dir);
        assert!(writer.path.starts_with(&tmp_dir));
        FsBackend::open(root.path()).await.unwrap();
        assert_eq!(backend.remove_abandoned().await.unwrap(), 0);
        assert!(writer.path.exists(), "a live writer's file was removed");
        assert!(backend.list("").await.unwrap().is_empty());
        let path = writer.kill();
        FsBackend::open(root.path()).await.unwrap();
        assert!(!path.exists(), "a dead writer's file was kept at open");

        // A running store sweeps periodically.
        let store = Arc::new(StoreCas::open(backend.clone()).await.unwrap());
        let _sweeps = store.spawn_refresh(Duration::from_millis(20));
        let writer = Writer::start(&tmp_dir);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(writer.path.exists(), "a live writer's file was swept");
        let path = writer.kill();
        let gone = async {
            while path.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), gone)
            .await
            .expect("a dead writer's file was never swept");
        assert_eq!(store.stats().xorbs + store.stats().shards, 0);
    }

    /// A write in this process holds its temporary file until it is placed; files
    /// without the lock convention (older versions, filesystems without locks) are left
    /// for an hour.
    #[test]
    fn writes_in_progress_and_young_unlocked_files_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ok = AtomicBool::new(true);
        let tmp = write_tmp(dir.path(), &[Bytes::from(data(3 << 20, 1))], &ok).unwrap();
        assert_eq!(remove_abandoned_tmp(dir.path()), 0);
        assert!(tmp.path.exists());
        tmp.remove();

        let young = dir.path().join("0123456789abcdef0123456789abcdef.tmp");
        let old = dir.path().join("fedcba9876543210fedcba9876543210.tmp");
        for p in [&young, &old] {
            std::fs::write(p, b"partial").unwrap();
        }
        let hours_ago = std::time::SystemTime::now() - 2 * STALE_TMP_AGE;
        let f = std::fs::File::options().write(true).open(&old).unwrap();
        f.set_modified(hours_ago).unwrap();
        assert_eq!(remove_abandoned_tmp(dir.path()), 1);
        assert!(young.exists() && !old.exists());
    }
}
