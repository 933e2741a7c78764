//! The upload pipeline, by stage: the scheduler starts readers (`read.rs`) in input
//! order, the dedup stage decides every chunk and seals xorbs, the uploader builds and
//! stores them, and once all are stored the shards are sent.
//!
//! [`upload_files`] reads top to bottom in that order; the stages follow it in this file.

use std::collections::{HashMap, HashSet};
use std::iter::Peekable;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use xet_cas::{Cas, XorbBody};
use xet_hash::MerkleHash;
use xet_shard::Shard;

use crate::cache::{LocalCache, now_secs};
use crate::dedup::{DedupParams, FileDedup, KnownIndex, SealedXorb, Session, TermRec, XorbRef};
use crate::error::{Result, UploadError};
use crate::global::{AnswerRx, GlobalDedup};
use crate::input::Input;
use crate::options::UploadOptions;
use crate::pool::{BodyPool, BufPool};
use crate::prepare::Speculation;
use crate::progress::Progress;
use crate::read::{BLOCKS_PER_FILE, Batch, FileMsg};
use crate::report::{FileReport, Totals, UploadReport};
use crate::shards::{FileRecord, build_shards};
use crate::uploads::UploadSlots;

/// What every stage shares.
struct Shared {
    cas: Arc<dyn Cas>,
    opts: UploadOptions,
    progress: Arc<dyn Progress>,
    cancel: CancellationToken,
    cache: Option<Arc<LocalCache>>,
    /// Resume journal: xorb hash → body length.
    journal: HashMap<MerkleHash, u64>,
    handle: tokio::runtime::Handle,
    /// Read blocks, open xorbs' data, xorb bodies.
    read_pool: BufPool,
    body_pool: BodyPool,
    /// Whether readers compress chunks as they hash them.
    speculation: Arc<Speculation>,
    /// How many xorbs are being sent at once.
    uploads: UploadSlots,
}

/// Upload `inputs`, reading every one.
pub(crate) async fn upload_files(
    cas: Arc<dyn Cas>,
    inputs: &[Input],
    options: &UploadOptions,
    progress: Arc<dyn Progress>,
) -> Result<UploadReport> {
    let started = Instant::now();
    let opts = options.normalized();
    let user_cancel = opts.cancel.clone().unwrap_or_default();
    let cancel = user_cancel.child_token();
    // Stops every stage if this future is dropped.
    let _guard = cancel.clone().drop_guard();

    let sizes = stat_inputs(inputs).await?;
    progress.start(sizes.len(), sizes.iter().map(|s| s.1).sum());
    let local = open_cache(&opts).await?;
    let shared = Arc::new(Shared::new(
        cas,
        opts,
        progress,
        cancel,
        local.cache,
        local.journal,
    ));
    let global = start_global_dedup(&shared, &local.index);
    let (output, xorbs) =
        run_stages(sizes, &shared, global.clone(), local.index, &user_cancel).await?;

    let files: Vec<FileReport> = output.files.iter().map(FileRecord::report).collect();
    let xorbs = Arc::new(xorbs);
    let shards = make_shards(output.files, xorbs.clone(), shared.opts.shard_max_bytes).await?;
    let (shards_sent, shard_bytes_sent) = send_shards(shards, &shared, &user_cancel).await?;
    tidy_journal(&shared, &xorbs).await;

    let mut totals = Totals {
        chunks: output.chunks,
        new_chunks: output.new_chunks,
        shards_sent,
        shard_bytes_sent,
        ..Totals::default()
    };
    count_files_and_xorbs(&mut totals, &files, &xorbs, global.as_deref());
    totals.elapsed = started.elapsed();
    Ok(UploadReport {
        dry_run: shared.opts.dry_run,
        files,
        totals,
    })
}

/// Run `f` on a blocking thread: file system and CPU-heavy work stays off the executor.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| UploadError::Internal(format!("worker failed: {e}")))?
}

// ---- Setup ----

/// Each input's size; a file that is not a regular file fails the upload.
async fn stat_inputs(inputs: &[Input]) -> Result<Vec<(Input, u64)>> {
    let inputs = inputs.to_vec();
    blocking(move || {
        inputs
            .into_iter()
            .map(|input| {
                let p = match &input {
                    Input::File(p) => p,
                    Input::Bytes { data, .. } => return Ok((input.clone(), data.len() as u64)),
                };
                let m = std::fs::metadata(p).map_err(|e| UploadError::input(p, e))?;
                if !m.is_file() {
                    let e =
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
                    return Err(UploadError::input(p, e));
                }
                Ok((input, m.len()))
            })
            .collect::<Result<Vec<_>>>()
    })
    .await
}

/// The local cache directory as opened.
struct OpenedCache {
    /// `None` without a cache directory.
    cache: Option<Arc<LocalCache>>,
    journal: HashMap<MerkleHash, u64>,
    /// The xorbs and chunks the cached shards describe.
    index: Arc<KnownIndex>,
}

async fn open_cache(opts: &UploadOptions) -> Result<OpenedCache> {
    let (cache, contents) = match &opts.cache_dir {
        Some(dir) => {
            let (dir, max, ro) = (dir.clone(), opts.shard_cache_max_bytes, opts.dry_run);
            let (c, contents) = blocking(move || LocalCache::open(&dir, max, ro)).await?;
            (Some(Arc::new(c)), contents)
        }
        None => (None, Default::default()),
    };
    let shards = contents.shards;
    let index = blocking(move || {
        let mut k = KnownIndex::new();
        for s in &shards {
            k.add_shard(s);
        }
        Ok(k)
    })
    .await?;
    tracing::debug!(
        xorbs = index.num_xorbs(),
        journal = contents.journal.len(),
        "local cache loaded"
    );
    Ok(OpenedCache {
        cache,
        journal: contents.journal,
        index: Arc::new(index),
    })
}

/// Idle read blocks kept for reuse: as many as the read-ahead and the xorbs being
/// filled, waiting or built hold (new chunks are slices of their blocks), so blocks freed
/// when a xorb is done are read into again instead of faulting fresh pages in. Idle
/// blocks never outnumber those in use at some earlier moment, so this adds nothing to
/// the peak.
fn read_pool_max(opts: &UploadOptions) -> usize {
    let xorbs = (opts.max_xorbs_in_flight as u64 + 2) * opts.xorb_max_bytes;
    ((opts.read_ahead_bytes + xorbs) / opts.block_size as u64) as usize + 4
}

impl Shared {
    fn new(
        cas: Arc<dyn Cas>,
        opts: UploadOptions,
        progress: Arc<dyn Progress>,
        cancel: CancellationToken,
        cache: Option<Arc<LocalCache>>,
        journal: HashMap<MerkleHash, u64>,
    ) -> Shared {
        Shared {
            read_pool: BufPool::new(opts.block_size, read_pool_max(&opts)),
            // The largest body: every chunk stored as it is (a compressed payload is kept
            // only when smaller), plus the headers.
            body_pool: BodyPool::new(
                opts.xorb_max_bytes as usize + xet_xorb::CHUNK_HEADER_LEN * opts.xorb_max_chunks,
                opts.max_xorbs_in_flight + 1,
            ),
            // Bodies sent in pieces carry each chunk's CRC (see `upload_one`).
            speculation: Arc::new(Speculation::new(cas.takes_xorb_pieces())),
            uploads: UploadSlots::new(opts.xorb_uploads_initial, opts.max_xorb_uploads),
            handle: tokio::runtime::Handle::current(),
            cas,
            opts,
            progress,
            cancel,
            cache,
            journal,
        }
    }
}

/// The global dedup client, if enabled; its answers go to the shard cache unless a dry run.
fn start_global_dedup(shared: &Shared, index: &Arc<KnownIndex>) -> Option<Arc<GlobalDedup>> {
    let o = &shared.opts;
    o.global_dedup.then(|| {
        Arc::new(GlobalDedup::new(
            shared.cas.clone(),
            shared.handle.clone(),
            o.max_dedup_queries_in_flight,
            index.clone(),
            if o.dry_run {
                None
            } else {
                shared.cache.clone()
            },
            shared.cancel.clone(),
        ))
    })
}

// ---- Stages ----

/// Run the scheduler, the dedup stage and the xorb uploader until every xorb is stored,
/// a stage fails or the caller cancels.
async fn run_stages(
    files: Vec<(Input, u64)>,
    shared: &Arc<Shared>,
    global: Option<Arc<GlobalDedup>>,
    cache_index: Arc<KnownIndex>,
    user_cancel: &CancellationToken,
) -> Result<(SessionOutput, Vec<BuiltXorb>)> {
    let opts = &shared.opts;
    // Room for every file of the groups being read: a group hands over all its files at
    // once, and with room for fewer the scheduler would wait for the dedup stage before
    // starting the next group's reader (its global dedup queries then started one group
    // at a time). The read-ahead permits bound what is read.
    let (files_tx, files_rx) =
        mpsc::channel::<FileJob>(opts.max_files_in_flight.saturating_mul(GROUP_FILES));
    let (xorb_tx, xorb_rx) = mpsc::channel::<XorbJob>(opts.max_xorbs_in_flight);
    let scheduler = tokio::spawn(schedule(files, files_tx, shared.clone(), global));
    let uploader = tokio::spawn(upload_xorbs(xorb_rx, shared.clone()));
    let session = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || run_session(files_rx, xorb_tx, &shared, cache_index))
    };

    let result = tokio::select! {
        r = finish(session, uploader) => r,
        _ = user_cancel.cancelled() => Err(UploadError::Interrupted),
    };
    scheduler.abort();
    if result.is_err() {
        shared.cancel.cancel();
    }
    result
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

// ---- Stage 1: the scheduler ----

/// Read-ahead budget unit (semaphore permits are u32).
const BUDGET_UNIT: u64 = 64 << 10;

/// Files up to this size are read in groups: one reader task reads the files of a group
/// one after the other. Per file, starting a reader and handing its results over cost
/// more than reading and hashing it (20,000 files of ~70 bytes spent most of their time
/// switching threads).
const SMALL_FILE: u64 = 256 << 10;
/// At most this many files, or this many bytes, in a group.
const GROUP_FILES: usize = 64;
const GROUP_BYTES: u64 = 4 << 20;

/// One file handed from the scheduler to the dedup stage, in input order.
struct FileJob {
    path: PathBuf,
    rx: mpsc::Receiver<FileMsg>,
    /// Released when the dedup stage is done with the file (with the last file of a
    /// group of small files, which share them).
    _permits: Arc<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

/// Start readers in input order, within the file-count and read-ahead budgets.
async fn schedule(
    files: Vec<(Input, u64)>,
    tx: mpsc::Sender<FileJob>,
    shared: Arc<Shared>,
    global: Option<Arc<GlobalDedup>>,
) {
    let o = &shared.opts;
    let count = Arc::new(Semaphore::new(o.max_files_in_flight));
    let budget_units = (o.read_ahead_bytes / BUDGET_UNIT).clamp(1, u32::MAX as u64 / 2) as u32;
    let budget = Arc::new(Semaphore::new(budget_units as usize));
    let mut files = files.into_iter().peekable();
    // The input position of the group's first file.
    let mut position = 0u64;
    while let Some(first) = files.next() {
        let group = next_group(first, &mut files);
        let first_position = position;
        position += group.len() as u64;
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
        for job in start_readers(group, first_position, permits, &shared, &global) {
            if tx.send(job).await.is_err() {
                return;
            }
        }
    }
}

/// A group: `first` and, if it is small, the small files right after it.
fn next_group<T>(
    first: (T, u64),
    files: &mut Peekable<impl Iterator<Item = (T, u64)>>,
) -> Vec<(T, u64)> {
    let mut bytes = first.1;
    let mut group = vec![first];
    if bytes > SMALL_FILE {
        return group;
    }
    while group.len() < GROUP_FILES {
        match files.peek() {
            Some(&(_, s)) if s <= SMALL_FILE && bytes + s <= GROUP_BYTES => {
                bytes += s;
                group.push(files.next().expect("peeked"));
            }
            _ => break,
        }
    }
    group
}

/// Read the files of `group` (the first at input position `position`), one after the
/// other, on one blocking thread; the jobs that hand their chunks to the dedup stage
/// share `permits`.
fn start_readers(
    group: Vec<(Input, u64)>,
    position: u64,
    permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
    shared: &Shared,
    global: &Option<Arc<GlobalDedup>>,
) -> Vec<FileJob> {
    let permits = Arc::new(permits);
    // Room for all of a one-block file's messages (the chunks its block decides, the
    // rest at its end, and the end), so the reader goes on to the next file of its
    // group without waiting for the dedup stage.
    let depth = if group.len() > 1 { 3 } else { 1 };
    let mut readers = Vec::with_capacity(group.len());
    let mut jobs = Vec::with_capacity(group.len());
    for (i, (input, _)) in group.into_iter().enumerate() {
        let (ftx, frx) = mpsc::channel(depth);
        let queries = global.as_ref().map(|g| g.for_file(position + i as u64));
        let path = input.name().to_path_buf();
        readers.push((input, ftx, queries));
        jobs.push(FileJob {
            path,
            rx: frx,
            _permits: permits.clone(),
        });
    }
    let (bs, c) = (shared.opts.block_size, shared.cancel.clone());
    let pool = shared.read_pool.clone();
    let spec = shared.speculation.clone();
    tokio::task::spawn_blocking(move || {
        for (p, ftx, queries) in readers {
            if c.is_cancelled() {
                return;
            }
            let spec = Some(spec.clone());
            crate::read::read_file(&p, bs, ftx, queries, pool.clone(), spec, c.clone());
        }
    });
    jobs
}

// ---- Stage 2: the dedup stage ----

struct SessionOutput {
    files: Vec<FileRecord>,
    chunks: u64,
    new_chunks: u64,
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

/// Files in input order, chunks in file order.
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
        xorb_first_bytes: o.xorb_first_bytes,
    };
    let mut session = Session::new(params, cache_index);
    let sealed = SealedSender {
        tx: xorb_tx,
        in_flight: Arc::new(Semaphore::new(o.max_xorbs_in_flight)),
        shared,
    };
    let mut out = SessionOutput {
        files: Vec::new(),
        chunks: 0,
        new_chunks: 0,
    };
    while let Some(job) = files.blocking_recv() {
        dedup_file(job, &mut session, &sealed, &mut out)?;
    }
    session.seal_open();
    sealed.flush(&mut session)?;
    Ok(out)
}

/// Deduplicate one file, batch by batch as its reader sends them; its record goes to
/// `out`.
fn dedup_file(
    mut job: FileJob,
    session: &mut Session,
    sealed: &SealedSender,
    out: &mut SessionOutput,
) -> Result<(), StageError> {
    let shared = sealed.shared;
    let mut f = FileDedup::new();
    loop {
        if shared.cancel.is_cancelled() {
            return Err(UploadError::Interrupted.into());
        }
        match job.rx.blocking_recv() {
            Some(FileMsg::Batch(batch)) => {
                let bytes = dedup_batch(batch, &mut f, session, shared)?;
                sealed.flush(session)?;
                shared.progress.processed(bytes);
            }
            Some(FileMsg::End { size, sha256 }) => {
                session.process(&mut f, true);
                sealed.flush(session)?;
                out.chunks += f.chunks.len() as u64;
                out.new_chunks += f.new_chunks;
                let rec = FileRecord::new(job.path.clone(), size, sha256, f)?;
                shared.progress.file_done(&rec.report());
                out.files.push(rec);
                return Ok(());
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

/// Decide the chunks of one batch, once the global dedup answers it waits for are in;
/// returns its bytes.
fn dedup_batch(
    batch: Batch,
    f: &mut FileDedup,
    session: &mut Session,
    shared: &Shared,
) -> Result<u64, StageError> {
    for rx in batch.answers {
        add_answer(rx, session, shared)?;
    }
    let mut bytes = 0u64;
    let mut prepared = batch.prepared.into_iter();
    for (i, (h, d)) in batch.chunks.into_iter().enumerate() {
        bytes += d.len() as u64;
        let block = batch.block.filter(|&(_, from)| i >= from).map(|(b, _)| b);
        session.push_prepared(f, h, d, prepared.next().flatten(), block);
    }
    let new_before = f.new_bytes;
    session.process(f, false);
    shared.speculation.observe(f.new_bytes - new_before, bytes);
    Ok(bytes)
}

/// Wait for a global dedup answer and let the session know the xorbs it names.
fn add_answer(mut rx: AnswerRx, session: &mut Session, shared: &Shared) -> Result<(), StageError> {
    if rx.borrow().is_none() {
        tracing::trace!("dedup stage waits for a global dedup answer");
    }
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
        None if shared.cancel.is_cancelled() => return Err(UploadError::Interrupted.into()),
        None => {}
    }
    Ok(())
}

/// Hands the session's sealed xorbs to the uploader, each with an in-flight permit.
struct SealedSender<'a> {
    tx: mpsc::Sender<XorbJob>,
    in_flight: Arc<Semaphore>,
    shared: &'a Shared,
}

impl SealedSender<'_> {
    fn flush(&self, session: &mut Session) -> Result<(), StageError> {
        let shared = self.shared;
        for sealed in session.take_sealed() {
            tracing::trace!(slot = sealed.slot, "xorb sealed");
            let permit = shared
                .handle
                .block_on(async {
                    tokio::select! {
                        p = self.in_flight.clone().acquire_owned() => Some(p.expect("never closed")),
                        _ = shared.cancel.cancelled() => None,
                    }
                })
                .ok_or(StageError::Failed(UploadError::Interrupted))?;
            self.tx
                .blocking_send(XorbJob {
                    sealed,
                    _permit: permit,
                })
                .map_err(|_| StageError::DownstreamClosed)?;
        }
        Ok(())
    }
}

// ---- Stage 3: the xorb uploader ----

/// A sealed xorb with its in-flight permit (held until the xorb is built and has an
/// upload slot).
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

/// Build and store xorbs: `max_xorbs_in_flight` being built or waiting for an upload
/// slot (the dedup stage takes their permits), as many being sent as the upload slots
/// allow.
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
        _permit: permit,
    } = job;
    let (tx, rx) = tokio::sync::oneshot::channel();
    if shared.cas.takes_xorb_pieces() {
        // Sent as pieces: stored chunks go out straight from where they were read.
        rayon::spawn(move || {
            let mut sink = crate::build::PiecesSink::default();
            let built = crate::build::build_xorb(&mut sealed, &mut sink).map(|h| {
                (
                    h,
                    XorbBody::Pieces(sink.finish()),
                    sealed.slot,
                    sealed.chunks,
                )
            });
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
                    XorbBody::Bytes(pool.to_bytes(body)),
                    sealed.slot,
                    sealed.chunks,
                )
            });
            let _ = tx.send(built);
        });
    }
    // The chunks' data was dropped with the rest of `sealed` once built: what the body
    // still needs (stored chunks sent as pieces) it holds itself.
    let (hash, body, slot, chunks) = rx
        .await
        .map_err(|_| UploadError::Internal("xorb build task failed".into()))??;
    let body_len = body.len();
    // The sealed xorb's permit goes back once it has a slot: the dedup stage seals the
    // next one while this one is sent.
    let sending = shared.uploads.acquire().await;
    drop(permit);
    tracing::trace!(slot, %hash, body_len, "xorb upload starts");
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
            Err(e) => {
                let e = xet_cas::error_chain(&e);
                tracing::debug!(%hash, "xorb_size failed, uploading again: {e}");
            }
        }
    }
    built.sent = true;
    if shared.opts.dry_run {
        return Ok(built);
    }
    shared.cas.put_xorb(&hash, body).await?;
    tracing::trace!(slot, %hash, "xorb stored");
    sending.stored(body_len);
    drop(sending);
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

// ---- Stage 4: the shards, once every xorb is stored ----

/// The shards registering `records` and the new `xorbs`, serialized (built off the
/// executor: a large upload has many terms).
async fn make_shards(
    records: Vec<FileRecord>,
    xorbs: Arc<Vec<BuiltXorb>>,
    max_bytes: u64,
) -> Result<Vec<(Shard, Vec<u8>)>> {
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
            let info = xet_shard::CasInfo::from_chunks(x.hash, &entries, 0)
                .map_err(|e| UploadError::Internal(format!("describing xorb {}: {e}", x.hash)))?;
            cas_infos.push(info);
        }
        let file_infos = records
            .iter()
            .map(|f| f.to_file_info(&resolve))
            .collect::<Result<Vec<_>>>()?;
        build_shards(file_infos, cas_infos, max_bytes)
    })
    .await
}

/// Send the shards (unless a dry run), each also written to the shard cache; returns
/// how many and their bytes.
async fn send_shards(
    shards: Vec<(Shard, Vec<u8>)>,
    shared: &Shared,
    user_cancel: &CancellationToken,
) -> Result<(usize, u64)> {
    let (mut sent, mut sent_bytes) = (0, 0);
    for (shard, bytes) in shards {
        if user_cancel.is_cancelled() {
            return Err(UploadError::Interrupted);
        }
        let len = bytes.len() as u64;
        if !shared.opts.dry_run {
            shared.cas.put_shard(Bytes::from(bytes)).await?;
            shared.progress.uploaded(len);
            if let Some(c) = &shared.cache {
                cache_shard(c.clone(), shard).await;
            }
        }
        sent += 1;
        sent_bytes += len;
    }
    Ok((sent, sent_bytes))
}

/// Write a sent shard to the shard cache in stored form; a failure only costs dedup
/// against it later.
async fn cache_shard(cache: Arc<LocalCache>, shard: Shard) {
    let saved = blocking(move || {
        let stored = shard
            .into_stored(xet_shard::StoredOptions::shard_cache(now_secs()))
            .and_then(|s| s.to_bytes())
            .map_err(|e| UploadError::Internal(format!("shard cache form: {e}")))?;
        cache.save_shard(&stored)
    })
    .await;
    if let Err(e) = saved {
        tracing::warn!("cannot cache the uploaded shard: {e}");
    }
}

/// Remove the journal lines of this upload's xorbs: the shard cache covers them now.
async fn tidy_journal(shared: &Shared, xorbs: &[BuiltXorb]) {
    let (Some(c), false) = (&shared.cache, shared.opts.dry_run) else {
        return;
    };
    let done: HashSet<MerkleHash> = xorbs.iter().map(|x| x.hash).collect();
    let c = c.clone();
    if let Err(e) = blocking(move || c.journal_forget(&done)).await {
        tracing::warn!("cannot tidy the resume journal: {e}");
    }
}

/// The totals that follow from the files' reports and the xorbs formed.
fn count_files_and_xorbs(
    totals: &mut Totals,
    files: &[FileReport],
    xorbs: &[BuiltXorb],
    global: Option<&GlobalDedup>,
) {
    totals.files = files.len();
    totals.bytes = files.iter().map(|f| f.size).sum();
    totals.new_bytes = files.iter().map(|f| f.new_bytes).sum();
    totals.deduped_bytes = totals.bytes - totals.new_bytes;
    totals.xorbs_new = xorbs.len();
    totals.xorbs_sent = xorbs.iter().filter(|x| x.sent).count();
    totals.xorbs_resumed = xorbs.iter().filter(|x| x.resumed).count();
    totals.xorb_bytes_sent = xorbs.iter().filter(|x| x.sent).map(|x| x.body_len).sum();
    if let Some(g) = global {
        totals.dedup_queries = g.queries.load(Ordering::Relaxed);
        totals.dedup_answers = g.answers.load(Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(sizes: &[u64]) -> Vec<Vec<u64>> {
        let mut files = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| (PathBuf::from(i.to_string()), s))
            .peekable();
        let mut out = Vec::new();
        while let Some(first) = files.next() {
            out.push(next_group(first, &mut files).iter().map(|f| f.1).collect());
        }
        out
    }

    #[test]
    fn small_files_are_grouped_by_count_and_bytes() {
        let big = SMALL_FILE + 1;
        assert_eq!(
            groups(&[big, 10, 20, big, 30]),
            vec![vec![big], vec![10, 20], vec![big], vec![30]]
        );
        // A large file never joins a group, even as its first file.
        assert_eq!(groups(&[big, big]), vec![vec![big], vec![big]]);
        let many = vec![1; GROUP_FILES + 1];
        assert_eq!(groups(&many), vec![vec![1; GROUP_FILES], vec![1]]);
        let heavy = vec![SMALL_FILE; (GROUP_BYTES / SMALL_FILE) as usize + 1];
        let per_group = (GROUP_BYTES / SMALL_FILE) as usize;
        assert_eq!(
            groups(&heavy),
            vec![vec![SMALL_FILE; per_group], vec![SMALL_FILE]]
        );
    }
}
