//! The one `O_DIRECT` writer ([`DirectWriter`]) and the positional writes under it, and
//! the one `O_DIRECT` reader ([`read_range`]), for reading such a file back.
//!
//! Stored objects and downloaded files are fsynced before they are placed, so their
//! bytes go to the disk right away either way. Through the page cache they are first
//! copied into newly allocated cache pages: most of a store's CPU time for large xorbs,
//! and on a virtual machine, allocating pages the host reclaimed made that copy the
//! largest cost of a download from a server (30% of the client's samples in one
//! profile). A direct write goes to the disk from a recycled, aligned staging buffer
//! ([`IoBuf`]) instead, or straight from the caller's memory when that is aligned
//! already; the file is still read through the page cache (it is simply not in it until
//! first read).

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};

use crate::IoBuf;

/// Alignment of buffer addresses, file offsets and lengths for `O_DIRECT`: the largest
/// logical block size in common use (and the page size), so it suits any device.
pub const ALIGN: u64 = 4096;
/// Bytes staged and written per direct call.
pub const STAGE: usize = 8 << 20;
/// Staging buffers per writer unless it asks for fewer: one being filled, the others
/// being written.
pub const STAGES: usize = 4;
/// Staging buffers kept for the next writer of this process (huge pages are slow to
/// fault in the first time; see [`IoBuf`]).
const IDLE_MAX: usize = 4;

/// Staging buffers given back by finished writers.
static IDLE: Mutex<Vec<IoBuf>> = Mutex::new(Vec::new());

/// Write all of `buf` at `offset`.
#[cfg(unix)]
pub fn write_all_at(f: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(f, buf, offset)
}

/// Write all of `buf` at `offset`.
#[cfg(windows)]
pub fn write_all_at(f: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
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

/// Write `bufs` back to back starting at `offset` (`pwritev`, resumed after short writes).
#[cfg(unix)]
pub fn write_all_vectored_at(f: &File, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
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

/// Write `bufs` back to back starting at `offset`.
#[cfg(not(unix))]
pub fn write_all_vectored_at(f: &File, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
    for b in bufs {
        write_all_at(f, b, offset)?;
        offset += b.len() as u64;
    }
    Ok(())
}

/// Writes a file's page-aligned spans with `O_DIRECT` (Linux), the rest through the page
/// cache, through two handles on the one file.
///
/// Each aligned span is copied into a staging buffer and a writer thread hands it to the
/// disk while the caller goes on (at most `stages` buffers in flight bound the memory);
/// a span whose memory is aligned already is written from there, on the caller's
/// thread, without the copy. The few bytes before the first and after the last block
/// boundary of a write share blocks with neighbouring writes, so they go through the
/// page cache (never both paths on one block). A filesystem that refuses `O_DIRECT`
/// (tmpfs, some network filesystems) answers `EINVAL`, at the open or at the first
/// write; the span is then written through the page cache and everything after it goes
/// that way too ([`DirectWriter::refused`]).
///
/// Writes are complete only after [`DirectWriter::finish`] (or drop); a
/// [`WriteWaiter`] waits for those queued so far from any thread. Nothing is fsynced:
/// the caller syncs the buffered handle before it places the file.
pub struct DirectWriter {
    direct: Arc<File>,
    buffered: Arc<File>,
    jobs: Option<SyncSender<Job>>,
    free: Receiver<IoBuf>,
    state: Arc<WriterState>,
    /// Staging buffers this writer may hold.
    max_stages: usize,
    /// Staging buffers taken so far (at most `max_stages`).
    stages: usize,
    /// Buffers back from the writer thread, collected by `finish`.
    spare: Vec<IoBuf>,
    thread: Option<std::thread::JoinHandle<()>>,
}

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

impl WriterState {
    fn check(&self) -> io::Result<()> {
        match &*self.failed.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
            None => Ok(()),
        }
    }

    fn fail(&self, e: &io::Error) {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.get_or_insert((e.kind(), e.to_string()));
    }
}

/// Waits, from any thread, for the writes queued so far.
#[derive(Clone)]
pub struct WriteWaiter(Arc<WriterState>);

impl WriteWaiter {
    /// Block until every write queued before this call is done; the first error any
    /// write met.
    pub fn wait(&self) -> io::Result<()> {
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

struct Job {
    stage: IoBuf,
    len: usize,
    offset: u64,
}

impl DirectWriter {
    /// A writer for `buffered`, the file at `path`, with a second handle on it opened
    /// for direct writes and up to [`STAGES`] staging buffers; `None` where direct
    /// writes are not available (not Linux, or the open refused).
    pub fn open(path: &Path, buffered: Arc<File>) -> Option<DirectWriter> {
        Self::open_with_stages(path, buffered, STAGES)
    }

    /// [`DirectWriter::open`] with at most `stages` (at least one) staging buffers: one
    /// makes copying and writing alternate, more let them overlap.
    #[cfg(target_os = "linux")]
    pub fn open_with_stages(
        path: &Path,
        buffered: Arc<File>,
        stages: usize,
    ) -> Option<DirectWriter> {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(path)
            .ok()?;
        Self::with_handles(direct, buffered, stages)
    }

    #[cfg(not(target_os = "linux"))]
    pub fn open_with_stages(
        _path: &Path,
        _buffered: Arc<File>,
        _stages: usize,
    ) -> Option<DirectWriter> {
        None
    }

    /// A writer writing aligned spans to `direct` (on the writer thread) and the rest
    /// to `buffered`, both handles on one file.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fn with_handles(direct: File, buffered: Arc<File>, stages: usize) -> Option<DirectWriter> {
        let stages = stages.max(1);
        let (jobs, todo) = sync_channel::<Job>(stages);
        let (give_back, free) = sync_channel::<IoBuf>(stages);
        let state = Arc::new(WriterState::default());
        let direct = Arc::new(direct);
        let (st, d, b) = (state.clone(), direct.clone(), buffered.clone());
        let thread = std::thread::Builder::new()
            .name("xet-direct-writer".into())
            .spawn(move || {
                for job in todo {
                    if st.check().is_ok()
                        && let Err(e) = write_span(&d, &b, &st, &job.stage[..job.len], job.offset)
                    {
                        st.fail(&e);
                    }
                    let _ = give_back.send(job.stage);
                    *st.done.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    st.done_cv.notify_all();
                }
            })
            .ok()?;
        Some(DirectWriter {
            direct,
            buffered,
            jobs: Some(jobs),
            free,
            state,
            max_stages: stages,
            stages: 0,
            spare: Vec::new(),
            thread: Some(thread),
        })
    }

    /// Write `bufs` back to back at `offset` of the file: the aligned middle directly,
    /// head and tail through `buffered` (a handle on the same file; the one given to
    /// `open` or a clone of it) at once. Returns the bytes that went through the page
    /// cache.
    pub fn write(&mut self, buffered: &File, bufs: &[&[u8]], offset: u64) -> io::Result<u64> {
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
        self.write_aligned(
            &sub_bufs(bufs, mid_start - offset..mid_end - offset),
            mid_start,
        )?;
        let tail = sub_bufs(bufs, mid_end - offset..len);
        write_all_vectored_at(buffered, &tail, mid_end)?;
        Ok(len - (mid_end - mid_start))
    }

    /// Write `bufs` (a multiple of `ALIGN` bytes in all) at `offset` (aligned): whole
    /// blocks on aligned addresses straight from memory, the rest copied into staging
    /// buffers and queued.
    fn write_aligned(&mut self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        let mut cur: Option<(IoBuf, usize)> = None;
        for b in bufs {
            let mut rest = *b;
            while !rest.is_empty() {
                // Nothing staged, so `offset` is the next byte's place, and aligned.
                let whole = rest.len() / ALIGN as usize * ALIGN as usize;
                if cur.is_none() && whole > 0 && rest.as_ptr().align_offset(ALIGN as usize) == 0 {
                    self.write_in_place(&rest[..whole], offset)?;
                    offset += whole as u64;
                    rest = &rest[whole..];
                    continue;
                }
                let (stage, filled) = match &mut cur {
                    Some(c) => c,
                    None => cur.insert((self.take_stage()?, 0)),
                };
                let n = rest.len().min(STAGE - *filled);
                stage[*filled..*filled + n].copy_from_slice(&rest[..n]);
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

    /// A span on aligned memory, written now on this thread.
    fn write_in_place(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let res = write_span(&self.direct, &self.buffered, &self.state, data, offset);
        if let Err(e) = &res {
            self.state.fail(e);
        }
        res
    }

    /// A free staging buffer: one of this writer's that is free, else a new one (from
    /// the idle ones when there are) while it has fewer than its maximum, else the next
    /// one the writer thread gives back (waiting for it: the bound on what is in flight).
    fn take_stage(&mut self) -> io::Result<IoBuf> {
        if let Some(s) = self.spare.pop() {
            return Ok(s);
        }
        if let Ok(s) = self.free.try_recv() {
            return Ok(s);
        }
        if self.stages < self.max_stages {
            let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let s = match idle {
                Some(s) => s,
                None => IoBuf::new(STAGE)?,
            };
            self.stages += 1;
            return Ok(s);
        }
        self.free.recv().map_err(|_| writer_gone())
    }

    fn queue(&mut self, stage: IoBuf, len: usize, offset: u64) -> io::Result<()> {
        let jobs = self.jobs.as_ref().ok_or_else(writer_gone)?;
        jobs.send(Job { stage, len, offset })
            .map_err(|_| writer_gone())?;
        // Counted once sent, so a waiter never waits for a job the thread cannot get.
        self.state.queued.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// A handle for waiting on this writer's queued writes without holding it.
    pub fn waiter(&self) -> WriteWaiter {
        WriteWaiter(self.state.clone())
    }

    /// Wait until every queued write is done; the first error any of them met.
    pub fn finish(&mut self) -> io::Result<()> {
        while self.spare.len() < self.stages {
            let s = self.free.recv().map_err(|_| writer_gone())?;
            self.spare.push(s);
        }
        self.state.check()
    }

    /// Whether the filesystem refused a direct write (everything from then on went
    /// through the page cache).
    pub fn refused(&self) -> bool {
        self.state.refused.load(Ordering::Relaxed)
    }

    /// Bytes written with `O_DIRECT` so far.
    pub fn direct_bytes(&self) -> u64 {
        self.state.direct_bytes.load(Ordering::Relaxed)
    }
}

impl Drop for DirectWriter {
    /// Completes the queued writes (errors are for [`DirectWriter::finish`] to report)
    /// and keeps staging buffers for the next writer.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.spare.extend(self.free.try_iter());
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        while idle.len() < IDLE_MAX
            && let Some(s) = self.spare.pop()
        {
            idle.push(s);
        }
    }
}

/// Read `path`'s bytes `from..to` in order, handing them to `each` a piece at a time,
/// while a second thread reads the next piece. With `O_DIRECT` where the system takes
/// it (Linux; buffered reads where the open or the first read is refused), so a file
/// that was written directly and is not in the page cache is read without filling it:
/// reading 1 GiB written that way through the page cache cost 2.3-2.6 s of CPU on the
/// bench machine, against 0.7 s for a direct read (hashing it included). For bytes
/// still in the page cache, a buffered read is cheaper (a direct read first writes back
/// what is dirty in the range and then reads from the disk). A file shorter than `to` is
/// an `UnexpectedEof` error.
pub fn read_range(path: &Path, from: u64, to: u64, mut each: impl FnMut(&[u8])) -> io::Result<()> {
    if from >= to {
        return Ok(());
    }
    match open_direct(path) {
        Some(direct) => match read_direct(&direct, from, to, &mut each)? {
            Read::Done => Ok(()),
            Read::Refused => read_buffered(&File::open(path)?, from, to, &mut each),
        },
        None => read_buffered(&File::open(path)?, from, to, &mut each),
    }
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_path: &Path) -> Option<File> {
    None
}

enum Read {
    Done,
    /// The first read was refused: nothing was handed to `each`.
    Refused,
}

/// One piece read by [`read_direct`]'s reader: its buffer and the bytes of it to hand
/// over.
type Filled = io::Result<(IoBuf, std::ops::Range<usize>)>;

/// `from..to` of `direct` (opened with `O_DIRECT`) in aligned reads of [`STAGE`] bytes
/// into two staging buffers, one being read while `each` takes the other.
fn read_direct(direct: &File, from: u64, to: u64, each: &mut dyn FnMut(&[u8])) -> io::Result<Read> {
    let start = from - from % ALIGN;
    let bufs = take_idle(2)?;
    let (full_tx, full_rx) = sync_channel::<Filled>(1);
    let (free_tx, free_rx) = sync_channel::<IoBuf>(2);
    let (res, kept) = std::thread::scope(move |s| {
        let reader = s.spawn(move || {
            let mut at = start;
            while at < to {
                let Ok(mut buf) = free_rx.recv() else { break };
                let want = ((to - at) as usize).min(STAGE);
                let skip = from.saturating_sub(at) as usize;
                let filled = read_aligned(direct, &mut buf, want, at).map(|()| (buf, skip..want));
                let failed = filled.is_err();
                if full_tx.send(filled).is_err() || failed {
                    break;
                }
                at += want as u64;
            }
            drop(full_tx);
            free_rx.try_iter().collect::<Vec<IoBuf>>()
        });
        // Moved in here, so that however this returns the reader is not left waiting.
        let (full_rx, free_tx) = (full_rx, free_tx);
        let mut kept = Vec::new();
        for b in bufs {
            free_tx.send(b).expect("the reader takes two buffers");
        }
        let mut handed = false;
        let mut res = Ok(Read::Done);
        for filled in full_rx.iter() {
            match filled {
                Ok((buf, range)) => {
                    each(&buf[range]);
                    handed = true;
                    // The reader may be done: nothing to give the buffer back to.
                    if let Err(back) = free_tx.send(buf) {
                        kept.push(back.0);
                    }
                }
                Err(e) if !handed && is_refusal(&e) => res = Ok(Read::Refused),
                Err(e) => res = Err(e),
            }
        }
        drop(free_tx);
        kept.extend(reader.join().unwrap_or_default());
        (res, kept)
    });
    give_idle(kept);
    res
}

/// Fill `buf[..want]` from `at` (aligned) with aligned reads; the last one may end past
/// the end of the file, which then must come at or after `want`.
fn read_aligned(direct: &File, buf: &mut IoBuf, want: usize, at: u64) -> io::Result<()> {
    let mut got = 0;
    while got < want {
        let len = (want - got)
            .next_multiple_of(ALIGN as usize)
            .min(buf.len() - got);
        let n = read_at(direct, &mut buf[got..got + len], at + got as u64)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(())
}

#[cfg(unix)]
fn read_at(f: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    loop {
        match std::os::unix::fs::FileExt::read_at(f, buf, at) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

#[cfg(windows)]
fn read_at(f: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(f, buf, at)
}

/// `from..to` of `f` through the page cache, a piece at a time (what [`read_range`]
/// falls back to; for bytes that are in the page cache, the cheaper read). A file
/// shorter than `to` is an `UnexpectedEof` error.
pub fn read_buffered(f: &File, from: u64, to: u64, each: &mut dyn FnMut(&[u8])) -> io::Result<()> {
    let mut buf = vec![0u8; ((to - from) as usize).min(1 << 20)];
    let mut at = from;
    while at < to {
        let len = buf.len().min((to - at) as usize);
        let n = read_at(f, &mut buf[..len], at)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        each(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

/// `n` staging buffers, idle ones first.
fn take_idle(n: usize) -> io::Result<Vec<IoBuf>> {
    let mut out: Vec<IoBuf> = {
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        let k = idle.len().saturating_sub(n);
        idle.drain(k..).collect()
    };
    while out.len() < n {
        out.push(IoBuf::new(STAGE)?);
    }
    Ok(out)
}

/// Keep staging buffers for the next writer or reader.
fn give_idle(mut bufs: Vec<IoBuf>) {
    let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
    while idle.len() < IDLE_MAX
        && let Some(b) = bufs.pop()
    {
        idle.push(b);
    }
}

fn writer_gone() -> io::Error {
    io::Error::other("the direct writer's thread stopped")
}

/// One span: directly unless refused, else through the page cache.
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
            Err(e) if is_refusal(&e) => st.refused.store(true, Ordering::Relaxed),
            Err(e) => return Err(e),
        }
    }
    write_all_at(buffered, data, offset)
}

/// The answer of a filesystem that does not take direct writes.
#[cfg(unix)]
fn is_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
}

#[cfg(not(unix))]
fn is_refusal(_e: &io::Error) -> bool {
    false
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

    fn file(dir: &Path, len: u64) -> (std::path::PathBuf, Arc<File>) {
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
    /// staging buffers long, split into many slices, from aligned memory or not) in
    /// shuffled order land exactly, through the direct path where the filesystem has
    /// one.
    fn direct_writes_land(seed: u64, cuts: &[u64], split: usize, stages: usize) {
        let len = *cuts.last().unwrap();
        let want: Vec<u8> = (0..len)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
            .collect();
        // The same bytes on an aligned address, so some spans skip the staging copy.
        let mut aligned = IoBuf::new_small_pages(len as usize).unwrap();
        aligned[..len as usize].copy_from_slice(&want);
        let dir = tempfile::tempdir().unwrap();
        let (p, f) = file(dir.path(), len);
        let Some(mut w) = DirectWriter::open_with_stages(&p, f.clone(), stages) else {
            eprintln!("O_DIRECT is not supported under the temp dir; direct writes unchecked");
            return;
        };
        let mut spans: Vec<(u64, u64)> = cuts.windows(2).map(|c| (c[0], c[1])).collect();
        // A fixed shuffle: later spans first, so the file fills out of order.
        spans.sort_by_key(|&(a, _)| (a.wrapping_mul(seed | 1)) % 1009);
        let mut through_cache = 0;
        // Whole blocks inside each span go directly, nothing else.
        let direct_want: u64 = spans
            .iter()
            .map(|&(a, b)| (b / ALIGN).saturating_sub(a.div_ceil(ALIGN)) * ALIGN)
            .sum();
        for (k, (a, b)) in spans.into_iter().enumerate() {
            let src = if k % 2 == 0 { &want[..] } else { &aligned[..] };
            let data = &src[a as usize..b as usize];
            let parts: Vec<&[u8]> = data.chunks(data.len().div_ceil(split).max(1)).collect();
            through_cache += w.write(&f, &parts, a).unwrap();
        }
        // What a caller waits for: every queued write done, read back before `finish`.
        w.waiter().wait().unwrap();
        assert!(
            std::fs::read(&p).unwrap() == want,
            "seed {seed}, cuts {cuts:?}"
        );
        w.finish().unwrap();
        let direct = w.direct_bytes();
        assert_eq!(direct + through_cache, len, "every byte written once");
        if !w.refused() {
            assert_eq!(
                direct, direct_want,
                "the direct path takes every whole block"
            );
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
            STAGES,
        );
        direct_writes_land(2, &[0, s + 1, 3 * s - 1, 3 * s + 2 * a, 5 * s + 3], 7, 1);
        direct_writes_land(3, &[0, 5 * s + 4095], 300, STAGES);
        direct_writes_land(4, &[0, 100, 200, 2 * a - 1], 2, 2);
        direct_writes_land(5, &[0, 2 * s + 3 * a, 4 * s], 1, 1);
        // Once found by the property test below: one write of the whole file.
        direct_writes_land(0, &[0, 3 << 20], 1, STAGES);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        #[test]
        fn direct_writer_any_spans(
            seed in 0u64..1000,
            mut cuts in proptest::collection::vec(0u64..(3 << 20), 1..12),
            split in 1usize..9,
            stages in 1usize..5,
        ) {
            cuts.push(0);
            cuts.push(3 << 20);
            cuts.sort_unstable();
            cuts.dedup();
            direct_writes_land(seed, &cuts, split, stages);
        }
    }

    /// A failed write on the writer thread is reported, by `finish` and by the
    /// writes after it; nothing panics.
    #[test]
    fn direct_writer_reports_failed_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (p, f) = file(dir.path(), 4 * STAGE as u64);
        // A handle that cannot write: every direct write fails (EBADF).
        let ro = File::open(&p).unwrap();
        let mut w = DirectWriter::with_handles(ro, f.clone(), STAGES).unwrap();
        let data = vec![7u8; 2 * STAGE];
        w.write(&f, &[&data], 0).unwrap();
        assert!(w.waiter().wait().is_err(), "waiting reports the failure");
        let e = w.finish().unwrap_err();
        assert!(!e.to_string().is_empty());
        let again = w.write(&f, &[&data], 2 * STAGE as u64);
        assert!(again.is_err(), "later writes report the failure");
    }

    /// Every range (unaligned ends, within one staging buffer, across several, to the
    /// end of a file whose length is not aligned) is handed over whole and in order,
    /// whether the file went to the disk directly or sits in the page cache.
    #[test]
    fn ranges_are_read_back_whole_and_in_order() {
        let len = 2 * STAGE as u64 + 12_345;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let (p, f) = file(dir.path(), len);
        match DirectWriter::open(&p, f.clone()) {
            Some(mut w) => {
                w.write(&f, &[&data], 0).unwrap();
                w.finish().unwrap();
            }
            None => write_all_at(&f, &data, 0).unwrap(),
        }
        let ranges = [
            (0, len),
            (1, 4095),
            (4096, 8192),
            (5000, STAGE as u64 + 3),
            (STAGE as u64 - 1, len),
            (len - 1, len),
            (len, len),
        ];
        for (from, to) in ranges {
            let mut got = Vec::new();
            let mut pieces = 0;
            read_range(&p, from, to, |b| {
                got.extend_from_slice(b);
                pieces += 1;
            })
            .unwrap();
            assert_eq!(got, &data[from as usize..to as usize], "{from}..{to}");
            assert!(pieces <= (to - from).div_ceil(1 << 20).max(1) as usize);
            // The fallback where direct reads are refused.
            got.clear();
            read_buffered(&f, from, to, &mut |b| got.extend_from_slice(b)).unwrap();
            assert_eq!(
                got,
                &data[from as usize..to as usize],
                "buffered {from}..{to}"
            );
        }
        let mut read = 0u64;
        let e = read_range(&p, len - 10, len + 1, |b| read += b.len() as u64).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(read <= 10);
        assert!(read_range(&dir.path().join("missing"), 0, 1, |_| ()).is_err());
    }
}
