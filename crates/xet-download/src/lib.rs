//! The xet download pipeline over any [`Cas`]: reconstruction in segments, parallel
//! fetches bounded in count and in bytes, decoding with bounded decompression, every
//! chunk hashed, the file hash checked, positional writes to a resumable `.part` file,
//! atomic rename, and an on-disk LRU chunk cache.
//!
//! # Use
//!
//! ```no_run
//! # async fn f(cas: std::sync::Arc<dyn xet_cas::Cas>, hash: xet_hash::MerkleHash) -> Result<(), xet_download::DownloadError> {
//! use xet_download::*;
//! let opts = DownloadOptions { cache: default_cache_dir().map(CacheConfig::new), ..Default::default() };
//! let report = download(cas, vec![DownloadRequest::to_path(hash, "model.bin")], opts, None).await?;
//! println!("{}", serde_json::to_string(&report).unwrap());
//! # Ok(()) }
//! ```
//!
//! # What happens to one file
//!
//! 1. The empty file (hash zero) is created with no request at all.
//! 2. The size comes from the request; for a whole file without one, from the first
//!    segment's reconstruction (an answer cut before the segment's end was cut at the
//!    end of the file; the first segment is four segments long, 2 GiB by default), and
//!    only for files larger than that from [`Cas::file_size`] after it: no request
//!    comes before the reconstruction query.
//!    With a [`FileRange`] and no size, [`Cas::file_size`] first. The wanted bytes (the whole
//!    file or a [`FileRange`]) are walked front to back in **segments**: the
//!    reconstruction is queried for about [`DownloadOptions::segment_bytes`] at a time
//!    and every term of the answer is taken whole, so the next query starts on a term
//!    boundary and no chunk is taken twice (a server answering with untrimmed terms
//!    that start before the query is handled: the overlap is dropped on a chunk
//!    boundary). At most [`DownloadOptions::segments_in_flight`] segments are being
//!    fetched at once, so presigned URLs are used soon after they are issued.
//! 3. Fetches of one xorb (and URL) whose chunk ranges overlap or touch are merged,
//!    and terms are grouped by the fetch that covers them: **one fetch serves every
//!    term it covers** and no byte range is downloaded twice; each fetch is one
//!    [`Cas::stream_xorb_range`] call, whose pieces are decoded as they arrive. Fetches
//!    run in parallel, limited by [`DownloadOptions::fetch_concurrency`] (count: by
//!    default adapted to the measured throughput, see below) and by
//!    [`DownloadOptions::memory_budget`] (a semaphore over KiB of fetched bytes held in
//!    memory, across all files of the call): a fetch reserves only what a stream holds
//!    (its queue of pieces and one write batch) where the CAS says it streams
//!    ([`Cas::streams_ranges`]: the HTTP client); elsewhere it first reserves its whole
//!    range (a local store hands a range over in one piece) and keeps only what a
//!    stream holds once its first piece shows that it streams, and once one range of
//!    the call has streamed, later fetches reserve only that from the start. A single
//!    fetch larger than the budget still runs, alone.
//!    Once the CAS is known to stream, a range of more than 16 MiB is asked for in
//!    **parts** of at most 8 MiB (one request moves one TCP window per round trip, so
//!    a long fat link needs several at once, and the last range of a file must not
//!    finish alone): the fetch takes its parts in order, and while a fetch slot and
//!    memory for a whole part are free, up to seven later parts are fetched ahead into
//!    buffers of their own. The decoder gets the parts' bytes concatenated in order,
//!    the same range a single request gives; each part is retried and resumed on its
//!    own, holds a slot of the fetch limit and counts in its throughput.
//! 4. A transfer that delivers nothing for `stall_timeout`, or has not completed
//!    within `stall_timeout + remaining / min_throughput`, is cancelled and retried;
//!    retryable errors ([`xet_cas::CasError::is_retryable`], short bodies) are retried
//!    with exponential backoff and jitter, at most [`DownloadOptions::max_retries`]
//!    times. **A retry asks only for the bytes not yet delivered**, so the decoder
//!    sees one seamless range and nothing is fetched twice. Then the error names the
//!    file, the xorb and the URL host (never the signed query). An expired presigned
//!    URL ([`xet_cas::CasError::UrlExpired`]) re-queries the reconstruction for that
//!    segment and goes on with the fresh URL (at most
//!    [`DownloadOptions::max_url_refreshes`] times). Reconstruction and size queries
//!    get the same stall limit and retries.
//! 5. Decoding runs on a blocking thread per fetch (and rayon for a range that arrives
//!    whole), fed through a bounded queue. Each chunk is decoded once its last byte is
//!    in: its header is validated first (version, scheme, sizes within the chunk limit
//!    and within the range), the chunk count may not exceed what the reconstruction
//!    lists and the total declared size must stay within 64 MiB; it is decompressed
//!    into a buffer of exactly its declared size (no decompression bomb can produce
//!    more), **hashed** ([`xet_hash::chunk_hash`]), and written in batches straight
//!    to its offset(s) in `<dest>.part` (positional writes, clipped to each term's
//!    part of the output) and into the chunk cache entry. Only a chunk whose bytes
//!    arrive in more than one piece is copied to make it contiguous; no buffer of a fetch's
//!    size exists. Once the range is complete, the chunk count must be exactly the
//!    reconstruction's and each term's length its `unpacked_length`. A part of at
//!    least 8 MiB that is renamed into place (fsynced anyway) gets its page-aligned
//!    spans written with `O_DIRECT` by a writer thread from recycled staging buffers,
//!    not copied into new page-cache pages (Linux; a filesystem that refuses gets
//!    page-cache writes).
//! 6. Once all of a term's chunks are written (direct writes included), the term is
//!    appended to the resume journal.
//! 7. **Whole-file downloads**: the file hash is recomputed from every chunk's
//!    `(hash, size)` in file order and must equal the requested hash, and the total
//!    must equal the size. A request with [`DownloadRequest::with_sha256`] must also
//!    have that sha256: it is computed from the bytes as they are written where they
//!    land at the hashed frontier (small files, in-order writes; what is written ahead
//!    of it is held, up to 8 MiB per file and 32 MiB across the call), and the rest is read back from the `.part` once every write
//!    has landed, with `O_DIRECT` reads where it was written directly (far less CPU
//!    than reading it back through the page cache; see docs/BENCHMARKS.md). Only then is the `.part` file fsynced and renamed to the
//!    destination (and the directory fsynced). On any verification failure the `.part`
//!    file and journal are deleted, the chunk-cache entries the file used are evicted,
//!    and nothing appears at the destination. The error names the chunk, xorb and
//!    term when a chunk fails to decode or a term has the wrong length. When only the
//!    file hash is wrong (a corrupt but decodable chunk), the reconstruction carries
//!    no chunk hashes to compare with, so the pipeline asks the CAS's global-dedup
//!    endpoint ([`Cas::dedup_shard`]) for a few of the file's chunks: its answers list
//!    every chunk hash of the xorbs holding them, which names the bad chunk; failing
//!    that, a fetched range that was a whole xorb is checked against its xorb hash.
//! 8. **Range downloads** cannot be checked against the file hash (it needs every
//!    chunk of the file). What is checked: every chunk header and decompression
//!    bound, the chunk count of each fetch, and every term's length; with
//!    [`DownloadOptions::chunk_hashes`] also every chunk's hash, fetched or read from
//!    the chunk cache, against its xorb's: the footer is asked of the CAS
//!    ([`Cas::xorb_footer`]) while the range is fetched, once per xorb, and taken only
//!    if its chunk hashes and sizes make up the xorb hash and it puts the fetch's
//!    chunks at the fetch's bytes ([`ChunkHashes`]). The report says which check was
//!    made ([`Verification`]). A range covering the whole file is a whole-file
//!    download.
//!
//! # Resume
//!
//! With [`DownloadOptions::resume`] (the default) an interrupted or failed download
//! (other than a verification failure) leaves `<dest>.part` and the journal
//! `<dest>.part.jsonl`. After a failure, fetches already under way finish and record
//! their terms before the error is returned; nothing new starts. A rerun of the same
//! request (same file, size and range) re-verifies the recorded terms by **re-hashing
//! their bytes in the `.part` file** against the recorded chunk hashes (so a torn
//! write or a tampered `.part` is caught and refetched), fetches only what is not
//! recorded (a fetch is skipped when all the terms it serves are recorded), and checks
//! the whole file's hash as usual, with the recorded chunk hashes standing in for the
//! resumed terms: the final verification covers the whole file. Only whole terms are
//! recorded, so the trimmed first and last term of a range download are refetched.
//! Writer destinations (stdout) are assembled in a temporary file, copied to the
//! writer only once verified, and are not resumable.
//!
//! The journal is JSON Lines; the first line identifies the download, each further
//! line is one term completely written to the `.part` file:
//!
//! ```text
//! {"version":1,"file":"<file hash>","size":<file size>,"start":<range start>,"end":<range end, exclusive>}
//! {"offset":<offset in the .part file>,"len":<bytes>,"chunks":[["<chunk hash>",<size>],...]}
//! ```
//!
//! # Chunk cache
//!
//! Decompressed chunks, keyed by (xorb hash, chunk range) — the reconstruction names
//! chunks by xorb and index, never by chunk hash — in `<cache dir>/chunks/`, bounded by
//! [`CacheConfig::max_bytes`] with LRU eviction (recency is the entry file's mtime,
//! refreshed on every hit, so it survives restarts). One entry is what one fetch
//! decoded; a lookup may be served by several entries. A group of terms that is
//! entirely cached fetches nothing. Every chunk read from the cache is re-hashed and
//! compared with the hash stored in the entry (a bad entry is deleted and becomes a
//! miss). Entries are written under a temporary name and renamed; several processes
//! may share the directory. See [`cache_stats`] and [`cache_clear`]. Entry format:
//!
//! ```text
//! <cache dir>/chunks/<xorb hash>/<start>-<end>
//!     "XETCC001"                           8-byte magic
//!     n: u32 LE                            number of chunks (= end - start)
//!     n × (hash: [u8; 32], size: u32 LE)   chunk hash and decompressed size
//!     data                                 the n chunks' data, concatenated
//! ```
//!
//! A whole file downloaded to the cache's file system ([`CacheConfig::link_files`], on by
//! default) is not copied into the cache while it downloads: once verified, it is
//! hard-linked into `<cache dir>/chunks/files/<file hash>` and each of its terms is
//! recorded as a small reference into that link (format in the `cache` module). The
//! re-hash on every read covers a file the user later changes in place.
//!
//! # Several files
//!
//! Files run concurrently ([`DownloadOptions::max_concurrent_files`], of which at most
//! [`DownloadOptions::max_concurrent_large_files`] of 8 MiB or more) and share the
//! fetch and memory limits. Their first reconstruction queries are **pipelined**: up to
//! [`DownloadOptions::reconstructions_ahead`] files, in request order, have their
//! destination resolved and their first segment (and size) asked for while the files
//! before them are being fetched, so a repository of many small files does not pay a
//! round trip per file before its fetch (a URL that expired while its file waited is
//! re-queried like any other). The first error stops the call and is returned; other files in progress keep their `.part` file and journal for a rerun.
//!
//! # Fetch concurrency
//!
//! [`FetchConcurrency::Fixed`] runs at most that many fetches, always.
//! [`FetchConcurrency::Adaptive`] (the default: from 32, within 1..=64) climbs a hill:
//! time is cut into windows of four round trips (the shortest time to a fetch's first
//! byte; 250 ms to 2 s), and at the end of each window in which a fetch had to wait for
//! a slot, the bytes delivered give the throughput. While it keeps rising (by 5%) the
//! limit grows by half; a larger limit that brought 10% less is taken back, one that
//! brought about the same stays (and is probed upwards again after eight windows). A
//! fetch that is retried or fails (deadline overrun, broken transfer) takes a quarter
//! off at once, and when each fetch gets less than
//! [`DownloadOptions::min_throughput`] for two windows in a row (a slow link split
//! too many ways, where transfers would overrun their deadlines), the limit drops to
//! what the link carries at that rate per fetch; not for a window in which as many
//! fetches started as there are slots (short fetches, such as many small files over a
//! long round trip, move little each however many run, and no deadline threatens
//! them). Fetches in flight are bounded by the
//! limit in count and by the memory budget in bytes; each part of a range fetched
//! ahead is a fetch here, and finding no slot free for one counts as having waited.
//!
//! # Streaming a file
//!
//! [`file_stream`] hands a file's bytes (or a range of them) out in order through a
//! bounded channel instead of writing them anywhere: a server's response body. It
//! decodes with the same decoder and checks what a range download checks (chunk
//! headers and counts, bounded decompression, every term's length), not the file hash;
//! [`file_stream_checked`] also checks every chunk against its xorb's chunk hashes, as
//! a range download with [`DownloadOptions::chunk_hashes`] does.
//! [`file_sha256`] reads a file through it once.
//!
//! # Cancellation
//!
//! Cancelling [`DownloadOptions::cancel`] stops at once with
//! [`DownloadError::Interrupted`]; every term recorded in the journal so far is kept.

mod budget;
mod cache;
mod chunk_hashes;
mod ctx;
mod decode;
pub mod dest;
mod diagnose;
mod digest;
mod error;
mod fetch;
mod file;
mod fsio;
mod journal;
mod limit;
mod part;
mod pipeline;
mod plan;
mod segments;
mod split;
pub mod stream;
mod sync;
mod types;
mod verify;
mod write;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use futures_util::StreamExt;
use tokio::sync::Semaphore;
/// What [`DownloadOptions::cancel`] takes (see [`cancel_token`]).
pub use tokio_util::sync::CancellationToken;
pub use xet_cas::Cas;

pub use cache::{CacheStats, cache_clear, cache_stats};
pub use chunk_hashes::ChunkHashes;
pub use error::{DownloadError, ErrorKind, Result};
pub use stream::{file_sha256, file_stream, file_stream_checked};
pub use types::{
    CacheConfig, Destination, DownloadOptions, DownloadReport, DownloadRequest, FetchConcurrency,
    FileRange, FileReport, ProgressEvent, ProgressFn, Totals, Verification, default_cache_dir,
};

use budget::MemoryBudget;
use ctx::Shared;
use limit::FetchLimit;
use pipeline::Prepared;

/// Download `requests` from `cas`. Returns a report per file (in request order) and
/// totals, or the first error. `progress` receives [`ProgressEvent`]s from any thread.
pub async fn download(
    cas: Arc<dyn Cas>,
    requests: Vec<DownloadRequest>,
    options: DownloadOptions,
    progress: Option<ProgressFn>,
) -> Result<DownloadReport> {
    let started = Instant::now();
    let cache = open_cache(&options).await?;
    let fetches = match options.fetch_concurrency {
        FetchConcurrency::Fixed(n) => FetchLimit::fixed(n),
        FetchConcurrency::Adaptive { start, min, max } => FetchLimit::adaptive(limit::Bounds {
            start,
            min,
            max,
            floor: options.min_throughput,
        }),
    };
    // Told, a download splits and streams its first ranges too, instead of learning it
    // from them.
    let streams = AtomicBool::new(cas.streams_ranges());
    let shared = Arc::new(Shared {
        cas,
        cache,
        fetches,
        memory: MemoryBudget::new(options.memory_budget),
        streams,
        progress,
        cancel: options.cancel.clone().unwrap_or_default(),
        sha256_held: Arc::default(),
        opts: options,
    });
    let mut files = run_files(shared, requests).await?;
    files.sort_by_key(|(i, _)| *i);
    let files: Vec<FileReport> = files.into_iter().map(|(_, r)| r).collect();
    let totals = Totals {
        files: files.len(),
        bytes: files.iter().map(|f| f.size).sum(),
        bytes_fetched: files.iter().map(|f| f.bytes_fetched).sum(),
        bytes_from_cache: files.iter().map(|f| f.bytes_from_cache).sum(),
        bytes_resumed: files.iter().map(|f| f.bytes_resumed).sum(),
        fetches: files.iter().map(|f| f.fetches).sum(),
        elapsed: started.elapsed().as_secs_f64(),
    };
    Ok(DownloadReport { files, totals })
}

/// The chunk cache, if configured and usable (an unusable one is warned about and
/// left out).
async fn open_cache(options: &DownloadOptions) -> Result<Option<Arc<cache::ChunkCache>>> {
    let Some(c) = &options.cache else {
        return Ok(None);
    };
    let (dir, max) = (c.dir.clone(), c.max_bytes);
    match tokio::task::spawn_blocking(move || cache::ChunkCache::open(&dir, max)).await {
        Ok(Ok(c)) => Ok(Some(Arc::new(c))),
        Ok(Err(e)) => {
            tracing::warn!(
                "chunk cache at {} unusable ({e}); continuing without it",
                c.dir.display()
            );
            Ok(None)
        }
        Err(e) => Err(DownloadError::task("opening the cache", e)),
    }
}

/// Run every request: files are prepared (destination, size, first reconstruction) in
/// request order, up to [`DownloadOptions::reconstructions_ahead`] ahead of the files
/// downloading, at most [`DownloadOptions::max_concurrent_files`] at once. Returns
/// `(request index, report)` as files finish, or the first error (files still running
/// then are dropped: their `.part` files and journals stay).
async fn run_files(
    shared: Arc<Shared>,
    requests: Vec<DownloadRequest>,
) -> Result<Vec<(usize, FileReport)>> {
    let n = requests.len();
    let ahead = shared.opts.reconstructions_ahead.max(1);
    // Preparations in request order; the permits of `ahead` bound how many there are.
    let (tx, mut rx) = tokio::sync::mpsc::channel(ahead);
    let producer = tokio::spawn(prepare_in_order(shared.clone(), requests, tx));
    let _producer = AbortOnDrop(producer.abort_handle());
    let files = Arc::new(Semaphore::new(shared.opts.max_concurrent_files.max(1)));
    let large = Arc::new(Semaphore::new(
        shared.opts.max_concurrent_large_files.max(1),
    ));
    // Polled by this task (the pipeline's futures are not all `Send`-provable).
    let mut running = futures_util::stream::FuturesUnordered::new();
    let mut reports = Vec::with_capacity(n);
    let mut slot = None;
    let mut more = true;
    while more || !running.is_empty() {
        tokio::select! {
            biased;
            Some(done) = running.next() => reports.push(done?),
            s = files.clone().acquire_owned(), if more && slot.is_none() => {
                slot = Some(s.expect("the file semaphore is never closed"));
            }
            p = rx.recv(), if more && slot.is_some() => match p {
                None => more = false,
                Some(preparing) => {
                    let (slot, large, shared) = (slot.take(), large.clone(), shared.clone());
                    running.push(async move {
                        let _slot = slot;
                        let p = preparing.finish().await?;
                        let _large = match p.output_len() >= file::DIRECT_MIN {
                            true => Some(large.acquire_owned().await.expect("never closed")),
                            false => None,
                        };
                        let index = p.index;
                        pipeline::download_file(shared, p).await.map(|r| (index, r))
                    });
                }
            },
        }
    }
    Ok(reports)
}

/// Start preparing each of `requests`, in order, as soon as fewer than
/// [`DownloadOptions::reconstructions_ahead`] prepared files wait for their turn, and
/// hand them to `tx`.
async fn prepare_in_order(
    shared: Arc<Shared>,
    requests: Vec<DownloadRequest>,
    tx: tokio::sync::mpsc::Sender<Preparing>,
) {
    let ahead = Arc::new(Semaphore::new(shared.opts.reconstructions_ahead.max(1)));
    for (i, req) in requests.into_iter().enumerate() {
        let permit = ahead.clone().acquire_owned().await.expect("never closed");
        let task = tokio::spawn(pipeline::prepare_file(shared.clone(), i, req));
        let preparing = Preparing {
            task: AbortOnDrop(task.abort_handle()),
            handle: task,
            _ahead: permit,
        };
        if tx.send(preparing).await.is_err() {
            return;
        }
    }
}

/// A file being prepared on its own task, holding its place in the lookahead until
/// it is taken to be downloaded.
struct Preparing {
    handle: tokio::task::JoinHandle<Result<Prepared>>,
    task: AbortOnDrop,
    _ahead: tokio::sync::OwnedSemaphorePermit,
}

impl Preparing {
    /// The prepared file (its place in the lookahead is given up).
    async fn finish(self) -> Result<Prepared> {
        let Preparing { handle, task, .. } = self;
        let r = handle
            .await
            .map_err(|e| DownloadError::task("preparing a download", e))?;
        drop(task);
        r
    }
}

/// Aborts a spawned task when dropped (the call returned, or was dropped itself).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A token to pass as [`DownloadOptions::cancel`] (e.g. cancelled on Ctrl-C).
pub fn cancel_token() -> CancellationToken {
    CancellationToken::new()
}
