//! Gearhash content-defined chunking, byte-for-byte as the XET reference (`hf_xet`) does it.
//!
//! A chunk boundary falls after the byte at which the 64-bit gear hash `h = (h << 1) +
//! TABLE[b]` has its top 16 bits clear ([`MASK`]), subject to a minimum and a maximum chunk
//! length. The gear hash only depends on the last [`HASH_WINDOW_SIZE`] bytes (older bytes
//! have been shifted out), so the first bytes of each chunk are skipped without hashing:
//! hashing starts [`HASH_WINDOW_SIZE`] + 1 bytes before the minimum length, and boundaries
//! are only accepted once the chunk is at least [`MIN_CHUNK_SIZE`] long. The result is
//! identical to the byte-at-a-time pseudo-code of draft-denis-xet §5.3.
//!
//! Older xet-core releases accepted a match as soon as hashing started (chunks of 8128..8191
//! bytes, decided partly by hash state left over from the previous chunk). `hf_xet` 1.8.0
//! does not: the golden vectors of three corpus files and a constructed input hashed with
//! `hf_xet.hash_files` only agree with the behaviour above (see `tests/rules.rs`).
//!
//! The crate is pure and synchronous: [`Chunker`] is the streaming core,
//! [`StreamChunker`] buffers partial chunks across blocks, [`chunk_boundaries`] /
//! [`chunk_data`] are one-shot helpers, and [`find_matches`] + [`boundaries_from_matches`]
//! split the scan of one large input across threads.

use std::ops::Range;

use xet_hash::MerkleHash;

pub mod scan;

/// Chunks are never shorter than this, except the last chunk of a file.
pub const MIN_CHUNK_SIZE: usize = 8 * 1024;
/// Expected average chunk length (one boundary per 2^16 positions on random data).
pub const TARGET_CHUNK_SIZE: usize = 64 * 1024;
/// A boundary is forced when a chunk reaches this length.
pub const MAX_CHUNK_SIZE: usize = 128 * 1024;
/// A boundary may fall where `hash & MASK == 0`: the top 16 bits, the ones that depend on
/// the whole window.
pub const MASK: u64 = 0xFFFF_0000_0000_0000;
/// Number of trailing bytes the gear hash depends on (one bit shifted out per byte).
pub const HASH_WINDOW_SIZE: usize = 64;

/// Offset within a chunk at which hashing starts. Same as the reference, which skips
/// `MIN - 64 - 1` bytes; one byte more than strictly needed, harmless since that byte is
/// shifted out before the first boundary check.
const HASH_START: usize = MIN_CHUNK_SIZE - HASH_WINDOW_SIZE - 1;

/// The gearhash lookup table used by the chunker (draft-denis-xet Appendix B; it is the
/// `gearhash` crate's default table, as in the reference).
pub fn gear_table() -> &'static [u64; 256] {
    &gearhash::DEFAULT_TABLE
}

/// Streaming boundary finder.
///
/// Feed the input in blocks of any size: call [`next_boundary`](Self::next_boundary) with
/// the unconsumed part of the current block. `Some(n)` means the current chunk ends after
/// `data[..n]` (call again with `data[n..]`); `None` means all of `data` was consumed and
/// belongs to the still-open chunk. At end of input, [`finish`](Self::finish) closes the last
/// chunk. Boundaries do not depend on how the input was split into blocks.
///
/// ```
/// use xet_chunk::Chunker;
/// let data = vec![7u8; 300_000];
/// let mut chunker = Chunker::new();
/// let mut lens = Vec::new();
/// for block in data.chunks(10_000) {
///     let mut rest = block;
///     while let Some(n) = chunker.next_boundary(rest) {
///         lens.push(chunker.last_chunk_len());
///         rest = &rest[n..];
///     }
/// }
/// lens.extend(chunker.finish());
/// assert_eq!(lens, [131_072, 131_072, 37_856]);
/// ```
#[derive(Clone, Debug)]
pub struct Chunker {
    hasher: gearhash::Hasher<'static>,
    /// Bytes of the open chunk consumed so far.
    len: usize,
    /// Length of the chunk most recently closed by `next_boundary`.
    last_len: usize,
}

impl Default for Chunker {
    fn default() -> Self {
        Self::new()
    }
}

impl Chunker {
    /// A chunker at the start of a file.
    pub fn new() -> Self {
        Chunker {
            hasher: gearhash::Hasher::default(),
            len: 0,
            last_len: 0,
        }
    }

    /// Bytes consumed into the chunk that is still open.
    pub fn pending_len(&self) -> usize {
        self.len
    }

    /// Length of the chunk closed by the last `Some` from [`next_boundary`](Self::next_boundary)
    /// (including bytes fed in earlier blocks).
    pub fn last_chunk_len(&self) -> usize {
        self.last_len
    }

    /// Scan `data` (the continuation of the open chunk). Returns `Some(n)` if the chunk ends
    /// after `data[..n]`, with `n >= 1`; `None` if all of `data` was consumed without a
    /// boundary (always the case for empty `data`).
    #[inline]
    pub fn next_boundary(&mut self, data: &[u8]) -> Option<usize> {
        let mut pos = 0;

        // Bytes before HASH_START cannot influence any boundary check: skip them unread.
        if self.len < HASH_START {
            let skip = (HASH_START - self.len).min(data.len());
            pos = skip;
            self.len += skip;
        }

        // Never look past the forced boundary.
        let limit = data.len().min(pos + (MAX_CHUNK_SIZE - self.len));

        // Warm the hash up to one byte before the minimum length without testing it: the
        // reference rejects matches in this stretch (they would depend on the hasher's
        // state from before the chunk).
        if self.len < MIN_CHUNK_SIZE - 1 {
            let n = (MIN_CHUNK_SIZE - 1 - self.len).min(limit - pos);
            self.hasher.update(&data[pos..pos + n]);
            pos += n;
            self.len += n;
            if self.len < MIN_CHUNK_SIZE - 1 {
                return None;
            }
        }

        match self.hasher.next_match(&data[pos..limit], MASK) {
            Some(k) => {
                self.len += k;
                Some(self.close(pos + k))
            }
            None => {
                self.len += limit - pos;
                if self.len == MAX_CHUNK_SIZE {
                    Some(self.close(limit))
                } else {
                    None
                }
            }
        }
    }

    fn close(&mut self, consumed: usize) -> usize {
        self.last_len = self.len;
        self.len = 0;
        self.hasher.set_hash(0);
        consumed
    }

    /// End of input: returns the length of the final (possibly short) chunk, or `None` if
    /// no bytes are pending. The chunker is then ready for a new file.
    pub fn finish(&mut self) -> Option<usize> {
        let n = self.len;
        self.len = 0;
        self.hasher.set_hash(0);
        (n > 0).then(|| {
            self.last_len = n;
            n
        })
    }
}

/// End offsets of every chunk of `data` (the last is `data.len()`; empty for empty input).
pub fn chunk_boundaries(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::with_capacity(data.len() / TARGET_CHUNK_SIZE + 1);
    let mut chunker = Chunker::new();
    let mut pos = 0;
    while let Some(n) = chunker.next_boundary(&data[pos..]) {
        pos += n;
        out.push(pos);
    }
    if chunker.finish().is_some() {
        out.push(data.len());
    }
    out
}

/// Byte ranges of every chunk of `data`, in order.
pub fn chunk_ranges(data: &[u8]) -> Vec<Range<usize>> {
    let mut start = 0;
    chunk_boundaries(data)
        .into_iter()
        .map(|end| {
            let r = start..end;
            start = end;
            r
        })
        .collect()
}

/// Parallel chunking, step 1: every end offset `p` with `range.start < p <= range.end`
/// after which a boundary *may* fall, i.e. the gear hash of the 64 bytes ending at `p` has
/// the [`MASK`] bits clear (offsets before the first full window are never reported).
///
/// Any boundary that the min/max rules accept is such a match, and whether an offset matches
/// does not depend on where chunks start, so disjoint ranges can be scanned on separate
/// threads and their results concatenated (in order) for [`boundaries_from_matches`]. This
/// scans every byte, unlike [`Chunker`], which skips the start of each chunk.
pub fn find_matches(data: &[u8], range: Range<usize>) -> Vec<usize> {
    find_matches_after(&[], data, range)
}

/// [`find_matches`] for `data` that continues an input whose preceding bytes end with
/// `before` (only its last 63 bytes are read): a window may reach back into `before`, so
/// an input split into blocks can be scanned block by block without copying the blocks
/// together. Offsets are relative to `data`; windows that are not yet full (fewer than
/// [`HASH_WINDOW_SIZE`] bytes of `before` and `data` up to the offset) are never reported.
pub fn find_matches_after(before: &[u8], data: &[u8], range: Range<usize>) -> Vec<usize> {
    let mut out = Vec::with_capacity(range.len() / TARGET_CHUNK_SIZE * 2 + 1);
    if range.start >= range.end {
        return out;
    }
    let need = HASH_WINDOW_SIZE - 1;
    let from_data = range.start.min(need);
    let from_before = (need - from_data).min(before.len());
    // The (up to) 63 bytes before `range.start` complete the window of the first byte scanned.
    let mut hash = scan::update(0, &before[before.len() - from_before..]);
    hash = scan::update(hash, &data[range.start - from_data..range.start]);
    let mut pos = range.start;
    let missing = need - from_data - from_before;
    if missing > 0 {
        // Near the start of the input: fill the window without reporting matches.
        let n = missing.min(range.end - pos);
        hash = scan::update(hash, &data[pos..pos + n]);
        pos += n;
    }
    // Every match is wanted: the multi-lane scan is faster than `gearhash` at that.
    scan::matches(hash, &data[pos..range.end], pos, &mut out);
    out
}

/// Parallel chunking, step 2: the chunk end offsets of a `len`-byte input, from all of its
/// [`find_matches`] results in ascending order. Equals [`chunk_boundaries`] on that input.
pub fn boundaries_from_matches(matches: &[usize], len: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(len / TARGET_CHUNK_SIZE + 1);
    let mut start = 0;
    let mut i = 0;
    while len - start > MAX_CHUNK_SIZE || (len - start >= MIN_CHUNK_SIZE && i < matches.len()) {
        // First match at or past the minimum length, if within the maximum.
        while i < matches.len() && matches[i] < start + MIN_CHUNK_SIZE {
            i += 1;
        }
        let end = match matches.get(i) {
            Some(&m) if m <= start + MAX_CHUNK_SIZE => m,
            _ if len - start > MAX_CHUNK_SIZE => start + MAX_CHUNK_SIZE,
            _ => break,
        };
        out.push(end);
        start = end;
    }
    if start < len {
        out.push(len);
    }
    out
}

/// One chunk of a file: where it is and its chunk hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkInfo {
    /// Offset of the chunk's first byte in the file.
    pub offset: u64,
    /// Length in bytes (at most [`MAX_CHUNK_SIZE`]).
    pub len: u32,
    /// `xet_hash::chunk_hash` of the chunk's bytes.
    pub hash: MerkleHash,
}

impl ChunkInfo {
    /// The chunk's byte range within the file.
    pub fn range(&self) -> Range<usize> {
        let start = self.offset as usize;
        start..start + self.len as usize
    }
}

/// Chunk `data` and hash every chunk.
pub fn chunk_data(data: &[u8]) -> Vec<ChunkInfo> {
    chunk_ranges(data)
        .into_iter()
        .map(|r| ChunkInfo {
            offset: r.start as u64,
            len: r.len() as u32,
            hash: xet_hash::chunk_hash(&data[r]),
        })
        .collect()
}

/// The file hash of `data` (`xet_hash::file_hash` over its chunks).
pub fn file_hash(data: &[u8]) -> MerkleHash {
    let chunks: Vec<(MerkleHash, u64)> = chunk_data(data)
        .iter()
        .map(|c| (c.hash, c.len as u64))
        .collect();
    xet_hash::file_hash(&chunks)
}

/// Adaptor for block-wise input (e.g. file reads): buffers the open chunk across blocks and
/// hands out each complete chunk's bytes. A chunk that lies wholly inside one block is
/// passed without copying.
///
/// ```
/// use xet_chunk::{StreamChunker, chunk_boundaries};
/// let data: Vec<u8> = (0..400_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
/// let mut out = Vec::new();
/// let mut sc = StreamChunker::new();
/// for block in data.chunks(50_000) {
///     sc.push_with(block, |off, bytes| out.push(off as usize + bytes.len()));
/// }
/// sc.finish_with(|off, bytes| out.push(off as usize + bytes.len()));
/// assert_eq!(out, chunk_boundaries(&data));
/// ```
#[derive(Clone, Debug, Default)]
pub struct StreamChunker {
    chunker: Chunker,
    /// Bytes of the open chunk that arrived in earlier blocks.
    pending: Vec<u8>,
    /// File offset of the open chunk's first byte.
    offset: u64,
}

impl StreamChunker {
    /// A stream chunker at the start of a file.
    pub fn new() -> Self {
        Self::default()
    }

    /// File offset at which the open (not yet emitted) chunk starts; after
    /// [`finish`](Self::finish), the total length.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes buffered for the open chunk.
    pub fn pending_len(&self) -> usize {
        self.chunker.pending_len()
    }

    /// Feed the next block; calls `emit(offset, bytes)` for every chunk it completes, in order.
    pub fn push_with(&mut self, block: &[u8], mut emit: impl FnMut(u64, &[u8])) {
        let mut rest = block;
        while let Some(n) = self.chunker.next_boundary(rest) {
            if self.pending.is_empty() {
                emit(self.offset, &rest[..n]);
            } else {
                self.pending.extend_from_slice(&rest[..n]);
                emit(self.offset, &self.pending);
                self.pending.clear();
            }
            self.offset += self.chunker.last_chunk_len() as u64;
            rest = &rest[n..];
        }
        if !rest.is_empty() {
            if self.pending.capacity() == 0 {
                self.pending.reserve(MAX_CHUNK_SIZE);
            }
            self.pending.extend_from_slice(rest);
        }
    }

    /// Feed the next block; returns the chunks it completes as owned buffers.
    pub fn push(&mut self, block: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.push_with(block, |_, c| out.push(c.to_vec()));
        out
    }

    /// End of input: calls `emit(offset, bytes)` for the final chunk, if any bytes are
    /// pending. Use a new adaptor for the next file.
    pub fn finish_with(&mut self, mut emit: impl FnMut(u64, &[u8])) {
        if self.chunker.finish().is_some() {
            emit(self.offset, &self.pending);
            self.offset += self.pending.len() as u64;
            self.pending.clear();
        }
    }

    /// End of input: the final chunk's bytes, if any.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let mut out = None;
        self.finish_with(|_, c| out = Some(c.to_vec()));
        out
    }
}

/// Streaming form of [`boundaries_from_matches`]: decides chunk ends as match positions
/// arrive block by block, so a caller can scan each block's matches on several threads
/// ([`find_matches`]) and still emit boundaries in order without holding the whole input.
///
/// Offsets are absolute (from the start of the file). A boundary is decided as soon as the
/// data seen so far fixes it: the first match at or past the minimum length, or the
/// maximum length once that much data has been seen without an acceptable match.
#[derive(Clone, Debug, Default)]
pub struct MatchResolver {
    /// Start of the open chunk.
    start: u64,
    /// Matches past `start` not yet consumed, ascending.
    pending: std::collections::VecDeque<u64>,
}

impl MatchResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Start of the chunk that is still open.
    pub fn open_chunk_start(&self) -> u64 {
        self.start
    }

    /// Add the matches found in the next stretch of input (ascending, all `<= seen`) and
    /// push onto `out` every chunk end that the first `seen` bytes of the file decide.
    pub fn push(&mut self, matches: impl IntoIterator<Item = u64>, seen: u64, out: &mut Vec<u64>) {
        self.pending.extend(matches);
        loop {
            while self
                .pending
                .front()
                .is_some_and(|&m| m < self.start + MIN_CHUNK_SIZE as u64)
            {
                self.pending.pop_front();
            }
            let max_end = self.start + MAX_CHUNK_SIZE as u64;
            let end = match self.pending.front() {
                Some(&m) if m <= max_end => m,
                // A match past the maximum, or enough data seen without one: forced cut.
                Some(_) => max_end,
                None if seen >= max_end => max_end,
                None => return,
            };
            out.push(end);
            self.start = end;
        }
    }

    /// End of input at `len` bytes: the remaining chunk ends (at most two: a forced or
    /// matched cut that needed no more data is already out, so only the tail remains).
    pub fn finish(&mut self, len: u64, out: &mut Vec<u64>) {
        self.push(std::iter::empty(), len, out);
        // With all data seen, an open chunk shorter than the maximum simply ends here.
        if self.start < len {
            out.push(len);
        }
        self.start = 0;
        self.pending.clear();
    }
}
