//! Small file-system helpers: positional reads and writes, durable renames. The
//! `O_DIRECT` writer of `.part` files and the positional writes are the workspace's one
//! implementation in `xet_mmap::direct`, re-exported here.

use std::fs::File;
use std::io;
use std::path::Path;

pub(crate) use xet_mmap::direct::{DirectWriter, WriteWaiter, write_all_at, write_all_vectored_at};

/// The direct writer's alignment is the one of the buffers bodies are received into.
const _: () = assert!(xet_mmap::direct::ALIGN == xet_cas::buffers::ALIGN as u64);

/// Start writing `len` bytes at `offset` back to disk now, without waiting, so the
/// fsync before the final rename finds little left to do: the disk works while the
/// download runs instead of after it. `POSIX_FADV_DONTNEED` on freshly written (dirty)
/// pages starts their writeback and cannot drop them, so the file stays page-cached.
/// Best effort: an error only means the fsync does all the work.
#[cfg(target_os = "linux")]
pub(crate) fn start_writeback(f: &File, offset: u64, len: u64) {
    if let Some(len) = std::num::NonZeroU64::new(len) {
        let _ = rustix::fs::fadvise(f, offset, Some(len), rustix::fs::Advice::DontNeed);
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn start_writeback(_f: &File, _offset: u64, _len: u64) {}

#[cfg(unix)]
pub(crate) fn read_exact_at(f: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

#[cfg(windows)]
pub(crate) fn read_exact_at(f: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        let n = f.seek_read(buf, offset)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "failed to fill whole buffer",
            ));
        }
        buf = &mut buf[n..];
        offset += n as u64;
    }
    Ok(())
}

/// Remove a file, ignoring "not found".
pub(crate) fn remove_if_exists(p: &Path) -> io::Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether `a` and `b` (existing paths) are on one file system, so a hard link from
/// one to the other can work.
#[cfg(unix)]
pub(crate) fn same_file_system(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev(),
        _ => false,
    }
}

#[cfg(not(unix))]
pub(crate) fn same_file_system(_a: &Path, _b: &Path) -> bool {
    false
}
