//! The per-file pipeline: segments → groups (one fetch each) → decode + verify →
//! positional writes into `<dest>.part` → journal → final check and rename, or copy to
//! the writer ([`crate::verify`]).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use xet_cas::{ByteRange, ChunkRange, Reconstruction, Term, XorbFetch};
use xet_hash::MerkleHash;

use crate::cache::{ChunkCache, PendingEntry};
use crate::ctx::{Assembled, FileCtx, FileStats, Shared, XorbCandidate, blocking};
use crate::decode;
use crate::dest::{self, Target};
use crate::digest::InOrderSha256;
use crate::error::{DownloadError, Result};
use crate::fetch;
use crate::fsio;
use crate::journal::{DoneTerm, Journal, JournalHeader};
use crate::limit::Slot;
use crate::part::{self, Output};
use crate::plan::{self, Group, Item};
use crate::split;
use crate::sync::lock;
use crate::types::*;
use crate::verify;

/// A request whose destination is resolved and whose size and first segment are known:
/// what can be asked for ahead of the file's turn ([`prepare_file`]).
pub(crate) struct Prepared {
    pub index: usize,
    file: MerkleHash,
    range: Option<FileRange>,
    output: Output,
    shown: String,
    /// `None` for the empty file.
    size: Option<u64>,
    first: Option<Reconstruction>,
    sha256: Option<[u8; 32]>,
    started: Instant,
}

impl Prepared {
    /// Bytes the download writes (the range's, for a range; 0 for the empty file).
    pub fn output_len(&self) -> u64 {
        let size = self.size.unwrap_or(0);
        match self.range {
            Some(r) => r
                .end
                .map_or(size, |e| e.saturating_add(1).min(size))
                .saturating_sub(r.start),
            None => size,
        }
    }
}

/// The first steps of one request (`index`: its position, for progress events): the
/// destination, and the size and first reconstruction segment. Nothing is written.
pub(crate) async fn prepare_file(
    shared: Arc<Shared>,
    index: usize,
    req: DownloadRequest,
) -> Result<Prepared> {
    let started = Instant::now();
    let DownloadRequest {
        file,
        dest,
        range,
        size,
        sha256,
    } = req;
    let shown = dest.display();
    let output = resolve_destination(&shared.opts, dest).await?;
    let (size, first) = if file.is_zero() {
        check_empty_range(file, range)?;
        (None, None)
    } else {
        let cancel = shared.cancel.clone();
        let known = async {
            let (size, first) = match size {
                Some(s) => (s, None),
                None if range.is_none() => first_segment_and_size(&shared, file).await?,
                None => (fetch::query_file_size(&shared, file).await?, None),
            };
            if let Some(first) = first {
                return Ok((size, Some(first)));
            }
            // The first segment, asked for as `walk_segments` would ask for it.
            let out = wanted_bytes(file, range, size)?;
            let first_len = plan::segment_len(0, shared.opts.segment_bytes);
            let query = plan::segment_query(out.start, out.end, first_len);
            let first = fetch::query_reconstruction(&shared, file, query).await?;
            Ok::<_, DownloadError>((size, Some(first)))
        };
        let (s, f) = tokio::select! {
            r = known => r?,
            _ = cancel.cancelled() => {
                return Err(DownloadError::Interrupted { file, resumable: output.writer.is_none() });
            }
        };
        (Some(s), f)
    };
    Ok(Prepared {
        index,
        file,
        range,
        output,
        shown,
        size,
        first,
        sha256,
        started,
    })
}

/// Download a prepared request.
pub(crate) async fn download_file(shared: Arc<Shared>, prepared: Prepared) -> Result<FileReport> {
    let Prepared {
        index,
        file,
        range,
        output,
        shown,
        size,
        first,
        sha256,
        started,
    } = prepared;
    let Some(size) = size else {
        check_empty_sha256(file, sha256)?;
        return download_empty(&shared, index, file, output, shown, started).await;
    };
    // `_staging` keeps a writer's temporary directory until the file is done.
    let Output {
        path: final_path,
        writer,
        staging: _staging,
    } = output;
    let resumable = writer.is_none();
    let out = wanted_bytes(file, range, size)?;
    let whole = out.start == 0 && out.end == size;
    if sha256.is_some() && !whole {
        return Err(DownloadError::InvalidRequest {
            file,
            reason: "a sha256 can only be checked for the whole file, not a range".into(),
        });
    }
    let header = JournalHeader::new(&file, size, out.start, out.end);
    let resume = resumable && shared.opts.resume;
    let opened = open_part_and_journal(&final_path, header, out.len(), resume, resumable).await?;
    let resumed: u64 = opened.done.values().map(|t| t.len).sum();
    let link_cache = links_into_cache(&shared, whole && resumable, size, &opened.part_path).await?;
    let sha256 = sha256.map(|want| {
        let resumed = opened.done.iter().map(|(&offset, t)| (offset, t.len));
        InOrderSha256::new(want, size, resumed, shared.sha256_held.clone())
    });
    shared.emit(ProgressEvent::FileStarted {
        index,
        file,
        dest: shown.clone(),
        total: out.len(),
        resumed,
    });

    let ctx = Arc::new(FileCtx {
        shared: shared.clone(),
        index,
        file,
        out,
        whole,
        link_cache,
        part: opened.part,
        part_path: opened.part_path,
        renamed: resumable,
        journal: opened.journal,
        stats: FileStats::default(),
        cache_touched: Mutex::new(Vec::new()),
        candidates: Mutex::new(Vec::new()),
        written: opened.direct.as_ref().map(fsio::DirectWriter::waiter),
        write_turn: Mutex::new(opened.direct),
        sha256,
        stop: CancellationToken::new(),
    });
    let cancel = shared.cancel.clone();
    let res = tokio::select! {
        r = run_segments(ctx.clone(), opened.done, first) => r,
        _ = cancel.cancelled() => Err(DownloadError::Interrupted { file, resumable }),
    };
    let res = match res {
        Ok(assembled) => {
            verify::verify_and_finish(&ctx, assembled, size, &final_path, writer, &shown).await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = &res {
        clean_up_after_failure(&ctx, e, resumable, &opened.journal_path);
    }
    res?;
    shared.emit(ProgressEvent::FileFinished { index });
    Ok(report(&ctx, shown, resumed, started))
}

/// The size of a file asked for whole, and the first segment's reconstruction, with no
/// request of their own: the first segment is asked for first, and an answer ending
/// before the segment does was cut at the end of the file, whose size it then gives
/// (every file smaller than the first segment, [`plan::FIRST_SEGMENTS`] segments, costs
/// one request, not two). A larger file needs the size query as well; its first segment
/// is the answer already in hand.
async fn first_segment_and_size(
    shared: &Shared,
    file: MerkleHash,
) -> Result<(u64, Option<Reconstruction>)> {
    let seg = plan::segment_len(0, shared.opts.segment_bytes);
    let first = fetch::query_reconstruction(shared, file, ByteRange::new(0, seg)).await?;
    let len = first
        .unpacked_len()
        .saturating_sub(first.offset_into_first_range);
    let size = if len < seg {
        len
    } else {
        fetch::query_file_size(shared, file).await?
    };
    Ok((size, Some(first)))
}

/// Where the verified bytes go. A path that may be replaced is the part's rename
/// target; a writer, or a device or FIFO (never replaced), gets a copy of a part staged
/// in a temporary directory. The directory the part goes to is created.
async fn resolve_destination(opts: &DownloadOptions, destination: Destination) -> Result<Output> {
    let output = match destination {
        Destination::Path(p) => match blocking(move || dest::resolve(&p)).await?? {
            Target::Replace(path) => Output {
                path,
                writer: None,
                staging: None,
            },
            Target::WriteInto(p) => part::staged(opts, Box::new(dest::OpenOnWrite::new(p)))?,
        },
        Destination::Writer(w) => part::staged(opts, w)?,
    };
    if let Some(parent) = output.path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| DownloadError::io("creating directory", parent, e))?;
    }
    Ok(output)
}

/// The empty file's content is no bytes: an expected sha256 must be the one of nothing.
fn check_empty_sha256(file: MerkleHash, sha256: Option<[u8; 32]>) -> Result<()> {
    use sha2::Digest as _;
    match sha256 {
        Some(want) if want[..] != sha2::Sha256::digest([])[..] => {
            Err(DownloadError::Verification {
                source: None,
                file,
                detail: format!(
                    "the file is empty, whose sha256 is not the expected {}",
                    xet_hash::hex::encode(&want)
                ),
            })
        }
        _ => Ok(()),
    }
}

/// The empty file has no bytes to ask for: only the whole file (no range) is allowed.
fn check_empty_range(file: MerkleHash, range: Option<FileRange>) -> Result<()> {
    match range {
        Some(r) if r.start > 0 || r.end.is_some() => Err(DownloadError::RangeNotSatisfiable {
            file,
            start: r.start,
            size: 0,
        }),
        _ => Ok(()),
    }
}

/// The empty file (hash zero): created with no request at all.
async fn download_empty(
    shared: &Shared,
    index: usize,
    file: MerkleHash,
    output: Output,
    shown: String,
    started: Instant,
) -> Result<FileReport> {
    shared.emit(ProgressEvent::FileStarted {
        index,
        file,
        dest: shown.clone(),
        total: 0,
        resumed: 0,
    });
    let p = output.path.clone();
    blocking(move || part::finish_empty(&p)).await??;
    if let Some(mut w) = output.writer {
        // Opens a device or FIFO destination, so its reader sees the (empty) end.
        blocking(move || w.flush())
            .await?
            .map_err(|e| DownloadError::io("writing", &shown, e))?;
    }
    shared.emit(ProgressEvent::FileFinished { index });
    Ok(FileReport {
        hash: file,
        path: shown.into(),
        size: 0,
        bytes_fetched: 0,
        bytes_from_cache: 0,
        bytes_resumed: 0,
        fetches: 0,
        verification: Verification::Empty,
        elapsed: started.elapsed().as_secs_f64(),
    })
}

/// The file bytes wanted: the whole file, or `range` (its end inclusive, clipped to
/// the file).
fn wanted_bytes(file: MerkleHash, range: Option<FileRange>, size: u64) -> Result<ByteRange> {
    let Some(r) = range else {
        return Ok(ByteRange::new(0, size));
    };
    if let Some(e) = r.end
        && e < r.start
    {
        return Err(DownloadError::InvalidRequest {
            file,
            reason: format!("range end {e} is before its start {}", r.start),
        });
    }
    if r.start >= size {
        return Err(DownloadError::RangeNotSatisfiable {
            file,
            start: r.start,
            size,
        });
    }
    Ok(ByteRange::new(
        r.start,
        r.end.map_or(size, |e| e.saturating_add(1).min(size)),
    ))
}

/// Outputs smaller than this keep no resume journal: fetching such a file again after an
/// interruption costs less than creating, syncing and renaming a journal for every one
/// (a third of the time of downloading thousands of small files).
const JOURNAL_MIN: u64 = 1 << 20;

/// Parts at least this large are written with `O_DIRECT` where possible
/// ([`fsio::DirectWriter`]).
pub(crate) const DIRECT_MIN: u64 = 8 << 20;

/// A part ready to be written.
struct OpenedPart {
    part: Arc<File>,
    /// `<dest>.part`.
    part_path: PathBuf,
    journal: Option<Journal>,
    /// `<dest>.part.jsonl`, whether or not a journal is kept.
    journal_path: PathBuf,
    /// Terms an earlier run recorded (and that still verify), by offset in the part.
    done: HashMap<u64, DoneTerm>,
    /// The direct writer of a large part.
    direct: Option<fsio::DirectWriter>,
}

/// Open the part of `final_path` (`len` bytes) and its journal (`header` says what is
/// downloaded), resuming from the journal if `resume`. Only a part that is renamed
/// into place (`renamed`) keeps a journal or gets a direct writer.
async fn open_part_and_journal(
    final_path: &Path,
    header: JournalHeader,
    len: u64,
    resume: bool,
    renamed: bool,
) -> Result<OpenedPart> {
    let part_path = part::part_path(final_path);
    let journal_path = part::journal_path(final_path);
    blocking(move || {
        let journaled = renamed && len >= JOURNAL_MIN;
        let (part, journal, done) =
            part::open_part(&part_path, &journal_path, &header, len, resume, journaled)?;
        let part = Arc::new(part);
        // Only a part that is fsynced and renamed must reach the disk anyway.
        let direct = (renamed && len >= DIRECT_MIN)
            .then(|| fsio::DirectWriter::open(&part_path, part.clone()))
            .flatten();
        Ok(OpenedPart {
            part,
            part_path,
            journal,
            journal_path,
            done,
            direct,
        })
    })
    .await?
}

/// Whether the verified file is hard-linked into the chunk cache (so fetched chunks
/// are not also copied into it): a whole file renamed into place
/// (`whole_and_renamed`), with [`CacheConfig::link_files`], room in the cache for the
/// file and its references, and the part on the cache's file system.
async fn links_into_cache(
    shared: &Shared,
    whole_and_renamed: bool,
    size: u64,
    part_path: &Path,
) -> Result<bool> {
    match (&shared.cache, &shared.opts.cache) {
        (Some(cache), Some(cfg)) if whole_and_renamed && cfg.link_files => {
            let (root, pp) = (cache.root().to_path_buf(), part_path.to_path_buf());
            // Room for the file and its references (36 bytes per chunk of at least
            // 8 KiB, and 20 per term, far below 1/128 of the file).
            Ok(size.saturating_add(size / 128 + 4096) <= cache.max_bytes()
                && blocking(move || {
                    fsio::same_file_system(&root, pp.parent().unwrap_or(Path::new(".")))
                })
                .await?)
        }
        _ => Ok(false),
    }
}

/// After a failed download: bad data (a verification failure) must not be resumed
/// from, or served again from the cache; a part that cannot be resumed is of no use.
/// Otherwise the part and journal stay for a rerun.
fn clean_up_after_failure(ctx: &FileCtx, e: &DownloadError, resumable: bool, journal_path: &Path) {
    let bad_data = e.kind() == crate::ErrorKind::Verification;
    if !bad_data && resumable {
        return;
    }
    let _ = fsio::remove_if_exists(&ctx.part_path);
    let _ = fsio::remove_if_exists(journal_path);
    if bad_data && let Some(cache) = &ctx.shared.cache {
        for (x, a, b) in lock(&ctx.cache_touched).drain(..) {
            cache.remove_overlapping(&x, a, b);
        }
    }
}

/// The report of a downloaded file.
fn report(ctx: &FileCtx, shown: String, resumed: u64, started: Instant) -> FileReport {
    FileReport {
        hash: ctx.file,
        path: shown.into(),
        size: ctx.out.len(),
        bytes_fetched: ctx.stats.fetched.load(Ordering::Relaxed),
        bytes_from_cache: ctx.stats.from_cache.load(Ordering::Relaxed),
        bytes_resumed: resumed,
        fetches: ctx.stats.fetches.load(Ordering::Relaxed),
        verification: if ctx.whole {
            Verification::FileHash
        } else {
            Verification::TermLengths
        },
        elapsed: started.elapsed().as_secs_f64(),
    }
}

/// Result of one group: `(item idx, kept chunks)` per item.
type GroupResult = Vec<(usize, Vec<(MerkleHash, u32)>)>;

/// Walk the segments and run their groups; returns every item's kept chunks in order.
/// On an error, fetches already under way are allowed to finish and write their terms
/// (so a rerun can resume from them) before the error is returned; nothing new starts.
async fn run_segments(
    ctx: Arc<FileCtx>,
    done: HashMap<u64, DoneTerm>,
    first: Option<Reconstruction>,
) -> Result<Assembled> {
    let mut tasks = JoinSet::new();
    let res = walk_segments(&ctx, done, first, &mut tasks).await;
    if res.is_err() {
        ctx.stop.cancel();
        while tasks.join_next().await.is_some() {}
    }
    res
}

async fn walk_segments(
    ctx: &Arc<FileCtx>,
    done: HashMap<u64, DoneTerm>,
    mut first: Option<Reconstruction>,
    tasks: &mut JoinSet<(usize, Result<GroupResult>)>,
) -> Result<Assembled> {
    let shared = &ctx.shared;
    let opts = &shared.opts;
    let out = ctx.out;
    let mut covered = out.start;
    let mut results: Vec<Option<Vec<(MerkleHash, u32)>>> = Vec::new();
    let mut terms: Vec<Term> = Vec::new();
    // Per segment still running: (segment id, groups left).
    let mut pending: VecDeque<(usize, usize)> = VecDeque::new();
    let mut seg_id = 0usize;

    let handle =
        |joined: std::result::Result<(usize, Result<GroupResult>), tokio::task::JoinError>,
         results: &mut Vec<Option<Vec<(MerkleHash, u32)>>>,
         pending: &mut VecDeque<(usize, usize)>|
         -> Result<()> {
            let (seg, r) = joined
                .map_err(|e| DownloadError::Internal(format!("download task failed: {e}")))?;
            for (idx, chunks) in r? {
                results[idx] = Some(chunks);
            }
            if let Some(p) = pending.iter_mut().find(|p| p.0 == seg) {
                p.1 -= 1;
            }
            pending.retain(|p| p.1 > 0);
            Ok(())
        };

    while covered < out.end {
        while pending.len() >= opts.segments_in_flight.max(1) {
            let j = tasks
                .join_next()
                .await
                .expect("pending segments have tasks");
            handle(j, &mut results, &mut pending)?;
        }
        let seg_len = plan::segment_len(seg_id, opts.segment_bytes);
        let query = plan::segment_query(covered, out.end, seg_len);
        let recon = match first.take() {
            Some(r) => r,
            None => fetch::query_reconstruction(shared, ctx.file, query).await?,
        };
        let (items, new_covered) =
            plan::plan_segment(ctx.file, &recon, query, covered, out, results.len())?;
        if ctx.whole && new_covered > out.end {
            return Err(DownloadError::BadReconstruction {
                file: ctx.file,
                detail: format!(
                    "terms extend to byte {new_covered} but the file is {} bytes",
                    out.end
                ),
            });
        }
        results.resize(results.len() + items.len(), None);
        terms.extend(items.iter().map(|i| i.term.clone()));
        let needed = resume_recorded(items, &done, out, &mut results);
        let groups = plan::group_items(ctx.file, &recon, needed)?;
        if !groups.is_empty() {
            pending.push_back((seg_id, groups.len()));
            for g in groups {
                let ctx = Arc::clone(ctx);
                let id = seg_id;
                tasks.spawn(async move { (id, run_group(ctx, query, g).await) });
            }
        }
        seg_id += 1;
        covered = new_covered;
    }
    while let Some(j) = tasks.join_next().await {
        handle(j, &mut results, &mut pending)?;
    }
    results
        .into_iter()
        .zip(terms)
        .enumerate()
        .map(|(i, (r, t))| match r {
            Some(c) => Ok((t, c)),
            None => Err(DownloadError::Internal(format!(
                "term {i} was never completed"
            ))),
        })
        .collect()
}

/// Take the chunks of the items an earlier run recorded (with the right length) from
/// the journal into `results`; returns the items still to fetch.
fn resume_recorded(
    items: Vec<Item>,
    done: &HashMap<u64, DoneTerm>,
    out: ByteRange,
    results: &mut [Option<Vec<(MerkleHash, u32)>>],
) -> Vec<Item> {
    let mut needed = Vec::with_capacity(items.len());
    for item in items {
        // Only whole items are journaled, and those start inside the output.
        let recorded = if item.is_whole() {
            done.get(&(item.data_start - out.start))
        } else {
            None
        };
        match recorded {
            Some(t) if t.len == item.term.unpacked_length => {
                results[item.idx] = Some(t.chunks.clone());
            }
            _ => needed.push(item),
        }
    }
    needed
}

/// Fetch (or read from the cache), decode, verify and write the items of one group.
async fn run_group(ctx: Arc<FileCtx>, segment: ByteRange, group: Group) -> Result<GroupResult> {
    let shared = ctx.shared.clone();
    let Group {
        fetch: planned,
        items,
    } = group;
    let xorb = planned.xorb;

    // 1. The chunk cache: all items must be covered, else the fetch serves them all.
    if let Some(cache) = shared.cache.clone()
        && items
            .iter()
            .all(|i| cache.contains(&xorb, i.term.chunks.start, i.term.chunks.end))
    {
        // Reading streams chunk by chunk; reserve a little for the buffers.
        let Some(_mem) = ctx.unless_stopped(shared.memory.reserve(1 << 20)).await else {
            return Ok(Vec::new());
        };
        let (c2, items2) = (ctx.clone(), items.clone());
        if let Some(done) = blocking(move || read_cached(&c2, &cache, &items2)).await?? {
            let bytes: u64 = items.iter().map(|i| i.term.unpacked_length).sum();
            ctx.stats.from_cache.fetch_add(bytes, Ordering::Relaxed);
            return Ok(report_written(&ctx, done, true));
        }
    }

    // 2. The network: the range is decoded and written as it arrives.
    let needed = ChunkRange::new(
        items
            .iter()
            .map(|i| i.term.chunks.start)
            .min()
            .unwrap_or(planned.chunks.start),
        items
            .iter()
            .map(|i| i.term.chunks.end)
            .max()
            .unwrap_or(planned.chunks.end),
    );
    // Memory: the whole serialized range at first (a store that hands it over in one
    // piece holds all of it); once the first piece shows that it streams, only what a
    // stream holds (`STREAM_MEMORY`).
    // Once the CAS is known to stream, that is what a fetch reserves from the start (a
    // range handed over whole after all is held beyond the budget until written).
    let reserve = if shared.streams.load(Ordering::Relaxed) {
        planned.bytes.len().min(STREAM_MEMORY)
    } else {
        planned.bytes.len()
    };
    let Some(mut mem) = ctx.unless_stopped(shared.memory.reserve(reserve)).await else {
        return Ok(Vec::new());
    };
    let Some(mut slot) = ctx.unless_stopped(shared.fetches.acquire()).await else {
        return Ok(Vec::new());
    };
    let done = stream_and_write(&ctx, segment, planned, needed, items, &mut mem, &mut slot).await?;
    drop(slot);
    drop(mem);
    ctx.stats.fetches.fetch_add(1, Ordering::Relaxed);
    Ok(report_written(&ctx, done, false))
}

/// Pieces of a range queued between the network and its decoder.
const PIECES_QUEUED: usize = 16;

/// Memory a streamed range holds: the queued pieces (at most about 400 KiB each from
/// the HTTP client) and the decoder's unwritten batch (decoded chunks, or the pieces
/// its stored chunks are slices of).
const STREAM_MEMORY: u64 = PIECES_QUEUED as u64 * (400 << 10) + WRITE_BATCH + (1 << 20);

/// Fetch one range (in parts where the CAS is known to stream, see [`split`]) and
/// decode, verify and write it as it arrives: the network side ([`fetch::pump_range`])
/// feeds pieces through a bounded queue to a decoder on a blocking thread
/// ([`decode_and_write`]).
async fn stream_and_write(
    ctx: &Arc<FileCtx>,
    segment: ByteRange,
    fetch: XorbFetch,
    needed: ChunkRange,
    items: Vec<Item>,
    mem: &mut OwnedSemaphorePermit,
    slot: &mut Slot,
) -> Result<Written> {
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(PIECES_QUEUED);
    let (c2, f2) = (ctx.clone(), fetch.clone());
    let decoder = tokio::task::spawn_blocking(move || decode_and_write(&c2, &f2, &items, rx));
    let shared = &ctx.shared;
    // A CAS known to stream (it says so, or an earlier range showed it) gets a large
    // range asked for in parts, those ahead of their turn with memory of their own.
    let parts = if shared.streams.load(Ordering::Relaxed) {
        shared.memory.shrink(mem, STREAM_MEMORY);
        split::parts(fetch.bytes, split::PART_BYTES)
    } else {
        vec![fetch.bytes]
    };
    let pumped = if parts.len() > 1 {
        let c = ctx.clone();
        let split = split::Split {
            shared,
            file: ctx.file,
            segment,
            fetch: &fetch,
            needed,
            counter: Arc::new(move |n| {
                c.stats.fetched.fetch_add(n, Ordering::Relaxed);
            }),
        };
        split.pump(&parts, &tx, slot).await
    } else {
        let total = fetch.bytes.len();
        let mut first = true;
        let pieces = fetch::Pieces::Decoder(&tx);
        fetch::pump_range(shared, ctx.file, segment, fetch, needed, pieces, |piece| {
            ctx.stats
                .fetched
                .fetch_add(piece.len() as u64, Ordering::Relaxed);
            slot.delivered(piece.len() as u64);
            if std::mem::take(&mut first) && (piece.len() as u64) < total {
                shared.streams.store(true, Ordering::Relaxed);
                shared.memory.shrink(mem, STREAM_MEMORY);
            }
        })
        .await
    };
    drop(tx);
    let decoded = decoder
        .await
        .map_err(|e| DownloadError::Internal(format!("decoding task failed: {e}")))?;
    match (pumped, decoded) {
        (Ok(fetch::Pumped::Complete), Ok(Some(done))) => Ok(done),
        // The decoder stopped early: its error is the one to report.
        (Ok(_), Err(e)) => Err(e),
        // The range did not arrive whole: the network's error says why, unless the
        // decoder found something wrong in what did arrive.
        (Err(e), Ok(None)) | (Err(e), Ok(Some(_))) => Err(e),
        (Err(pe), Err(de)) => Err(if de.kind() == crate::ErrorKind::Verification {
            de
        } else {
            pe
        }),
        (Ok(p), Ok(_)) => Err(DownloadError::Internal(format!(
            "fetching ended {p:?} but the decoder saw the range end early"
        ))),
    }
}

/// `(item idx, kept chunks, bytes written)`.
type WrittenItem = (usize, Vec<(MerkleHash, u32)>, u64);
type Written = Vec<WrittenItem>;

fn report_written(ctx: &FileCtx, done: Written, from_cache: bool) -> GroupResult {
    done.into_iter()
        .map(|(idx, kept, n)| {
            ctx.shared.emit(ProgressEvent::Written {
                index: ctx.index,
                bytes: n,
                from_cache,
            });
            (idx, kept)
        })
        .collect()
}

/// Decoded bytes handed to the writer at once: large writes, few of them (one staging
/// buffer of the direct writer; 16 MiB measured no faster and held more memory).
const WRITE_BATCH: u64 = 8 << 20;

/// Write the part of consecutive chunks `pieces` (the first at file offset `at`) that
/// falls in `item.write`, with one vectored positional write. Writers of one file take
/// turns: concurrent writes to one file only contend on its inode lock in the kernel.
fn write_clipped<'a>(
    ctx: &FileCtx,
    item: &Item,
    mut at: u64,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> std::io::Result<()> {
    let mut bufs: Vec<&[u8]> = Vec::new();
    let mut first_off = None;
    for data in pieces {
        let lo = at.max(item.write.start);
        let hi = (at + data.len() as u64).min(item.write.end);
        if lo < hi {
            first_off.get_or_insert(lo);
            bufs.push(&data[(lo - at) as usize..(hi - at) as usize]);
        }
        at += data.len() as u64;
    }
    if let Some(off) = first_off {
        let pos = off - ctx.out.start;
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let through_cache = {
            let mut turn = lock(&ctx.write_turn);
            match turn.as_mut() {
                Some(direct) => direct.write(&ctx.part, &bufs, pos)?,
                None => {
                    fsio::write_all_vectored_at(&ctx.part, &bufs, pos)?;
                    len
                }
            }
        };
        // Only spans written through the page cache in full are worth starting early.
        if ctx.renamed && through_cache == len {
            fsio::start_writeback(&ctx.part, pos, len);
        }
        if let Some(d) = &ctx.sha256 {
            d.wrote(&ctx.part, pos, &bufs);
        }
    }
    Ok(())
}

/// Before terms are journaled: wait until the bytes written for them are in the part
/// (direct writes complete on the writer thread).
fn writes_landed(ctx: &FileCtx) -> Result<()> {
    match (&ctx.written, &ctx.journal) {
        (Some(w), Some(_)) => w
            .wait()
            .map_err(|e| DownloadError::io("writing", &ctx.part_path, e)),
        _ => Ok(()),
    }
}

/// After an item's chunks are written: check its length, journal it, keep its chunks.
fn finish_item(ctx: &FileCtx, item: &Item, entries: Vec<(MerkleHash, u32)>) -> Result<WrittenItem> {
    let len: u64 = entries.iter().map(|e| u64::from(e.1)).sum();
    check_term_len(ctx, item, len)?;
    if item.is_whole()
        && let Some(j) = &ctx.journal
    {
        let t = DoneTerm {
            len,
            chunks: entries.clone(),
        };
        j.append(item.data_start - ctx.out.start, &t)
            .map_err(|e| DownloadError::io("writing", j.path(), e))?;
    }
    let kept = if ctx.whole {
        kept_chunks(ctx, item, entries)?
    } else {
        Vec::new()
    };
    Ok((item.idx, kept, item.write.len()))
}

/// Serve `items` from the cache (blocking). `None` if any item missed.
fn read_cached(ctx: &FileCtx, cache: &ChunkCache, items: &[Item]) -> Result<Option<Written>> {
    let mut entries = Vec::with_capacity(items.len());
    for item in items {
        let got = cache.read_chunks(
            &item.term.xorb,
            item.term.chunks.start,
            item.term.chunks.end,
            |off, data| write_clipped(ctx, item, item.data_start + off, [data]),
        );
        match got.map_err(|e| DownloadError::io("writing", &ctx.part_path, e))? {
            Some(e) => entries.push(e),
            None => return Ok(None),
        }
        lock(&ctx.cache_touched).push((
            item.term.xorb,
            item.term.chunks.start,
            item.term.chunks.end,
        ));
    }
    writes_landed(ctx)?;
    items
        .iter()
        .zip(entries)
        .map(|(item, e)| finish_item(ctx, item, e))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Decode a range from the pieces arriving on `rx` and write its chunks where the items
/// want them (blocking). `None` if the pieces stopped before the range was whole (the
/// sender knows why).
fn decode_and_write(
    ctx: &FileCtx,
    fetch: &XorbFetch,
    items: &[Item],
    mut rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
) -> Result<Option<Written>> {
    let bad = |rel: Option<usize>, message: &str| range_error(ctx, fetch, items, rel, message);
    let n = fetch.chunks.len() as usize;
    let mut decoder = decode::RangeDecoder::new(fetch.bytes.len(), n, WRITE_BATCH)
        .map_err(|e| bad(e.chunk, &e.message))?;
    let spans = item_spans(fetch, items);
    let mut pending = match &ctx.shared.cache {
        Some(c) if !ctx.link_cache => c.begin(&fetch.xorb, fetch.chunks.start, n),
        _ => None,
    };
    let mut cache_ok = true;
    let mut sink = |first: usize, pieces: &[decode::Piece], ends: &[u64]| {
        write_pieces(ctx, items, &spans, first, pieces, ends)?;
        if let Some(p) = pending.as_mut().filter(|_| cache_ok) {
            cache_ok = pieces.iter().all(|piece| p.append(piece.bytes()).is_ok());
        }
        Ok(())
    };
    let failed = |e: decode::EachError<std::io::Error>| match e {
        decode::EachError::Decode(d) => bad(d.chunk, &d.message),
        decode::EachError::Sink(io) => DownloadError::io("writing", &ctx.part_path, io),
    };
    while let Some(piece) = rx.blocking_recv() {
        decoder.feed(piece, &mut sink).map_err(failed)?;
    }
    if decoder.fed() < fetch.bytes.len() {
        return Ok(None);
    }
    let (hashes, ends) = decoder.finish(&mut sink).map_err(failed)?;
    for (item, &(a, b)) in items.iter().zip(&spans) {
        check_term_len(ctx, item, start_of(&ends, b) - start_of(&ends, a))?;
    }
    let chunks: Vec<(MerkleHash, u32)> = (0..hashes.len())
        .map(|i| {
            (
                hashes[i],
                (start_of(&ends, i + 1) - start_of(&ends, i)) as u32,
            )
        })
        .collect();
    keep_decoded(ctx, fetch, pending.filter(|_| cache_ok), &hashes, &chunks);
    writes_landed(ctx)?;
    items
        .iter()
        .zip(&spans)
        .map(|(item, &(a, b))| finish_item(ctx, item, chunks[a..b].to_vec()))
        .collect::<Result<_>>()
        .map(Some)
}

/// Where chunk `i` of a decoded range starts in its data, given each chunk's end.
fn start_of(ends: &[u64], i: usize) -> u64 {
    if i == 0 { 0 } else { ends[i - 1] }
}

/// Each item's chunks, relative to the fetch.
fn item_spans(fetch: &XorbFetch, items: &[Item]) -> Vec<(usize, usize)> {
    items
        .iter()
        .map(|i| {
            (
                (i.term.chunks.start - fetch.chunks.start) as usize,
                (i.term.chunks.end - fetch.chunks.start) as usize,
            )
        })
        .collect()
}

/// What is wrong with chunk `rel` of `fetch` (relative to the fetch; `None`: the
/// range as a whole), naming the terms it serves.
fn range_error(
    ctx: &FileCtx,
    fetch: &XorbFetch,
    items: &[Item],
    rel: Option<usize>,
    message: &str,
) -> DownloadError {
    let chunk = rel.map_or(String::new(), |r| {
        format!("chunk {} of ", fetch.chunks.start as usize + r)
    });
    let users: Vec<String> = items.iter().map(Item::describe).collect();
    DownloadError::Verification {
        source: None,
        file: ctx.file,
        detail: format!(
            "{chunk}xorb {} (fetched bytes {}..{} for chunks {}..{}, used by {}): {message}",
            fetch.xorb,
            fetch.bytes.start,
            fetch.bytes.end,
            fetch.chunks.start,
            fetch.chunks.end,
            users.join(", "),
        ),
    }
}

/// Write the decoded chunks `first..first + pieces.len()` of a fetch (`ends`: where
/// each chunk of the fetch ends in its data, so far) into the items they belong to.
fn write_pieces(
    ctx: &FileCtx,
    items: &[Item],
    spans: &[(usize, usize)],
    first: usize,
    pieces: &[decode::Piece],
    ends: &[u64],
) -> std::io::Result<()> {
    let last = first + pieces.len();
    for (item, &(a, b)) in items.iter().zip(spans) {
        let (lo, hi) = (a.max(first), b.min(last));
        if lo < hi {
            // Clipped to the item's part of the output, so chunks of a wrong length
            // (caught once the range is whole) cannot land outside it.
            write_clipped(
                ctx,
                item,
                item.data_start + start_of(ends, lo) - start_of(ends, a),
                pieces[lo - first..hi - first]
                    .iter()
                    .map(decode::Piece::bytes),
            )?;
        }
    }
    Ok(())
}

/// Keep what a whole decoded range offers beyond its items: the chunk cache entry
/// written alongside (`pending`, published with the chunks' `hashes`), and, for a
/// range that may be a whole xorb, its `chunks` for [`XorbCandidate`].
fn keep_decoded(
    ctx: &FileCtx,
    fetch: &XorbFetch,
    pending: Option<PendingEntry>,
    hashes: &[MerkleHash],
    chunks: &[(MerkleHash, u32)],
) {
    if let (Some(p), Some(cache)) = (pending, &ctx.shared.cache) {
        cache.commit(p, hashes);
        lock(&ctx.cache_touched).push((fetch.xorb, fetch.chunks.start, fetch.chunks.end));
    }
    if ctx.whole && fetch.chunks.start == 0 && fetch.bytes.start == 0 {
        lock(&ctx.candidates).push(XorbCandidate {
            fetch: fetch.clone(),
            chunks: chunks.to_vec(),
        });
    }
}

fn check_term_len(ctx: &FileCtx, item: &Item, got: u64) -> Result<()> {
    if got != item.term.unpacked_length {
        return Err(DownloadError::Verification {
            source: None,
            file: ctx.file,
            detail: format!(
                "{} decodes to {got} bytes, the reconstruction says {}",
                item.describe(),
                item.term.unpacked_length
            ),
        });
    }
    Ok(())
}

/// The chunks of `item` that lie at or after `keep_from` (all of them unless a later
/// segment's answer overlapped an earlier one); the cut must be a chunk boundary.
fn kept_chunks(
    ctx: &FileCtx,
    item: &Item,
    entries: Vec<(MerkleHash, u32)>,
) -> Result<Vec<(MerkleHash, u32)>> {
    let skip = item.keep_from - item.data_start;
    if skip == 0 {
        return Ok(entries);
    }
    let mut acc = 0u64;
    for (i, e) in entries.iter().enumerate() {
        if acc == skip {
            return Ok(entries[i..].to_vec());
        }
        acc += u64::from(e.1);
    }
    Err(DownloadError::BadReconstruction {
        file: ctx.file,
        detail: format!(
            "{} overlaps the previous segment at byte {}, not at a chunk boundary",
            item.describe(),
            item.keep_from
        ),
    })
}
