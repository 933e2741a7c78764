//! Chunk and hash a file as fast as the machine allows: one thread reads large blocks,
//! boundary scanning of block N+1 overlaps the (parallel) chunk hashing of block N, and
//! sha256 runs on its own thread when asked for.

use rayon::prelude::*;
use sha2::Digest;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::sync_channel;
use xet_chunk::MatchResolver;
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

/// Absolute offsets of every gear-hash match in `buf[from..]`, scanned in parallel
/// segments (each segment's window reaches back into the bytes before it).
fn matches(buf: &[u8], base: u64, from: usize) -> Vec<u64> {
    const SEGMENT: usize = 1 << 20;
    let segs: Vec<(usize, usize)> = (from..buf.len())
        .step_by(SEGMENT)
        .map(|s| (s, (s + SEGMENT).min(buf.len())))
        .collect();
    let found: Vec<Vec<usize>> = segs
        .par_iter()
        .map(|&(s, e)| xet_chunk::find_matches(buf, s..e))
        .collect();
    found
        .into_iter()
        .flatten()
        .map(|p| p as u64 + base)
        .collect()
}

/// Hash the chunks `[starts[i], ends[i])` (absolute) that lie in `buf` (whose first byte is
/// at absolute offset `base`).
fn hash_chunks(buf: &[u8], base: u64, first_start: u64, ends: &[u64]) -> Vec<(MerkleHash, u64)> {
    let starts = std::iter::once(first_start).chain(ends.iter().copied());
    let ranges: Vec<(u64, u64)> = starts.zip(ends.iter().copied()).collect();
    ranges
        .par_iter()
        .map(|&(s, e)| {
            (
                xet_hash::chunk_hash(&buf[(s - base) as usize..(e - base) as usize]),
                e - s,
            )
        })
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

    let mut resolver = MatchResolver::new();
    let mut chunks = Vec::new();
    let mut seen = 0u64;
    // `buf` holds the open chunk's bytes (at least the 63 bytes a match window needs, once
    // there are that many) followed by the newest block; `base` is its first byte's offset.
    let mut carry: Vec<u8> = Vec::new();
    let mut carry_base = 0u64;
    // The previous buffer and the chunk ends decided in it, hashed while the next block is scanned.
    let mut prev: Option<(Vec<u8>, u64, u64, Vec<u64>)> = None;
    let mut read_err = None;
    for block in rx.iter() {
        let block = match block {
            Ok(b) => b,
            Err(e) => {
                read_err = Some(e);
                break;
            }
        };
        if let Some(tx) = &sha_tx {
            let _ = tx.send(block.clone());
        }
        let base = carry_base;
        let mut buf = std::mem::take(&mut carry);
        let from = buf.len();
        buf.extend_from_slice(&block);
        seen += block.len() as u64;
        let open_start = resolver.open_chunk_start();
        let (hashed, found) = rayon::join(
            || {
                prev.as_ref()
                    .map(|(b, bb, fs, e)| hash_chunks(b, *bb, *fs, e))
            },
            || matches(&buf, base, from),
        );
        if let Some(h) = hashed {
            chunks.extend(h);
        }
        let mut ends = Vec::new();
        resolver.push(found, seen, &mut ends);
        // Keep the open chunk, and at least a full match window, for the next block.
        let keep_from = resolver
            .open_chunk_start()
            .min(seen.saturating_sub(xet_chunk::HASH_WINDOW_SIZE as u64 - 1))
            .max(base);
        carry = Vec::with_capacity((seen - keep_from) as usize + block_size);
        carry.extend_from_slice(&buf[(keep_from - base) as usize..]);
        carry_base = keep_from;
        prev = Some((buf, base, open_start, ends));
    }
    drop(sha_tx);
    let _ = reader.join();
    if let Some(e) = read_err {
        return Err(e);
    }
    if let Some((b, bb, fs, e)) = prev {
        chunks.extend(hash_chunks(&b, bb, fs, &e));
    }
    let last_start = resolver.open_chunk_start();
    let mut ends = Vec::new();
    resolver.finish(seen, &mut ends);
    if !ends.is_empty() {
        chunks.extend(hash_chunks(&carry, carry_base, last_start, &ends));
    }
    let size = seen;
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
