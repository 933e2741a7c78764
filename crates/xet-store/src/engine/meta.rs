//! What the store knows about one xorb, taken from its footer.

use xet_hash::MerkleHash;

use xet_cas::{ByteRange, ChunkRange};

/// Chunk hashes and boundaries of a stored xorb (from its footer; never from a client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XorbMeta {
    pub hash: MerkleHash,
    /// Raw chunk hashes in chunk order.
    pub chunk_hashes: Vec<MerkleHash>,
    /// End of each chunk (header included) in the serialized chunk region.
    pub chunk_ends: Vec<u64>,
    /// End of each chunk in the concatenated uncompressed data.
    pub unpacked_ends: Vec<u64>,
}

impl XorbMeta {
    pub fn num_chunks(&self) -> u32 {
        self.chunk_hashes.len() as u32
    }

    /// Length of the serialized chunk region (the stored object minus its footer).
    pub fn region_len(&self) -> u64 {
        self.chunk_ends.last().copied().unwrap_or(0)
    }

    /// The v1 footer this metadata was read from (or built for).
    pub fn footer(&self) -> xet_xorb::XorbFooter {
        // Offsets fit in u32: a stored xorb is at most the footered limit (< 4 GiB).
        let u32s = |v: &[u64]| v.iter().map(|&e| e as u32).collect();
        xet_xorb::XorbFooter {
            version: xet_xorb::FOOTER_VERSION,
            xorb_hash: self.hash,
            chunk_hashes: self.chunk_hashes.clone(),
            chunk_boundary_offsets: u32s(&self.chunk_ends),
            unpacked_chunk_offsets: u32s(&self.unpacked_ends),
        }
    }

    /// Total uncompressed bytes.
    pub fn unpacked_len(&self) -> u64 {
        self.unpacked_ends.last().copied().unwrap_or(0)
    }

    fn valid(&self, r: ChunkRange) -> bool {
        r.start < r.end && r.end <= self.num_chunks()
    }

    /// Uncompressed size of chunk `i`.
    pub fn chunk_size(&self, i: u32) -> u64 {
        let i = i as usize;
        self.unpacked_ends[i] - if i == 0 { 0 } else { self.unpacked_ends[i - 1] }
    }

    /// Byte range of chunks `r` in the chunk region; `None` if `r` is empty or outside.
    pub fn byte_range(&self, r: ChunkRange) -> Option<ByteRange> {
        if !self.valid(r) {
            return None;
        }
        let start = if r.start == 0 {
            0
        } else {
            self.chunk_ends[r.start as usize - 1]
        };
        Some(ByteRange::new(start, self.chunk_ends[r.end as usize - 1]))
    }

    /// Uncompressed bytes of chunks `r`; `None` if `r` is empty or outside.
    pub fn unpacked_range_len(&self, r: ChunkRange) -> Option<u64> {
        if !self.valid(r) {
            return None;
        }
        let start = if r.start == 0 {
            0
        } else {
            self.unpacked_ends[r.start as usize - 1]
        };
        Some(self.unpacked_ends[r.end as usize - 1] - start)
    }

    /// Raw chunk hashes of chunks `r`; `None` if `r` is empty or outside.
    pub fn hashes(&self, r: ChunkRange) -> Option<&[MerkleHash]> {
        self.valid(r)
            .then(|| &self.chunk_hashes[r.start as usize..r.end as usize])
    }

    /// `(hash, uncompressed size)` of every chunk.
    pub fn chunk_list(&self) -> Vec<(MerkleHash, u64)> {
        (0..self.num_chunks())
            .map(|i| (self.chunk_hashes[i as usize], self.chunk_size(i)))
            .collect()
    }

    /// Approximate heap size, for the cache budget.
    pub fn heap_bytes(&self) -> usize {
        self.chunk_hashes.len() * (32 + 8 + 8)
    }
}
