//! The crate's error type. Every variant says what failed and where (chunk index,
//! byte offset in the input, expected vs got), so a server can log a useful reason
//! for rejecting an upload.

use std::fmt;

use xet_hash::MerkleHash;

use crate::CompressionScheme;

/// Why a chunk payload could not be decompressed.
///
/// Not an error type of its own: it is carried by [`XorbError::CorruptPayload`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadProblem {
    /// The payload ended in the middle of an LZ4 frame structure.
    Truncated { what: &'static str },
    /// The first 4 bytes of a frame are not the LZ4 frame magic number
    /// (legacy and skippable frames are not accepted in chunks).
    BadMagic { got: u32 },
    /// Frame descriptor has a bad version, reserved bit or block size code.
    BadDescriptor { what: &'static str },
    /// Frames that need an external dictionary cannot be decoded.
    DictionaryNotSupported,
    /// Frame descriptor checksum byte does not match.
    HeaderChecksum { expected: u8, got: u8 },
    /// A block is larger than the frame's declared maximum block size.
    BlockTooLarge { size: u32, max: u32 },
    /// A block's xxh32 checksum does not match.
    BlockChecksum,
    /// The frame's content checksum does not match.
    ContentChecksum,
    /// The frame's declared content size differs from what its blocks hold.
    ContentSize { declared: u64, got: u64 },
    /// The LZ4 block decoder rejected a block.
    Block { detail: String },
    /// The payload would decompress to more than the header's declared size.
    /// Decoding stops at the declared size, so the excess is never produced.
    Overflow { declared: u32 },
    /// The payload decompressed to fewer bytes than the header declares.
    Short { declared: u32, got: u64 },
}

impl fmt::Display for PayloadProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayloadProblem::Truncated { what } => write!(f, "LZ4 frame truncated in {what}"),
            PayloadProblem::BadMagic { got } => write!(f, "not an LZ4 frame (magic {got:#010x})"),
            PayloadProblem::BadDescriptor { what } => write!(f, "bad LZ4 frame descriptor: {what}"),
            PayloadProblem::DictionaryNotSupported => write!(f, "LZ4 frame needs a dictionary"),
            PayloadProblem::HeaderChecksum { expected, got } => {
                write!(
                    f,
                    "LZ4 frame header checksum {got:#04x}, expected {expected:#04x}"
                )
            }
            PayloadProblem::BlockTooLarge { size, max } => {
                write!(
                    f,
                    "LZ4 block of {size} bytes exceeds the frame's maximum {max}"
                )
            }
            PayloadProblem::BlockChecksum => write!(f, "LZ4 block checksum mismatch"),
            PayloadProblem::ContentChecksum => write!(f, "LZ4 content checksum mismatch"),
            PayloadProblem::ContentSize { declared, got } => {
                write!(
                    f,
                    "LZ4 frame declares {declared} content bytes, blocks hold {got}"
                )
            }
            PayloadProblem::Block { detail } => write!(f, "LZ4 block: {detail}"),
            PayloadProblem::Overflow { declared } => {
                write!(f, "decompresses to more than the declared {declared} bytes")
            }
            PayloadProblem::Short { declared, got } => {
                write!(f, "decompresses to {got} bytes, header declares {declared}")
            }
        }
    }
}

/// Everything that can go wrong building, parsing or verifying a xorb.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XorbError {
    /// The input is larger than the caller's [`crate::Limits::max_bytes`].
    #[error("input is {len} bytes, more than the limit of {max}")]
    InputTooLarge { len: u64, max: u64 },

    /// A body fed to [`crate::BodyVerifier`] is not as long as declared.
    #[error("body is {got} bytes but was declared as {declared}")]
    BodyLength { declared: u64, got: u64 },

    /// A xorb must hold at least one chunk.
    #[error("xorb has no chunks")]
    Empty,

    /// A structure runs past the end of the input.
    #[error("truncated {what} at offset {offset}: need {needed} bytes, {available} available")]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },

    #[error("chunk {chunk} at offset {offset}: unsupported chunk header version {version}")]
    ChunkVersion {
        chunk: usize,
        offset: u64,
        version: u8,
    },

    #[error("chunk {chunk} at offset {offset}: unknown compression scheme {scheme}")]
    UnknownScheme {
        chunk: usize,
        offset: u64,
        scheme: u8,
    },

    /// Declared uncompressed size is zero or above the maximum chunk size.
    #[error(
        "chunk {chunk} at offset {offset}: declared uncompressed size {size} is not in 1..={max}"
    )]
    UncompressedSize {
        chunk: usize,
        offset: u64,
        size: u32,
        max: u32,
    },

    /// Declared compressed size is zero, above the maximum chunk size, or past the end.
    #[error(
        "chunk {chunk} at offset {offset}: declared compressed size {size} is not in 1..={max}"
    )]
    CompressedSize {
        chunk: usize,
        offset: u64,
        size: u32,
        max: u64,
    },

    /// A scheme-0 chunk stores its bytes as-is, so both sizes must agree.
    #[error(
        "chunk {chunk} at offset {offset}: uncompressed chunk has compressed size {compressed} \
         but uncompressed size {uncompressed}"
    )]
    StoredSizeMismatch {
        chunk: usize,
        offset: u64,
        compressed: u32,
        uncompressed: u32,
    },

    #[error("chunk {chunk} at offset {offset}: corrupt {scheme} payload: {problem}")]
    CorruptPayload {
        chunk: usize,
        offset: u64,
        scheme: CompressionScheme,
        problem: PayloadProblem,
    },

    #[error("xorb has more than {max} chunks")]
    TooManyChunks { max: usize },

    #[error("chunk {chunk}: xorb's chunks decompress to more than {max} bytes")]
    UnpackedTooLarge { chunk: usize, max: u64 },

    #[error("chunk {chunk}: hash {got} does not match the footer's {expected}")]
    ChunkHash {
        chunk: usize,
        expected: MerkleHash,
        got: MerkleHash,
    },

    /// The footer's xorb hash disagrees with the hash computed from the chunks.
    #[error("footer xorb hash {footer} does not match the computed {computed}")]
    XorbHash {
        footer: MerkleHash,
        computed: MerkleHash,
    },

    /// The caller's expected hash (e.g. from the URL) disagrees with the computed one.
    #[error("xorb hash {computed} is not the expected {expected}")]
    UnexpectedXorbHash {
        expected: MerkleHash,
        computed: MerkleHash,
    },

    #[error("footer {section} ident missing at offset {offset}")]
    FooterIdent { section: &'static str, offset: u64 },

    #[error("footer {section} has unsupported version {version}")]
    FooterVersion { section: &'static str, version: u8 },

    /// A footer field disagrees with another field or with the layout.
    #[error("footer field {field} is {got}, expected {expected}")]
    FooterField {
        field: &'static str,
        expected: u64,
        got: u64,
    },

    #[error("footer reserved bytes at offset {offset} are not zero")]
    FooterReserved { offset: u64 },

    /// A boundary in the footer disagrees with the chunk headers (or is not increasing).
    #[error("chunk {chunk}: footer {field} is {footer}, chunk headers give {actual}")]
    FooterBoundary {
        chunk: usize,
        field: &'static str,
        footer: u64,
        actual: u64,
    },

    /// Consecutive footer offsets imply a chunk size no valid chunk can have.
    #[error("chunk {chunk}: footer {field} imply an impossible chunk size {size}")]
    FooterChunkSize {
        chunk: usize,
        field: &'static str,
        size: i64,
    },

    #[error("expected {expected} chunks, got {got}")]
    ChunkCount { expected: usize, got: usize },

    #[error("expected {expected} decompressed bytes, got {got}")]
    UnpackedLength { expected: u64, got: u64 },

    #[error("chunk range {start}..{end} is not a non-empty range within {num_chunks} chunks")]
    ChunkRange {
        start: usize,
        end: usize,
        num_chunks: usize,
    },

    /// The builder cannot take this chunk; start a new xorb. The builder is unchanged.
    #[error(
        "xorb is full ({chunks} chunks, {unpacked_bytes} bytes) and cannot take a {adding}-byte chunk"
    )]
    XorbFull {
        chunks: usize,
        unpacked_bytes: u64,
        adding: usize,
    },

    /// Chunks must be 1..=MAX_CHUNK_SIZE bytes.
    #[error("chunk of {len} bytes is not in 1..={max}")]
    ChunkSize { len: usize, max: usize },
}
