//! Shared by the chunking tests: the draft's byte-at-a-time chunker, the reference every
//! fast path is compared with, and the streaming `Chunker` fed in blocks.

use xet_chunk::{Chunker, MASK, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE};

/// Draft §5.3 pseudo-code, one byte at a time: returns chunk end offsets.
pub fn draft_boundaries(table: &[u64; 256], data: &[u8]) -> Vec<usize> {
    let mut h: u64 = 0;
    let mut start = 0;
    let mut out = Vec::new();
    for (i, &b) in data.iter().enumerate() {
        h = (h << 1).wrapping_add(table[b as usize]);
        let size = i - start + 1;
        if size < MIN_CHUNK_SIZE {
            continue;
        }
        if size >= MAX_CHUNK_SIZE || h & MASK == 0 {
            out.push(i + 1);
            start = i + 1;
            h = 0;
        }
    }
    if start < data.len() {
        out.push(data.len());
    }
    out
}

/// Chunk ends from the streaming [`Chunker`] fed `data` in blocks of `sizes` bytes, in
/// turn (cycling).
pub fn streamed(data: &[u8], sizes: &[usize]) -> Vec<usize> {
    let mut chunker = Chunker::new();
    let mut ends = Vec::new();
    let (mut pos, mut k) = (0, 0);
    while pos < data.len() {
        let end = (pos + sizes[k % sizes.len()]).min(data.len());
        k += 1;
        let mut rest = &data[pos..end];
        let mut at = pos;
        while let Some(n) = chunker.next_boundary(rest) {
            at += n;
            ends.push(at);
            rest = &rest[n..];
        }
        pos = end;
    }
    if let Some(n) = chunker.finish() {
        assert_eq!(data.len() - ends.last().copied().unwrap_or(0), n);
        ends.push(data.len());
    }
    ends
}
