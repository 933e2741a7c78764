//! XET xorb format (draft-denis-xet-03 §7), byte-compatible with the reference `hf_xet`.
//!
//! A xorb is a sequence of chunks, each an 8-byte chunk header plus a payload compressed
//! with one of three schemes, optionally followed by a CasObjectInfo footer. Clients
//! upload the chunk region only (the "body"); stored xorbs carry the footer. Where the
//! reference and the draft differ we follow the reference:
//!
//! * the 64 MiB xorb limit counts *uncompressed* chunk bytes, so a body may be slightly
//!   larger than 64 MiB;
//! * LZ4 is the LZ4 frame format, and a chunk that does not shrink is stored as-is.
//!
//! Everything is pure and synchronous and works on byte slices. Parsers check every size
//! field against the input and a caller-given [`Limits`] before allocating or
//! decompressing, and decompression never produces more than a header declares.
//!
//! Typical use:
//! * client: [`XorbBuilder`] (or [`serialize_chunk_auto`] on many threads +
//!   [`XorbBuilder::add_serialized`]), then upload [`Xorb::body`];
//! * server: [`verify_body`] (or [`Xorb::from_body`]) on an upload with the hash from the
//!   URL, or [`BodyVerifier`] on the upload as it arrives; store [`Xorb::to_footered`];
//!   answer byte ranges with [`XorbFooter::chunk_byte_range`] from [`parse_footer`];
//! * download: [`decode_chunks`] on what a ranged GET returned.

mod chunk;
mod error;
mod footer;
mod scheme;
mod xorb;

pub use chunk::{
    CHUNK_HEADER_LEN, CHUNK_HEADER_VERSION, ChunkHeader, ChunkIter, DecodedChunks, Expected,
    RawChunk, SerializedChunk, chunks, decode_chunks, serialize_chunk, serialize_chunk_auto,
};
pub use error::{PayloadProblem, XorbError};
pub use footer::{
    BOUNDARIES_IDENT, FOOTER_IDENT, FOOTER_VERSION, FOOTER_VERSION_V0, HASHES_IDENT, XorbFooter,
    footer_len_v0, footer_len_v1, parse_footer, parse_footer_tail,
};
pub use scheme::{
    CompressionScheme, byte_group4, byte_group4_into, byte_ungroup4, byte_ungroup4_into,
    choose_scheme, compress, compress_chunk_into, compress_into, decompress, decompress_into,
    popcount_histograms, popcount_histograms_scalar, try_compress_into,
};
pub use xorb::{
    BodyVerifier, ChunkInfo, VerifiedBody, Xorb, XorbBuilder, XorbInfo, extract_chunk_range,
    verify, verify_body,
};

/// Largest chunk (draft §5.2): 128 KiB.
pub const MAX_CHUNK_SIZE: usize = 128 * 1024;
/// Most chunks in one xorb.
pub const MAX_XORB_CHUNKS: usize = 8192;
/// Most *uncompressed* chunk bytes in one xorb: 64 MiB.
pub const MAX_XORB_UNPACKED_BYTES: u64 = 64 * 1024 * 1024;
/// Largest chunk region a valid xorb can have: every payload is at most its
/// uncompressed size, plus one header per chunk.
pub const MAX_XORB_BODY_BYTES: u64 =
    MAX_XORB_UNPACKED_BYTES + (CHUNK_HEADER_LEN * MAX_XORB_CHUNKS) as u64;
/// Largest stored xorb: body, v1 footer for the most chunks, info_length.
pub const MAX_XORB_FOOTERED_BYTES: u64 =
    MAX_XORB_BODY_BYTES + footer_len_v1(MAX_XORB_CHUNKS) as u64 + 4;

/// Resource budget for parsing untrusted input. [`Limits::default`] is the protocol's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted input (body, stored xorb or chunk range), in bytes.
    pub max_bytes: u64,
    /// Most chunks.
    pub max_chunks: usize,
    /// Most decompressed bytes.
    pub max_unpacked_bytes: u64,
}

impl Limits {
    /// The protocol limits.
    pub const PROTOCOL: Limits = Limits {
        max_bytes: MAX_XORB_FOOTERED_BYTES,
        max_chunks: MAX_XORB_CHUNKS,
        max_unpacked_bytes: MAX_XORB_UNPACKED_BYTES,
    };

    pub(crate) fn check_input(&self, len: usize) -> Result<(), XorbError> {
        self.check_input_len(len as u64)
    }

    pub(crate) fn check_input_len(&self, len: u64) -> Result<(), XorbError> {
        if len > self.max_bytes {
            return Err(XorbError::InputTooLarge {
                len,
                max: self.max_bytes,
            });
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::PROTOCOL
    }
}
