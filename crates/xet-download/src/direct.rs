//! `O_DIRECT` plumbing shared by the `.part` writer and the chunk cache: aligned,
//! recycled buffers and opening/writing files around the page cache (Linux; elsewhere
//! nothing is direct and callers take their buffered path).

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Mutex;

/// Alignment of direct writes (buffer address, file offset, length): the largest
/// logical block size in common use, so it suits any device.
pub(crate) const ALIGN: usize = 4096;

/// Recycled buffers of one size.
pub(crate) struct Pool {
    len: usize,
    keep: usize,
    idle: Mutex<Vec<Vec<u8>>>,
}

impl Pool {
    /// A pool of `len`-byte aligned buffers (a multiple of [`ALIGN`]) keeping at most
    /// `keep` idle ones.
    pub(crate) const fn new(len: usize, keep: usize) -> Pool {
        Pool {
            len,
            keep,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A buffer with stale contents.
    pub(crate) fn take(&'static self) -> AlignedBuf {
        let mut buf = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default();
        buf.resize(self.len + ALIGN, 0);
        // The aligned window of the buffer (`align_offset` keeps this free of unsafe).
        let at = buf.as_ptr().align_offset(ALIGN);
        AlignedBuf {
            buf,
            at,
            pool: self,
        }
    }
}

/// An aligned window of `pool.len` bytes; goes back to its pool when dropped.
pub(crate) struct AlignedBuf {
    buf: Vec<u8>,
    at: usize,
    pool: &'static Pool,
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.pool.len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.at..self.at + self.pool.len]
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let mut idle = self.pool.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.pool.keep {
            idle.push(std::mem::take(&mut self.buf));
        }
    }
}

/// `n` rounded up to the alignment.
pub(crate) fn padded(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// The error a filesystem gives for a direct write it does not support.
pub(crate) fn is_unsupported(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// Open `path` for direct writes (`create_new`: it must not exist yet). `None` where
/// that is not possible; the caller then writes through the page cache.
#[cfg(target_os = "linux")]
pub(crate) fn open(path: &Path, create_new: bool) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(create_new)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn open(_path: &Path, _create_new: bool) -> Option<File> {
    None
}

/// Write all of `buf` at `offset`.
pub(crate) fn write_at(f: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    crate::fsio::write_all_at(f, buf, offset)
}
