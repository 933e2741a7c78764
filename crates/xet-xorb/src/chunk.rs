//! Chunk headers and serialized chunks (draft §7.3), and walking a chunk region.

use xet_hash::MerkleHash;

use crate::error::XorbError;
use crate::scheme::{self, CompressionScheme};
use crate::{Limits, MAX_CHUNK_SIZE};

/// Length of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 8;

/// The only chunk header version.
pub const CHUNK_HEADER_VERSION: u8 = 0;

/// A chunk header: `version(1)=0 | compressed_size(3 LE) | scheme(1) | uncompressed_size(3 LE)`.
///
/// `compressed_size` is the payload length that follows the header (the header itself
/// is not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub compressed_size: u32,
    pub scheme: CompressionScheme,
    pub uncompressed_size: u32,
}

impl ChunkHeader {
    /// Encode. Sizes must fit in 24 bits (any valid chunk does).
    pub fn to_bytes(&self) -> [u8; CHUNK_HEADER_LEN] {
        debug_assert!(self.compressed_size < 1 << 24 && self.uncompressed_size < 1 << 24);
        let c = self.compressed_size.to_le_bytes();
        let u = self.uncompressed_size.to_le_bytes();
        [
            CHUNK_HEADER_VERSION,
            c[0],
            c[1],
            c[2],
            self.scheme.as_u8(),
            u[0],
            u[1],
            u[2],
        ]
    }

    /// Decode and validate a header found at `offset` as chunk number `chunk` of a chunk
    /// region with `remaining` bytes after the header. Checks the version, the scheme and
    /// both sizes (draft §7.3.2) before anything is allocated or decompressed.
    pub fn parse(
        b: &[u8; CHUNK_HEADER_LEN],
        chunk: usize,
        offset: u64,
        remaining: u64,
    ) -> Result<ChunkHeader, XorbError> {
        if b[0] != CHUNK_HEADER_VERSION {
            return Err(XorbError::ChunkVersion {
                chunk,
                offset,
                version: b[0],
            });
        }
        let scheme = CompressionScheme::from_u8(b[4]).ok_or(XorbError::UnknownScheme {
            chunk,
            offset,
            scheme: b[4],
        })?;
        let compressed_size = u32::from_le_bytes([b[1], b[2], b[3], 0]);
        let uncompressed_size = u32::from_le_bytes([b[5], b[6], b[7], 0]);
        if uncompressed_size == 0 || uncompressed_size as usize > MAX_CHUNK_SIZE {
            return Err(XorbError::UncompressedSize {
                chunk,
                offset,
                size: uncompressed_size,
                max: MAX_CHUNK_SIZE as u32,
            });
        }
        let max = remaining.min(MAX_CHUNK_SIZE as u64);
        if compressed_size == 0 || u64::from(compressed_size) > max {
            return Err(XorbError::CompressedSize {
                chunk,
                offset,
                size: compressed_size,
                max,
            });
        }
        if scheme == CompressionScheme::None && compressed_size != uncompressed_size {
            return Err(XorbError::StoredSizeMismatch {
                chunk,
                offset,
                compressed: compressed_size,
                uncompressed: uncompressed_size,
            });
        }
        Ok(ChunkHeader {
            compressed_size,
            scheme,
            uncompressed_size,
        })
    }

    /// Header plus payload length.
    pub fn serialized_len(&self) -> usize {
        CHUNK_HEADER_LEN + self.compressed_size as usize
    }
}

/// One chunk in its serialized form (header + payload) with its hash, ready to be
/// appended to a xorb by [`crate::XorbBuilder::add_serialized`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerializedChunk {
    hash: MerkleHash,
    header: ChunkHeader,
    bytes: Vec<u8>,
}

impl SerializedChunk {
    pub fn hash(&self) -> MerkleHash {
        self.hash
    }
    pub fn header(&self) -> ChunkHeader {
        self.header
    }
    pub fn scheme(&self) -> CompressionScheme {
        self.header.scheme
    }
    pub fn uncompressed_len(&self) -> usize {
        self.header.uncompressed_size as usize
    }
    /// Header + payload, exactly as it appears in the xorb.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Check that a chunk's length is valid for a xorb.
pub(crate) fn check_chunk_len(len: usize) -> Result<(), XorbError> {
    if len == 0 || len > MAX_CHUNK_SIZE {
        return Err(XorbError::ChunkSize {
            len,
            max: MAX_CHUNK_SIZE,
        });
    }
    Ok(())
}

/// Append chunk `data` (header + payload) to `out`, compressed with `scheme` unless
/// that does not shrink it. Returns the header written.
pub(crate) fn write_chunk(
    data: &[u8],
    scheme: CompressionScheme,
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> ChunkHeader {
    let start = out.len();
    out.extend_from_slice(&[0u8; CHUNK_HEADER_LEN]);
    let used = scheme::compress_chunk_into(scheme, data, out, scratch);
    let header = ChunkHeader {
        compressed_size: (out.len() - start - CHUNK_HEADER_LEN) as u32,
        scheme: used,
        uncompressed_size: data.len() as u32,
    };
    out[start..start + CHUNK_HEADER_LEN].copy_from_slice(&header.to_bytes());
    header
}

/// Compress one chunk into its serialized form with `scheme`, or store it uncompressed
/// if that does not shrink it. `hash` skips rehashing when the chunker already
/// computed it (it is trusted).
///
/// Independent of any other chunk, so a pipeline can run it on many threads.
pub fn serialize_chunk(
    data: &[u8],
    hash: Option<MerkleHash>,
    scheme: CompressionScheme,
) -> Result<SerializedChunk, XorbError> {
    check_chunk_len(data.len())?;
    let hash = hash.unwrap_or_else(|| xet_hash::chunk_hash(data));
    // LZ4 frames add 15 bytes; a bit more room avoids a regrow on incompressible data.
    let mut bytes = Vec::with_capacity(CHUNK_HEADER_LEN + data.len() + 32);
    let mut scratch = Vec::new();
    let header = write_chunk(data, scheme, &mut bytes, &mut scratch);
    Ok(SerializedChunk {
        hash,
        header,
        bytes,
    })
}

/// [`serialize_chunk`] with the scheme picked by [`crate::choose_scheme`], exactly as
/// [`crate::XorbBuilder::add_chunk`] does it.
pub fn serialize_chunk_auto(
    data: &[u8],
    hash: Option<MerkleHash>,
) -> Result<SerializedChunk, XorbError> {
    serialize_chunk(data, hash, scheme::choose_scheme(data))
}

/// A chunk found in a chunk region: validated header and its (still compressed) payload.
#[derive(Debug, Clone, Copy)]
pub struct RawChunk<'a> {
    /// Index of the chunk within the walked region.
    pub index: usize,
    /// Offset of the chunk header within the walked region.
    pub offset: u64,
    pub header: ChunkHeader,
    pub payload: &'a [u8],
}

impl RawChunk<'_> {
    /// Append the decompressed chunk to `out`; exactly `header.uncompressed_size` bytes
    /// are added or an error is returned (and `out` is restored).
    pub fn decompress_into(
        &self,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
    ) -> Result<(), XorbError> {
        let start = out.len();
        out.resize(start + self.header.uncompressed_size as usize, 0);
        let res =
            scheme::decompress_into(self.header.scheme, self.payload, &mut out[start..], scratch);
        if let Err(problem) = res {
            out.truncate(start);
            return Err(XorbError::CorruptPayload {
                chunk: self.index,
                offset: self.offset,
                scheme: self.header.scheme,
                problem,
            });
        }
        Ok(())
    }

    /// The decompressed chunk.
    pub fn decompress(&self) -> Result<Vec<u8>, XorbError> {
        let mut out = Vec::with_capacity(self.header.uncompressed_size as usize);
        self.decompress_into(&mut out, &mut Vec::new())?;
        Ok(out)
    }

    /// Header + payload, as in the region.
    pub fn serialized_len(&self) -> usize {
        self.header.serialized_len()
    }
}

/// Walk the chunks of a chunk region (a footer-less xorb body, or a byte range holding
/// whole chunks). Headers are validated; payloads are not decompressed. After the first
/// error the iterator ends.
pub fn chunks(region: &[u8]) -> ChunkIter<'_> {
    ChunkIter {
        region,
        pos: 0,
        index: 0,
        failed: false,
    }
}

/// Iterator returned by [`chunks`].
#[derive(Debug, Clone)]
pub struct ChunkIter<'a> {
    region: &'a [u8],
    pos: usize,
    index: usize,
    failed: bool,
}

impl ChunkIter<'_> {
    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for ChunkIter<'a> {
    type Item = Result<RawChunk<'a>, XorbError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.region.len() {
            return None;
        }
        let res = self.next_inner();
        self.failed = res.is_err();
        Some(res)
    }
}

impl<'a> ChunkIter<'a> {
    fn next_inner(&mut self) -> Result<RawChunk<'a>, XorbError> {
        let rest = &self.region[self.pos..];
        let offset = self.pos as u64;
        let Some((hb, after)) = rest.split_first_chunk::<CHUNK_HEADER_LEN>() else {
            return Err(XorbError::Truncated {
                what: "chunk header",
                offset,
                needed: CHUNK_HEADER_LEN as u64,
                available: rest.len() as u64,
            });
        };
        let header = ChunkHeader::parse(hb, self.index, offset, after.len() as u64)?;
        let payload = &after[..header.compressed_size as usize];
        let chunk = RawChunk {
            index: self.index,
            offset,
            header,
            payload,
        };
        self.pos += header.serialized_len();
        self.index += 1;
        Ok(chunk)
    }
}

/// What the caller knows about a byte range of whole chunks (e.g. from a
/// reconstruction answer), checked by [`decode_chunks`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expected {
    pub num_chunks: Option<usize>,
    pub unpacked_len: Option<u64>,
}

/// Decompressed chunks of a byte range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodedChunks {
    /// The chunks' data, concatenated.
    pub data: Vec<u8>,
    /// End offset of each chunk within `data`.
    pub chunk_ends: Vec<u64>,
}

impl DecodedChunks {
    pub fn num_chunks(&self) -> usize {
        self.chunk_ends.len()
    }
    /// Data of chunk `i`.
    pub fn chunk(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.chunk_ends[i - 1] as usize
        };
        &self.data[start..self.chunk_ends[i] as usize]
    }
    /// Chunk hashes, computed now.
    pub fn chunk_hashes(&self) -> Vec<MerkleHash> {
        (0..self.num_chunks())
            .map(|i| xet_hash::chunk_hash(self.chunk(i)))
            .collect()
    }
}

/// Decode a byte slice that is a sequence of whole chunks (what a ranged GET of a
/// xorb returns), checking it against `expected` and `limits` before decompressing
/// anything that would exceed them.
pub fn decode_chunks(
    bytes: &[u8],
    expected: Expected,
    limits: &Limits,
) -> Result<DecodedChunks, XorbError> {
    limits.check_input(bytes.len())?;
    let max_unpacked = expected
        .unpacked_len
        .map_or(limits.max_unpacked_bytes, |e| {
            e.min(limits.max_unpacked_bytes)
        });
    let max_chunks = expected
        .num_chunks
        .map_or(limits.max_chunks, |e| e.min(limits.max_chunks));
    let mut out = DecodedChunks {
        // Only a hint: never more than the input could decompress to (LZ4 expands at
        // most ~255x).
        data: Vec::with_capacity(
            expected
                .unpacked_len
                .unwrap_or(0)
                .min(max_unpacked)
                .min(bytes.len() as u64 * 256) as usize,
        ),
        chunk_ends: Vec::with_capacity(expected.num_chunks.unwrap_or(0).min(max_chunks)),
    };
    let mut scratch = Vec::new();
    for c in chunks(bytes) {
        let c = c?;
        if c.index >= max_chunks {
            return Err(match expected.num_chunks {
                Some(e) if e < limits.max_chunks => XorbError::ChunkCount {
                    expected: e,
                    got: chunks(bytes).count(),
                },
                _ => XorbError::TooManyChunks {
                    max: limits.max_chunks,
                },
            });
        }
        let new_len = out.data.len() as u64 + u64::from(c.header.uncompressed_size);
        if new_len > max_unpacked {
            return Err(match expected.unpacked_len {
                Some(e) if e < limits.max_unpacked_bytes => XorbError::UnpackedLength {
                    expected: e,
                    got: new_len,
                },
                _ => XorbError::UnpackedTooLarge {
                    chunk: c.index,
                    max: limits.max_unpacked_bytes,
                },
            });
        }
        c.decompress_into(&mut out.data, &mut scratch)?;
        out.chunk_ends.push(out.data.len() as u64);
    }
    if let Some(e) = expected.num_chunks
        && e != out.num_chunks()
    {
        return Err(XorbError::ChunkCount {
            expected: e,
            got: out.num_chunks(),
        });
    }
    if let Some(e) = expected.unpacked_len
        && e != out.data.len() as u64
    {
        return Err(XorbError::UnpackedLength {
            expected: e,
            got: out.data.len() as u64,
        });
    }
    Ok(out)
}
