//! The CasObjectInfo footer of a stored xorb (draft §7.5) and its trailing length.
//!
//! Layout as written by the reference (verified against its xorbs), all integers LE:
//!
//! ```text
//! v1: "XETBLOB" 1u8 xorb_hash[32]
//!     "XBLBHSH" 0u8 n:u32 chunk_hash[32] * n                 <- hash section
//!     "XBLBBND" 1u8 n:u32 boundary:u32 * n unpacked:u32 * n   <- boundary section
//!     n:u32 hashes_off:u32 boundary_off:u32 nonce[4] reserved[12]=0
//! v0: "XETBLOB" 0u8 xorb_hash[32] n:u32 boundary:u32 * n chunk_hash[32] * n nonce[4] reserved[12]
//! then info_length:u32 = footer length, not counting itself.
//! ```
//!
//! `hashes_off` / `boundary_off` count the bytes from the start of that section's ident
//! to the end of the footer (the end of the reserved bytes, before `info_length`).
//! `boundary[i]` is the end of chunk `i` in the chunk region, headers included;
//! `unpacked[i]` the end of chunk `i` in the concatenated decompressed chunks.

use std::ops::Range;

use xet_hash::MerkleHash;

use crate::chunk::CHUNK_HEADER_LEN;
use crate::error::XorbError;
use crate::{Limits, MAX_CHUNK_SIZE};

pub const FOOTER_IDENT: &[u8; 7] = b"XETBLOB";
pub const HASHES_IDENT: &[u8; 7] = b"XBLBHSH";
pub const BOUNDARIES_IDENT: &[u8; 7] = b"XBLBBND";
/// Footer version written by the reference (and by us).
pub const FOOTER_VERSION: u8 = 1;
/// Older footer version, accepted for reading.
pub const FOOTER_VERSION_V0: u8 = 0;
const HASHES_VERSION: u8 = 0;
const BOUNDARIES_VERSION: u8 = 1;
const RESERVED_LEN: usize = 16;
/// Leading bytes of the reserved buffer that may hold a uniqueness nonce (xet-core's
/// `XORB_OBJECT_FORMAT_NONCE_LEN`); read and ignored, written as zeros.
const NONCE_LEN: usize = 4;

/// Parsed footer. For a v0 footer `unpacked_chunk_offsets` is empty (v0 does not store
/// it; [`crate::verify`] recomputes it from the chunk headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XorbFooter {
    /// [`FOOTER_VERSION`] or [`FOOTER_VERSION_V0`]; [`XorbFooter::write`] writes this version.
    pub version: u8,
    pub xorb_hash: MerkleHash,
    pub chunk_hashes: Vec<MerkleHash>,
    pub chunk_boundary_offsets: Vec<u32>,
    pub unpacked_chunk_offsets: Vec<u32>,
}

/// Serialized length of a v1 footer for `n` chunks (without the `info_length` u32).
pub const fn footer_len_v1(n: usize) -> usize {
    92 + 40 * n
}

/// Serialized length of a v0 footer for `n` chunks (without the `info_length` u32).
pub const fn footer_len_v0(n: usize) -> usize {
    60 + 36 * n
}

/// Bytes from the boundary section's ident to the end of a v1 footer.
const fn boundary_offset_from_end(n: usize) -> usize {
    12 + 8 * n + 12 + RESERVED_LEN
}

/// Bytes from the hash section's ident to the end of a v1 footer.
const fn hashes_offset_from_end(n: usize) -> usize {
    12 + 32 * n + boundary_offset_from_end(n)
}

impl XorbFooter {
    pub fn num_chunks(&self) -> usize {
        self.chunk_hashes.len()
    }

    /// Length of the chunk region this footer describes.
    pub fn body_len(&self) -> u64 {
        self.chunk_boundary_offsets
            .last()
            .map_or(0, |&b| u64::from(b))
    }

    /// Serialized length without the trailing `info_length`.
    pub fn serialized_len(&self) -> usize {
        if self.version == FOOTER_VERSION_V0 {
            footer_len_v0(self.num_chunks())
        } else {
            footer_len_v1(self.num_chunks())
        }
    }

    /// Append the footer and the trailing `info_length` to `out`.
    ///
    /// The vectors must all have `num_chunks()` entries (`unpacked_chunk_offsets` may be
    /// empty for v0).
    pub fn write(&self, out: &mut Vec<u8>) {
        let n = self.num_chunks();
        assert_eq!(
            self.chunk_boundary_offsets.len(),
            n,
            "footer: boundary count"
        );
        let start = out.len();
        out.reserve(self.serialized_len() + 4);
        out.extend_from_slice(FOOTER_IDENT);
        if self.version == FOOTER_VERSION_V0 {
            out.push(FOOTER_VERSION_V0);
            out.extend_from_slice(self.xorb_hash.as_bytes());
            out.extend_from_slice(&(n as u32).to_le_bytes());
            put_u32s(out, &self.chunk_boundary_offsets);
            for h in &self.chunk_hashes {
                out.extend_from_slice(h.as_bytes());
            }
        } else {
            assert_eq!(
                self.unpacked_chunk_offsets.len(),
                n,
                "footer: unpacked offset count"
            );
            out.push(FOOTER_VERSION);
            out.extend_from_slice(self.xorb_hash.as_bytes());
            out.extend_from_slice(HASHES_IDENT);
            out.push(HASHES_VERSION);
            out.extend_from_slice(&(n as u32).to_le_bytes());
            for h in &self.chunk_hashes {
                out.extend_from_slice(h.as_bytes());
            }
            out.extend_from_slice(BOUNDARIES_IDENT);
            out.push(BOUNDARIES_VERSION);
            out.extend_from_slice(&(n as u32).to_le_bytes());
            put_u32s(out, &self.chunk_boundary_offsets);
            put_u32s(out, &self.unpacked_chunk_offsets);
            out.extend_from_slice(&(n as u32).to_le_bytes());
            out.extend_from_slice(&(hashes_offset_from_end(n) as u32).to_le_bytes());
            out.extend_from_slice(&(boundary_offset_from_end(n) as u32).to_le_bytes());
        }
        out.extend_from_slice(&[0u8; RESERVED_LEN]);
        let len = (out.len() - start) as u32;
        debug_assert_eq!(len as usize, self.serialized_len());
        out.extend_from_slice(&len.to_le_bytes());
    }

    /// Footer bytes followed by `info_length`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write(&mut v);
        v
    }

    /// Byte range of chunks `chunks` in the chunk region (what a server puts in a
    /// reconstruction answer and what a ranged GET fetches; end-exclusive here).
    pub fn chunk_byte_range(&self, chunks: Range<usize>) -> Result<Range<u64>, XorbError> {
        check_range(&chunks, self.num_chunks())?;
        let start = if chunks.start == 0 {
            0
        } else {
            self.chunk_boundary_offsets[chunks.start - 1]
        };
        Ok(u64::from(start)..u64::from(self.chunk_boundary_offsets[chunks.end - 1]))
    }

    /// Range of chunks `chunks` in the concatenated decompressed data; `None` for a v0
    /// footer, which does not record it.
    pub fn unpacked_range(&self, chunks: Range<usize>) -> Result<Option<Range<u64>>, XorbError> {
        check_range(&chunks, self.num_chunks())?;
        if self.unpacked_chunk_offsets.len() != self.num_chunks() {
            return Ok(None);
        }
        let start = if chunks.start == 0 {
            0
        } else {
            self.unpacked_chunk_offsets[chunks.start - 1]
        };
        Ok(Some(
            u64::from(start)..u64::from(self.unpacked_chunk_offsets[chunks.end - 1]),
        ))
    }
}

pub(crate) fn check_range(r: &Range<usize>, n: usize) -> Result<(), XorbError> {
    if r.start >= r.end || r.end > n {
        return Err(XorbError::ChunkRange {
            start: r.start,
            end: r.end,
            num_chunks: n,
        });
    }
    Ok(())
}

fn put_u32s(out: &mut Vec<u8>, v: &[u32]) {
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Cursor over the footer bytes that reports absolute offsets in errors.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the whole xorb.
    base: u64,
}

impl<'a> Reader<'a> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], XorbError> {
        let available = self.buf.len() - self.pos;
        if available < n {
            return Err(XorbError::Truncated {
                what,
                offset: self.offset(),
                needed: n as u64,
                available: available as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, XorbError> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, XorbError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn hash(&mut self, what: &'static str) -> Result<MerkleHash, XorbError> {
        let b = self.take(32, what)?;
        Ok(MerkleHash(b.try_into().expect("32 bytes")))
    }
    fn ident(&mut self, ident: &[u8; 7], section: &'static str) -> Result<(), XorbError> {
        let offset = self.offset();
        if self.take(7, section)? != ident {
            return Err(XorbError::FooterIdent { section, offset });
        }
        Ok(())
    }
    fn u32s(&mut self, n: usize, what: &'static str) -> Result<Vec<u32>, XorbError> {
        let b = self.take(4 * n, what)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    fn hashes(&mut self, n: usize, what: &'static str) -> Result<Vec<MerkleHash>, XorbError> {
        let b = self.take(32 * n, what)?;
        Ok(b.chunks_exact(32)
            .map(|c| MerkleHash(c.try_into().expect("32 bytes")))
            .collect())
    }
    fn expect_u32(&mut self, field: &'static str, expected: u64) -> Result<(), XorbError> {
        let got = u64::from(self.u32(field)?);
        if got != expected {
            return Err(XorbError::FooterField {
                field,
                expected,
                got,
            });
        }
        Ok(())
    }
}

/// Split a stored xorb into its chunk region length and parsed footer, checking the
/// footer's structure and its boundary arrays (without touching the chunks).
///
/// Every count is checked against `limits` and against the footer's own length before
/// anything is allocated.
pub fn parse_footer(xorb: &[u8], limits: &Limits) -> Result<(XorbFooter, usize), XorbError> {
    parse_footer_tail(xorb, xorb.len() as u64, limits).map(|(f, body_len)| (f, body_len as usize))
}

/// [`parse_footer`] from only the end of a stored xorb: `tail` is the last `tail.len()`
/// bytes of an object of `total_len` bytes and must contain the whole footer and
/// `info_length` (read the last 4 bytes first to learn how much that is). Lets a store
/// read chunk metadata without reading the chunk region.
pub fn parse_footer_tail(
    tail: &[u8],
    total_len: u64,
    limits: &Limits,
) -> Result<(XorbFooter, u64), XorbError> {
    if total_len > limits.max_bytes {
        return Err(XorbError::InputTooLarge {
            len: total_len,
            max: limits.max_bytes,
        });
    }
    if tail.len() as u64 > total_len {
        return Err(XorbError::Truncated {
            what: "xorb tail",
            offset: 0,
            needed: tail.len() as u64,
            available: total_len,
        });
    }
    let tail_start = total_len - tail.len() as u64;
    let Some(info_at) = tail.len().checked_sub(4) else {
        return Err(XorbError::Truncated {
            what: "info_length",
            offset: tail_start,
            needed: 4,
            available: tail.len() as u64,
        });
    };
    let info_len = u32::from_le_bytes(tail[info_at..].try_into().expect("4 bytes")) as usize;
    if info_len > info_at {
        return Err(XorbError::Truncated {
            what: "footer",
            offset: tail_start + info_at as u64,
            needed: info_len as u64,
            available: info_at as u64,
        });
    }
    let body_len = total_len - 4 - info_len as u64;
    let mut r = Reader {
        buf: &tail[info_at - info_len..info_at],
        pos: 0,
        base: body_len,
    };

    r.ident(FOOTER_IDENT, "XETBLOB")?;
    let version = r.u8("footer version")?;
    let footer = match version {
        FOOTER_VERSION => parse_v1(&mut r, info_len, limits)?,
        FOOTER_VERSION_V0 => parse_v0(&mut r, info_len, limits)?,
        v => {
            return Err(XorbError::FooterVersion {
                section: "XETBLOB",
                version: v,
            });
        }
    };
    // The buffer's first bytes may hold the uniqueness nonce xet-core stamps into the
    // footers it writes since mid-2026 (not part of the xorb hash); the rest is zero.
    let reserved_at = r.offset() + NONCE_LEN as u64;
    let buffer = r.take(RESERVED_LEN, "footer reserved bytes")?;
    if buffer[NONCE_LEN..].iter().any(|&b| b != 0) {
        return Err(XorbError::FooterReserved {
            offset: reserved_at,
        });
    }
    debug_assert_eq!(r.pos, info_len, "length was checked against num_chunks");
    check_boundaries(&footer, body_len, limits)?;
    Ok((footer, body_len))
}

fn check_count(
    n: u32,
    info_len: usize,
    expected_len: fn(usize) -> usize,
    limits: &Limits,
) -> Result<usize, XorbError> {
    let n = n as usize;
    if n == 0 {
        return Err(XorbError::Empty);
    }
    if n > limits.max_chunks {
        return Err(XorbError::TooManyChunks {
            max: limits.max_chunks,
        });
    }
    // The footer's length is fully determined by the chunk count: checking it here
    // means the arrays below are known to fit before they are read.
    let expected = expected_len(n);
    if info_len != expected {
        return Err(XorbError::FooterField {
            field: "info_length",
            expected: expected as u64,
            got: info_len as u64,
        });
    }
    Ok(n)
}

fn parse_v1(r: &mut Reader<'_>, info_len: usize, limits: &Limits) -> Result<XorbFooter, XorbError> {
    let xorb_hash = r.hash("footer xorb hash")?;
    r.ident(HASHES_IDENT, "XBLBHSH")?;
    let hv = r.u8("hash section version")?;
    if hv != HASHES_VERSION {
        return Err(XorbError::FooterVersion {
            section: "XBLBHSH",
            version: hv,
        });
    }
    let n32 = r.u32("hash section num_chunks")?;
    let n = check_count(n32, info_len, footer_len_v1, limits)?;
    let chunk_hashes = r.hashes(n, "chunk hashes")?;
    r.ident(BOUNDARIES_IDENT, "XBLBBND")?;
    let bv = r.u8("boundary section version")?;
    if bv != BOUNDARIES_VERSION {
        return Err(XorbError::FooterVersion {
            section: "XBLBBND",
            version: bv,
        });
    }
    r.expect_u32("boundary section num_chunks", n as u64)?;
    let chunk_boundary_offsets = r.u32s(n, "chunk boundary offsets")?;
    let unpacked_chunk_offsets = r.u32s(n, "unpacked chunk offsets")?;
    r.expect_u32("num_chunks", n as u64)?;
    r.expect_u32(
        "hashes_section_offset_from_end",
        hashes_offset_from_end(n) as u64,
    )?;
    r.expect_u32(
        "boundary_section_offset_from_end",
        boundary_offset_from_end(n) as u64,
    )?;
    Ok(XorbFooter {
        version: FOOTER_VERSION,
        xorb_hash,
        chunk_hashes,
        chunk_boundary_offsets,
        unpacked_chunk_offsets,
    })
}

fn parse_v0(r: &mut Reader<'_>, info_len: usize, limits: &Limits) -> Result<XorbFooter, XorbError> {
    let xorb_hash = r.hash("footer xorb hash")?;
    let n32 = r.u32("num_chunks")?;
    let n = check_count(n32, info_len, footer_len_v0, limits)?;
    let chunk_boundary_offsets = r.u32s(n, "chunk boundary offsets")?;
    let chunk_hashes = r.hashes(n, "chunk hashes")?;
    Ok(XorbFooter {
        version: FOOTER_VERSION_V0,
        xorb_hash,
        chunk_hashes,
        chunk_boundary_offsets,
        unpacked_chunk_offsets: Vec::new(),
    })
}

/// Boundaries must describe chunks of plausible sizes that exactly tile the chunk region.
fn check_boundaries(f: &XorbFooter, body_len: u64, limits: &Limits) -> Result<(), XorbError> {
    let min_chunk = CHUNK_HEADER_LEN as u64 + 1;
    let max_chunk = (CHUNK_HEADER_LEN + MAX_CHUNK_SIZE) as u64;
    let mut prev = 0u64;
    for (i, &b) in f.chunk_boundary_offsets.iter().enumerate() {
        let b = u64::from(b);
        if b < prev + min_chunk || b > prev + max_chunk {
            return Err(XorbError::FooterChunkSize {
                chunk: i,
                field: "chunk_boundary_offsets",
                size: b as i64 - prev as i64,
            });
        }
        prev = b;
    }
    if prev != body_len {
        return Err(XorbError::FooterBoundary {
            chunk: f.num_chunks() - 1,
            field: "chunk_boundary_offsets",
            footer: prev,
            actual: body_len,
        });
    }
    let mut prev = 0u64;
    for (i, &u) in f.unpacked_chunk_offsets.iter().enumerate() {
        let u = u64::from(u);
        if u <= prev || u > prev + MAX_CHUNK_SIZE as u64 {
            return Err(XorbError::FooterChunkSize {
                chunk: i,
                field: "unpacked_chunk_offsets",
                size: u as i64 - prev as i64,
            });
        }
        if u > limits.max_unpacked_bytes {
            return Err(XorbError::UnpackedTooLarge {
                chunk: i,
                max: limits.max_unpacked_bytes,
            });
        }
        prev = u;
    }
    Ok(())
}
