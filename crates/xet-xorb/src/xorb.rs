//! Whole xorbs: verification, the parsed/built model, range extraction, the builder.

use std::ops::Range;

use xet_hash::MerkleHash;

use crate::chunk::{self, CHUNK_HEADER_LEN, ChunkHeader, Expected, SerializedChunk};
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

/// Decompress-and-hash walk over a chunk region of a known length, checking it against
/// the footer (if any) and the limits chunk by chunk, so a bad xorb is rejected at the
/// first bad chunk. It can be fed the region as it arrives ([`Walk::advance`] with each
/// longer prefix) or whole; either way it does the same checks in the same order, so it
/// finds the same chunks and the same first error.
struct Walk<'f> {
    /// Length of the whole chunk region.
    total: u64,
    footer: Option<&'f XorbFooter>,
    limits: Limits,
    infos: Vec<ChunkInfo>,
    /// End of the last chunk walked.
    pos: usize,
    unpacked: u64,
    /// Decompression target and scratch, allocated at the first compressed chunk.
    buf: Vec<u8>,
    scratch: Vec<u8>,
}

impl<'f> Walk<'f> {
    fn new(total: u64, footer: Option<&'f XorbFooter>, limits: &Limits) -> Walk<'f> {
        let expected_n = footer.map(XorbFooter::num_chunks);
        let guess = usize::try_from(total / (64 * 1024) + 1).unwrap_or(usize::MAX);
        Walk {
            total,
            footer,
            limits: *limits,
            infos: Vec::with_capacity(expected_n.unwrap_or(guess).min(limits.max_chunks)),
            pos: 0,
            unpacked: 0,
            buf: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Walk every chunk that `received` (a prefix of the region, at least as long as the
    /// last one given) holds whole. A chunk whose header or payload is still incomplete
    /// waits for a longer prefix, unless the prefix is the whole region.
    fn advance(&mut self, received: &[u8]) -> Result<(), XorbError> {
        if received.len() as u64 > self.total {
            return Err(XorbError::BodyLength {
                declared: self.total,
                got: received.len() as u64,
            });
        }
        let whole = received.len() as u64 == self.total;
        while self.pos < received.len() {
            let rest = &received[self.pos..];
            let offset = self.pos as u64;
            let Some((hb, _)) = rest.split_first_chunk::<CHUNK_HEADER_LEN>() else {
                if !whole {
                    return Ok(());
                }
                return Err(XorbError::Truncated {
                    what: "chunk header",
                    offset,
                    needed: CHUNK_HEADER_LEN as u64,
                    available: rest.len() as u64,
                });
            };
            let i = self.infos.len();
            let after = self.total - offset - CHUNK_HEADER_LEN as u64;
            let header = ChunkHeader::parse(hb, i, offset, after)?;
            let Some(chunk) = rest.get(..header.serialized_len()) else {
                // The payload is still arriving (the header checked it fits the region).
                return Ok(());
            };
            self.chunk(offset, header, &chunk[CHUNK_HEADER_LEN..])?;
            self.pos += header.serialized_len();
        }
        Ok(())
    }

    fn chunk(&mut self, offset: u64, header: ChunkHeader, payload: &[u8]) -> Result<(), XorbError> {
        let i = self.infos.len();
        if i >= self.limits.max_chunks {
            return Err(XorbError::TooManyChunks {
                max: self.limits.max_chunks,
            });
        }
        let end = offset + header.serialized_len() as u64;
        let size = u64::from(header.uncompressed_size);
        let unpacked = self.unpacked;
        if let Some(f) = self.footer {
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
            if let Some(&fu) = f.unpacked_chunk_offsets.get(i)
                && u64::from(fu) != unpacked + size
            {
                return Err(XorbError::FooterBoundary {
                    chunk: i,
                    field: "unpacked_chunk_offsets",
                    footer: u64::from(fu),
                    actual: unpacked + size,
                });
            }
        }
        if unpacked + size > self.limits.max_unpacked_bytes {
            return Err(XorbError::UnpackedTooLarge {
                chunk: i,
                max: self.limits.max_unpacked_bytes,
            });
        }
        // A stored (uncompressed) payload of the declared size is the chunk itself: hash
        // it in place rather than copying it out first. (Headers are bounded by
        // MAX_CHUNK_SIZE, so the buffer below is too.)
        let data: &[u8] =
            if header.scheme == CompressionScheme::None && payload.len() as u64 == size {
                payload
            } else {
                if self.buf.is_empty() {
                    self.buf = vec![0u8; MAX_CHUNK_SIZE];
                    self.scratch = Vec::with_capacity(MAX_CHUNK_SIZE);
                }
                let out = &mut self.buf[..size as usize];
                scheme::decompress_into(header.scheme, payload, out, &mut self.scratch).map_err(
                    |problem| XorbError::CorruptPayload {
                        chunk: i,
                        offset,
                        scheme: header.scheme,
                        problem,
                    },
                )?;
                out
            };
        let hash = xet_hash::chunk_hash(data);
        if let Some(f) = self.footer
            && f.chunk_hashes[i] != hash
        {
            return Err(XorbError::ChunkHash {
                chunk: i,
                expected: f.chunk_hashes[i],
                got: hash,
            });
        }
        self.infos.push(ChunkInfo {
            hash,
            scheme: header.scheme,
            offset,
            compressed_size: header.compressed_size,
            uncompressed_size: header.uncompressed_size,
            unpacked_offset: unpacked,
        });
        self.unpacked += size;
        Ok(())
    }

    /// Walk the rest of the whole `region` and check the walk is complete.
    fn finish(mut self, region: &[u8]) -> Result<Vec<ChunkInfo>, XorbError> {
        if region.len() as u64 != self.total {
            return Err(XorbError::BodyLength {
                declared: self.total,
                got: region.len() as u64,
            });
        }
        self.advance(region)?;
        if self.infos.is_empty() {
            return Err(XorbError::Empty);
        }
        if let Some(n) = self.footer.map(XorbFooter::num_chunks)
            && n != self.infos.len()
        {
            return Err(XorbError::ChunkCount {
                expected: n,
                got: self.infos.len(),
            });
        }
        Ok(self.infos)
    }
}

fn walk_body(
    body: &[u8],
    footer: Option<&XorbFooter>,
    limits: &Limits,
) -> Result<Vec<ChunkInfo>, XorbError> {
    Walk::new(body.len() as u64, footer, limits).finish(body)
}

/// [`verify_body`] on a body as it arrives: feed it every longer prefix received (a
/// server calls [`advance`](Self::advance) after each piece of a request body, while the
/// piece is still in the CPU's cache), then [`finish`](Self::finish) with the whole body.
/// The result, and the first error, are those of [`verify_body`] on the whole body.
///
/// After an error the verifier is spent: drop it (and keep or reject the body without
/// it).
#[derive(Debug)]
pub struct BodyVerifier {
    walk: Walk<'static>,
}

impl std::fmt::Debug for Walk<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Walk")
            .field("total", &self.total)
            .field("chunks", &self.infos.len())
            .field("pos", &self.pos)
            .finish()
    }
}

impl BodyVerifier {
    /// For a body of `body_len` bytes (its declared length), within `limits`.
    pub fn new(body_len: u64, limits: &Limits) -> Result<BodyVerifier, XorbError> {
        limits.check_input_len(body_len)?;
        Ok(BodyVerifier {
            walk: Walk::new(body_len, None, limits),
        })
    }

    /// Verify every chunk that `received`, the body so far, holds whole and that was not
    /// verified yet. `received` must start with everything given before.
    pub fn advance(&mut self, received: &[u8]) -> Result<(), XorbError> {
        self.walk.advance(received)
    }

    /// Bytes of the body verified so far (whole chunks).
    pub fn verified_len(&self) -> u64 {
        self.walk.pos as u64
    }

    /// Verify what is left of the whole `body` and compute the xorb hash, which must be
    /// `expected_hash` if given.
    pub fn finish(
        self,
        body: &[u8],
        expected_hash: Option<&MerkleHash>,
    ) -> Result<XorbInfo, XorbError> {
        let chunks = self.walk.finish(body)?;
        let hash = hash_of(&chunks);
        check_expected(hash, expected_hash)?;
        Ok(XorbInfo {
            hash,
            chunks,
            footer_version: None,
        })
    }

    /// [`finish`](Self::finish), keeping `body` and what was found together, so that a
    /// store can take the pair without verifying the body again.
    pub fn finish_owned<B: AsRef<[u8]>>(
        self,
        body: B,
        expected_hash: Option<&MerkleHash>,
    ) -> Result<VerifiedBody<B>, XorbError> {
        let info = self.finish(body.as_ref(), expected_hash)?;
        Ok(VerifiedBody { body, info })
    }
}

/// A footer-less xorb body and what verifying it found. Only verification makes one
/// ([`BodyVerifier::finish_owned`]) and the body cannot be changed afterwards, so the
/// info is known to describe these bytes.
#[derive(Debug, Clone)]
pub struct VerifiedBody<B> {
    body: B,
    info: XorbInfo,
}

impl<B> VerifiedBody<B> {
    pub fn body(&self) -> &B {
        &self.body
    }

    pub fn info(&self) -> &XorbInfo {
        &self.info
    }

    /// The xorb hash of the body.
    pub fn hash(&self) -> MerkleHash {
        self.info.hash
    }

    pub fn into_parts(self) -> (B, XorbInfo) {
        (self.body, self.info)
    }
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
    BodyVerifier::new(body.len() as u64, limits)?.finish(body, expected_hash)
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
