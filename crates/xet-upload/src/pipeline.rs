//! The upload orchestration: scheduler → readers → dedup stage → xorb uploader → shards.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use xet_cas::{Cas, CasError, XorbPieces};
use xet_hash::MerkleHash;

use crate::cache::{LocalCache, now_secs};
use crate::dedup::{DedupParams, FileDedup, KnownIndex, SealedXorb, Session, TermRec, XorbRef};
use crate::error::{Result, UploadError};
use crate::global::GlobalDedup;
use crate::options::UploadOptions;
use crate::pool::{BodyPool, BufPool};
use crate::progress::Progress;
use crate::read::{BLOCKS_PER_FILE, FileMsg};
use crate::report::{FileReport, Totals, UploadReport};
use crate::shards::{FileRecord, build_shards};
use crate::unchanged::{self, Identity, Unchanged};
use futures_util::StreamExt;

/// Read-ahead budget unit (semaphore permits are u32).
const BUDGET_UNIT: u64 = 64 << 10;

/// One file handed from the scheduler to the dedup stage, in input order.
struct FileJob {
    path: PathBuf,
    rx: mpsc::Receiver<FileMsg>,
    /// Released when the dedup stage is done with the file (with the last file of a
    /// group of small files, which share them).
    _permits: Arc<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

/// Files up to this size are read in groups: one reader task reads the files of a group
/// one after the other. Per file, starting a reader and handing its results over cost
/// more than reading and hashing it (20,000 files of ~70 bytes spent most of their time
/// switching threads).
const SMALL_FILE: u64 = 256 << 10;
/// At most this many files, or this many bytes, in a group.
const GROUP_FILES: usize = 64;
const GROUP_BYTES: u64 = 4 << 20;

/// A sealed xorb with its in-flight permit.
struct XorbJob {
    sealed: SealedXorb,
    _permit: OwnedSemaphorePermit,
}

/// A xorb built (and, unless a dry run, stored).
struct BuiltXorb {
    slot: u32,
    hash: MerkleHash,
    chunks: Vec<(MerkleHash, u32)>,
    body_len: u64,
    sent: bool,
    resumed: bool,
}

/// Why the dedup stage stopped.
enum StageError {
    Failed(UploadError),
    /// The uploader went away (it has the real error).
    DownstreamClosed,
}

impl From<UploadError> for StageError {
    fn from(e: UploadError) -> Self {
        StageError::Failed(e)
    }
}

struct Shared {
    cas: Arc<dyn Cas>,
    opts: UploadOptions,
    progress: Arc<dyn Progress>,
    cancel: CancellationToken,
    cache: Option<Arc<LocalCache>>,
    journal: HashMap<MerkleHash, u64>,
    handle: tokio::runtime::Handle,
    /// Read blocks, open xorbs' data, xorb bodies.
    read_pool: BufPool,
    body_pool: BodyPool,
    /// Whether readers compress chunks as they hash them.
    speculation: Arc<crate::build::Speculation>,
}

struct SessionOutput {
    files: Vec<FileRecord>,
    chunks: u64,
    new_chunks: u64,
}

/// Passes events on, adding the files and bytes of every `start` to those before: the
/// `rehash` check of recorded files and the upload of the rest form one progress.
struct CountedProgress {
    inner: Arc<dyn Progress>,
    started: std::sync::Mutex<(usize, u64)>,
}

impl CountedProgress {
    fn new(inner: Arc<dyn Progress>) -> Self {
        CountedProgress {
            inner,
            started: std::sync::Mutex::new((0, 0)),
        }
    }
}

impl Progress for CountedProgress {
    fn start(&self, files: usize, total_bytes: u64) {
        let (f, b) = {
            let mut s = self.started.lock().unwrap_or_else(|e| e.into_inner());
            s.0 += files;
            s.1 += total_bytes;
            *s
        };
        self.inner.start(f, b);
    }
    fn processed(&self, bytes: u64) {
        self.inner.processed(bytes);
    }
    fn uploaded(&self, bytes: u64) {
        self.inner.uploaded(bytes);
    }
    fn file_done(&self, file: &crate::report::FileReport) {
        self.inner.file_done(file);
    }
}

/// See the crate documentation.
pub async fn upload(
    cas: Arc<dyn Cas>,
    inputs: &[PathBuf],
    options: &UploadOptions,
    progress: Arc<dyn Progress>,
) -> Result<UploadReport> {
    let Some(dir) = options.cache_dir.clone() else {
        return upload_files(cas, inputs, options, progress).await;
    };
    let trust_records = !options.rehash;
    let started = Instant::now();
    let before_ns = unchanged::now_ns();
    // Files whose on-disk identity matches an earlier upload to this CAS.
    let list = inputs.to_vec();
    let (mut known, looked) = blocking(move || {
        let known = Unchanged::load(&dir);
        let looked: Vec<(Option<Identity>, Option<unchanged::Entry>)> = list
            .iter()
            .map(|p| {
                let id = std::fs::metadata(p)
                    .ok()
                    .filter(|m| m.is_file() && m.len() > 0)
                    .and_then(|m| Identity::of(&m));
                // With `rehash`, a recorded file is read again and checked (below).
                let entry = id.as_ref().and_then(|id| known.lookup(p, id).cloned());
                (id, entry)
            })
            .collect();
        Ok((known, looked))
    })
    .await?;
    // ... and that the CAS still has at that size.
    let confirmed: Vec<bool> = futures_util::stream::iter(looked.iter().map(|(_, e)| e.clone()))
        .map(|e| {
            let cas = cas.clone();
            async move {
                match e {
                    Some(e) => {
                        matches!(cas.file_size(&e.hash).await, Ok(Some(n)) if n == e.identity.size)
                    }
                    None => false,
                }
            }
        })
        .buffered(16)
        .collect()
        .await;
    // With `rehash`, a recorded file counts as unchanged only if it still has the
    // recorded content: its file hash is computed again (chunking and chunk hashes only,
    // which is what makes this cheaper than an upload) and must equal the recorded one.
    // Equal file hashes mean equal bytes, so the recorded sha256 and terms still hold; a
    // file that differs goes through the full upload below.
    let mut confirmed = confirmed;
    let progress_for_rest: Arc<dyn Progress> = if trust_records {
        progress.clone()
    } else {
        let check: Vec<(PathBuf, unchanged::Entry)> = inputs
            .iter()
            .zip(&confirmed)
            .zip(&looked)
            .filter_map(|((p, ok), (_, e))| e.clone().filter(|_| *ok).map(|e| (p.clone(), e)))
            .collect();
        let counted = Arc::new(CountedProgress::new(progress.clone()));
        if !check.is_empty() {
            counted.start(
                check.len(),
                check.iter().map(|(_, e)| e.identity.size).sum(),
            );
            let cancel = options.cancel.clone().unwrap_or_default();
            let prog = counted.clone();
            let same: Vec<bool> = blocking(move || {
                let mut same = Vec::with_capacity(check.len());
                for (path, e) in &check {
                    let mut observe = |n: u64| {
                        prog.processed(n);
                        !cancel.is_cancelled()
                    };
                    match crate::scan::scan_file_observed(path, false, &mut observe) {
                        Ok(s) => same.push(s.size == e.identity.size && s.file_hash() == e.hash),
                        Err(_) if cancel.is_cancelled() => return Err(UploadError::Interrupted),
                        // Unreadable now: the upload below reports it.
                        Err(_) => same.push(false),
                    }
                }
                Ok(same)
            })
            .await?;
            let mut same = same.into_iter();
            for (ok, (_, e)) in confirmed.iter_mut().zip(&looked) {
                if *ok && e.is_some() {
                    *ok = same.next().unwrap_or(false);
                }
            }
        }
        counted
    };
    let rest: Vec<PathBuf> = inputs
        .iter()
        .zip(&confirmed)
        .filter(|(_, ok)| !**ok)
        .map(|(p, _)| p.clone())
        .collect();
    let inner = if rest.is_empty() {
        UploadReport {
            dry_run: options.dry_run,
            files: Vec::new(),
            totals: Totals::default(),
        }
    } else {
        match upload_files(cas.clone(), &rest, options, progress_for_rest.clone()).await {
            // The shard named a xorb that dedup against the local shard cache took as
            // stored, and the CAS lacks it (a store deleted and made anew at the same
            // place, or emptied by its operator): the cache describes another store.
            // Drop it and upload again, once; xorbs stored meanwhile are not sent twice.
            Err(UploadError::Cas(CasError::MissingXorb { hash })) => {
                let dir = options.cache_dir.clone().unwrap_or_default();
                let dropped = blocking(move || crate::cache::drop_shards(&dir)).await?;
                tracing::warn!(
                    "the CAS does not hold xorb {hash}, which the local shard cache refers to; \
                     dropped {dropped} cached shards and uploading again"
                );
                let progress = Arc::new(CountedProgress::new(progress_for_rest));
                upload_files(cas, &rest, options, progress).await?
            }
            r => r?,
        }
    };

    // Merge in input order; remember what was uploaded for next time.
    let mut uploaded = inner.files.into_iter();
    let mut files = Vec::with_capacity(inputs.len());
    let mut totals = inner.totals;
    for ((path, ok), (id, entry)) in inputs.iter().zip(&confirmed).zip(&looked) {
        match (ok, entry) {
            (true, Some(e)) => {
                let f = FileReport {
                    path: path.clone(),
                    hash: e.hash,
                    size: e.identity.size,
                    sha256: e.sha256.clone(),
                    new_bytes: 0,
                    deduped_bytes: e.identity.size,
                    terms: e.terms,
                };
                progress.file_done(&f);
                totals.files += 1;
                if trust_records {
                    totals.files_unchanged += 1;
                } else {
                    totals.files_verified += 1;
                }
                totals.bytes += f.size;
                totals.deduped_bytes += f.size;
                files.push(f);
            }
            _ => {
                let f = uploaded.next().ok_or_else(|| {
                    UploadError::Internal("upload reported fewer files than it was given".into())
                })?;
                match id {
                    Some(id) if id.size == f.size => known.record(
                        path,
                        unchanged::Entry {
                            identity: *id,
                            hash: f.hash,
                            sha256: f.sha256.clone(),
                            terms: f.terms,
                            recorded_ns: before_ns,
                        },
                    ),
                    _ => known.forget(path),
                }
                files.push(f);
            }
        }
    }
    if !options.dry_run {
        let saved = blocking(move || {
            known
                .save()
                .map_err(|e| UploadError::Internal(e.to_string()))
        });
        if let Err(e) = saved.await {
            tracing::warn!("cannot record the uploaded files' identities: {e}");
        }
    }
    totals.elapsed = started.elapsed();
    Ok(UploadReport {
        dry_run: options.dry_run,
        files,
        totals,
    })
}

/// Upload `inputs`, reading every one.
async fn upload_files(
    cas: Arc<dyn Cas>,
    inputs: &[PathBuf],
    options: &UploadOptions,
    progress: Arc<dyn Progress>,
) -> Result<UploadReport> {
    let started = Instant::now();
    let opts = options.normalized();
    let user_cancel = opts.cancel.clone().unwrap_or_default();
    let cancel = user_cancel.child_token();
    // Stops every stage if this future is dropped.
    let _guard = cancel.clone().drop_guard();

    let inputs = inputs.to_vec();
    let sizes = blocking(move || {
        inputs
            .into_iter()
            .map(|p| {
                let m = std::fs::metadata(&p).map_err(|e| UploadError::input(&p, e))?;
                if !m.is_file() {
                    let e =
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
                    return Err(UploadError::input(&p, e));
                }
                Ok((p, m.len()))
            })
            .collect::<Result<Vec<_>>>()
    })
    .await?;
    progress.start(sizes.len(), sizes.iter().map(|s| s.1).sum());

    let (cache, contents) = match &opts.cache_dir {
        Some(dir) => {
            let (dir, max, ro) = (dir.clone(), opts.shard_cache_max_bytes, opts.dry_run);
            let (c, contents) = blocking(move || LocalCache::open(&dir, max, ro)).await?;
            (Some(Arc::new(c)), contents)
        }
        None => (None, Default::default()),
    };
    let cache_index = {
        let shards = contents.shards;
        Arc::new(
            blocking(move || {
                let mut k = KnownIndex::new();
                for s in &shards {
                    k.add_shard(s);
                }
                Ok(k)
            })
            .await?,
        )
    };
    tracing::debug!(
        xorbs = cache_index.num_xorbs(),
        journal = contents.journal.len(),
        "local cache loaded"
    );

    let handle = tokio::runtime::Handle::current();
    let global = opts.global_dedup.then(|| {
        Arc::new(GlobalDedup::new(
            cas.clone(),
            handle.clone(),
            opts.max_dedup_queries_in_flight,
            cache_index.clone(),
            if opts.dry_run { None } else { cache.clone() },
            cancel.clone(),
        ))
    });
    let shared = Arc::new(Shared {
        cas: cas.clone(),
        opts: opts.clone(),
        progress: progress.clone(),
        cancel: cancel.clone(),
        cache: cache.clone(),
        journal: contents.journal,
        handle: handle.clone(),
        read_pool: BufPool::new(
            opts.block_size,
            (opts.read_ahead_bytes / opts.block_size as u64) as usize + 4,
        ),
        // The largest body: every chunk stored as it is (a compressed payload is kept
        // only when smaller), plus the headers.
        body_pool: BodyPool::new(
            opts.xorb_max_bytes as usize + xet_xorb::CHUNK_HEADER_LEN * opts.xorb_max_chunks,
            opts.max_xorbs_in_flight + 1,
        ),
        // Bodies sent in pieces carry each chunk's CRC (see `upload_one`).
        speculation: Arc::new(crate::build::Speculation::new(cas.takes_xorb_pieces())),
    });

    let (files_tx, files_rx) = mpsc::channel::<FileJob>(opts.max_files_in_flight);
    let (xorb_tx, xorb_rx) = mpsc::channel::<XorbJob>(opts.max_xorbs_in_flight);
    let scheduler = tokio::spawn(schedule(sizes, files_tx, shared.clone(), global.clone()));
    let uploader = tokio::spawn(upload_xorbs(xorb_rx, shared.clone()));
    let session = {
        let shared = shared.clone();
        let cache_index = cache_index.clone();
        tokio::task::spawn_blocking(move || run_session(files_rx, xorb_tx, &shared, cache_index))
    };

    let result = tokio::select! {
        r = finish(session, uploader) => r,
        _ = user_cancel.cancelled() => Err(UploadError::Interrupted),
    };
    scheduler.abort();
    if result.is_err() {
        cancel.cancel();
    }
    let (output, xorbs) = result?;

    // Shards, once every xorb is stored (built off the executor: a large upload has
    // many terms).
    let files: Vec<FileReport> = output.files.iter().map(FileRecord::report).collect();
    let xorbs = Arc::new(xorbs);
    let shard_max = opts.shard_max_bytes;
    let shards = {
        let xorbs = xorbs.clone();
        let records = output.files;
        blocking(move || {
            let by_slot: HashMap<u32, &BuiltXorb> = xorbs.iter().map(|x| (x.slot, x)).collect();
            let resolve = |t: &TermRec| match t.xorb {
                XorbRef::Known(h) => Ok(h),
                XorbRef::Session(s) => by_slot
                    .get(&s)
                    .map(|x| x.hash)
                    .ok_or_else(|| UploadError::Internal(format!("xorb slot {s} was never built"))),
            };
            let mut cas_infos = Vec::with_capacity(xorbs.len());
            for x in xorbs.iter() {
                let entries: Vec<(MerkleHash, u64)> =
                    x.chunks.iter().map(|&(h, l)| (h, l as u64)).collect();
                let info = xet_shard::CasInfo::from_chunks(x.hash, &entries, 0).map_err(|e| {
                    UploadError::Internal(format!("describing xorb {}: {e}", x.hash))
                })?;
                cas_infos.push(info);
            }
            let file_infos = records
                .iter()
                .map(|f| f.to_file_info(&resolve))
                .collect::<Result<Vec<_>>>()?;
            build_shards(file_infos, cas_infos, shard_max)
        })
        .await?
    };

    let mut totals = Totals::default();
    for (shard, bytes) in shards {
        if user_cancel.is_cancelled() {
            return Err(UploadError::Interrupted);
        }
        let len = bytes.len() as u64;
        if !opts.dry_run {
            cas.put_shard(Bytes::from(bytes)).await?;
            progress.uploaded(len);
            if let Some(c) = &cache {
                let c = c.clone();
                let saved = blocking(move || {
                    let stored = shard
                        .into_stored(xet_shard::StoredOptions::shard_cache(now_secs()))
                        .and_then(|s| s.to_bytes())
                        .map_err(|e| UploadError::Internal(format!("shard cache form: {e}")))?;
                    c.save_shard(&stored)
                })
                .await;
                if let Err(e) = saved {
                    tracing::warn!("cannot cache the uploaded shard: {e}");
                }
            }
        }
        totals.shards_sent += 1;
        totals.shard_bytes_sent += len;
    }
    if let (Some(c), false) = (&cache, opts.dry_run) {
        let done: HashSet<MerkleHash> = xorbs.iter().map(|x| x.hash).collect();
        let c = c.clone();
        if let Err(e) = blocking(move || c.journal_forget(&done)).await {
            tracing::warn!("cannot tidy the resume journal: {e}");
        }
    }

    totals.files = files.len();
    totals.bytes = files.iter().map(|f| f.size).sum();
    totals.new_bytes = files.iter().map(|f| f.new_bytes).sum();
    totals.deduped_bytes = totals.bytes - totals.new_bytes;
    totals.chunks = output.chunks;
    totals.new_chunks = output.new_chunks;
    totals.xorbs_new = xorbs.len();
    totals.xorbs_sent = xorbs.iter().filter(|x| x.sent).count();
    totals.xorbs_resumed = xorbs.iter().filter(|x| x.resumed).count();
    totals.xorb_bytes_sent = xorbs.iter().filter(|x| x.sent).map(|x| x.body_len).sum();
    if let Some(g) = &global {
        totals.dedup_queries = g.queries.load(Ordering::Relaxed);
        totals.dedup_answers = g.answers.load(Ordering::Relaxed);
    }
    totals.elapsed = started.elapsed();
    Ok(UploadReport {
        dry_run: opts.dry_run,
        files,
        totals,
    })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| UploadError::Internal(format!("worker failed: {e}")))?
}

/// Wait for the dedup stage and the uploader; report the error that caused a stop.
async fn finish(
    session: tokio::task::JoinHandle<Result<SessionOutput, StageError>>,
    uploader: tokio::task::JoinHandle<Result<Vec<BuiltXorb>>>,
) -> Result<(SessionOutput, Vec<BuiltXorb>)> {
    let joined =
        |e: tokio::task::JoinError| UploadError::Internal(format!("pipeline stage failed: {e}"));
    let s = session.await.map_err(joined)?;
    match s {
        Ok(out) => {
            let xorbs = uploader.await.map_err(joined)??;
            Ok((out, xorbs))
        }
        Err(StageError::Failed(e)) => {
            uploader.abort();
            Err(e)
        }
        Err(StageError::DownstreamClosed) => match uploader.await.map_err(joined)? {
            Err(e) => Err(e),
            Ok(_) => Err(UploadError::Internal("xorb uploader stopped early".into())),
        },
    }
}

/// Start readers in input order, within the file-count and read-ahead budgets.
async fn schedule(
    files: Vec<(PathBuf, u64)>,
    tx: mpsc::Sender<FileJob>,
    shared: Arc<Shared>,
    global: Option<Arc<GlobalDedup>>,
) {
    let o = &shared.opts;
    let count = Arc::new(Semaphore::new(o.max_files_in_flight));
    let budget_units = (o.read_ahead_bytes / BUDGET_UNIT).clamp(1, u32::MAX as u64 / 2) as u32;
    let budget = Arc::new(Semaphore::new(budget_units as usize));
    let mut files = files.into_iter().peekable();
    while let Some((path, size)) = files.next() {
        // A group: this file and the small files right after it, if it is small.
        let mut group = vec![(path, size)];
        if size <= SMALL_FILE {
            let mut bytes = size;
            while group.len() < GROUP_FILES {
                match files.peek() {
                    Some(&(_, s)) if s <= SMALL_FILE && bytes + s <= GROUP_BYTES => {
                        bytes += s;
                        group.push(files.next().expect("peeked"));
                    }
                    _ => break,
                }
            }
        }
        // A file never holds more than BLOCKS_PER_FILE blocks (or its size) at once, so
        // reserving that up front, in input order, cannot deadlock the ordered consumer.
        let want = group
            .iter()
            .map(|&(_, size)| {
                size.min(BLOCKS_PER_FILE * o.block_size as u64)
                    .div_ceil(BUDGET_UNIT)
                    .max(1)
            })
            .sum::<u64>()
            .clamp(1, budget_units as u64) as u32;
        let permits = tokio::select! {
            _ = shared.cancel.cancelled() => return,
            p = async {
                let c = count.clone().acquire_owned().await.expect("never closed");
                let b = budget.clone().acquire_many_owned(want).await.expect("never closed");
                (c, b)
            } => p,
        };
        let permits = Arc::new(permits);
        // Room for all of a one-block file's messages (the chunks its block decides, the
        // rest at its end, and the end), so the reader goes on to the next file of its
        // group without waiting for the dedup stage.
        let depth = if group.len() > 1 { 3 } else { 1 };
        let mut readers = Vec::with_capacity(group.len());
        let mut jobs = Vec::with_capacity(group.len());
        for (path, _) in group {
            let (ftx, frx) = mpsc::channel(depth);
            readers.push((path.clone(), ftx));
            jobs.push(FileJob {
                path,
                rx: frx,
                _permits: permits.clone(),
            });
        }
        drop(permits);
        let (bs, g, c) = (o.block_size, global.clone(), shared.cancel.clone());
        let pool = shared.read_pool.clone();
        let spec = shared.speculation.clone();
        tokio::task::spawn_blocking(move || {
            for (p, ftx) in readers {
                if c.is_cancelled() {
                    return;
                }
                let spec = Some(spec.clone());
                crate::read::read_file(&p, bs, ftx, g.clone(), pool.clone(), spec, c.clone());
            }
        });
        for job in jobs {
            if tx.send(job).await.is_err() {
                return;
            }
        }
    }
}

/// The dedup stage: files in input order, chunks in file order.
fn run_session(
    mut files: mpsc::Receiver<FileJob>,
    xorb_tx: mpsc::Sender<XorbJob>,
    shared: &Shared,
    cache_index: Arc<KnownIndex>,
) -> Result<SessionOutput, StageError> {
    let o = &shared.opts;
    let params = DedupParams {
        min_run_chunks: o.min_dedup_run_chunks,
        min_run_bytes: o.min_dedup_run_bytes,
        xorb_max_chunks: o.xorb_max_chunks,
        xorb_max_bytes: o.xorb_max_bytes,
    };
    let mut session = Session::new(params, cache_index);
    let in_flight = Arc::new(Semaphore::new(o.max_xorbs_in_flight));
    let mut out = SessionOutput {
        files: Vec::new(),
        chunks: 0,
        new_chunks: 0,
    };

    let flush = |session: &mut Session| -> Result<(), StageError> {
        for sealed in session.take_sealed() {
            let permit = shared
                .handle
                .block_on(async {
                    tokio::select! {
                        p = in_flight.clone().acquire_owned() => Some(p.expect("never closed")),
                        _ = shared.cancel.cancelled() => None,
                    }
                })
                .ok_or(StageError::Failed(UploadError::Interrupted))?;
            xorb_tx
                .blocking_send(XorbJob {
                    sealed,
                    _permit: permit,
                })
                .map_err(|_| StageError::DownstreamClosed)?;
        }
        Ok(())
    };

    while let Some(mut job) = files.blocking_recv() {
        let mut f = FileDedup::new();
        loop {
            if shared.cancel.is_cancelled() {
                return Err(UploadError::Interrupted.into());
            }
            match job.rx.blocking_recv() {
                Some(FileMsg::Batch(batch)) => {
                    for rx in batch.answers {
                        let mut rx = rx;
                        let answer = shared.handle.block_on(async {
                            tokio::select! {
                                r = rx.wait_for(Option::is_some) => r.ok().and_then(|v| v.clone()),
                                _ = shared.cancel.cancelled() => None,
                            }
                        });
                        match answer {
                            // Merging an answer again is a cheap no-op (its xorbs are known).
                            Some(Ok(Some(shard))) => session.add_answer(&shard),
                            Some(Err(e)) => return Err(UploadError::Cas(e).into()),
                            Some(Ok(None)) => {}
                            None if shared.cancel.is_cancelled() => {
                                return Err(UploadError::Interrupted.into());
                            }
                            None => {}
                        }
                    }
                    let mut bytes = 0u64;
                    f.copy_new = !batch.mapped;
                    let mut prepared = batch.prepared.into_iter();
                    for (h, d) in batch.chunks {
                        bytes += d.len() as u64;
                        session.push_prepared(&mut f, h, d, prepared.next().flatten());
                    }
                    let new_before = f.new_bytes;
                    session.process(&mut f, false);
                    shared.speculation.observe(f.new_bytes - new_before, bytes);
                    flush(&mut session)?;
                    shared.progress.processed(bytes);
                }
                Some(FileMsg::End { size, sha256 }) => {
                    session.process(&mut f, true);
                    flush(&mut session)?;
                    out.chunks += f.chunks.len() as u64;
                    out.new_chunks += f.new_chunks;
                    let rec = FileRecord::new(job.path.clone(), size, sha256, f)?;
                    shared.progress.file_done(&rec.report());
                    out.files.push(rec);
                    break;
                }
                Some(FileMsg::Failed(e)) => return Err(e.into()),
                None if shared.cancel.is_cancelled() => return Err(UploadError::Interrupted.into()),
                None => {
                    let msg = format!("reader of {} stopped unexpectedly", job.path.display());
                    return Err(UploadError::Internal(msg).into());
                }
            }
        }
    }
    session.seal_open();
    flush(&mut session)?;
    Ok(out)
}

/// Build and store xorbs, `max_xorbs_in_flight` at a time (the dedup stage holds the permits).
async fn upload_xorbs(
    mut rx: mpsc::Receiver<XorbJob>,
    shared: Arc<Shared>,
) -> Result<Vec<BuiltXorb>> {
    let mut set: JoinSet<Result<BuiltXorb>> = JoinSet::new();
    let mut out = Vec::new();
    let joined = |r: std::result::Result<Result<BuiltXorb>, tokio::task::JoinError>| {
        r.map_err(|e| UploadError::Internal(format!("xorb upload task failed: {e}")))?
    };
    loop {
        tokio::select! {
            biased;
            _ = shared.cancel.cancelled() => return Err(UploadError::Interrupted),
            Some(r) = set.join_next(), if !set.is_empty() => out.push(joined(r)?),
            job = rx.recv() => match job {
                Some(job) => { set.spawn(upload_one(job, shared.clone())); }
                None => break,
            },
        }
    }
    loop {
        tokio::select! {
            biased;
            _ = shared.cancel.cancelled() => return Err(UploadError::Interrupted),
            r = set.join_next() => match r {
                Some(r) => out.push(joined(r)?),
                None => break,
            },
        }
    }
    out.sort_by_key(|x| x.slot);
    Ok(out)
}

async fn upload_one(job: XorbJob, shared: Arc<Shared>) -> Result<BuiltXorb> {
    let XorbJob {
        mut sealed,
        _permit,
    } = job;
    let (tx, rx) = tokio::sync::oneshot::channel();
    if shared.cas.takes_xorb_pieces() {
        // Sent as pieces: stored chunks go out straight from where they were read.
        rayon::spawn(move || {
            let mut sink = crate::build::PiecesSink::default();
            let built = crate::build::build_xorb(&mut sealed, &mut sink)
                .map(|h| (h, sink.finish(), sealed.slot, sealed.chunks));
            let _ = tx.send(built);
        });
    } else {
        // The body starts on a page boundary, so the embedded store's direct writes take
        // it straight from memory.
        let mut body = shared
            .body_pool
            .get()
            .map_err(|e| UploadError::Internal(format!("cannot allocate a xorb body: {e}")))?;
        let pool = shared.body_pool.clone();
        rayon::spawn(move || {
            let built = crate::build::build_xorb(&mut sealed, &mut body).map(|h| {
                (
                    h,
                    XorbPieces::from(pool.to_bytes(body)),
                    sealed.slot,
                    sealed.chunks,
                )
            });
            let _ = tx.send(built);
        });
    }
    // The chunks' data was dropped with the rest of `sealed` once built: what the body
    // still needs (stored chunks sent as pieces) it holds itself, and a mapped input's
    // pages are released as soon as nothing holds them (see `read::MapBlock`).
    let (hash, body, slot, chunks) = rx
        .await
        .map_err(|_| UploadError::Internal("xorb build task failed".into()))??;
    let body_len = body.len();
    let mut built = BuiltXorb {
        slot,
        hash,
        chunks,
        body_len,
        sent: false,
        resumed: false,
    };

    if shared.journal.get(&hash) == Some(&body_len) {
        // Stored by an interrupted earlier run; trust it only if the CAS confirms.
        match shared.cas.xorb_size(&hash).await {
            Ok(Some(n)) if n == body_len => {
                built.resumed = true;
                return Ok(built);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(%hash, "xorb_size failed, uploading again: {e}"),
        }
    }
    built.sent = true;
    if shared.opts.dry_run {
        return Ok(built);
    }
    shared.cas.put_xorb_pieces(&hash, body).await?;
    shared.progress.uploaded(body_len);
    if let Some(c) = &shared.cache {
        let c = c.clone();
        let r = tokio::task::spawn_blocking(move || c.journal_append(&hash, body_len)).await;
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("resume journal: {e}"),
            Err(e) => tracing::warn!("resume journal: {e}"),
        }
    }
    Ok(built)
}
