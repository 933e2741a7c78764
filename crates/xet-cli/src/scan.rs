//! Chunk and hash a file as fast as the machine allows: one thread reads large blocks,
//! boundary scanning of block N+1 overlaps the (parallel) chunk hashing of block N, and
//! sha256 runs on its own thread when asked for.

use rayon::prelude::*;
use sha2::Digest;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::sync_channel;
use xet_chunk::Chunker;
use xet_hash::MerkleHash;

const BLOCK: usize = 16 << 20;

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

/// End offsets (within `buf`) of the chunks that close in `buf[from..]`. `buf[..from]` is
/// the open chunk's start, which `chunker` has already consumed and must not see again.
fn boundaries(chunker: &mut Chunker, buf: &[u8], from: usize, out: &mut Vec<usize>) {
    let mut pos = from;
    while let Some(n) = chunker.next_boundary(&buf[pos..]) {
        pos += n;
        out.push(pos);
    }
}

fn hash_ranges(buf: &[u8], ends: &[usize]) -> Vec<(MerkleHash, u64)> {
    let starts = std::iter::once(0).chain(ends.iter().copied());
    let ranges: Vec<(usize, usize)> = starts.zip(ends.iter().copied()).collect();
    ranges
        .par_iter()
        .map(|&(s, e)| (xet_hash::chunk_hash(&buf[s..e]), (e - s) as u64))
        .collect()
}

pub fn scan_file(path: &Path, want_sha256: bool) -> std::io::Result<Scanned> {
    scan_reader(std::fs::File::open(path)?, BLOCK, want_sha256)
}

/// Chunk and hash everything `file` yields, reading `block`-byte blocks.
pub fn scan_reader<R: Read + Send + 'static>(
    mut file: R,
    block: usize,
    want_sha256: bool,
) -> std::io::Result<Scanned> {
    const { assert!(BLOCK > 0) };
    let block_size = block.max(1);
    let (tx, rx) = sync_channel::<std::io::Result<Arc<Vec<u8>>>>(2);
    let reader = std::thread::spawn(move || {
        loop {
            let mut block = vec![0u8; block_size];
            let mut n = 0;
            let res = loop {
                match file.read(&mut block[n..]) {
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
                let _ = tx.send(Err(e));
                return;
            }
            if n == 0 {
                return;
            }
            block.truncate(n);
            if tx.send(Ok(Arc::new(block))).is_err() {
                return;
            }
        }
    });

    let (sha_tx, sha_handle) = if want_sha256 {
        let (stx, srx) = sync_channel::<Arc<Vec<u8>>>(2);
        let h = std::thread::spawn(move || {
            let mut hasher = sha2::Sha256::new();
            for b in srx {
                hasher.update(&b[..]);
            }
            <[u8; 32]>::from(hasher.finalize())
        });
        (Some(stx), Some(h))
    } else {
        (None, None)
    };

    let mut chunker = Chunker::new();
    let mut chunks = Vec::new();
    let mut size = 0u64;
    // `cur` holds the open chunk's bytes followed by the newest block.
    let mut prev: Option<(Vec<u8>, Vec<usize>)> = None;
    let mut carry: Vec<u8> = Vec::new();
    let mut read_err = None;
    for block in rx.iter() {
        let block = match block {
            Ok(b) => b,
            Err(e) => {
                read_err = Some(e);
                break;
            }
        };
        size += block.len() as u64;
        if let Some(tx) = &sha_tx {
            let _ = tx.send(block.clone());
        }
        let mut cur = std::mem::take(&mut carry);
        let from = cur.len();
        cur.extend_from_slice(&block);
        // Hash the previous buffer's chunks while scanning this one.
        let mut ends = Vec::with_capacity(cur.len() / xet_chunk::TARGET_CHUNK_SIZE + 2);
        let (hashed, ()) = rayon::join(
            || prev.as_ref().map(|(b, e)| hash_ranges(b, e)),
            || boundaries(&mut chunker, &cur, from, &mut ends),
        );
        if let Some(h) = hashed {
            chunks.extend(h);
        }
        let done = ends.last().copied().unwrap_or(0);
        carry = Vec::with_capacity(xet_chunk::MAX_CHUNK_SIZE + block_size);
        carry.extend_from_slice(&cur[done..]);
        cur.truncate(done);
        prev = Some((cur, ends));
    }
    drop(sha_tx);
    let _ = reader.join();
    if let Some(e) = read_err {
        return Err(e);
    }
    if let Some((b, e)) = prev {
        chunks.extend(hash_ranges(&b, &e));
    }
    if chunker.finish().is_some() {
        chunks.push((xet_hash::chunk_hash(&carry), carry.len() as u64));
    }
    let sha256 = sha_handle.map(|h| h.join().expect("sha256 thread"));
    Ok(Scanned {
        size,
        chunks,
        sha256,
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
    fn golden_file_hashes() {
        for (c, g) in xet_testdata::golden_files() {
            let s = scan_reader(std::io::Cursor::new(c.bytes()), 1 << 20, false).unwrap();
            assert_eq!(s.file_hash().to_string(), g.hash, "{}", g.name);
        }
    }
}
