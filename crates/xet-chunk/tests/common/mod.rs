//! Shared by the chunking tests: the draft's byte-at-a-time chunker, the reference every
//! fast path is compared with.

use xet_chunk::{MASK, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE};

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
