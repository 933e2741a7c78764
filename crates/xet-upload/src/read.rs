//! Stage 1, one per file: read in large blocks, chunk, hash chunks and sha256 on the
//! rayon pool, start global dedup queries, and hand batches to the dedup stage.
//!
//! Runs on a blocking thread (`spawn_blocking`) with a scoped reader thread, so the
//! next block is read while the current one is chunked and hashed. Files are read into
//! buffers of our own, never mapped, and checked for changes once read (see
//! [`crate::input`]).

use std::io::Read;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;

use bytes::Bytes;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use xet_hash::MerkleHash;

use crate::cut::BlockCutter;
use crate::dedup::BlockId;
use crate::error::UploadError;
use crate::global::{AnswerRx, FileQueries};
use crate::input::{Input, Snapshot};
use crate::pool::BufPool;
use crate::prepare::{Prepared, Speculation};

/// Chunks of one block, in file order.
pub(crate) struct Batch {
    pub chunks: Vec<(MerkleHash, Bytes)>,
    /// Chunks compressed here already, by index (see [`Speculation`]); may be shorter
    /// than `chunks`.
    pub prepared: Vec<Option<Prepared>>,
    /// Global dedup answers to wait for before deciding these chunks.
    pub answers: Vec<AnswerRx>,
    /// The read block that `chunks[from..]` are slices of, as `(block, from)`; the
    /// chunks before (one that began in the previous block) own their bytes.
    pub block: Option<(BlockId, usize)>,
}

/// Ids of read blocks (see [`BlockId`]).
static NEXT_BLOCK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) enum FileMsg {
    Batch(Batch),
    End { size: u64, sha256: [u8; 32] },
    Failed(UploadError),
}

/// Blocks alive per file at most: being read, queued to the chunker, being chunked,
/// queued to or in the sha256 thread, being hashed, queued to the dedup stage, being
/// deduplicated.
pub(crate) const BLOCKS_PER_FILE: u64 = 7;

/// Read, chunk and hash `input`, sending batches to `tx`. Returns when the file is done,
/// failed (a `Failed` message was sent) or the receiver is gone.
pub(crate) fn read_file(
    input: &Input,
    block_size: usize,
    tx: mpsc::Sender<FileMsg>,
    global: Option<FileQueries>,
    pool: BufPool,
    speculation: Option<Arc<Speculation>>,
    cancel: CancellationToken,
) {
    let spec = speculation.as_deref();
    if let Err(e) = read_file_inner(input, block_size, &tx, global.as_ref(), pool, spec, &cancel) {
        let _ = tx.blocking_send(FileMsg::Failed(e));
    }
}

fn read_file_inner(
    input: &Input,
    block_size: usize,
    tx: &mpsc::Sender<FileMsg>,
    global: Option<&FileQueries>,
    pool: BufPool,
    speculation: Option<&Speculation>,
    cancel: &CancellationToken,
) -> Result<(), UploadError> {
    let path = input.name();
    let Opened { file, len, blocks } = open_blocks(input, block_size, pool)?;
    // A file of one block has no blocks to overlap: it is read, sha256-hashed and chunked
    // on this thread. Starting the two threads below for it cost more than the work for
    // small files (40,000 thread starts for 20,000 of them).
    let one_block = len <= block_size as u64;
    std::thread::scope(|s| {
        // Otherwise three overlapped steps per block: read (thread), sha256 (thread),
        // chunk boundaries (here) and chunk hashes (rayon, while the next block is
        // scanned).
        let blocks: Box<dyn Iterator<Item = std::io::Result<Bytes>>> = if one_block {
            blocks
        } else {
            let (btx, brx) = std_mpsc::sync_channel::<std::io::Result<Bytes>>(1);
            s.spawn(move || {
                for b in blocks {
                    if btx.send(b).is_err() {
                        return;
                    }
                }
            });
            Box::new(brx.into_iter())
        };
        let mut sha = if one_block {
            ShaJob::Here(Sha256::new())
        } else {
            let (stx, srx) = std_mpsc::sync_channel::<Bytes>(1);
            let handle = s.spawn(move || {
                let mut sha = Sha256::new();
                for b in srx {
                    sha.update(&b);
                }
                <[u8; 32]>::from(sha.finalize())
            });
            ShaJob::Thread(stx, handle)
        };

        // Boundaries from every gear-hash match of each block (the multi-lane scan, faster
        // than stopping at each boundary) resolved in order; chunks inside a block are
        // slices of it, not copies.
        let mut cutter = BlockCutter::new();
        let mut index = 0u64;
        // Chunk hashes of the previous block, being computed on rayon, and the block.
        let mut in_flight: Option<(HashJob, Option<(BlockId, usize)>)> = None;
        for block in blocks {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let block = block.map_err(|e| UploadError::input(path, e))?;
            sha.feed(&block)?;
            let base = cutter.seen();
            let found = xet_chunk::find_matches_after(cutter.tail(), &block, 0..block.len());
            let cut = cutter.cut(&block, found.into_iter().map(|m| base + m as u64));
            let mut datas = Vec::with_capacity(cut.inside.len() + 1);
            datas.extend(cut.spanning.map(owned));
            let id = BlockId(NEXT_BLOCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            let slices = (!cut.inside.is_empty()).then_some((id, datas.len()));
            datas.extend(cut.inside.into_iter().map(|r| block.slice(r)));
            drop(block);
            let job = HashJob::start(datas, speculation.and_then(Speculation::wanted));
            if let Some((prev, slices)) = in_flight.replace((job, slices))
                && !send_batch(tx, global, &mut index, prev.wait(), slices)
            {
                return Ok(());
            }
        }
        if let Some((prev, slices)) = in_flight.take()
            && !send_batch(tx, global, &mut index, prev.wait(), slices)
        {
            return Ok(());
        }
        // What the blocks could not decide without knowing where the input ends.
        let size = cutter.seen();
        let last = cutter
            .finish()
            .into_iter()
            .map(|c| (xet_hash::chunk_hash(&c), owned(c)))
            .collect();
        if !send_batch(tx, global, &mut index, (last, Vec::new()), None) {
            return Ok(());
        }
        let sha256 = sha.finish()?;
        // What was read is one version of the file only if nobody wrote to it meanwhile;
        // a file that changed is refused here, before its End, so no shard registers it.
        if let Some((file, snapshot)) = &file {
            snapshot
                .check(file)
                .map_err(|e| UploadError::input(path, e))?;
        }
        let _ = tx.blocking_send(FileMsg::End { size, sha256 });
        Ok(())
    })
}

/// A chunk assembled in a buffer of its own, cut to its length: it is kept as it is if
/// new (see [`BlockId`]), and its buffer has room for the largest chunk.
fn owned(mut chunk: Vec<u8>) -> Bytes {
    chunk.shrink_to_fit();
    Bytes::from(chunk)
}

/// An input opened for reading in blocks.
struct Opened {
    /// The file, with its size and modification time when opened, to be checked once it
    /// has been read; `None` for bytes in memory, which nobody else can change.
    file: Option<(Arc<std::fs::File>, Snapshot)>,
    /// The size when opened: it decides how the input is read, but the size reported is
    /// what was read.
    len: u64,
    blocks: Box<dyn Iterator<Item = std::io::Result<Bytes>> + Send>,
}

/// Open `input` and its blocks: a file's read into buffers of `pool`, bytes in memory
/// sliced (no copy).
fn open_blocks(input: &Input, block_size: usize, pool: BufPool) -> Result<Opened, UploadError> {
    let path = match input {
        Input::File(path) => path,
        Input::Bytes { data, .. } => {
            let data = data.clone();
            let len = data.len();
            let blocks = (0..len)
                .step_by(block_size.max(1))
                .map(move |at| Ok(data.slice(at..(at + block_size).min(len))));
            return Ok(Opened {
                file: None,
                len: len as u64,
                blocks: Box::new(blocks),
            });
        }
    };
    let input = |e| UploadError::input(path, e);
    let file = Arc::new(std::fs::File::open(path).map_err(input)?);
    let snapshot = Snapshot::of(&file).map_err(input)?;
    let blocks = ReadBlocks {
        file: Arc::clone(&file),
        size_hint: snapshot.len,
        block_size,
        pool,
        read: 0,
        done: false,
    };
    Ok(Opened {
        file: Some((file, snapshot)),
        len: snapshot.len,
        blocks: Box::new(blocks),
    })
}

/// Chunk hashes of one block computed on the rayon pool, or here for a small one; and,
/// if asked, each chunk prepared for its xorb (see [`Speculation`]).
enum HashJob {
    Done(Hashed),
    Pending(std_mpsc::Receiver<Hashed>),
}

/// `(hash, data)` of each chunk, and what was prepared of them (empty if nothing).
type Hashed = (Vec<(MerkleHash, Bytes)>, Vec<Option<Prepared>>);

/// Below this many bytes a block's chunks are hashed on the reader's thread: waking a
/// pool thread and waiting for its answer costs more than hashing them (a few hundred
/// microseconds of blake3; most of a small file's upload time was such hand-offs).
const HASH_HERE_BELOW: usize = 256 << 10;

impl HashJob {
    /// `prepare`: `Some(want_crc)` to compress each chunk right after hashing it.
    fn start(datas: Vec<Bytes>, prepare: Option<bool>) -> HashJob {
        if datas.iter().map(Bytes::len).sum::<usize>() < HASH_HERE_BELOW {
            let hashed = datas
                .into_iter()
                .map(|d| (xet_hash::chunk_hash(&d), d))
                .collect();
            return HashJob::Done((hashed, Vec::new()));
        }
        let (tx, rx) = std_mpsc::sync_channel(1);
        rayon::spawn(move || {
            let done: Vec<(MerkleHash, Option<Prepared>)> = datas
                .par_iter()
                .map_init(
                    || (Vec::new(), Vec::new()),
                    |(out, scratch), d| {
                        let h = xet_hash::chunk_hash(d);
                        let p = prepare.map(|crc| crate::prepare::prepare(d, crc, out, scratch));
                        (h, p)
                    },
                )
                .collect();
            let (hashes, prepared): (Vec<_>, Vec<_>) = done.into_iter().unzip();
            let prepared = if prepare.is_some() {
                prepared
            } else {
                Vec::new()
            };
            let _ = tx.send((hashes.into_iter().zip(datas).collect(), prepared));
        });
        HashJob::Pending(rx)
    }

    fn wait(self) -> Hashed {
        match self {
            HashJob::Done(v) => v,
            // The job always sends unless it panicked, which rayon turns into an abort.
            HashJob::Pending(rx) => rx.recv().unwrap_or_default(),
        }
    }
}

fn send_batch(
    tx: &mpsc::Sender<FileMsg>,
    global: Option<&FileQueries>,
    index: &mut u64,
    (chunks, prepared): Hashed,
    block: Option<(BlockId, usize)>,
) -> bool {
    if chunks.is_empty() {
        return true;
    }
    let mut answers = Vec::new();
    for (h, _) in &chunks {
        if let Some(rx) = global.and_then(|g| g.maybe_query(h, *index)) {
            answers.push(rx);
        }
        *index += 1;
    }
    tx.blocking_send(FileMsg::Batch(Batch {
        chunks,
        prepared,
        answers,
        block,
    }))
    .is_ok()
}

/// sha256 of the file, on this thread or on its own (fed block by block, straight from
/// the read buffers: loading each piece's cache lines first, which sped up hashing
/// mapped inputs, cost 0.09-0.1 s more CPU per GiB on read buffers and saved no time).
enum ShaJob<'s> {
    Here(Sha256),
    Thread(
        std_mpsc::SyncSender<Bytes>,
        std::thread::ScopedJoinHandle<'s, [u8; 32]>,
    ),
}

impl ShaJob<'_> {
    fn feed(&mut self, block: &Bytes) -> Result<(), UploadError> {
        match self {
            ShaJob::Here(sha) => sha.update(block),
            ShaJob::Thread(tx, _) => {
                if tx.send(block.clone()).is_err() {
                    return Err(UploadError::Internal("sha256 thread stopped".into()));
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<[u8; 32], UploadError> {
        match self {
            ShaJob::Here(sha) => Ok(sha.finalize().into()),
            ShaJob::Thread(tx, handle) => {
                drop(tx);
                handle
                    .join()
                    .map_err(|_| UploadError::Internal("sha256 thread panicked".into()))
            }
        }
    }
}

/// The blocks of a file read with `read(2)`, in blocks of `block_size` (smaller for a
/// small file) until EOF.
struct ReadBlocks {
    file: Arc<std::fs::File>,
    size_hint: u64,
    block_size: usize,
    pool: BufPool,
    read: u64,
    done: bool,
}

impl Iterator for ReadBlocks {
    type Item = std::io::Result<Bytes>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let remaining = self.size_hint.saturating_sub(self.read);
        // The size may change while reading: never allocate less than 64 KiB once the
        // expected size is reached, so a growing file still makes progress.
        let want = (remaining.max(64 << 10) as usize).min(self.block_size);
        let mut buf = self.pool.get(want);
        match (&*self.file).take(want as u64).read_to_end(&mut buf) {
            Ok(0) => {
                self.pool.put(buf);
                self.done = true;
                None
            }
            Ok(n) => {
                self.read += n as u64;
                Some(Ok(self.pool.to_bytes(buf)))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_match_one_shot_chunking_for_any_block_size() {
        // One block and several.
        let sizes = [64 << 10, 100_000, 1 << 20, 8 << 20];
        for len in [1_000_003, (3 << 20) + 17] {
            one_shot_vs_blocks(xet_testdata::Kind::Random, len, &sizes).await;
        }
        // Blocks shorter than a gear-hash window (matches completed across several blocks'
        // tails), chunks spanning many blocks, forced cuts at the maximum (zeros), and the
        // empty file.
        let small = [37, 63, 64, 65, 4097];
        one_shot_vs_blocks(xet_testdata::Kind::Random, 300_001, &small).await;
        one_shot_vs_blocks(xet_testdata::Kind::Zeros, 300_001, &small[1..]).await;
        one_shot_vs_blocks(xet_testdata::Kind::Random, 0, &small).await;
    }

    /// A file that grows while it is read is refused with an input error (its bytes may
    /// not be one version of the file), not uploaded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_changed_while_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let len = 4 << 20;
        let path = d.path().join("f");
        std::fs::write(
            &path,
            xet_testdata::generate(xet_testdata::Kind::Random, len, 9),
        )
        .unwrap();
        let (tx, mut rx) = mpsc::channel(1);
        let p = Input::File(path.clone());
        let h = tokio::task::spawn_blocking(move || {
            read_file(
                &p,
                64 << 10,
                tx,
                None,
                BufPool::new(64 << 10, 4),
                None,
                CancellationToken::new(),
            )
        });
        // The file was opened before the first batch is sent.
        assert!(matches!(rx.recv().await, Some(FileMsg::Batch(_))));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"more").unwrap();
        drop(f);
        let mut failed = None;
        while let Some(m) = rx.recv().await {
            match m {
                FileMsg::Batch(_) => {}
                FileMsg::End { .. } => {
                    panic!("a file that changed was read to the end as if whole")
                }
                FileMsg::Failed(e) => failed = Some(e),
            }
        }
        h.await.unwrap();
        let e = failed.expect("an error for the changed file");
        assert!(matches!(e, UploadError::Input { .. }), "{e:?}");
        assert!(e.to_string().contains("changed during upload"), "{e}");
    }

    /// A new chunk is kept as it is (see [`BlockId`]), so it must not sit in a larger
    /// buffer of its own: not the last chunk of a 100-byte file (in a buffer with room
    /// for the largest chunk), nor a chunk assembled across two blocks.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_in_buffers_of_their_own_hold_only_their_bytes() {
        let d = tempfile::tempdir().unwrap();
        for len in [100, 20_000, 300_001] {
            let path = d.path().join(format!("f{len}"));
            let data = xet_testdata::generate(xet_testdata::Kind::Random, len, 4);
            std::fs::write(&path, &data).unwrap();
            let (tx, mut rx) = mpsc::channel(2);
            let h = tokio::task::spawn_blocking(move || {
                let pool = BufPool::new(64 << 10, 4);
                read_file(
                    &Input::File(path),
                    64 << 10,
                    tx,
                    None,
                    pool,
                    None,
                    CancellationToken::new(),
                )
            });
            let mut chunks = 0;
            while let Some(m) = rx.recv().await {
                if let FileMsg::Batch(b) = m {
                    for (_, c) in b.chunks {
                        let n = c.len();
                        // The allocation itself when nothing else shares it.
                        assert_eq!(Vec::from(c).capacity(), n, "file of {len} bytes");
                        chunks += 1;
                    }
                }
            }
            h.await.unwrap();
            assert_eq!(chunks, xet_chunk::chunk_data(&data).len());
        }
    }

    async fn one_shot_vs_blocks(kind: xet_testdata::Kind, len: usize, block_sizes: &[usize]) {
        let d = tempfile::tempdir().unwrap();
        let data = xet_testdata::generate(kind, len, 5);
        let path = d.path().join("f");
        std::fs::write(&path, &data).unwrap();
        let want = xet_chunk::chunk_data(&data);
        // Without, and with chunks prepared for their xorbs as they are hashed (with and
        // without their CRCs).
        let specs = [None, Some(false), Some(true)];
        // The file, and the same bytes held in memory: the same chunks, hashes and sha256.
        let inputs = [
            Input::File(path.clone()),
            Input::Bytes {
                name: "f".into(),
                data: Bytes::from(data.clone()),
            },
        ];
        for (input, (&bs, spec)) in inputs.iter().flat_map(|i| {
            block_sizes
                .iter()
                .flat_map(|b| specs.iter().map(move |s| (b, s)))
                .map(move |c| (i, c))
        }) {
            let (tx, mut rx) = mpsc::channel(2);
            let p = input.clone();
            let speculation = spec.map(|crc| Arc::new(Speculation::new(crc)));
            let h = tokio::task::spawn_blocking(move || {
                read_file(
                    &p,
                    bs,
                    tx,
                    None,
                    BufPool::new(bs, 4),
                    speculation,
                    CancellationToken::new(),
                )
            });
            let mut got = Vec::new();
            let mut prepared = Vec::new();
            let mut end = None;
            while let Some(m) = rx.recv().await {
                match m {
                    FileMsg::Batch(mut b) => {
                        assert!(b.prepared.len() <= b.chunks.len());
                        if spec.is_none() {
                            assert!(b.prepared.is_empty());
                        }
                        b.prepared.resize_with(b.chunks.len(), || None);
                        got.extend(b.chunks);
                        prepared.extend(b.prepared);
                    }
                    FileMsg::End { size, sha256 } => end = Some((size, sha256)),
                    FileMsg::Failed(e) => panic!("{e}"),
                }
            }
            h.await.unwrap();
            assert_eq!(got.len(), want.len(), "length {len}, block size {bs}");
            let (mut out, mut scratch) = (Vec::new(), Vec::new());
            for ((g, w), p) in got.iter().zip(&want).zip(&prepared) {
                assert_eq!(g.0, w.hash);
                assert_eq!(&g.1[..], &data[w.range()]);
                if let (Some(p), Some(crc)) = (p, spec) {
                    let direct = crate::prepare::prepare(&g.1, *crc, &mut out, &mut scratch);
                    assert_eq!(*p, direct, "length {len}, block size {bs}");
                }
            }
            if spec.is_some() && bs >= HASH_HERE_BELOW && len > 2 * bs {
                // Blocks hashed on the pool are prepared there.
                assert!(prepared.iter().any(Option::is_some), "block size {bs}");
            }
            let (size, sha) = end.unwrap();
            assert_eq!(size, data.len() as u64);
            assert_eq!(sha, <[u8; 32]>::from(Sha256::digest(&data)));
        }
    }
}
