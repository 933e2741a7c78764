//! Chunk and hash a file as fast as the machine allows, without storing anything: `xet
//! hash`, `xet chunk`, and the check that a file re-read with `--rehash` still has the
//! content recorded at its last upload. One thread reads large blocks
//! into recycled buffers (no page faults or zeroing after the first few blocks); the
//! boundary scan of block N+1 (parallel segments) overlaps the parallel chunk hashing (and
//! sha256) of block N. Blocks are never copied together: a match window that straddles two
//! blocks is completed from the previous block's tail, and only the one chunk that spans a
//! block boundary is assembled.

use rayon::prelude::*;
use sha2::Digest;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::cut::{BlockCutter, Cut};
use crate::input::Snapshot;
use xet_hash::MerkleHash;

const BLOCK: usize = 16 << 20;
/// Read buffers in flight: one being read, one queued, one scanned, one hashed.
const BUFFERS: usize = 4;
/// Granularity of the parallel match scan.
const SEGMENT: usize = 1 << 20;

pub struct Scanned {
    pub size: u64,
    /// (chunk hash, chunk length) in file order.
    pub chunks: Vec<(MerkleHash, u64)>,
    pub sha256: Option<[u8; 32]>,
}

impl Scanned {
    pub fn file_hash(&self) -> MerkleHash {
        xet_hash::file_hash(&self.chunks)
    }
}

/// Absolute offsets of every gear-hash match in `block` (whose first byte is at `base`),
/// scanned in parallel segments; `tail` holds the bytes just before the block.
fn matches(tail: &[u8], block: &[u8], base: u64) -> Vec<u64> {
    let segs: Vec<(usize, usize)> = (0..block.len())
        .step_by(SEGMENT)
        .map(|s| (s, (s + SEGMENT).min(block.len())))
        .collect();
    let found: Vec<Vec<usize>> = segs
        .par_iter()
        .map(|&(s, e)| xet_chunk::find_matches_after(tail, block, s..e))
        .collect();
    found
        .into_iter()
        .flatten()
        .map(|p| p as u64 + base)
        .collect()
}

/// The chunks decided in one block, hashed while the next block is scanned.
struct HashJob<B> {
    block: B,
    /// The chunk that began in earlier blocks and ends in this one, assembled.
    spanning: Option<Vec<u8>>,
    /// Chunks lying wholly inside `block`, as ranges of it.
    inside: Vec<std::ops::Range<usize>>,
}

impl<B: AsRef<[u8]> + Sync> HashJob<B> {
    fn run(&self, sha: Option<&mut sha2::Sha256>) -> Vec<(MerkleHash, u64)> {
        let block = self.block.as_ref();
        let hash_all = || {
            let mut out = Vec::with_capacity(self.inside.len() + 1);
            if let Some(c) = &self.spanning {
                out.push((xet_hash::chunk_hash(c), c.len() as u64));
            }
            let inside: Vec<(MerkleHash, u64)> = self
                .inside
                .par_iter()
                .map(|r| (xet_hash::chunk_hash(&block[r.clone()]), r.len() as u64))
                .collect();
            out.extend(inside);
            out
        };
        match sha {
            Some(sha) => rayon::join(|| sha.update(block), hash_all).1,
            None => hash_all(),
        }
    }
}

/// Reads `file` in `block_size` blocks into buffers recycled through `free`.
fn read_blocks<R: Read>(
    mut file: R,
    block_size: usize,
    free: Receiver<Vec<u8>>,
    out: SyncSender<std::io::Result<Vec<u8>>>,
) {
    for mut buf in free.iter() {
        buf.resize(block_size, 0);
        let mut n = 0;
        let res = loop {
            match file.read(&mut buf[n..]) {
                Ok(0) => break Ok(()),
                Ok(k) => {
                    n += k;
                    if n == block_size {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = res {
            let _ = out.send(Err(e));
            return;
        }
        if n == 0 {
            return;
        }
        buf.truncate(n);
        if out.send(Ok(buf)).is_err() {
            return;
        }
    }
}

/// Chunk and hash the file at `path`, read in blocks (never mapped: see the crate docs).
/// A file that changed while it was read is an error ([`crate::InputChanged`]): what
/// was read may mix two versions of it.
pub fn scan_file(path: &Path, want_sha256: bool) -> std::io::Result<Scanned> {
    scan_file_observed(path, want_sha256, &mut |_| true)
}

/// [`scan_file`] that reports each block's length to `observe` once it is hashed; when
/// `observe` returns false the scan stops with an [`std::io::ErrorKind::Interrupted`]
/// error (a cancelled upload does not wait for a large file to be read to the end).
pub fn scan_file_observed(
    path: &Path,
    want_sha256: bool,
    observe: &mut (dyn FnMut(u64) -> bool + Send),
) -> std::io::Result<Scanned> {
    let file = Arc::new(std::fs::File::open(path)?);
    let snapshot = Snapshot::of(&file)?;
    let scanned = scan_reader_observed(SharedFile(Arc::clone(&file)), BLOCK, want_sha256, observe)?;
    snapshot.check(&file)?;
    Ok(scanned)
}

/// A file read through an `Arc`, so the scan's reader thread can own it while the caller
/// keeps it to check it afterwards.
struct SharedFile(Arc<std::fs::File>);

impl Read for SharedFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self.0).read(buf)
    }
}

/// Chunk and hash everything `file` yields, reading `block`-byte blocks.
pub fn scan_reader<R: Read + Send + 'static>(
    file: R,
    block: usize,
    want_sha256: bool,
) -> std::io::Result<Scanned> {
    scan_reader_observed(file, block, want_sha256, &mut |_| true)
}

fn scan_reader_observed<R: Read + Send + 'static>(
    file: R,
    block: usize,
    want_sha256: bool,
    observe: &mut (dyn FnMut(u64) -> bool + Send),
) -> std::io::Result<Scanned> {
    let block_size = block.max(1);
    let (free_tx, free_rx) = sync_channel::<Vec<u8>>(BUFFERS);
    for _ in 0..BUFFERS {
        free_tx.send(Vec::new()).expect("receiver alive");
    }
    let (tx, rx) = sync_channel::<std::io::Result<Vec<u8>>>(1);
    let reader = std::thread::spawn(move || read_blocks(file, block_size, free_rx, tx));
    let res = scan_blocks(rx.iter(), want_sha256, |b| {
        let go_on = observe(b.len() as u64);
        let _ = free_tx.try_send(b);
        go_on
    });
    drop(free_tx);
    drop(rx);
    let _ = reader.join();
    res
}

/// The scan itself, over the input's consecutive blocks; `recycle` gets each block back
/// once it has been hashed, and returns false to stop the scan (an `Interrupted` error).
fn scan_blocks<B: AsRef<[u8]> + Send + Sync>(
    blocks: impl Iterator<Item = std::io::Result<B>>,
    want_sha256: bool,
    mut recycle: impl FnMut(B) -> bool + Send,
) -> std::io::Result<Scanned> {
    let stopped = || std::io::Error::new(std::io::ErrorKind::Interrupted, "scan stopped");
    let mut sha = want_sha256.then(sha2::Sha256::new);
    let mut cutter = BlockCutter::new();
    let mut chunks = Vec::new();
    let mut prev: Option<HashJob<B>> = None;
    for block in blocks {
        let block = block?;
        let bytes = block.as_ref();
        // The previous block is handed back (to the reader, for the next read) on the
        // hashing side, so the serial stretch between blocks stays short.
        let (hashed, found) = rayon::join(
            || {
                prev.take().map(|job| {
                    let h = job.run(sha.as_mut());
                    (h, recycle(job.block))
                })
            },
            || matches(cutter.tail(), bytes, cutter.seen()),
        );
        if let Some((h, go_on)) = hashed {
            if !go_on {
                return Err(stopped());
            }
            chunks.extend(h);
        }

        let Cut { spanning, inside } = cutter.cut(bytes, found);
        prev = Some(HashJob {
            block,
            spanning,
            inside,
        });
    }
    if let Some(job) = prev.take() {
        chunks.extend(job.run(sha.as_mut()));
        if !recycle(job.block) {
            return Err(stopped());
        }
    }
    let size = cutter.seen();
    for c in cutter.finish() {
        chunks.push((xet_hash::chunk_hash(&c), c.len() as u64));
    }
    Ok(Scanned {
        size,
        chunks,
        sha256: sha.map(|h| h.finalize().into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one_shot(data: &[u8]) -> Vec<(MerkleHash, u64)> {
        xet_chunk::chunk_data(data)
            .iter()
            .map(|c| (c.hash, c.len as u64))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        // Streaming with any block size equals one-shot chunking: guards the carry of the
        // open chunk across blocks, which must not be fed to the chunker twice.
        #[test]
        fn streaming_scan_equals_one_shot(seed in any::<u64>(), len in 0usize..1_500_000, block in 1usize..400_000) {
            let data = xet_testdata::generate(xet_testdata::Kind::Random, len, seed);
            let s = scan_reader(std::io::Cursor::new(data.clone()), block, true).unwrap();
            prop_assert_eq!(s.size, len as u64);
            prop_assert_eq!(&s.chunks, &one_shot(&data));
            let want: [u8; 32] = sha2::Sha256::digest(&data).into();
            prop_assert_eq!(s.sha256, Some(want));
        }
    }

    #[test]
    fn zeros_across_blocks_hit_max_size_exactly() {
        // Zeros never match the mask: every chunk is forced at 128 KiB, the case the carry bug broke.
        let data = vec![0u8; 1 << 20];
        for block in [1000, 65_536, 131_071, 131_073, 300_000] {
            let s = scan_reader(std::io::Cursor::new(data.clone()), block, false).unwrap();
            assert_eq!(s.chunks, one_shot(&data), "block {block}");
        }
    }

    #[test]
    fn file_scan_equals_one_shot_across_block_boundaries() {
        // Over 16 MiB so the scan crosses a block boundary; the sha256 rides along.
        let data = xet_testdata::generate(xet_testdata::Kind::Random, BLOCK + 3_000_000, 7);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, &data).unwrap();
        let s = scan_file(&p, true).unwrap();
        assert_eq!(s.size, data.len() as u64);
        assert_eq!(s.chunks, one_shot(&data));
        let want: [u8; 32] = sha2::Sha256::digest(&data).into();
        assert_eq!(s.sha256, Some(want));
    }

    /// A file truncated while it is scanned (`xet hash`, `--rehash`) is an error saying
    /// it changed, not a crash (it used to be mapped: the next access faulted).
    #[test]
    fn a_file_truncated_while_it_is_scanned_is_an_error() {
        let data = xet_testdata::generate(xet_testdata::Kind::Random, 4 * BLOCK, 8);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, &data).unwrap();
        let mut first = true;
        let res = scan_file_observed(&p, true, &mut |_| {
            if std::mem::take(&mut first) {
                let f = std::fs::File::options().write(true).open(&p).unwrap();
                f.set_len(BLOCK as u64 / 2).unwrap();
            }
            true
        });
        let e = res.err().expect("the truncated file is refused");
        let changed = e
            .get_ref()
            .and_then(|c| c.downcast_ref::<crate::InputChanged>());
        assert!(changed.is_some(), "{e:?}");
        assert!(e.to_string().contains("changed"), "{e}");
    }

    #[test]
    fn golden_file_hashes() {
        for (c, g) in xet_testdata::golden_files() {
            let s = scan_reader(std::io::Cursor::new(c.bytes()), 1 << 20, false).unwrap();
            assert_eq!(s.file_hash().to_string(), g.hash, "{}", g.name);
        }
    }
}
