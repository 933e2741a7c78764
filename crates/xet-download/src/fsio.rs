//! Small file-system helpers: positional reads and writes, durable renames.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};

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

/// Writes a `.part` file's page-aligned spans with `O_DIRECT` (Linux), the rest through
/// the page cache.
///
/// A part renamed into place is fsynced first, so its bytes must reach the disk before
/// the download ends either way. Through the page cache they are first copied into newly
/// allocated cache pages: on a virtual machine, allocating pages the host reclaimed makes
/// that copy the largest cost of a download from a server (30% of the client's samples
/// in one profile). Here each aligned span is copied into a recycled, aligned staging
/// buffer instead, and a writer thread hands it to the disk while decoding goes on
/// ([`STAGES`] buffers bound what is in flight). The few bytes before the first and after
/// the last page boundary of a write share pages with neighbouring writes, so they go
/// through the page cache (never both paths on one page). A filesystem that refuses
/// `O_DIRECT` (tmpfs, some network filesystems) answers `EINVAL`; the writer thread then
/// writes that span through the page cache and everything after it goes that way too.
///
/// Writes are complete only after [`DirectWriter::finish`] (or drop), so a term is
/// journaled only once [`WriteWaiter::wait`] has seen its queued writes done.
pub(crate) struct DirectWriter {
    jobs: Option<SyncSender<Job>>,
    free: Receiver<Stage>,
    state: Arc<WriterState>,
    /// Staging buffers allocated so far (at most [`STAGES`]).
    stages: usize,
    /// Buffers back from the writer thread, collected by `finish`.
    spare: Vec<Stage>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Alignment of buffer addresses, file offsets and lengths for `O_DIRECT` (the page size,
/// shared with the store's direct writes).
pub(crate) const ALIGN: u64 = xet_cas::buffers::ALIGN as u64;
/// Bytes staged and written per direct call.
const STAGE: usize = 8 << 20;
/// Staging buffers per writer: one being filled, the others being written.
const STAGES: usize = 4;

#[derive(Default)]
struct WriterState {
    /// The first failed write: `(kind, message)`, reported by every later call.
    failed: Mutex<Option<(io::ErrorKind, String)>>,
    /// The filesystem refused a direct write.
    refused: AtomicBool,
    /// Bytes written with `O_DIRECT` so far.
    direct_bytes: AtomicU64,
    /// Jobs handed to the writer thread so far, and jobs it has finished (in order).
    queued: AtomicU64,
    done: Mutex<u64>,
    done_cv: Condvar,
}

/// Waits, from any thread, for the writes queued so far.
#[derive(Clone)]
pub(crate) struct WriteWaiter(Arc<WriterState>);

impl WriteWaiter {
    /// Block until every write queued before this call is done; the first error any
    /// write met.
    pub(crate) fn wait(&self) -> io::Result<()> {
        let st = &self.0;
        let target = st.queued.load(Ordering::Acquire);
        let mut done = st.done.lock().unwrap_or_else(|e| e.into_inner());
        while *done < target {
            done = st.done_cv.wait(done).unwrap_or_else(|e| e.into_inner());
        }
        drop(done);
        st.check()
    }
}

impl WriterState {
    fn check(&self) -> io::Result<()> {
        match &*self.failed.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
            None => Ok(()),
        }
    }
}

/// A staging buffer of `STAGE` bytes, aligned and in huge pages ([`xet_mmap::IoBuf`]:
/// the kernel pins every page of a direct write, and 2 MiB pages pin far faster).
struct Stage {
    buf: xet_mmap::IoBuf,
}

impl Stage {
    fn new() -> io::Result<Stage> {
        Ok(Stage {
            buf: xet_mmap::IoBuf::new(STAGE)?,
        })
    }

    fn window(&mut self) -> &mut [u8] {
        &mut self.buf[..STAGE]
    }
}

struct Job {
    stage: Stage,
    len: usize,
    offset: u64,
}

impl DirectWriter {
    /// A writer for `buffered`, the part at `path`, with a second handle on it opened for
    /// direct writes; `None` where that is not available.
    #[cfg(target_os = "linux")]
    pub(crate) fn open(path: &Path, buffered: Arc<File>) -> Option<DirectWriter> {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(path)
            .ok()?;
        Self::with_handles(direct, buffered)
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    /// A writer writing aligned spans to `direct` (on the writer thread) and the rest
    /// to `buffered`, both handles on one file.
    fn with_handles(direct: File, buffered: Arc<File>) -> Option<DirectWriter> {
        let (jobs, todo) = sync_channel::<Job>(STAGES);
        let (give_back, free) = sync_channel::<Stage>(STAGES);
        let state = Arc::new(WriterState::default());
        let st = state.clone();
        let thread = std::thread::Builder::new()
            .name("xet-part-writer".into())
            .spawn(move || {
                for job in todo {
                    if st.check().is_ok() {
                        let data = &job.stage.buf[..job.len];
                        if let Err(e) = write_span(&direct, &buffered, &st, data, job.offset) {
                            let mut failed = st.failed.lock().unwrap_or_else(|e| e.into_inner());
                            failed.get_or_insert((e.kind(), e.to_string()));
                        }
                    }
                    let _ = give_back.send(job.stage);
                    *st.done.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    st.done_cv.notify_all();
                }
            })
            .ok()?;
        Some(DirectWriter {
            jobs: Some(jobs),
            free,
            state,
            stages: 0,
            spare: Vec::new(),
            thread: Some(thread),
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn open(_path: &Path, _buffered: Arc<File>) -> Option<DirectWriter> {
        None
    }

    /// Write `bufs` back to back at `offset` of `buffered` (the same file): the aligned
    /// middle through the writer thread, head and tail at once. Returns the bytes that
    /// went through the page cache.
    pub(crate) fn write(
        &mut self,
        buffered: &File,
        bufs: &[&[u8]],
        offset: u64,
    ) -> io::Result<u64> {
        self.state.check()?;
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let mid_start = offset.next_multiple_of(ALIGN);
        let mid_end = (offset + len) / ALIGN * ALIGN;
        if self.state.refused.load(Ordering::Relaxed) || mid_start >= mid_end {
            write_all_vectored_at(buffered, bufs, offset)?;
            return Ok(len);
        }
        let head = sub_bufs(bufs, 0..mid_start - offset);
        write_all_vectored_at(buffered, &head, offset)?;
        self.stage_out(
            &sub_bufs(bufs, mid_start - offset..mid_end - offset),
            mid_start,
        )?;
        let tail = sub_bufs(bufs, mid_end - offset..len);
        write_all_vectored_at(buffered, &tail, mid_end)?;
        Ok(len - (mid_end - mid_start))
    }

    /// Copy `bufs` (a multiple of `ALIGN` bytes in all) into staging buffers and queue
    /// them for `offset` on.
    fn stage_out(&mut self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        let mut cur: Option<(Stage, usize)> = None;
        for b in bufs {
            let mut rest = *b;
            while !rest.is_empty() {
                let (stage, filled) = match &mut cur {
                    Some(c) => c,
                    None => cur.insert((self.take_stage()?, 0)),
                };
                let n = rest.len().min(STAGE - *filled);
                stage.window()[*filled..*filled + n].copy_from_slice(&rest[..n]);
                *filled += n;
                rest = &rest[n..];
                if *filled == STAGE {
                    let (stage, len) = cur.take().expect("just filled");
                    self.queue(stage, len, offset)?;
                    offset += len as u64;
                }
            }
        }
        if let Some((stage, len)) = cur.take() {
            self.queue(stage, len, offset)?;
        }
        Ok(())
    }

    /// A free staging buffer: a new one while fewer than [`STAGES`] exist, else the next
    /// one the writer thread gives back (waiting for it: the bound on what is in flight).
    fn take_stage(&mut self) -> io::Result<Stage> {
        if let Some(s) = self.spare.pop() {
            return Ok(s);
        }
        if let Ok(s) = self.free.try_recv() {
            return Ok(s);
        }
        if self.stages < STAGES {
            let s = Stage::new()?;
            self.stages += 1;
            return Ok(s);
        }
        self.free.recv().map_err(|_| writer_gone())
    }

    fn queue(&mut self, stage: Stage, len: usize, offset: u64) -> io::Result<()> {
        let jobs = self.jobs.as_ref().ok_or_else(writer_gone)?;
        jobs.send(Job { stage, len, offset })
            .map_err(|_| writer_gone())?;
        // Counted once sent, so a waiter never waits for a job the thread cannot get.
        self.state.queued.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// A handle for waiting on this writer's queued writes without holding it.
    pub(crate) fn waiter(&self) -> WriteWaiter {
        WriteWaiter(self.state.clone())
    }

    /// Wait until every queued write is done; the first error any of them met.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        while self.spare.len() < self.stages {
            let s = self.free.recv().map_err(|_| writer_gone())?;
            self.spare.push(s);
        }
        self.state.check()
    }
}

impl Drop for DirectWriter {
    /// Completes the queued writes (errors are for [`DirectWriter::finish`] to report).
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn writer_gone() -> io::Error {
    io::Error::other("the part file's writer thread stopped")
}

/// One span on the writer thread: directly unless refused, else through the page cache.
fn write_span(
    direct: &File,
    buffered: &File,
    st: &WriterState,
    data: &[u8],
    offset: u64,
) -> io::Result<()> {
    if !st.refused.load(Ordering::Relaxed) {
        match write_all_at(direct, data, offset) {
            Ok(()) => {
                st.direct_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                return Ok(());
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                st.refused.store(true, Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    }
    write_all_at(buffered, data, offset)
}

/// The bytes `range` of `bufs` taken back to back, as slices of them.
fn sub_bufs<'a>(bufs: &[&'a [u8]], range: std::ops::Range<u64>) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for b in bufs {
        let end = at + b.len() as u64;
        let lo = range.start.max(at);
        let hi = range.end.min(end);
        if lo < hi {
            out.push(&b[(lo - at) as usize..(hi - at) as usize]);
        }
        at = end;
    }
    out
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

    fn part(dir: &Path, len: u64) -> (std::path::PathBuf, Arc<File>) {
        let p = dir.join("f.part");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(len).unwrap();
        (p, Arc::new(f))
    }

    /// Writes of every shape (unaligned starts and ends, shorter than a block, several
    /// staging buffers long, split into many slices) in shuffled order land exactly,
    /// through the direct path where the filesystem has one.
    fn direct_writes_land(seed: u64, cuts: &[u64], split: usize) {
        let len = *cuts.last().unwrap();
        let want: Vec<u8> = (0..len)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let (p, f) = part(dir.path(), len);
        let Some(mut w) = DirectWriter::open(&p, f.clone()) else {
            eprintln!("O_DIRECT is not supported under the temp dir; direct writes unchecked");
            return;
        };
        let mut spans: Vec<(u64, u64)> = cuts.windows(2).map(|c| (c[0], c[1])).collect();
        // A fixed shuffle: later spans first, so the file fills out of order.
        spans.sort_by_key(|&(a, _)| (a.wrapping_mul(seed | 1)) % 1009);
        let mut through_cache = 0;
        // Whole blocks inside each span go directly, nothing else.
        let aligned: u64 = spans
            .iter()
            .map(|&(a, b)| (b / ALIGN).saturating_sub(a.div_ceil(ALIGN)) * ALIGN)
            .sum();
        for (a, b) in spans {
            let data = &want[a as usize..b as usize];
            let parts: Vec<&[u8]> = data.chunks(data.len().div_ceil(split).max(1)).collect();
            through_cache += w.write(&f, &parts, a).unwrap();
        }
        // What journaling waits for: every queued write done, read back before `finish`.
        w.waiter().wait().unwrap();
        assert!(
            std::fs::read(&p).unwrap() == want,
            "seed {seed}, cuts {cuts:?}"
        );
        w.finish().unwrap();
        let direct = w.state.direct_bytes.load(Ordering::Relaxed);
        assert_eq!(direct + through_cache, len, "every byte written once");
        if !w.state.refused.load(Ordering::Relaxed) {
            assert_eq!(direct, aligned, "the direct path takes every whole block");
        }
        drop(w);
        assert!(
            std::fs::read(&p).unwrap() == want,
            "seed {seed}, cuts {cuts:?}"
        );
    }

    #[test]
    fn direct_writer_lands_every_byte() {
        let a = ALIGN;
        let s = STAGE as u64;
        // Boundaries around blocks and staging buffers.
        direct_writes_land(
            1,
            &[0, 1, a - 1, a, a + 1, 3 * a, 3 * a + 7, s, 2 * s + a + 5],
            1,
        );
        direct_writes_land(2, &[0, s + 1, 3 * s - 1, 3 * s + 2 * a, 5 * s + 3], 7);
        direct_writes_land(3, &[0, 5 * s + 4095], 300);
        direct_writes_land(4, &[0, 100, 200, 2 * a - 1], 2);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        #[test]
        fn direct_writer_any_spans(
            seed in 0u64..1000,
            mut cuts in proptest::collection::vec(0u64..(3 << 20), 1..12),
            split in 1usize..9,
        ) {
            cuts.push(0);
            cuts.push(3 << 20);
            cuts.sort_unstable();
            cuts.dedup();
            direct_writes_land(seed, &cuts, split);
        }
    }

    /// A failed write on the writer thread is reported, by `finish` and by the
    /// writes after it; nothing panics.
    #[test]
    fn direct_writer_reports_failed_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (p, f) = part(dir.path(), 4 * STAGE as u64);
        // A handle that cannot write: every direct write fails (EBADF).
        let ro = File::open(&p).unwrap();
        let mut w = DirectWriter::with_handles(ro, f.clone()).unwrap();
        let data = vec![7u8; 2 * STAGE];
        w.write(&f, &[&data], 0).unwrap();
        assert!(w.waiter().wait().is_err(), "waiting reports the failure");
        let e = w.finish().unwrap_err();
        assert!(!e.to_string().is_empty());
        let again = w.write(&f, &[&data], 2 * STAGE as u64);
        assert!(again.is_err(), "later writes report the failure");
    }
}
