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

/// A xorb's upload body (chunk headers and payloads, no footer) as pieces whose
/// concatenation is the body ([`crate::Cas::put_xorb_pieces`]), so that stored chunks can
/// be sent straight from where they were read rather than first copied into one buffer.
#[derive(Clone, Debug, Default)]
pub struct XorbPieces {
    pieces: Vec<bytes::Bytes>,
    len: u64,
}

impl XorbPieces {
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a piece (empty ones are skipped).
    pub fn push(&mut self, piece: bytes::Bytes) {
        if !piece.is_empty() {
            self.len += piece.len() as u64;
            self.pieces.push(piece);
        }
    }

    /// Length of the whole body.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn pieces(&self) -> &[bytes::Bytes] {
        &self.pieces
    }

    /// The whole body in one buffer (no copy when it is one piece).
    pub fn concat(&self) -> bytes::Bytes {
        match self.pieces.as_slice() {
            [] => bytes::Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut v = Vec::with_capacity(self.len as usize);
                for p in many {
                    v.extend_from_slice(p);
                }
                bytes::Bytes::from(v)
            }
        }
    }
}

impl From<bytes::Bytes> for XorbPieces {
    fn from(body: bytes::Bytes) -> Self {
        let mut p = XorbPieces::new();
        p.push(body);
        p
    }
}
