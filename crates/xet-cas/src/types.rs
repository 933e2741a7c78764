//! Domain types of the contract. Ranges here are end-exclusive; the wire form converts
//! to the HTTP conventions (end-inclusive byte ranges) in [`crate::wire`].

use xet_hash::MerkleHash;

/// Bytes `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    pub fn new(start: u64, end: u64) -> Self {
        ByteRange { start, end }
    }
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Chunk indices `[start, end)` within a xorb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkRange {
    pub start: u32,
    pub end: u32,
}

impl ChunkRange {
    pub fn new(start: u32, end: u32) -> Self {
        ChunkRange { start, end }
    }
    pub fn len(&self) -> u32 {
        self.end.saturating_sub(self.start)
    }
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
    pub fn contains(&self, other: &ChunkRange) -> bool {
        self.start <= other.start && other.end <= self.end
    }
}

/// One term of a reconstruction: chunks `chunks` of `xorb`, `unpacked_length` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub xorb: MerkleHash,
    pub chunks: ChunkRange,
    pub unpacked_length: u64,
}

/// Where to get serialized chunks of a xorb. One fetch may cover several terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XorbFetch {
    pub xorb: MerkleHash,
    pub chunks: ChunkRange,
    /// Byte range of those chunks within the serialized chunk region.
    pub bytes: ByteRange,
    /// Presigned URL when the data is served over HTTP; `None` in-process.
    pub url: Option<String>,
}

/// How to rebuild a file or a byte range of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reconstruction {
    /// Bytes to skip at the start of the first term (range queries).
    pub offset_into_first_range: u64,
    /// Terms in file order.
    pub terms: Vec<Term>,
    /// Fetches covering every term's chunks.
    pub fetches: Vec<XorbFetch>,
}

impl Reconstruction {
    /// Total unpacked bytes of all terms (before trimming a range).
    pub fn unpacked_len(&self) -> u64 {
        self.terms.iter().map(|t| t.unpacked_length).sum()
    }

    /// The fetch that contains `term`'s chunks.
    pub fn fetch_for(&self, term: &Term) -> Option<&XorbFetch> {
        self.fetches
            .iter()
            .find(|f| f.xorb == term.xorb && f.chunks.contains(&term.chunks))
    }
}
