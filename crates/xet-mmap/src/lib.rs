//! Read-only views of whole files without copying them through `read(2)`, and aligned
//! buffers for direct I/O. The workspace's only `unsafe` code lives here.
//!
//! [`MappedFile::map`] maps large regular files and tells the caller to read everything
//! else (small files, pipes, special files, filesystems without mmap support). A map is
//! only sound to use for files that nobody truncates or rewrites while it is mapped:
//! bytes written meanwhile show through it, and an access past a truncation faults
//! (`SIGBUS`), which kills the process. So maps are for **stored objects**, which are
//! written once under a temporary name and never modified. Upload inputs, which their
//! owner may be editing, are not mapped: `xet-upload` reads them into buffers of its own
//! and checks once read that they did not change (a truncated input used to kill the
//! client with a bus error; the copy costs about 0.3 s of CPU per GiB, see its docs).
//!
//! [`IoBuf`] is anonymous memory for direct I/O: aligned and backed by huge pages. The
//! file writes built on it live here too, one of each: [`direct::DirectWriter`], the
//! `O_DIRECT` writer of the store and the download, and [`durable`], the atomic replace
//! (temporary file, fsync, rename, directory fsync).

use std::fs::File;
use std::path::Path;

pub mod direct;
pub mod durable;

/// Files smaller than this are not mapped: mapping costs a few system calls and page
/// faults that buy nothing for small inputs.
pub const MAP_THRESHOLD: u64 = 1 << 20;

/// A read-only map of one whole regular file that nobody modifies while it is mapped
/// (see the crate docs).
pub struct MappedFile {
    map: memmap2::Mmap,
}

impl MappedFile {
    /// Map `file` if it is a regular file of at least [`MAP_THRESHOLD`] bytes and the
    /// system can map it; `Ok(None)` means "read it instead" (small files, pipes, special
    /// files, filesystems without mmap support).
    pub fn map(file: File) -> std::io::Result<Option<MappedFile>> {
        let meta = file.metadata()?;
        let len = meta.len();
        if !meta.is_file() || len < MAP_THRESHOLD || usize::try_from(len).is_err() {
            return Ok(None);
        }
        let Some(map) = map(&file) else {
            return Ok(None);
        };
        // Sequential access: the kernel reads ahead of us.
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(Some(MappedFile { map }))
    }

    /// Open and map `path` (see [`map`](Self::map)).
    pub fn open(path: &Path) -> std::io::Result<Option<MappedFile>> {
        Self::map(File::open(path)?)
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

#[allow(unsafe_code)]
fn map(file: &File) -> Option<memmap2::Mmap> {
    // SAFETY: the map is read-only and private to this process, and is only ever exposed
    // as `&[u8]` borrowed from the `MappedFile` that owns it (so it cannot outlive the map).
    // The remaining hazard, another process writing or truncating the file meanwhile, is
    // why only files nobody modifies are mapped (see the crate docs).
    unsafe { memmap2::Mmap::map(file) }.ok()
}

/// Alignment of [`IoBuf`]s: the size of a transparent huge page on x86-64 and arm64.
pub const HUGE_PAGE: usize = 2 << 20;

/// A zeroed, writable buffer in its own anonymous memory, starting on a 2 MiB boundary,
/// that asks the kernel for transparent huge pages (`MADV_HUGEPAGE`, where the system
/// allows it; a plain buffer otherwise). For memory that `O_DIRECT` writes come from:
/// the kernel pins the pages of every such write, and a few 2 MiB pages pin much faster
/// than thousands of 4 KiB ones (8 MiB direct writes of 1 GiB took 0.30 s from huge
/// pages against 0.43-0.54 s from ordinary ones on the bench machine). Touching it also
/// faults in 2 MiB at a time.
///
/// Huge pages pay off for buffers reused many times. A fresh huge page can cost far more
/// to fault in than 512 small ones: on a virtual machine whose host takes back free
/// guest memory, first touching 256 MiB of huge pages took 0.59 s against 0.09 s for
/// 4 KiB pages. Large buffers used only a few times per process take
/// [`IoBuf::new_small_pages`].
pub struct IoBuf {
    map: memmap2::MmapMut,
    start: usize,
    len: usize,
}

impl IoBuf {
    /// A buffer of `len` bytes (at least one).
    pub fn new(len: usize) -> std::io::Result<IoBuf> {
        let len = len.max(1);
        let total = len.checked_add(HUGE_PAGE).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "buffer too large")
        })?;
        let map = memmap2::MmapMut::map_anon(total)?;
        let start = (map.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - map.as_ptr() as usize;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let _ = map.advise_range(memmap2::Advice::HugePage, start, len);
        Ok(IoBuf { map, start, len })
    }

    /// A buffer of `len` bytes (at least one) in ordinary pages: zeroed, writable and
    /// starting on a page boundary (so still fit for `O_DIRECT`), without asking for huge
    /// pages (see the type's documentation for when that is cheaper).
    pub fn new_small_pages(len: usize) -> std::io::Result<IoBuf> {
        let len = len.max(1);
        let map = memmap2::MmapMut::map_anon(len)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let _ = map.advise(memmap2::Advice::NoHugePage);
        Ok(IoBuf { map, start: 0, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

impl std::ops::Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_buffers_are_zeroed_aligned_and_writable() {
        type Make = fn(usize) -> std::io::Result<IoBuf>;
        let kinds: [(Make, usize); 2] = [(IoBuf::new, HUGE_PAGE), (IoBuf::new_small_pages, 4096)];
        for (make, align) in kinds {
            for len in [
                0usize,
                1,
                4095,
                4096,
                4097,
                HUGE_PAGE - 1,
                HUGE_PAGE,
                HUGE_PAGE + 1,
                (8 << 20) + 4096,
            ] {
                let mut b = make(len).unwrap();
                assert_eq!(b.len(), len.max(1));
                assert_eq!(b.as_ptr() as usize % align, 0, "len {len}");
                assert!(b.iter().all(|&x| x == 0), "len {len}");
                let n = b.len();
                b[n - 1] = 7;
                b[0] = 9;
                assert_eq!((b[0], b[n - 1]), (9, if n == 1 { 9 } else { 7 }));
            }
            assert!(make(usize::MAX).is_err());
        }
    }

    #[test]
    fn large_files_are_mapped_small_ones_and_directories_are_not() {
        let dir = tempfile::tempdir().unwrap();
        for len in [
            0usize,
            1,
            MAP_THRESHOLD as usize - 1,
            MAP_THRESHOLD as usize,
            3 << 20,
        ] {
            let p = dir.path().join(format!("f{len}"));
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            std::fs::write(&p, &data).unwrap();
            match MappedFile::open(&p).unwrap() {
                Some(m) => {
                    assert!(len as u64 >= MAP_THRESHOLD, "len {len}");
                    assert_eq!(m.bytes(), &data[..], "len {len}");
                }
                None => assert!((len as u64) < MAP_THRESHOLD, "len {len}"),
            }
        }
        assert!(
            MappedFile::open(dir.path()).is_err()
                || MappedFile::open(dir.path()).unwrap().is_none()
        );
    }
}
