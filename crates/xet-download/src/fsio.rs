//! Small file-system helpers: positional reads and writes, durable renames.

use std::fs::File;
use std::io;
use std::path::Path;

#[cfg(unix)]
pub(crate) fn write_all_at(f: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(f, buf, offset)
}

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

/// Write `bufs` back to back starting at `offset` (`pwritev`, resumed after short writes).
#[cfg(unix)]
pub(crate) fn write_all_vectored_at(f: &File, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
    use std::io::IoSlice;
    // Linux accepts at most 1024 buffers per call.
    const MAX_IOV: usize = 1024;
    let mut i = 0;
    let mut skip = 0;
    loop {
        while i < bufs.len() && bufs[i].len() == skip {
            i += 1;
            skip = 0;
        }
        if i == bufs.len() {
            return Ok(());
        }
        let slices: Vec<IoSlice<'_>> = bufs[i..bufs.len().min(i + MAX_IOV)]
            .iter()
            .enumerate()
            .map(|(k, b)| IoSlice::new(if k == 0 { &b[skip..] } else { b }))
            .collect();
        let mut n = match rustix::io::pwritev(f, &slices, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "failed to write whole buffer",
                ));
            }
            Ok(n) => n,
            Err(e) if e == rustix::io::Errno::INTR => continue,
            Err(e) => return Err(e.into()),
        };
        offset += n as u64;
        // Advance past what was written.
        while n > 0 {
            let left = bufs[i].len() - skip;
            if n >= left {
                n -= left;
                i += 1;
                skip = 0;
            } else {
                skip += n;
                n = 0;
            }
        }
    }
}

#[cfg(not(unix))]
pub(crate) fn write_all_vectored_at(f: &File, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
    for b in bufs {
        write_all_at(f, b, offset)?;
        offset += b.len() as u64;
    }
    Ok(())
}

#[cfg(unix)]
pub(crate) fn read_exact_at(f: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

#[cfg(windows)]
pub(crate) fn write_all_at(f: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        let n = f.seek_write(buf, offset)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "failed to write whole buffer",
            ));
        }
        buf = &buf[n..];
        offset += n as u64;
    }
    Ok(())
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

/// Make a rename or file creation in `dir` durable (no-op where directories cannot be
/// opened).
pub(crate) fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_write_lands_every_byte_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        // More buffers than one call takes, empty ones among them, at an offset.
        let parts: Vec<Vec<u8>> = (0..2500)
            .map(|i| vec![(i % 251) as u8; if i % 7 == 0 { 0 } else { i % 300 }])
            .collect();
        let bufs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        write_all_vectored_at(&f, &bufs, 10).unwrap();
        let want: Vec<u8> = std::iter::repeat_n(0u8, 10).chain(parts.concat()).collect();
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), want);
    }
}
