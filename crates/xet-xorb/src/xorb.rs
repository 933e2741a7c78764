//! Whole xorbs: verification, the parsed/built model, range extraction, the builder.

use std::ops::Range;

use xet_hash::MerkleHash;

use crate::chunk::{self, CHUNK_HEADER_LEN, Expected, SerializedChunk};
use crate::error::XorbError;
use crate::footer::{self, FOOTER_VERSION, XorbFooter, check_range};
use crate::scheme::{self, CompressionScheme};
use crate::{Limits, MAX_CHUNK_SIZE, MAX_XORB_CHUNKS, MAX_XORB_UNPACKED_BYTES};

/// One chunk of a verified or built xorb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkInfo {
    pub hash: MerkleHash,
    pub scheme: CompressionScheme,
    /// Offset of the chunk header in the chunk region.
    pub offset: u64,
    /// Payload length (after the 8-byte header).
    pub compressed_size: u32,
    pub uncompressed_size: u32,
    /// Offset of the chunk's data in the concatenated decompressed chunks.
    pub unpacked_offset: u64,
}

impl ChunkInfo {
    /// Header + payload.
    pub fn serialized_len(&self) -> u64 {
        CHUNK_HEADER_LEN as u64 + u64::from(self.compressed_size)
    }
    /// End of the chunk in the chunk region.
    pub fn end(&self) -> u64 {
        self.offset + self.serialized_len()
    }
    /// End of the chunk's data in the decompressed stream.
    pub fn unpacked_end(&self) -> u64 {
        self.unpacked_offset + u64::from(self.uncompressed_size)
    }
}

/// What [`verify`] and [`verify_body`] learn about a xorb, and what the builder records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XorbInfo {
    /// The xorb hash, computed from the chunks.
    pub hash: MerkleHash,
    pub chunks: Vec<ChunkInfo>,
    /// Footer version of the parsed input; `None` for a footer-less body or a built xorb.
    pub footer_version: Option<u8>,
}

impl XorbInfo {
    pub fn num_chunks(&self) -> usize {
        self.chunks.len()
    }
    /// Length of the chunk region (the upload body).
    pub fn body_len(&self) -> u64 {
        self.chunks.last().map_or(0, ChunkInfo::end)
    }
    /// Total decompressed length of all chunks.
    pub fn unpacked_len(&self) -> u64 {
        self.chunks.last().map_or(0, ChunkInfo::unpacked_end)
    }
    /// Byte range of chunks `chunks` in the chunk region (end-exclusive).
    pub fn chunk_byte_range(&self, chunks: Range<usize>) -> Result<Range<u64>, XorbError> {
        check_range(&chunks, self.num_chunks())?;
        Ok(self.chunks[chunks.start].offset..self.chunks[chunks.end - 1].end())
    }
    /// Range of chunks `chunks` in the concatenated decompressed data.
    pub fn unpacked_range(&self, chunks: Range<usize>) -> Result<Range<u64>, XorbError> {
        check_range(&chunks, self.num_chunks())?;
        Ok(self.chunks[chunks.start].unpacked_offset..self.chunks[chunks.end - 1].unpacked_end())
    }
    /// `(chunk hash, length)` pairs, as the xorb hash and shard CAS entries use them.
    pub fn hash_entries(&self) -> Vec<(MerkleHash, u64)> {
        self.chunks
            .iter()
            .map(|c| (c.hash, u64::from(c.uncompressed_size)))
            .collect()
    }
    /// The v1 footer describing these chunks.
    pub fn footer(&self) -> XorbFooter {
        XorbFooter {
            version: FOOTER_VERSION,
            xorb_hash: self.hash,
            chunk_hashes: self.chunks.iter().map(|c| c.hash).collect(),
            chunk_boundary_offsets: self.chunks.iter().map(|c| c.end() as u32).collect(),
            unpacked_chunk_offsets: self
                .chunks
                .iter()
                .map(|c| c.unpacked_end() as u32)
                .collect(),
        }
    }
}

/// Decompress-and-hash walk over a chunk region, checking it against the footer (if any)
/// and the limits chunk by chunk, so a bad xorb is rejected at the first bad chunk.
fn walk_body(
    body: &[u8],
    footer: Option<&XorbFooter>,
    limits: &Limits,
) -> Result<Vec<ChunkInfo>, XorbError> {
    let expected_n = footer.map(XorbFooter::num_chunks);
    let mut infos = Vec::with_capacity(
        expected_n
            .unwrap_or(body.len() / (64 * 1024) + 1)
            .min(limits.max_chunks),
    );
    // One reusable chunk buffer; headers are bounded by MAX_CHUNK_SIZE before use.
    let mut buf = vec![0u8; MAX_CHUNK_SIZE];
    let mut scratch = Vec::with_capacity(MAX_CHUNK_SIZE);
    let mut unpacked = 0u64;
    for c in chunk::chunks(body) {
        let c = c?;
        let i = c.index;
        if i >= limits.max_chunks {
            return Err(XorbError::TooManyChunks {
                max: limits.max_chunks,
            });
        }
        let end = c.offset + c.serialized_len() as u64;
        let size = u64::from(c.header.uncompressed_size);
        if let Some(f) = footer {
            if i >= f.num_chunks() {
                return Err(XorbError::ChunkCount {
                    expected: f.num_chunks(),
                    got: i + 1,
                });
            }
            let fb = u64::from(f.chunk_boundary_offsets[i]);
            if fb != end {
                return Err(XorbError::FooterBoundary {
                    chunk: i,
                    field: "chunk_boundary_offsets",
                    footer: fb,
                    actual: end,
                });
            }
            if let Some(&fu) = f.unpacked_chunk_offsets.get(i) {
                if u64::from(fu) != unpacked + size {
                    return Err(XorbError::FooterBoundary {
                        chunk: i,
                        field: "unpacked_chunk_offsets",
                        footer: u64::from(fu),
                        actual: unpacked + size,
                    });
                }
            }
        }
        if unpacked + size > limits.max_unpacked_bytes {
            return Err(XorbError::UnpackedTooLarge {
                chunk: i,
                max: limits.max_unpacked_bytes,
            });
        }
        // A stored (uncompressed) payload of the declared size is the chunk itself: hash
        // it in place rather than copying it out first.
        let data: &[u8] =
            if c.header.scheme == CompressionScheme::None && c.payload.len() as u64 == size {
                c.payload
            } else {
                let out = &mut buf[..size as usize];
                scheme::decompress_into(c.header.scheme, c.payload, out, &mut scratch).map_err(
                    |problem| XorbError::CorruptPayload {
                        chunk: i,
                        offset: c.offset,
                        scheme: c.header.scheme,
                        problem,
                    },
                )?;
                out
            };
        let hash = xet_hash::chunk_hash(data);
        if let Some(f) = footer {
            if f.chunk_hashes[i] != hash {
                return Err(XorbError::ChunkHash {
                    chunk: i,
                    expected: f.chunk_hashes[i],
                    got: hash,
                });
            }
        }
        infos.push(ChunkInfo {
            hash,
            scheme: c.header.scheme,
            offset: c.offset,
            compressed_size: c.header.compressed_size,
            uncompressed_size: c.header.uncompressed_size,
            unpacked_offset: unpacked,
        });
        unpacked += size;
    }
    if infos.is_empty() {
        return Err(XorbError::Empty);
    }
    if let Some(n) = expected_n {
        if n != infos.len() {
            return Err(XorbError::ChunkCount {
                expected: n,
                got: infos.len(),
            });
        }
    }
    Ok(infos)
}

fn check_expected(computed: MerkleHash, expected: Option<&MerkleHash>) -> Result<(), XorbError> {
    match expected {
        Some(&e) if e != computed => Err(XorbError::UnexpectedXorbHash {
            expected: e,
            computed,
        }),
        _ => Ok(()),
    }
}

fn hash_of(chunks: &[ChunkInfo]) -> MerkleHash {
    let entries: Vec<(MerkleHash, u64)> = chunks
        .iter()
        .map(|c| (c.hash, u64::from(c.uncompressed_size)))
        .collect();
    xet_hash::xorb_hash(&entries)
}

/// Fully verify a stored xorb (chunk region + footer, v1 or v0): every header and size,
/// every chunk decompresses to its declared length and hashes to the footer's hash,
/// boundaries agree, the footer's xorb hash is the hash of the chunks, and it equals
/// `expected_hash` if given (e.g. the hash in the URL or file name).
pub fn verify(
    xorb: &[u8],
    expected_hash: Option<&MerkleHash>,
    limits: &Limits,
) -> Result<XorbInfo, XorbError> {
    let (footer, body_len) = footer::parse_footer(xorb, limits)?;
    let chunks = walk_body(&xorb[..body_len], Some(&footer), limits)?;
    let hash = hash_of(&chunks);
    if hash != footer.xorb_hash {
        return Err(XorbError::XorbHash {
            footer: footer.xorb_hash,
            computed: hash,
        });
    }
    check_expected(hash, expected_hash)?;
    Ok(XorbInfo {
        hash,
        chunks,
        footer_version: Some(footer.version),
    })
}

/// Fully verify a footer-less xorb body (what clients upload): walk the chunk headers,
/// decompress and hash every chunk, compute the xorb hash and compare it with
/// `expected_hash` if given. The returned info rebuilds the footer
/// ([`XorbInfo::footer`]).
pub fn verify_body(
    body: &[u8],
    expected_hash: Option<&MerkleHash>,
    limits: &Limits,
) -> Result<XorbInfo, XorbError> {
    limits.check_input(body.len())?;
    let chunks = walk_body(body, None, limits)?;
    let hash = hash_of(&chunks);
    check_expected(hash, expected_hash)?;
    Ok(XorbInfo {
        hash,
        chunks,
        footer_version: None,
    })
}

/// Decompressed data of chunks `chunks` of a stored xorb (footer required), using the
/// footer to find them. Only these chunks are decompressed; each is checked against its
/// footer hash (the xorb hash is not recomputed, which needs every chunk).
pub fn extract_chunk_range(
    xorb: &[u8],
    chunks: Range<usize>,
    limits: &Limits,
) -> Result<Vec<u8>, XorbError> {
    let (footer, _) = footer::parse_footer(xorb, limits)?;
    let bytes = footer.chunk_byte_range(chunks.clone())?;
    let unpacked = footer.unpacked_range(chunks.clone())?;
    let expected = Expected {
        num_chunks: Some(chunks.len()),
        unpacked_len: unpacked.map(|r| r.end - r.start),
    };
    let region = &xorb[bytes.start as usize..bytes.end as usize];
    let decoded = chunk::decode_chunks(region, expected, limits)?;
    for i in 0..decoded.num_chunks() {
        let got = xet_hash::chunk_hash(decoded.chunk(i));
        let want = footer.chunk_hashes[chunks.start + i];
        if got != want {
            return Err(XorbError::ChunkHash {
                chunk: chunks.start + i,
                expected: want,
                got,
            });
        }
    }
    Ok(decoded.data)
}

/// A verified (or built) xorb: its chunk region and what is known about each chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xorb {
    info: XorbInfo,
    body: Vec<u8>,
}

impl Xorb {
    /// Verify a stored (footered) xorb and keep its chunk region.
    pub fn parse(
        xorb: &[u8],
        expected_hash: Option<&MerkleHash>,
        limits: &Limits,
    ) -> Result<Xorb, XorbError> {
        let info = verify(xorb, expected_hash, limits)?;
        let body = xorb[..info.body_len() as usize].to_vec();
        Ok(Xorb { info, body })
    }

    /// Verify a footer-less body (an upload) and take ownership of it.
    pub fn from_body(
        body: Vec<u8>,
        expected_hash: Option<&MerkleHash>,
        limits: &Limits,
    ) -> Result<Xorb, XorbError> {
        let info = verify_body(&body, expected_hash, limits)?;
        Ok(Xorb { info, body })
    }

    pub fn hash(&self) -> MerkleHash {
        self.info.hash
    }
    pub fn info(&self) -> &XorbInfo {
        &self.info
    }
    pub fn num_chunks(&self) -> usize {
        self.info.num_chunks()
    }
    /// The footer-less chunk region: the upload body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }
    pub fn into_parts(self) -> (XorbInfo, Vec<u8>) {
        (self.info, self.body)
    }
    /// The v1 footer for this xorb.
    pub fn footer(&self) -> XorbFooter {
        self.info.footer()
    }
    /// Length of the stored form (body + footer + info_length).
    pub fn footered_len(&self) -> usize {
        self.body.len() + footer::footer_len_v1(self.num_chunks()) + 4
    }
    /// The stored form: chunk region, v1 footer, info_length (what the reference's
    /// `local://` store writes).
    pub fn to_footered(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.footered_len());
        out.extend_from_slice(&self.body);
        self.footer().write(&mut out);
        out
    }
    /// Serialized bytes of chunks `chunks` (what a ranged GET for them returns).
    pub fn chunk_range_bytes(&self, chunks: Range<usize>) -> Result<&[u8], XorbError> {
        let r = self.info.chunk_byte_range(chunks)?;
        Ok(&self.body[r.start as usize..r.end as usize])
    }
    /// Decompressed data of chunks `chunks`.
    pub fn extract_chunk_range(&self, chunks: Range<usize>) -> Result<Vec<u8>, XorbError> {
        let len = self.info.unpacked_range(chunks.clone())?;
        let bytes = self.chunk_range_bytes(chunks.clone())?;
        let expected = Expected {
            num_chunks: Some(chunks.len()),
            unpacked_len: Some(len.end - len.start),
        };
        // Already verified (possibly under a caller's larger limits): no budget needed.
        let trusted = Limits {
            max_bytes: u64::MAX,
            max_chunks: usize::MAX,
            max_unpacked_bytes: u64::MAX,
        };
        Ok(chunk::decode_chunks(bytes, expected, &trusted)?.data)
    }
}

/// Collects chunks into a xorb, enforcing the reference's limits: at most
/// [`MAX_XORB_CHUNKS`] chunks and [`MAX_XORB_UNPACKED_BYTES`] of *uncompressed* chunk
/// data (the serialized body may be slightly larger).
///
/// `add_chunk` compresses on the calling thread, choosing the scheme per chunk with
/// [`crate::choose_scheme`]. To compress on several threads instead, run
/// [`crate::serialize_chunk_auto`] in parallel and append the results in order with
/// [`XorbBuilder::add_serialized`]; both ways give identical xorbs.
#[derive(Debug, Clone)]
pub struct XorbBuilder {
    body: Vec<u8>,
    chunks: Vec<ChunkInfo>,
    unpacked: u64,
    scratch: Vec<u8>,
}

impl Default for XorbBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl XorbBuilder {
    pub fn new() -> Self {
        XorbBuilder {
            body: Vec::new(),
            chunks: Vec::new(),
            unpacked: 0,
            scratch: Vec::new(),
        }
    }

    /// Pre-allocate room for about `body_bytes` of chunk region.
    pub fn with_capacity(body_bytes: usize) -> Self {
        let mut b = Self::new();
        b.body.reserve(body_bytes);
        b
    }

    pub fn num_chunks(&self) -> usize {
        self.chunks.len()
    }
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
    /// Uncompressed bytes added so far (what the 64 MiB limit counts).
    pub fn unpacked_len(&self) -> u64 {
        self.unpacked
    }
    /// Serialized chunk region length so far.
    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// Whether a chunk of `uncompressed_len` bytes fits.
    pub fn can_add(&self, uncompressed_len: usize) -> bool {
        self.chunks.len() < MAX_XORB_CHUNKS
            && self.unpacked + uncompressed_len as u64 <= MAX_XORB_UNPACKED_BYTES
    }

    /// Whether no further chunk of any size fits.
    pub fn is_full(&self) -> bool {
        !self.can_add(1)
    }

    fn check_room(&self, len: usize) -> Result<(), XorbError> {
        chunk::check_chunk_len(len)?;
        if !self.can_add(len) {
            return Err(XorbError::XorbFull {
                chunks: self.chunks.len(),
                unpacked_bytes: self.unpacked,
                adding: len,
            });
        }
        Ok(())
    }

    /// Compress and append a chunk; returns its index. On [`XorbError::XorbFull`] the
    /// builder is unchanged: finish it and start a new one.
    pub fn add_chunk(&mut self, data: &[u8]) -> Result<usize, XorbError> {
        self.add_chunk_with_hash(data, None)
    }

    /// Like [`XorbBuilder::add_chunk`], with the chunk hash if already known (trusted).
    pub fn add_chunk_with_hash(
        &mut self,
        data: &[u8],
        hash: Option<MerkleHash>,
    ) -> Result<usize, XorbError> {
        self.check_room(data.len())?;
        let scheme = scheme::choose_scheme(data);
        let hash = hash.unwrap_or_else(|| xet_hash::chunk_hash(data));
        let offset = self.body.len() as u64;
        let header = chunk::write_chunk(data, scheme, &mut self.body, &mut self.scratch);
        Ok(self.push(
            hash,
            offset,
            header.scheme,
            header.compressed_size,
            header.uncompressed_size,
        ))
    }

    /// Append a chunk compressed by [`crate::serialize_chunk`]; returns its index. On
    /// [`XorbError::XorbFull`] the builder is unchanged.
    pub fn add_serialized(&mut self, chunk: &SerializedChunk) -> Result<usize, XorbError> {
        self.check_room(chunk.uncompressed_len())?;
        let offset = self.body.len() as u64;
        self.body.extend_from_slice(chunk.bytes());
        let h = chunk.header();
        Ok(self.push(
            chunk.hash(),
            offset,
            h.scheme,
            h.compressed_size,
            h.uncompressed_size,
        ))
    }

    fn push(
        &mut self,
        hash: MerkleHash,
        offset: u64,
        scheme: CompressionScheme,
        compressed: u32,
        uncompressed: u32,
    ) -> usize {
        self.chunks.push(ChunkInfo {
            hash,
            scheme,
            offset,
            compressed_size: compressed,
            uncompressed_size: uncompressed,
            unpacked_offset: self.unpacked,
        });
        self.unpacked += u64::from(uncompressed);
        self.chunks.len() - 1
    }

    /// Finish: computes the xorb hash. Fails with [`XorbError::Empty`] if no chunk was added.
    pub fn finish(self) -> Result<Xorb, XorbError> {
        if self.chunks.is_empty() {
            return Err(XorbError::Empty);
        }
        let hash = hash_of(&self.chunks);
        Ok(Xorb {
            info: XorbInfo {
                hash,
                chunks: self.chunks,
                footer_version: None,
            },
            body: self.body,
        })
    }
}
