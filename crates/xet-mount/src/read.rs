//! Reads of one open file: each read is served from read-ahead windows, byte ranges of
//! the file rebuilt by `xet-download` (the reconstruction of that range only, its xorb
//! ranges fetched, every chunk decoded within its declared sizes and its hash checked
//! against its xorb's, the mount's [`xet_download::ChunkHashes`]). A reader that goes
//! on where the last window ends gets windows that double, from [`FIRST_WINDOW`] to
//! [`MAX_WINDOW`], one (then [`AHEAD`]) of them fetched ahead of the one it reads, each
//! streamed in order (`file_stream`); a read elsewhere fetches [`RANDOM_WINDOW`]
//! through the chunk cache (consulted and filled) and starts the growth over, so random
//! readers do not pay for read-ahead (see [`streamed`]). Windows hold permits of the
//! mount's memory budget until they are dropped; permits are taken now or not at all
//! (no reader waits for another's memory): without them a read fetches only its own
//! bytes.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use tokio::sync::OwnedSemaphorePermit;
use xet_download::{DownloadOptions, DownloadRequest, FetchConcurrency, FileRange};
use xet_hash::MerkleHash;

use crate::ctx::{Ctx, Source};
pub(crate) use xet_cas::error_chain;

/// The first window of a sequential reader.
pub(crate) const FIRST_WINDOW: u64 = 4 << 20;
/// The largest window (hf-mount's too).
pub(crate) const MAX_WINDOW: u64 = 128 << 20;
/// What a read that is not sequential fetches at least.
pub(crate) const RANDOM_WINDOW: u64 = 1 << 20;
/// A read this far past the last window still counts as sequential (the kernel's own
/// read-ahead and several threads of one reader jump a little).
const SEQUENTIAL_SLACK: u64 = 16 << 20;
/// Windows fetched ahead of the one a sequential reader is in, once they are large.
const AHEAD: usize = 2;
/// Windows kept per open file: the one read, those fetched ahead, and the last one for
/// readers that step back a little.
const WINDOWS_KEPT: usize = AHEAD + 2;

/// Why a window could not be had; already logged with the file and the server.
#[derive(Debug, Clone)]
pub(crate) struct ReadFailed;

type Fetched = Result<Arc<(Pieces, Option<OwnedSemaphorePermit>)>, ReadFailed>;

/// A window's bytes: consecutive pieces as they came (a streamed window is pieces of
/// about 1 MiB; joining them would copy every byte once more).
pub(crate) struct Pieces {
    parts: Vec<Bytes>,
    /// Where each part starts within the window.
    starts: Vec<usize>,
    len: usize,
}

impl Pieces {
    fn new(parts: Vec<Bytes>) -> Pieces {
        let mut starts = Vec::with_capacity(parts.len());
        let mut len = 0;
        for p in &parts {
            starts.push(len);
            len += p.len();
        }
        Pieces { parts, starts, len }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Bytes `from..to` of the window (`to` at most its length): no copy within one
    /// part, one copy of just those bytes across parts.
    fn slice(&self, from: usize, to: usize) -> Bytes {
        let first = self.starts.partition_point(|&s| s <= from) - 1;
        let (p, at) = (&self.parts[first], self.starts[first]);
        if to - at <= p.len() {
            return p.slice(from - at..to - at);
        }
        let mut out = Vec::with_capacity(to - from);
        let mut pos = from;
        for (part, &start) in self.parts[first..].iter().zip(&self.starts[first..]) {
            if pos >= to {
                break;
            }
            let upto = (start + part.len()).min(to);
            out.extend_from_slice(&part[pos - start..upto - start]);
            pos = upto;
        }
        Bytes::from(out)
    }
}

struct Window {
    start: u64,
    end: u64,
    data: Shared<BoxFuture<'static, Fetched>>,
}

#[derive(Default)]
struct Windows {
    list: VecDeque<Window>,
    /// The size of the next sequential window.
    next_len: u64,
}

/// How one file's bytes are fetched.
#[derive(Clone)]
pub(crate) struct Origin {
    pub ctx: Arc<Ctx>,
    /// The path below the mount's root (for the server and for log lines).
    pub path: String,
    pub size: u64,
    /// `None`: not in Xet, read whole through `resolve`.
    pub hash: Option<MerkleHash>,
}

/// The read state of one open file.
pub(crate) struct Reader {
    origin: Origin,
    windows: Mutex<Windows>,
}

impl Reader {
    pub fn new(origin: Origin) -> Reader {
        Reader {
            origin,
            windows: Mutex::new(Windows {
                list: VecDeque::new(),
                next_len: FIRST_WINDOW,
            }),
        }
    }

    /// `len` bytes at `offset` (fewer at the end of the file).
    pub async fn read(&self, offset: u64, len: u64) -> Result<Bytes, ReadFailed> {
        let size = self.origin.size;
        let end = offset.saturating_add(len).min(size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let mut parts: Vec<Bytes> = Vec::new();
        let mut pos = offset;
        while pos < end {
            let (start, data) = self.window_for(pos, end - pos);
            let got = data.await?;
            let pieces = &got.0;
            let from = usize::try_from(pos - start).map_err(|_| ReadFailed)?;
            if from >= pieces.len() {
                return Err(self.short(pos));
            }
            let upto = pieces
                .len()
                .min(from + usize::try_from(end - pos).unwrap_or(usize::MAX));
            parts.push(pieces.slice(from, upto));
            pos += (upto - from) as u64;
        }
        if parts.len() == 1 {
            return Ok(parts.pop().expect("one part"));
        }
        Ok(Bytes::from(parts.concat()))
    }

    fn short(&self, pos: u64) -> ReadFailed {
        tracing::error!(
            "reading {} from {}: the server's answer ends before byte {pos} of {}",
            self.origin.path,
            self.origin.ctx.server(),
            self.origin.size
        );
        ReadFailed
    }

    /// The window holding `pos`, started if there is none; and the next window started
    /// ahead when a sequential reader is in the last one.
    fn window_for(&self, pos: u64, want: u64) -> (u64, Shared<BoxFuture<'static, Fetched>>) {
        let size = self.origin.size;
        let mut w = self.windows.lock().expect("windows lock");
        if self.origin.hash.is_none() {
            // Outside Xet: one window, the whole file (small: plain git files).
            if w.list.is_empty() {
                let win = self.start(0, size, None);
                w.list.push_back(win);
            }
            let first = &w.list[0];
            return (first.start, first.data.clone());
        }
        if let Some(i) = w.list.iter().position(|x| x.start <= pos && pos < x.end) {
            let (start, end, data) = (w.list[i].start, w.list[i].end, w.list[i].data.clone());
            // In a sequential run: keep windows fetching after the one read, so the link
            // stays busy while the reader drains a window and the gap between one
            // window's end and the next one's first bytes is hidden.
            if end - start >= FIRST_WINDOW {
                // One window ahead while they are small (a short sequential read, such
                // as one tensor, or the kernel's own read-ahead after a random read,
                // is not charged for two), [`AHEAD`] once they are large.
                let ahead = if end - start >= self.max_window() / 2 {
                    AHEAD
                } else {
                    1
                };
                // Counted anew each time (pushing drops windows from the front), and at
                // most `ahead` pushes whatever the list holds.
                for _ in 0..ahead {
                    if w.list.iter().filter(|x| x.start >= end).count() >= ahead {
                        break;
                    }
                    let tail = w.list.back().map_or(end, |b| b.end);
                    if tail >= size || !self.push_sequential(&mut w, tail) {
                        break;
                    }
                }
            }
            return (start, data);
        }
        let sequential = w
            .list
            .back()
            .is_some_and(|b| pos >= b.end && pos <= b.end + SEQUENTIAL_SLACK);
        // Windows the reader has left hold memory others may want.
        w.list.retain(|x| x.end > pos);
        let len = if sequential || pos == 0 {
            let len = w.next_len;
            w.next_len = (len * 2).min(self.max_window());
            len.max(want)
        } else {
            w.next_len = FIRST_WINDOW.min(self.max_window());
            want.max(RANDOM_WINDOW)
        };
        let end = pos.saturating_add(len).min(size);
        let win = match self.reserve(end - pos) {
            Some(permit) => self.start(pos, end, Some(permit)),
            // No room in the budget: only what this read asks for (at most what the
            // kernel asks at once), outside the budget: small and short-lived.
            None => self.start(pos, pos.saturating_add(want).min(size), None),
        };
        let data = win.data.clone();
        w.list.push_back(win);
        while w.list.len() > WINDOWS_KEPT {
            w.list.pop_front();
        }
        (pos, data)
    }

    /// Read-ahead, if the memory budget has room for it now (never waited for: readers
    /// waiting for each other's memory could wait forever).
    fn push_sequential(&self, w: &mut Windows, from: u64) -> bool {
        let len = w.next_len;
        let end = from.saturating_add(len).min(self.origin.size);
        let Some(permit) = self.reserve(end - from) else {
            return false;
        };
        w.next_len = (len * 2).min(self.max_window());
        let win = self.start(from, end, Some(permit));
        w.list.push_back(win);
        while w.list.len() > WINDOWS_KEPT {
            w.list.pop_front();
        }
        true
    }

    /// Memory for `len` bytes of window, now or not at all.
    fn reserve(&self, len: u64) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(len.div_ceil(1024)).unwrap_or(u32::MAX);
        Arc::clone(&self.origin.ctx.memory)
            .try_acquire_many_owned(kib)
            .ok()
    }

    /// Windows within a quarter of the memory budget, so that several readers fit.
    fn max_window(&self) -> u64 {
        MAX_WINDOW
            .min(self.origin.ctx.opts.max_memory / 4)
            .max(RANDOM_WINDOW)
    }

    /// A window's fetch, started now on a task of its own (it runs whether or not
    /// anyone waits for it yet); `permit` is its share of the memory budget.
    fn start(&self, start: u64, end: u64, permit: Option<OwnedSemaphorePermit>) -> Window {
        let origin = self.origin.clone();
        let task = tokio::spawn(async move { fetch(origin, start, end, permit).await });
        let data = async move { task.await.unwrap_or(Err(ReadFailed)) }
            .boxed()
            .shared();
        Window { start, end, data }
    }
}

/// The bytes `start..end` of the file, within the time limit.
async fn fetch(
    origin: Origin,
    start: u64,
    end: u64,
    permit: Option<OwnedSemaphorePermit>,
) -> Fetched {
    let ctx = Arc::clone(&origin.ctx);
    let limit = ctx.opts.stall_timeout * 3;
    // Beyond the download's own stall handling (each fetch retried when it delivers
    // nothing for the stall timeout), a hard limit: a read never hangs.
    let allowance = Duration::from_secs((end - start) / (1 << 20));
    let got = async {
        if streamed(&origin, start, end) {
            stream(&origin, start, end).await
        } else {
            get(origin.clone(), start, end)
                .await
                .map(|b| Pieces::new(vec![b]))
        }
    };
    let pieces = match tokio::time::timeout(limit + allowance, got).await {
        Ok(Ok(b)) => b,
        Ok(Err(why)) => {
            tracing::error!(
                "reading {} (bytes {start}..{end}) from {} failed: {why}",
                origin.path,
                ctx.server()
            );
            return Err(ReadFailed);
        }
        Err(_) => {
            tracing::error!(
                "reading {} (bytes {start}..{end}) from {}: no answer within {:?}; the server stalled",
                origin.path,
                ctx.server(),
                limit + allowance
            );
            return Err(ReadFailed);
        }
    };
    if (pieces.len() as u64) < end - start {
        tracing::error!(
            "reading {} (bytes {start}..{end}) from {}: {} bytes came back",
            origin.path,
            ctx.server(),
            pieces.len()
        );
        return Err(ReadFailed);
    }
    Ok(Arc::new((pieces, permit)))
}

/// Whether a window is streamed: a sequential reader's window of part of a Xet file.
/// Its bytes come in order from the CAS without a staging file and without the chunk
/// cache (the kernel's page cache keeps what was read); what every fetched range
/// is checked against is the same as for a range download (each chunk decoded within
/// its declared sizes and hashed to its xorb's chunk hash, each term its stated
/// length: a range has no file hash to check). Random reads (small windows) and whole
/// files go through `xet-download`:
/// served from the chunk cache and filling it, and a whole file checked against its
/// file hash.
fn streamed(origin: &Origin, start: u64, end: u64) -> bool {
    origin.hash.is_some() && end - start >= FIRST_WINDOW && !(start == 0 && end == origin.size)
}

/// The bytes `start..end` of a Xet file as the CAS streams them (see [`streamed`]).
async fn stream(origin: &Origin, start: u64, end: u64) -> Result<Pieces, String> {
    let hash = origin.hash.ok_or("a file outside Xet is not streamed")?;
    let range = xet_cas::ByteRange::new(start, end);
    let ctx = &origin.ctx;
    let checked = Some(Arc::clone(&ctx.chunk_hashes));
    let mut rx =
        xet_download::file_stream_checked(Arc::clone(&ctx.cas), hash, Some(range), checked);
    let mut parts = Vec::new();
    while let Some(piece) = rx.recv().await {
        parts.push(piece.map_err(|e| error_chain(&e))?);
    }
    tracing::debug!("{}: bytes {start}..{end} streamed", origin.path);
    Ok(Pieces::new(parts))
}

/// A writer into memory shared with the caller (what `xet-download` writes a verified
/// range to).
#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("sink lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`get_now`] driven on a blocking thread by the runtime: the compiler cannot prove
/// the download's and the Hub client's futures `Send` for every lifetime of their
/// borrows, which a spawned task needs; `block_on` needs no `Send`. (The thread waits;
/// the work is still the runtime's.) Dropping the returned future (the read's time
/// limit passed) cancels the download, so the thread does not go on working for nobody.
async fn get(origin: Origin, start: u64, end: u64) -> Result<Bytes, String> {
    let rt = tokio::runtime::Handle::current();
    let cancel = xet_download::cancel_token();
    let _cancel_when_dropped = cancel.clone().drop_guard();
    tokio::task::spawn_blocking(move || rt.block_on(get_now(&origin, start, end, cancel)))
        .await
        .map_err(|e| format!("the fetch task failed: {e}"))?
}

/// The bytes, from the CAS (Xet) or from `resolve` (the rest).
async fn get_now(
    origin: &Origin,
    start: u64,
    end: u64,
    cancel: xet_download::CancellationToken,
) -> Result<Bytes, String> {
    let ctx = &origin.ctx;
    let Some(hash) = origin.hash else {
        return resolve_now(origin).await;
    };
    // The window's size up front: no reallocation (a copy of all so far) as it grows.
    let cap = usize::try_from(end - start).unwrap_or(0);
    let sink = Sink(Arc::new(Mutex::new(Vec::with_capacity(cap))));
    let mut request =
        DownloadRequest::to_writer(hash, Box::new(sink.clone())).with_size(origin.size);
    if start > 0 || end < origin.size {
        request = request.with_range(FileRange::new(start, Some(end - 1)));
    }
    let opts = DownloadOptions {
        resume: false,
        cache: ctx.opts.cache.clone(),
        stall_timeout: ctx.opts.stall_timeout,
        max_retries: 2,
        memory_budget: (end - start).max(8 << 20),
        fetch_concurrency: FetchConcurrency::Fixed(8),
        temp_dir: ctx.opts.staging_dir.clone(),
        cancel: Some(cancel),
        chunk_hashes: Some(Arc::clone(&ctx.chunk_hashes)),
        ..DownloadOptions::default()
    };
    let report = xet_download::download(Arc::clone(&ctx.cas), vec![request], opts, None)
        .await
        .map_err(|e| error_chain(&e))?;
    let t = &report.totals;
    tracing::debug!(
        "{}: bytes {start}..{end}: {} fetched in {} fetches, {} from the chunk cache, {:.3} s, checked: {:?}",
        origin.path,
        t.bytes_fetched,
        t.fetches,
        t.bytes_from_cache,
        t.elapsed,
        report.files.first().map(|f| f.verification),
    );
    let data = std::mem::take(&mut *sink.0.lock().expect("sink lock"));
    Ok(Bytes::from(data))
}

/// A file outside Xet, whole, through `resolve` at the mounted commit.
async fn resolve_now(origin: &Origin) -> Result<Bytes, String> {
    let ctx = &origin.ctx;
    let Source::Repo { repo, .. } = &ctx.source else {
        return Err("a bucket file without a Xet hash".to_string());
    };
    let remote = ctx.source.remote(&origin.path);
    let path = xet_hub::RepoPath::parse(&remote).map_err(|e| e.to_string())?;
    let commit = ctx.commit();
    let r = ctx
        .client
        .resolve_get(repo, &commit, &path)
        .await
        .map_err(|e| error_chain(&e))?;
    r.bytes().await.map_err(|e| error_chain(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every slice of pieces cut at every boundary (empty pieces included) is the same
    /// as the slice of the joined bytes.
    #[test]
    fn pieces_slice_like_the_joined_bytes() {
        let joined: Vec<u8> = (0..40u8).collect();
        for cuts in [
            vec![],
            vec![0],
            vec![1, 7],
            vec![5, 5, 20],
            vec![10, 20, 30, 39],
        ] {
            let mut parts = Vec::new();
            let mut at = 0;
            for &c in cuts.iter().chain([&40]) {
                parts.push(Bytes::copy_from_slice(&joined[at..c]));
                at = c;
            }
            let p = Pieces::new(parts);
            assert_eq!(p.len(), 40);
            for from in 0..40 {
                for to in from + 1..=40 {
                    assert_eq!(
                        &p.slice(from, to)[..],
                        &joined[from..to],
                        "{cuts:?} {from}..{to}"
                    );
                }
            }
        }
    }
}
