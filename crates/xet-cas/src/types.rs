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
/// concatenation is the body ([`crate::XorbBody::Pieces`]), so that stored chunks can
/// be sent straight from where they were read rather than first copied into one buffer.
#[derive(Clone, Debug)]
pub struct XorbPieces {
    pieces: Vec<bytes::Bytes>,
    len: u64,
    /// CRC-64/NVME of the pieces so far, while every push came with its CRC.
    crc: Option<u64>,
}

impl Default for XorbPieces {
    fn default() -> Self {
        XorbPieces {
            pieces: Vec::new(),
            len: 0,
            crc: Some(0),
        }
    }
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
            self.crc = None;
        }
    }

    /// Append pieces whose concatenation has CRC-64/NVME `crc`, taken by the caller while
    /// the bytes were in cache: [`crc64_nvme`](Self::crc64_nvme) then joins CRCs instead of
    /// reading the whole body again. `crc` must be right; a wrong one is only caught by
    /// whoever checks the body against it.
    pub fn push_with_crc64(&mut self, pieces: impl IntoIterator<Item = bytes::Bytes>, crc: u64) {
        let mut n = 0u64;
        for p in pieces {
            n += p.len() as u64;
            if !p.is_empty() {
                self.pieces.push(p);
            }
        }
        self.len += n;
        self.crc = self.crc.map(|c| crate::crc::crc64_nvme_combine(c, crc, n));
    }

    /// CRC-64/NVME of the whole body (a grant request's checksum): joined from the CRCs
    /// the pieces came with, or read from the pieces if any came without one.
    pub fn crc64_nvme(&self) -> u64 {
        self.crc.unwrap_or_else(|| {
            let mut c = crate::crc::Crc64Nvme::default();
            for piece in &self.pieces {
                c.update(piece);
            }
            c.finalize()
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn xorb_pieces_crc_joined_or_read_equals_one_shot() {
        let data: Bytes = (0..200_000u32)
            .map(|i| (i.wrapping_mul(40503) >> 7) as u8)
            .collect::<Vec<u8>>()
            .into();
        let crc = crate::crc::crc64_nvme;
        let cuts = [0usize, 8, 8, 65_544, 65_552, 130_000, 200_000];
        // Every push with its CRC (empty groups included): joined.
        let mut joined = XorbPieces::new();
        assert_eq!(joined.crc64_nvme(), 0);
        for w in cuts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let mid = (a + b) / 2;
            let pieces = [data.slice(a..mid), data.slice(mid..b)];
            joined.push_with_crc64(pieces, crc(&data[a..b]));
        }
        assert_eq!(joined.len(), data.len() as u64);
        assert_eq!(joined.concat(), data);
        assert_eq!(joined.crc64_nvme(), crc(&data));
        // One push without a CRC: read from the pieces instead, still right.
        let mut mixed = XorbPieces::new();
        mixed.push_with_crc64([data.slice(..1000)], crc(&data[..1000]));
        mixed.push(data.slice(1000..5000));
        mixed.push_with_crc64([data.slice(5000..)], crc(&data[5000..]));
        assert_eq!(mixed.crc64_nvme(), crc(&data));
        // A wrong CRC is believed: the check is the receiver's (and the test of callers).
        let mut wrong = XorbPieces::new();
        wrong.push_with_crc64([data.clone()], 1);
        assert_ne!(wrong.crc64_nvme(), crc(&data));
    }
}
